package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/httpstore"
)

// Split brain on Kubernetes, fenced: SIGSTOP the leader past
// leaseDuration, another takes over and writes through the fence; SIGCONT the
// old leader. Its /token must not return a token, its write with the token it
// held before the pause is rejected by the fence, and the resource keeps the
// new leader's value.
func TestSplitBrainFencedAfterSIGSTOP(t *testing.T) {
	g := newGroup(t, testTimings)
	store := httpstore.NewServer(fencing.NewMemory())
	storeURL, stopStore, err := httpstore.Listen("127.0.0.1:0", store)
	if err != nil {
		t.Fatal(err)
	}
	defer stopStore()

	g.start("pod-a", "pod-b", "pod-c")
	old, oldTok := g.waitLeader(startupTimeout)
	oldWriter := httpstore.NewClient(storeURL, old.Identity())
	if err := oldWriter.WriteToken(g.ctx, fencing.Token{Value: oldTok.Token, LeaseUID: oldTok.LeaseUID}, []byte("written by "+old.Instance)); err != nil {
		t.Fatalf("the leader's write with its token %d: %v", oldTok.Token, err)
	}
	g.waitAllSee(old, oldTok.Token)

	pausedAt := time.Now()
	if err := old.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = old.Resume()
		}
	}()
	next, newTok := g.waitLeader(testTimings.LeaseDuration+failoverSlack, old)
	takeover := g.firstTakeover(pausedAt, old).Received.Sub(pausedAt)
	t.Logf("SIGSTOP %s (token %d) -> %s leads with token %d after %v", old.Instance, oldTok.Token, next.Instance, newTok.Token, takeover.Round(time.Millisecond))
	if newTok.Token <= oldTok.Token {
		t.Fatalf("new token %d is not greater than the paused leader's %d", newTok.Token, oldTok.Token)
	}
	newValue := []byte("written by " + next.Instance)
	if err := httpstore.NewClient(storeURL, next.Identity()).WriteToken(g.ctx, fencing.Token{Value: newTok.Token, LeaseUID: newTok.LeaseUID}, newValue); err != nil {
		t.Fatalf("the new leader's fenced write with token %d: %v", newTok.Token, err)
	}

	// Wake the old leader; it is still a process that believes nothing
	// happened. Ask it for a token at once and until it has caught up: a
	// follower whose /leader names the new leader.
	if err := old.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	resumedAt := time.Now()
	pause := resumedAt.Sub(pausedAt)
	var served []string
	asked := 0
	g.waitFor(5*time.Second, "the resumed process to follow the new leader", func(ctx context.Context) error {
		r := old.Token(ctx)
		asked++
		if r.Valid() {
			served = append(served, fmt.Sprintf("%s at +%v", r, r.Sent.Sub(resumedAt).Round(time.Millisecond)))
		} else if r.Err == nil && r.Status != http.StatusConflict && r.Status != http.StatusServiceUnavailable {
			t.Errorf("resumed leader /token: %s, want 409 or 503", r)
		}
		st, err := old.Leader(ctx)
		if err != nil {
			return err
		}
		if st.IsLeader || st.Holder != next.Identity() {
			return fmt.Errorf("/leader isLeader=%v holder=%q", st.IsLeader, st.Holder)
		}
		return nil
	})
	if len(served) > 0 {
		t.Fatalf("the resumed leader (paused %v) served tokens: %v", pause.Round(time.Millisecond), served)
	}
	t.Logf("resumed %s after a %v pause: no token served in %d calls until it followed %s (%v)", old.Instance, pause.Round(time.Millisecond),
		asked, next.Instance, time.Since(resumedAt).Round(time.Millisecond))

	// The write it had in hand before the pause arrives now: the fence rejects it.
	err = oldWriter.WriteToken(g.ctx, fencing.Token{Value: oldTok.Token, LeaseUID: oldTok.LeaseUID}, []byte("late write by "+old.Instance))
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("stale write with token %d: %v, want fencing.ErrStaleToken", oldTok.Token, err)
	}
	var ste *fencing.StaleTokenError
	if !errors.As(err, &ste) || ste.Highest != newTok.Token {
		t.Fatalf("stale write error %#v, want highest %d", err, newTok.Token)
	}
	t.Logf("late write with token %d: %v", oldTok.Token, err)
	highest, value, err := store.Read(g.ctx)
	if err != nil || highest != newTok.Token || string(value) != string(newValue) {
		t.Fatalf("store holds %d %q (%v), want %d %q", highest, value, err, newTok.Token, newValue)
	}

	g.waitFor(5*time.Second, "exactly one leader", g.exactlyOneLeader)
}
