package pgstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

func TestStoreCommitsFencedAndRejectsAStaleTokenAgainstARealPostgreSQL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := dbserver.Postgres(t)
	s := New(srv.URL, "res", "writer-a", 2)
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	tok, value, version, err := s.Load(ctx)
	if err != nil || tok.Value != 0 || value != nil || version != "0" {
		t.Fatalf("Load of a new resource = %v %q %q %v, want token 0, no value, version 0", tok, value, version, err)
	}
	if err := s.Commit(ctx, version, fencing.Token{Value: 5, LeaseUID: "uid-1"}, []byte("v1")); err != nil {
		t.Fatalf("Commit with token 5: %v", err)
	}
	tok, value, version, err = s.Load(ctx)
	if err != nil || tok.Value != 5 || string(value) != "v1" {
		t.Fatalf("Load after the commit = %v %q %q %v, want token 5 and v1", tok, value, version, err)
	}
	// A stale token commits nothing, and the connection stays usable.
	err = s.Commit(ctx, version, fencing.Token{Value: 4, LeaseUID: "uid-1"}, []byte("stale"))
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("Commit with token 4 after 5 = %v, want ErrStaleToken", err)
	}
	if _, value, _, err := s.Load(ctx); err != nil || string(value) != "v1" {
		t.Fatalf("after the stale commit: value %q, %v; want v1", value, err)
	}

	// A server restart breaks the open connections: each is replaced on its next use.
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var loadErr error
	for i := 0; i < 2*cap(s.conns); i++ { // every connection at least once: the first use of a broken one fails
		if _, _, _, loadErr = s.Load(ctx); loadErr == nil {
			break
		}
	}
	if loadErr != nil {
		t.Fatalf("no Load succeeded after the restart: %v", loadErr)
	}
	for i := 0; i < cap(s.conns); i++ {
		if _, _, _, err := s.Load(ctx); err != nil {
			t.Fatalf("Load %d after the restart and a reconnect: %v", i, err)
		}
	}

	h, err := s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 1 || h[0].Token.Value != 5 || h[0].Holder != "writer-a" {
		t.Fatalf("History = %+v, want the one accepted write (token 5 by writer-a)", h)
	}
}
