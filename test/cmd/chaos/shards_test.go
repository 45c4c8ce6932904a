package main

import (
	"strings"
	"testing"
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
