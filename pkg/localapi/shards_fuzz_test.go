package localapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
)

// fuzzShardStatuses are the set's states FuzzShardsHandler picks from.
var fuzzShardStatuses = []shards.Status{
	owning,
	{Set: "team/queue", Identity: "pod-a", Shards: 16},
	{Set: "team/queue", Identity: "pod-a", Shards: 16, Ready: true},
	{},
}

// fuzzReleaseErrs are the errors of the set's Release FuzzShardsHandler
// picks from.
var fuzzReleaseErrs = []error{nil, shards.ErrNotHeld, shards.ErrNoSuchShard, errors.New("lease write failed")}

// FuzzShardsHandler sends a shard set's local API any method, path, query,
// conditional and stream headers and body, in any state of the set, and
// checks what must hold for every request: no panic, a real status code,
// every error a JSON object with an "error" message, a 200 of
// /shards/{i}/token only for a shard owned, with its token, a release only
// by a POST /release?shard= that was not rejected, and no stream or
// long-poll slot left taken. The request's context is already cancelled, so
// that /watch and a waiting long-poll end after their first write.
//
// state: bits 0-1 the Status (fuzzShardStatuses), bit 2 Alive, bits 3-4
// Release's error (fuzzReleaseErrs).
func FuzzShardsHandler(f *testing.F) {
	etag := (&shardView{s: owning}).etag()
	for _, s := range []struct {
		method, path, query, ifNoneMatch, lastEventID, accept string
		bodyLen                                               uint16
		chunked                                               bool
		state                                                 uint8
	}{
		{"GET", "/shards", "", "", "", "", 0, false, 0x04},
		{"GET", "/shards", "wait=30s", etag, "", "", 0, false, 0x04},
		{"GET", "/shards", "wait=1h", "W/" + etag, "", "", 0, false, 0x04},
		{"HEAD", "/shards", "", etag, "", "", 0, false, 0x05},
		{"GET", "/shards/5/token", "", "", "", "", 0, false, 0x04},
		{"GET", "/shards/4/token", "", "", "", "text/plain", 0, false, 0x04},
		{"GET", "/shards/16/token", "", "", "", "", 0, false, 0x04},
		{"GET", "/shards/-1/token", "", "", "", "", 0, false, 0x06},
		{"GET", "/shards/{i}/token", "", "", "", "", 0, false, 0x04},
		{"GET", "/shards/0/token/", "", "", "", "", 0, false, 0x04},
		{"GET", "/watch", "", "", etag, "", 0, false, 0x04},
		{"GET", "/leader", "", "", "", "", 0, false, 0x04},
		{"GET", "/token", "", "", "", "", 0, false, 0x04},
		{"POST", "/release", "shard=5", "", "", "", 0, false, 0x04},
		{"POST", "/release", "shard=4", "", "", "", 0, false, 0x0c},
		{"POST", "/release", "shard=99", "", "", "", 0, false, 0x14},
		{"POST", "/release", "shard=0&for=1m", "", "", "", 0, false, 0x04},
		{"POST", "/release", "", "", "", "", 0, false, 0x04},
		{"POST", "/release", "shard=0", "", "", "", MaxRequestBodyBytes + 1, true, 0x1c},
		{"GET", "/readyz", "", "", "", "", 0, false, 0x05},
		{"GET", "/healthz", "", "", "", "", 0, false, 0x00},
	} {
		f.Add(s.method, s.path, s.query, s.ifNoneMatch, s.lastEventID, s.accept, s.bodyLen, s.chunked, s.state)
	}
	f.Fuzz(func(t *testing.T, method, path, query, ifNoneMatch, lastEventID, accept string, bodyLen uint16, chunked bool, state uint8) {
		status := fuzzShardStatuses[int(state&3)]
		set := &fakeShardSet{status: status, alive: state&4 != 0, releaseErr: fuzzReleaseErrs[int(state>>3)&3]}
		h := shardsHandler(set)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, fuzzRequest(method, path, query, ifNoneMatch, lastEventID, accept, bodyLen, chunked))
		checkAnyAnswer(t, h, rec)
		code, got := rec.Code, rec.Body.Bytes()
		if seg, ok := shardPathIndex(path); ok && code == http.StatusOK && method == http.MethodGet {
			i, err := parseShard(seg)
			o, owned := status.Shard(i)
			var tok api.ShardToken
			if err != nil || !owned {
				t.Fatalf("GET %s answered 200 for a shard not owned: %q", path, got)
			}
			if json.Unmarshal(got, &tok) == nil && tok.Token != o.Token && string(got) != strconv.FormatInt(o.Token, 10) {
				t.Fatalf("GET %s answered token %q, the shard's is %d", path, got, o.Token)
			}
		}
		released := set.releases()
		rejected := code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge || code == http.StatusMethodNotAllowed
		if len(released) > 0 && (rejected || method != http.MethodPost || path != "/release") {
			t.Fatalf("%s %s?%s answered %d and released %v", method, path, query, code, released)
		}
		if len(released) > 1 {
			t.Fatalf("one request released %v", released)
		}
	})
}
