package localapi

import (
	"math/rand/v2"
	"testing"
	"testing/quick"
	"unicode/utf8"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
)

// TestShardEncodersMatchEncodingJSON: the shard set's bodies are written
// byte for byte as encoding/json writes them (nil and empty lists, awkward
// strings, extreme numbers) and decode back to the same value.
func TestShardEncodersMatchEncodingJSON(t *testing.T) {
	checkRoundTrip(t, api.ShardsResponse{})
	checkRoundTrip(t, api.ShardsResponse{Members: []string{}, Owned: []api.ShardToken{}})
	checkRoundTrip(t, api.ShardToken{})
	checkRoundTrip(t, api.NotShardOwnerResponse{})
	var valid []string
	for _, s := range awkward {
		if utf8.ValidString(s) {
			valid = append(valid, s)
		}
	}
	for i, s := range awkward {
		tok := api.ShardToken{Index: i, Lease: s, LeaseUID: s + "uid", Token: int64(i) << 40, ExpiresInMs: -int64(i)}
		checkRoundTrip(t, tok)
		checkRoundTrip(t, api.NotShardOwnerResponse{Error: s, Index: -i})
		checkRoundTrip(t, api.ShardsResponse{Set: s, Identity: s, Shards: 1 << 30, Ready: i%2 == 0, Live: i%3 == 0,
			Members: valid[:i%len(valid)], Owned: []api.ShardToken{tok, {Index: 1 << 31, Token: -1 << 63, ExpiresInMs: 1<<63 - 1}}})
	}
	for _, f := range []any{
		func(v api.ShardsResponse) bool { return checkRoundTrip(t, v) },
		func(v api.ShardToken) bool { return checkRoundTrip(t, v) },
		func(v api.NotShardOwnerResponse) bool { return checkRoundTrip(t, v) },
	} {
		if err := quick.Check(f, &quick.Config{MaxCount: 500}); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(3, 5))
	for i := 0; i < 2000 && !t.Failed(); i++ {
		checkRoundTrip(t, api.ShardToken{Index: int(randInt(r)), Lease: randString(r), LeaseUID: randString(r), Token: randInt(r), ExpiresInMs: randInt(r)})
		checkRoundTrip(t, api.NotShardOwnerResponse{Error: randString(r), Index: int(randInt(r))})
	}
}
