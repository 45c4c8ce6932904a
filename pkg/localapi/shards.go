package localapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
)

// The local API of a shard set (WithShards): GET /shards (also as a
// long-poll), GET /shards/{i}/token, POST /release?shard=i, and /watch's
// "shards" events. In that mode GET /leader and GET /token answer 404 (the
// sidecar holds no single Lease), and /healthz, /readyz, /release and
// /watch are the set's. Without WithShards, /shards and /shards/{i}/token
// answer 404: not a shard set.

// ShardSet is what the API reads and controls of a shard set;
// *shards.Set implements it.
type ShardSet interface {
	Status() shards.Status
	// Peek is Status without handing out any validity (what the set
	// records of Status's answers): readiness, and a long-poll's checks.
	Peek() shards.Status
	// Changed returns a channel closed when Status may have changed
	// (including when a shard's validity runs out with no Lease event).
	Changed() <-chan struct{}
	Release(ctx context.Context, i int) error
	Alive() bool
}

var _ ShardSet = (*shards.Set)(nil)

// shardTokenRoute is the route of GET /shards/{i}/token, as Routes names
// it (docs/openapi.yaml's path).
const shardTokenRoute = "/shards/{i}/token"

// WithShards serves the shard set set instead of a single election: the
// Elector given to NewHandler is not used and may be nil.
func WithShards(set ShardSet) Option {
	return func(h *Handler) { h.shards = &shardAPI{set: set} }
}

// shardAPI is a Handler's shard set and the /watch event its streams share.
type shardAPI struct {
	set    ShardSet
	events atomic.Pointer[shardFrame]
	// encoded counts the events encoded (tests).
	encoded atomic.Int64
}

// Errors of the routes that do not apply to the sidecar's mode.
const (
	errNotShardSet = "not a shard set (start the sidecar with --shards=N); use GET /leader and GET /token"
	errShardSet    = "this sidecar runs a shard set (--shards=N), not a single Lease: use GET /shards and GET /shards/{i}/token"
)

// addShardRoutes adds the shard routes: the set's, with WithShards, else
// ones that say this is not a shard set.
func (h *Handler) addShardRoutes() {
	if h.shards == nil {
		notSet := func(w http.ResponseWriter, _ *http.Request) { writeError(w, http.StatusNotFound, errNotShardSet) }
		h.routes["/shards"] = route{http.MethodGet, notSet}
		h.routes[shardTokenRoute] = route{http.MethodGet, notSet}
		return
	}
	single := func(w http.ResponseWriter, _ *http.Request) { writeError(w, http.StatusNotFound, errShardSet) }
	h.routes["/leader"] = route{http.MethodGet, single}
	h.routes["/token"] = route{http.MethodGet, single}
	h.routes["/shards"] = route{http.MethodGet, h.shardsStatus}
	h.routes[shardTokenRoute] = route{http.MethodGet, h.shardToken}
	h.routes["/release"] = route{http.MethodPost, h.releaseShard}
	h.routes["/watch"] = route{http.MethodGet, h.watchShards}
	h.routes["/healthz"] = route{http.MethodGet, h.shardsHealthz}
	h.routes["/readyz"] = route{http.MethodGet, h.shardsReadyz}
}

// route finds the route of path: an exact one, or /shards/{i}/token.
func (h *Handler) route(path string) (route, bool) {
	if rt, ok := h.routes[path]; ok {
		return rt, true
	}
	if _, ok := shardPathIndex(path); ok {
		rt, ok := h.routes[shardTokenRoute]
		return rt, ok
	}
	return route{}, false
}

// shardPathIndex returns the {i} of /shards/{i}/token, unparsed.
func shardPathIndex(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/shards/")
	if !ok {
		return "", false
	}
	i, ok := strings.CutSuffix(rest, "/token")
	return i, ok && !strings.Contains(i, "/")
}

// parseShard parses a shard index (a path segment or ?shard=); the error
// says what is wanted.
func parseShard(v string) (int, error) {
	digits := v != "" && (v == "0" || v[0] != '0')
	for i := 0; i < len(v) && digits; i++ {
		digits = v[i] >= '0' && v[i] <= '9'
	}
	i, err := strconv.Atoi(v)
	if !digits || err != nil {
		return 0, fmt.Errorf("%q is not a shard index: want 0, 1, 2, … (a non-negative integer)", v)
	}
	return i, nil
}

// noSuchShard is the error of an index >= N.
func noSuchShard(i, n int) string {
	return fmt.Sprintf("no shard %d: the set has %d shards, 0 … %d", i, n, n-1)
}

func (h *Handler) shardsStatus(w http.ResponseWriter, r *http.Request) {
	wait, match, ok := waitQuery(w, r)
	if !ok {
		return
	}
	if wait > 0 && match != "" {
		h.shardsLongPoll(w, r, match, wait)
		return
	}
	v := h.shardView()
	h.answerShards(w, &v, match)
}

// answerShards writes GET /shards's answer for v: 304 if match (the
// If-None-Match header) matches its ETag, else the body.
func (h *Handler) answerShards(w http.ResponseWriter, v *shardView, match string) {
	etag := v.etag()
	hdr := w.Header()
	hdr["Etag"] = []string{etag}
	hdr["Cache-Control"] = hdrNoStore
	if match != "" && etagMatches(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	buf := getBody()
	resp := v.response()
	*buf = append(resp.AppendJSON(*buf), '\n')
	writeJSON(w, http.StatusOK, *buf)
	putBody(buf)
}

func (h *Handler) shardToken(w http.ResponseWriter, r *http.Request) {
	if _, ok := queryParams(w, r); !ok {
		return
	}
	seg, _ := shardPathIndex(r.URL.Path)
	i, err := parseShard(seg)
	if err != nil {
		writeError(w, http.StatusBadRequest, "GET /shards/{i}/token: "+err.Error())
		return
	}
	s := h.shards.set.Status()
	w.Header()["Cache-Control"] = hdrNoStore
	if i >= s.Shards && s.Shards > 0 {
		writeError(w, http.StatusNotFound, noSuchShard(i, s.Shards))
		return
	}
	o, owned := s.Shard(i)
	switch {
	case owned && o.ExpiresIn > 0:
	case !s.Ready:
		writeError(w, http.StatusServiceUnavailable, "the shard set's Leases have not been listed yet (is the API server reachable?)")
		return
	default:
		msg := "not the owner of shard " + strconv.Itoa(i)
		if !s.Live {
			msg += ": this member's session is not live"
		}
		resp := api.NotShardOwnerResponse{Error: msg, Index: i}
		writeJSON(w, http.StatusConflict, append(resp.AppendJSON(make([]byte, 0, 128)), '\n'))
		return
	}
	buf := getBody()
	defer putBody(buf)
	if wantsText(r.Header.Get("Accept")) {
		w.Header()["Content-Type"] = hdrText
		w.WriteHeader(http.StatusOK)
		*buf = strconv.AppendInt(*buf, o.Token, 10)
		_, _ = w.Write(*buf)
		return
	}
	tok := shardToken(s.Set, &o)
	*buf = append(tok.AppendJSON(*buf), '\n')
	writeJSON(w, http.StatusOK, *buf)
}

// releaseShard is POST /release in shard mode: ?shard=i gives shard i back.
func (h *Handler) releaseShard(w http.ResponseWriter, r *http.Request) {
	q, ok := queryParams(w, r, "shard", "for")
	if !ok {
		return
	}
	if _, set := q["for"]; set {
		writeError(w, http.StatusBadRequest, "query parameter for: not supported by a shard set; release one shard with POST /release?shard=<i>")
		return
	}
	v, set := q["shard"]
	if !set {
		writeError(w, http.StatusBadRequest, "this sidecar runs a shard set: name the shard to give back, POST /release?shard=<i> (GET /shards lists the shards this member owns)")
		return
	}
	i, err := parseShard(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, "query parameter shard: "+err.Error())
		return
	}
	if !discardBody(w, r) {
		return
	}
	if !h.shards.set.Alive() {
		writeError(w, http.StatusServiceUnavailable, "shard set loop is not running: nothing changed")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ReleaseTimeout)
	defer cancel()
	err = h.shards.set.Release(ctx, i)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, shards.ErrNoSuchShard):
		writeError(w, http.StatusNotFound, noSuchShard(i, h.shards.set.Status().Shards))
	case errors.Is(err, shards.ErrNotHeld):
		resp := api.NotShardOwnerResponse{Error: "not the owner of shard " + strconv.Itoa(i) + ": nothing to release", Index: i}
		writeJSON(w, http.StatusConflict, append(resp.AppendJSON(make([]byte, 0, 128)), '\n'))
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, "releasing shard "+strconv.Itoa(i)+" did not finish within "+ReleaseTimeout.String()+" (it may still take effect): "+err.Error())
	default:
		writeError(w, http.StatusBadGateway, "releasing shard "+strconv.Itoa(i)+": "+err.Error())
	}
}

func (h *Handler) shardsHealthz(w http.ResponseWriter, _ *http.Request) {
	if !h.shards.set.Alive() {
		writeError(w, http.StatusServiceUnavailable, "shard set loop is not running")
		return
	}
	writeJSON(w, http.StatusOK, healthOK)
}

func (h *Handler) shardsReadyz(w http.ResponseWriter, _ *http.Request) {
	if !h.shards.set.Alive() {
		writeError(w, http.StatusServiceUnavailable, "shard set loop is not running")
		return
	}
	if !h.shards.set.Peek().Ready {
		writeError(w, http.StatusServiceUnavailable, "the shard set's Leases have not been listed yet")
		return
	}
	writeJSON(w, http.StatusOK, healthReady)
}

// shardView is what GET /shards and the shards /watch serve, read at one
// instant.
type shardView struct{ s shards.Status }

func (h *Handler) shardView() shardView { return shardView{s: h.shards.set.Status()} }

// response is the /shards body of v: Members and Owned never null.
func (v *shardView) response() api.ShardsResponse {
	r := api.ShardsResponse{Set: v.s.Set, Identity: v.s.Identity, Shards: v.s.Shards, Ready: v.s.Ready, Live: v.s.Live,
		Members: v.s.Members, Owned: make([]api.ShardToken, 0, len(v.s.Owned))}
	if r.Members == nil {
		r.Members = []string{}
	}
	for i := range v.s.Owned {
		r.Owned = append(r.Owned, shardToken(v.s.Set, &v.s.Owned[i]))
	}
	return r
}

// shardToken is the wire form of o, a shard of the set "ns/name".
func shardToken(set string, o *shards.Owned) api.ShardToken {
	return api.ShardToken{Index: o.Index, Lease: shardLeaseRef(set, o.Lease), LeaseUID: o.LeaseUID, Token: o.Token,
		ExpiresInMs: max(o.ExpiresIn.Milliseconds(), 0)}
}

// shardLeaseRef is "namespace/name" of a shard's Lease, the namespace
// being the set's.
func shardLeaseRef(set, lease string) string {
	if strings.Contains(lease, "/") {
		return lease
	}
	if ns, _, ok := strings.Cut(set, "/"); ok {
		return ns + "/" + lease
	}
	return lease
}
