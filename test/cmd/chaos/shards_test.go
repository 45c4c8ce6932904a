package main

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// --shards selects the shard soak, which is judged from PostgreSQL's
// history: it needs --store=postgres, and a bad value is a one-line reason.
func TestParseFlagsShardsNeedsPostgres(t *testing.T) {
	o, err := parseFlags([]string{"--shards=16", "--store=postgres"})
	if err != nil || o.shards != 16 || o.store != storePostgres {
		t.Fatalf("--shards=16 --store=postgres: %+v, %v", o, err)
	}
	if o, err := parseFlags(nil); err != nil || o.shards != 0 {
		t.Fatalf("no flags: shards %d, %v; want the single-Lease soak", o.shards, err)
	}
	for _, args := range [][]string{{"--shards=16"}, {"--shards=4", "--store=redis"}, {"--shards=-1", "--store=postgres"}} {
		_, err := parseFlags(args)
		if err == nil || !strings.Contains(err.Error(), "want --shards >= 1 with --store=postgres") || strings.Contains(err.Error(), "\n") {
			t.Errorf("parseFlags(%q) = %v, want the one-line reason", args, err)
		}
	}
}

// A process's /shards answers become per-shard samples whose terms end when
// the shard leaves the answer: a shard owned, then not listed in a 200, is
// one term followed by an invalid sample, never a valid "token 0".
func TestShardSamplesEndATermWhenTheShardIsNoLongerListed(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	owned := func(pairs ...int64) shardsBody { // index, token, index, token, ...
		var b shardsBody
		for k := 0; k < len(pairs); k += 2 {
			b.Owned = append(b.Owned, struct {
				Index       int    `json:"index"`
				Lease       string `json:"lease"`
				LeaseUID    string `json:"leaseUID"`
				Token       int64  `json:"token"`
				ExpiresInMs int64  `json:"expiresInMs"`
			}{Index: int(pairs[k]), Token: pairs[k+1], LeaseUID: "uid", ExpiresInMs: 1000})
		}
		return b
	}
	prev := make([]bool, 3)
	per := make([][]framework.Sample, 3)
	record := func(b shardsBody, code int, err error, ms int) {
		for i, x := range shardSamples("p#1", b, code, err, at(ms), at(ms+1), prev) {
			if x != nil {
				per[i] = append(per[i], *x)
			}
		}
	}
	record(owned(0, 4, 2, 7), http.StatusOK, nil, 0)
	record(owned(0, 4, 2, 7), http.StatusOK, nil, 10)
	record(owned(2, 7), http.StatusOK, nil, 20)        // shard 0 given away
	record(owned(2, 7), http.StatusOK, nil, 30)        // nothing new for shard 0
	record(shardsBody{}, 0, errors.New("refused"), 40) // no answer: shard 2's term ends
	if len(per[1]) != 0 {
		t.Errorf("shard 1, never owned: %d samples", len(per[1]))
	}
	if len(per[0]) != 3 || per[0][2].Valid() || per[0][2].Status != http.StatusConflict {
		t.Fatalf("shard 0: %+v; want two valid samples, then one 409", per[0])
	}
	terms := framework.TermsOf(per[0])
	if len(terms) != 1 || terms[0].Token != 4 || terms[0].Count != 2 || !terms[0].LastRecv.Equal(at(11)) {
		t.Errorf("shard 0 terms: %+v; want one term of token 4 ending at the second answer", terms)
	}
	if len(per[2]) != 5 || per[2][4].Valid() || per[2][4].Err == nil {
		t.Errorf("shard 2: %+v; want four valid samples, then the failed call", per[2])
	}
}
