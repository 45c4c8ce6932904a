package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/internal/testsupport"
	"github.com/elector-sidecar/elector-sidecar/pkg/client"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// TestWatchGivesASlowFnOnlyTheNewestState: while fn is busy, the pod leads
// for a few renewals and then loses; every one of those states reaches the
// client. When fn returns it gets the newest state only (isLeader:false),
// never a stale isLeader:true.
func TestWatchGivesASlowFnOnlyTheNewestState(t *testing.T) {
	sc := startSidecar(t, following)
	received := make(chan localapi.LeaderResponse, 64)
	defer client.SetReceivedHook(func(r localapi.LeaderResponse) { received <- r })()
	c := newClient(t, sc.URL)
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	got := make(chan localapi.LeaderResponse, 64)
	done := make(chan error, 1)
	calls := 0
	go func() {
		done <- c.Watch(ctx, func(s localapi.LeaderResponse) {
			calls++
			got <- s
			if calls == 1 {
				<-release // fn is busy (e.g. stopping leader work)
			}
		})
	}()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer func() {
		free()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	}()
	if s := <-got; s.Holder != "pod-b" {
		t.Fatalf("first state %+v, want pod-b leading", s)
	}
	awaitReceived := func(want func(localapi.LeaderResponse) bool) {
		t.Helper()
		for {
			select {
			case r := <-received:
				if want(r) {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the client did not receive the state")
			}
		}
	}
	awaitReceived(func(r localapi.LeaderResponse) bool { return r.Holder == "pod-b" })
	for i := 1; i <= 5; i++ { // renewals: each a new state the client reads
		s := leading
		s.ExpiresIn = time.Hour
		s.ValidUntil = leading.ValidUntil.Add(time.Duration(i) * time.Second)
		sc.el.set(s)
		awaitReceived(func(r localapi.LeaderResponse) bool { return r.IsLeader })
	}
	sc.el.set(nobody)
	awaitReceived(func(r localapi.LeaderResponse) bool { return !r.IsLeader && r.Holder == "" })
	free()
	select {
	case s := <-got:
		if s.IsLeader || s.Holder != "" {
			t.Fatalf("after the slow fn returned it got %+v, want the newest state (nobody leads)", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fn got nothing after it returned")
	}
	select {
	case s := <-got:
		t.Fatalf("fn got a further state %+v after the newest", s)
	default:
	}
}

// TestWatchLongPollPausesAfterAnEarly304: a sidecar (or a proxy) that
// answers a long-poll's If-None-Match with 304 at once is asked again only
// after the poll interval, not in a busy loop.
func TestWatchLongPollPausesAfterAnEarly304(t *testing.T) {
	var leaderReqs atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/leader" { // no /watch
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"no such endpoint: `+r.URL.Path+`"}`)
			return
		}
		leaderReqs.Add(1)
		w.Header().Set("ETag", `"FRCx1.0.0.abc"`)
		if r.Header.Get("If-None-Match") == `"FRCx1.0.0.abc"` {
			w.WriteHeader(http.StatusNotModified) // at once: the wait is ignored
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"isLeader":false,"holder":"pod-b","identity":"pod-a","lease":"ns/l","leaseTransitions":1,"ready":true,"candidate":true}`+"\n")
	}))
	defer srv.Close()
	wr := startWatch(t, srv.URL, client.WithPollInterval(time.Hour))
	wr.next(t, false, "pod-b")
	waitFor(t, "the first long-poll", func() bool { return leaderReqs.Load() >= 2 })
	// With an hour's pause, any third request within the period is a spin.
	err := testsupport.Consistently(context.Background(), 10*time.Millisecond, 300*time.Millisecond, "no GET /leader after the early 304",
		func(context.Context) error {
			if n := leaderReqs.Load(); n > 2 {
				return fmt.Errorf("%d GET /leader, want 2 (the GET, the long-poll answered 304 at once)", n)
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

// leadingFor is leading with expiresInMs d.
func leadingFor(d time.Duration) election.Status {
	s := leading
	s.ExpiresIn = d
	return s
}

// TestWatchSaysUnknownWhenTheSidecarDiesWhileLeading: fn's last state was
// isLeader:true; the sidecar dies. fn gets the unknown state when the
// delivered expiresInMs has passed, not an isLeader:true that stands forever.
func TestWatchSaysUnknownWhenTheSidecarDiesWhileLeading(t *testing.T) {
	sc := startSidecar(t, leadingFor(300*time.Millisecond))
	start := time.Now()
	wr := startWatch(t, sc.URL)
	s := wr.next(t, true, "pod-a")
	sc.setHook(func(int, http.ResponseWriter, *http.Request) bool { panic(http.ErrAbortHandler) })
	sc.dropConnections()
	u := wr.next(t, false, "")
	if !client.IsUnknown(u) || u.Identity != "pod-a" || u.Lease != "ns/l" || u.Token != 0 || u.ExpiresInMs != 0 {
		t.Fatalf("after the sidecar died fn got %+v, want the unknown state", u)
	}
	if since := time.Since(start); since < time.Duration(s.ExpiresInMs)*time.Millisecond {
		t.Fatalf("the unknown state came %v after the watch began, before the %dms the sidecar vouched for", since, s.ExpiresInMs)
	}
}

// TestWatchSaysUnknownWhenTheStreamStalls: the sidecar stops sending (it
// hangs; the stream stays open). fn gets the unknown state once the last
// isLeader:true's expiresInMs has passed, then the sidecar's state again
// when it speaks.
func TestWatchSaysUnknownWhenTheStreamStalls(t *testing.T) {
	sc := startSidecar(t, leadingFor(200*time.Millisecond))
	wr := startWatch(t, sc.URL)
	wr.next(t, true, "pod-a")
	if u := wr.next(t, false, ""); !client.IsUnknown(u) {
		t.Fatalf("a stalled stream gave %+v, want the unknown state", u)
	}
	sc.el.set(following)
	wr.next(t, false, "pod-b")
}

// TestWatchPollAnswerPastItsExpiryIsUnknown: an isLeader:true answer in the
// last millisecond of the term (expiresInMs 0) is past its time when fn
// could take it: fn gets the unknown state instead.
func TestWatchPollAnswerPastItsExpiryIsUnknown(t *testing.T) {
	sc := startSidecar(t, leadingFor(500*time.Microsecond))
	sc.setHook(func(_ int, w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/watch" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"no such endpoint: /watch"}`)
			return true
		}
		return false
	})
	wr := startWatch(t, sc.URL, client.WithPollInterval(time.Hour))
	if u := wr.next(t, false, ""); !client.IsUnknown(u) {
		t.Fatalf("an answer with no validity left gave %+v, want the unknown state", u)
	}
}
