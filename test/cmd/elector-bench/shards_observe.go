package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// What the shards section observes, from two sides:
//   - the Leases (shardLeases): the bench's informer on the run's namespace
//     sees every shard Lease <set>-<i> (holder, leaseTransitions = the
//     shard's token, each change with when it was seen) and every member's
//     session Lease <set>-member-… (ours only), when first seen held by it;
//   - the members' own local API (serveTracker, observeShards): each member
//     long-polls GET /shards?wait= with If-None-Match (both kinds serve it:
//     elector-sidecar with --shards, clientgo-candidate with --shards), and
//     the bench stamps every answer when it has read it. A shard is served
//     by a member from the first answer of that member that lists it with a
//     given token.

// shardHands is one shard Lease's state as the bench's informer saw it.
type shardHands struct {
	at     time.Time
	holder string
	token  int64
}

// shardLeases is the bench's view of a set's Leases.
type shardLeases struct {
	set string
	n   int

	mu      sync.Mutex
	hist    [][]shardHands       // by shard index, in the order seen
	members map[string]time.Time // member -> its session Lease first seen held by it
	changed chan struct{}        // closed and replaced on every change
	stop    chan struct{}
}

// shardIndex returns i if name is <set>-<i> with 0 <= i < n.
func shardIndex(set string, n int, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, set+"-")
	if !ok || rest == "" || strings.TrimLeft(rest, "0123456789") != "" || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i < n
}

func newShardLeases(set string, n int) *shardLeases {
	return &shardLeases{set: set, n: n, hist: make([][]shardHands, n), members: map[string]time.Time{}, changed: make(chan struct{}), stop: make(chan struct{})}
}

// observe records l as seen at at.
func (s *shardLeases) observe(l *coordinationv1.Lease, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := shardIndex(s.set, s.n, l.Name); ok {
		c := shardHands{at: at, holder: framework.HolderOf(l), token: framework.TransitionsOf(l)}
		if h := s.hist[i]; len(h) > 0 && h[len(h)-1].holder == c.holder && h[len(h)-1].token == c.token {
			return // a renew or an annotation: no change of hands
		}
		s.hist[i] = append(s.hist[i], c)
	} else if h := framework.HolderOf(l); strings.HasPrefix(l.Name, s.set+"-member-") && h != "" {
		if _, seen := s.members[h]; seen {
			return
		}
		s.members[h] = at
	} else {
		return
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// watchShardLeases starts the bench's informer on ns's Leases (all of them:
// client-go's Leases carry no label, so no selector can pick the set).
func (e *env) watchShardLeases(ns, set string, n int) (*shardLeases, error) {
	s := newShardLeases(set, n)
	lw := cache.NewListWatchFromClient(e.cp.Client.CoordinationV1().RESTClient(), "leases", ns, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{})
	add := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			s.observe(l, time.Now())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, n any) { add(n) }}); err != nil {
		return nil, err
	}
	go inf.Run(s.stop)
	if !cache.WaitForCacheSync(s.stop, inf.HasSynced) {
		close(s.stop)
		return nil, fmt.Errorf("lease informer on %s did not sync", ns)
	}
	return s, nil
}

func (s *shardLeases) close() { close(s.stop) }

// current returns every shard's holder and token now, and the channel
// closed on the next change.
func (s *shardLeases) current() ([]shardHands, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]shardHands, s.n)
	for i, h := range s.hist {
		if len(h) > 0 {
			out[i] = h[len(h)-1]
		}
	}
	return out, s.changed
}

// memberSeen returns when member's session Lease was first seen held by it.
func (s *shardLeases) memberSeen(member string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.members[member]
	return t, ok
}

// moves counts, per shard, the changes of hands seen after since: a new
// holder (another non-empty identity than the last one) or a new token.
// A shard released and taken again by another counts once.
func (s *shardLeases) moves(since time.Time) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, s.n)
	for i, h := range s.hist {
		var last shardHands
		for _, c := range h {
			if c.holder == "" {
				continue
			}
			if c.at.After(since) && last.holder != "" && (c.holder != last.holder || c.token != last.token) {
				out[i]++
			}
			last = c
		}
	}
	return out
}

// takenAt returns when shard i was first seen held by someone other than
// not with a token above old, after since.
func (s *shardLeases) takenAt(i int, not string, old int64, since time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.hist[i] {
		if !c.at.Before(since) && c.holder != "" && c.holder != not && c.token > old {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// holdings counts the shards each holder holds in cur.
func holdings(cur []shardHands) map[string]int {
	out := map[string]int{}
	for _, c := range cur {
		if c.holder != "" {
			out[c.holder]++
		}
	}
	return out
}

// fairShare reports whether the n shards are all owned by the live members,
// each with ⌊n/m⌋ or ⌈n/m⌉ of them.
func fairShare(owned map[string]int, live []string, n int) bool {
	m := len(live)
	if m == 0 {
		return false
	}
	lo, hi := n/m, (n+m-1)/m
	total := 0
	for _, id := range live {
		k := owned[id]
		if k < lo || k > hi {
			return false
		}
		total += k
	}
	return total == n
}

// ---- the members' local API ----

// serveEvent: member's answer first listing shard index with token, read at at.
type serveEvent struct {
	at     time.Time
	member string
	index  int
	token  int64
}

// serveTracker holds what every member's GET /shards said last, and when
// each member began serving each shard with each token.
type serveTracker struct {
	mu      sync.Mutex
	owned   map[string]map[int]int64 // member -> index -> token
	events  []serveEvent
	errors  map[string]string // member -> last error of its observer
	changed chan struct{}
}

func newServeTracker() *serveTracker {
	return &serveTracker{owned: map[string]map[int]int64{}, errors: map[string]string{}, changed: make(chan struct{})}
}

// record stores member's answer, read at at.
func (t *serveTracker) record(member string, at time.Time, owned map[int]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev := t.owned[member]
	for i, tok := range owned {
		if old, ok := prev[i]; !ok || old != tok {
			t.events = append(t.events, serveEvent{at: at, member: member, index: i, token: tok})
		}
	}
	t.owned[member] = owned
	delete(t.errors, member)
	close(t.changed)
	t.changed = make(chan struct{})
}

func (t *serveTracker) fail(member string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errors[member] = err.Error()
}

// forget drops a member that has gone.
func (t *serveTracker) forget(member string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.owned, member)
	close(t.changed)
	t.changed = make(chan struct{})
}

// counts returns how many shards each member serves, how many distinct
// shards are served, and the channel closed on the next answer.
func (t *serveTracker) counts() (map[string]int, int, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out, all := map[string]int{}, map[int]bool{}
	for m, o := range t.owned {
		out[m] = len(o)
		for i := range o {
			all[i] = true
		}
	}
	return out, len(all), t.changed
}

// servedAt returns when a member other than not first served shard i with
// a token above old, at or after since.
func (t *serveTracker) servedAt(i int, not string, old int64, since time.Time) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ev := range t.events {
		if ev.index == i && ev.member != not && ev.token > old && !ev.at.Before(since) {
			return ev.at, true
		}
	}
	return time.Time{}, false
}

func (t *serveTracker) lastErrors() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for m, e := range t.errors {
		parts = append(parts, m+": "+e)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// shardsAnswer is the part of GET /shards the bench reads (elector-sidecar's
// and clientgo-candidate's: each owned shard's index and token).
type shardsAnswer struct {
	Owned []struct {
		Index int   `json:"index"`
		Token int64 `json:"token"`
	} `json:"owned"`
}

func parseShardsAnswer(b []byte) (map[int]int64, error) {
	var a shardsAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("GET /shards: %w", err)
	}
	out := make(map[int]int64, len(a.Owned))
	for _, o := range a.Owned {
		out[o.Index] = o.Token
	}
	return out, nil
}

// shardsPollWait is the long-poll's wait; a member that does not long-poll
// (no ETag) is polled every shardsPollEvery instead.
const (
	shardsPollWait  = 30 * time.Second
	shardsPollEvery = 20 * time.Millisecond
)

// observeShards long-polls member's GET /shards until ctx ends, recording
// every answer in t.
func observeShards(ctx context.Context, member, baseURL string, t *serveTracker) {
	client := &http.Client{Timeout: shardsPollWait + 10*time.Second}
	etag := ""
	for ctx.Err() == nil {
		owned, next, err := getShards(ctx, client, baseURL, etag)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			t.fail(member, err) // getShards returned no ETag: the next is a plain GET
		case owned != nil:
			t.record(member, time.Now(), owned)
		}
		if err != nil || next == "" {
			select {
			case <-ctx.Done():
				return
			case <-time.After(shardsPollEvery):
			}
		}
		etag = next
	}
}

// getShards is one GET /shards: with etag, a long-poll. nil owned: 304.
func getShards(ctx context.Context, client *http.Client, baseURL, etag string) (map[int]int64, string, error) {
	url := baseURL + "/shards"
	if etag != "" {
		url += "?wait=" + shardsPollWait.String()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "", err
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	switch resp.StatusCode {
	case http.StatusNotModified:
		return nil, etag, nil
	case http.StatusOK:
		owned, err := parseShardsAnswer(body)
		return owned, resp.Header.Get("ETag"), err
	}
	return nil, "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
}

// watchOtherWrites sees the Lease writes outside ns (the apiserver's own, in
// kube-system), which the window's counts leave out. Its field selector keeps
// the set's Leases off it: a watch of every Lease gets client-go's ~1,000
// writes per retry period and, read by a process niced on a loaded machine,
// can fall behind until the apiserver closes it. A watch that ends (the
// apiserver overloaded, or its timeout) is opened again from the last
// version seen, so no write is missed.
func (e *env) watchOtherWrites(ctx context.Context, ns string) (*clusterWatch, error) {
	wctx, cancel := context.WithCancel(ctx)
	leases := e.cp.Client.CoordinationV1().Leases("")
	opts := metav1.ListOptions{FieldSelector: fields.OneTermNotEqualSelector("metadata.namespace", ns).String()}
	list, err := leases.List(wctx, opts)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("list the Leases outside %s: %w", ns, err)
	}
	cw := &clusterWatch{cancel: cancel}
	go func() {
		rv := list.ResourceVersion
		for wctx.Err() == nil {
			if rv == "" { // the version expired: go on from now
				l, err := leases.List(wctx, opts)
				if err != nil {
					select {
					case <-wctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
					continue
				}
				rv = l.ResourceVersion
			}
			o := opts
			o.ResourceVersion, o.AllowWatchBookmarks = rv, true
			w, err := leases.Watch(wctx, o)
			if err != nil {
				select {
				case <-wctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			for ev := range w.ResultChan() {
				l, ok := ev.Object.(*coordinationv1.Lease)
				if !ok {
					if ev.Type == watch.Error {
						rv = ""
					}
					continue
				}
				rv = l.ResourceVersion
				verb := map[watch.EventType]string{watch.Added: "POST", watch.Modified: "PUT", watch.Deleted: "DELETE"}[ev.Type]
				if verb == "" {
					continue
				}
				cw.mu.Lock()
				cw.events = append(cw.events, leaseEvent{at: time.Now(), namespace: l.Namespace, name: l.Name, verb: verb})
				cw.mu.Unlock()
			}
			w.Stop()
		}
	}()
	return cw, nil
}
