package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// The shard set's side of the local API (a sidecar started with
// --shards=N): Shards (GET /shards), WaitShards (its long-poll), ShardToken
// (GET /shards/{i}/token), ReleaseShard (POST /release?shard=i),
// WatchShards (/watch's "shards" events) and RunShards (one worker per
// owned shard).

// Errors of the shard set's calls.
var (
	// ErrNotShardOwner: GET /shards/{i}/token or POST /release?shard=i
	// answered 409, this member does not hold the shard (the error is a
	// *NotShardOwnerError).
	ErrNotShardOwner = errors.New("not the owner of the shard")
	// ErrNotShardSet: the sidecar runs a single Lease, not a shard set
	// (it was started without --shards).
	ErrNotShardSet = errors.New("the sidecar is not a shard set")
	// ErrShardLost is the cause (context.Cause) of the context RunShards
	// gives a shard's worker when it ends because this member no longer
	// holds the shard with that token, or the sidecar did not vouch for it
	// in time.
	ErrShardLost = errors.New("shard lost")
)

// NotShardOwnerError is the 409 of GET /shards/{i}/token and POST
// /release?shard=i: this member does not hold shard Index. errors.Is finds
// ErrNotShardOwner in it.
type NotShardOwnerError struct {
	Index int
	*StatusError
}

// Is reports whether target is ErrNotShardOwner (or what the StatusError
// matches).
func (e *NotShardOwnerError) Is(target error) bool {
	return target == ErrNotShardOwner || e.StatusError.Is(target)
}

// Unwrap returns the StatusError.
func (e *NotShardOwnerError) Unwrap() error { return e.StatusError }

// ShardToken is one shard this member holds, as the client got it.
type ShardToken struct {
	api.ShardToken
	// Deadline is when the token stops being safe to use, at the
	// earliest: the instant the request was sent (or the event read)
	// plus ExpiresInMs. It carries a monotonic clock reading.
	Deadline time.Time
}

// Fencing is the shard's token as pkg/fencing takes it: value and Lease UID.
func (t ShardToken) Fencing() fencing.Token {
	return fencing.Token{Value: t.Token, LeaseUID: t.LeaseUID}
}

// ShardSet is a shard set as this member's sidecar sees it: GET /shards's
// answer, with each owned shard's Deadline.
type ShardSet struct {
	// Set is "namespace/name"; Identity is this member's; Shards is N.
	Set      string
	Identity string
	Shards   int
	// Ready: the set's Leases have been listed; Live: this member's
	// session is valid.
	Ready, Live bool
	// Members are the live members, sorted.
	Members []string
	// Owned are the shards this member may work on, by index.
	Owned []ShardToken
	// ETag is the answer's (the event's id on /watch): WaitShards's
	// If-None-Match.
	ETag string
}

// Shard returns the owned shard i, if this member holds it.
func (s ShardSet) Shard(i int) (ShardToken, bool) {
	for _, t := range s.Owned {
		if t.Index == i {
			return t, true
		}
	}
	return ShardToken{}, false
}

// shardSetOf is r received at anchor, with ETag etag.
func shardSetOf(r *api.ShardsResponse, etag string, anchor time.Time) ShardSet {
	s := ShardSet{Set: r.Set, Identity: r.Identity, Shards: r.Shards, Ready: r.Ready, Live: r.Live, Members: r.Members, ETag: etag,
		Owned: make([]ShardToken, 0, len(r.Owned))}
	for _, o := range r.Owned {
		s.Owned = append(s.Owned, ShardToken{ShardToken: o, Deadline: anchor.Add(time.Duration(o.ExpiresInMs) * time.Millisecond)})
	}
	return s
}

// Shards reads GET /shards: the shards this member owns, each with its
// token. A sidecar that is not a shard set gives an error matching
// ErrNotShardSet.
func (c *Client) Shards(ctx context.Context) (ShardSet, error) {
	s, _, err := c.getShards(ctx, "", 0)
	return s, err
}

// WaitShards long-polls GET /shards?wait=: it returns as soon as the state
// differs from the one with ETag etag (changed true), or after wait
// (at most api.MaxWait) with changed false and s.ETag etag. An empty etag
// returns the state at once.
func (c *Client) WaitShards(ctx context.Context, etag string, wait time.Duration) (s ShardSet, changed bool, err error) {
	if wait < 0 || wait > api.MaxWait {
		return s, false, fmt.Errorf("WaitShards: wait %v: want 0 … %v", wait, api.MaxWait)
	}
	return c.getShards(ctx, etag, wait)
}

func (c *Client) getShards(ctx context.Context, etag string, wait time.Duration) (ShardSet, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+c.timeout)
	defer cancel()
	var query string
	var hdr http.Header
	if etag != "" {
		hdr = http.Header{"If-None-Match": {etag}}
		if wait > 0 {
			query = "wait=" + wait.String()
		}
	}
	sent := time.Now()
	resp, err := c.do(ctx, http.MethodGet, "/shards", query, hdr)
	if err != nil {
		return ShardSet{}, false, err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := checkStatus(resp, "/shards", http.StatusOK, http.StatusNotModified); err != nil {
		return ShardSet{}, false, notShardSet(err)
	}
	if resp.StatusCode == http.StatusNotModified {
		return ShardSet{ETag: etag}, false, nil
	}
	var r api.ShardsResponse
	if err := decode(resp, "/shards", &r); err != nil {
		return ShardSet{}, false, err
	}
	return shardSetOf(&r, resp.Header.Get("ETag"), sent), true, nil
}

// notShardSet adds ErrNotShardSet to a 404 of a shard route.
func notShardSet(err error) error {
	var se *StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusNotFound && strings.Contains(se.Message, "not a shard set") {
		return fmt.Errorf("%w: %w", ErrNotShardSet, err)
	}
	return err
}

// ShardToken reads GET /shards/{i}/token: shard i's token, while this
// member holds it. Otherwise the error matches ErrNotShardOwner (a
// *NotShardOwnerError), or ErrUnavailable before the set is listed.
func (c *Client) ShardToken(ctx context.Context, i int) (ShardToken, error) {
	var t ShardToken
	if i < 0 {
		return t, fmt.Errorf("shard %d: want an index 0 … N-1", i)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	path := "/shards/" + strconv.Itoa(i) + "/token"
	sent := time.Now()
	resp, err := c.do(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return t, err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := shardStatus(resp, path, i, http.StatusOK); err != nil {
		return t, err
	}
	if err := decode(resp, path, &t.ShardToken); err != nil {
		return t, err
	}
	if t.Token <= 0 || t.Index != i {
		return t, fmt.Errorf("GET %s: 200 with shard %d token %d", path, t.Index, t.Token)
	}
	t.Deadline = sent.Add(time.Duration(t.ExpiresInMs) * time.Millisecond)
	return t, nil
}

// ReleaseShard posts /release?shard=i: this member stops working shard i
// (its token stops at once) and the shard goes to another member (or, when
// this member is alone, back to it with a new token). A shard this member
// does not hold gives an error matching ErrNotShardOwner.
func (c *Client) ReleaseShard(ctx context.Context, i int) error {
	if i < 0 {
		return fmt.Errorf("shard %d: want an index 0 … N-1", i)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.do(ctx, http.MethodPost, "/release", "shard="+strconv.Itoa(i), nil)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := shardStatus(resp, "/release", i, http.StatusNoContent, http.StatusOK); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	return nil
}

// shardStatus is checkStatus for the shard routes: a 409 is a
// *NotShardOwnerError, a 404 saying so matches ErrNotShardSet.
func shardStatus(resp *http.Response, path string, i int, ok ...int) error {
	err := checkStatus(resp, path, ok...)
	var se *StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusConflict {
		return &NotShardOwnerError{Index: i, StatusError: se}
	}
	if err != nil && resp.StatusCode == http.StatusBadRequest && strings.Contains(err.Error(), "unknown query parameter \"shard\"") {
		return fmt.Errorf("%w: %w", ErrNotShardSet, err) // POST /release?shard= on a single Lease
	}
	return notShardSet(err)
}

// decodeShardsEvent parses the data of a "shards" event.
func decodeShardsEvent(data []byte) (api.ShardsResponse, error) {
	var r api.ShardsResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("GET /watch: the shards event's data is not the expected JSON (%w): %q", err, data[:min(len(data), 200)])
	}
	return r, nil
}
