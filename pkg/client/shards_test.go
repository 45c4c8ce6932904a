package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
)

// fakeSet is a shard set as the local API sees it; set publishes a status
// and fires Changed, as the set's loop does.
type fakeSet struct {
	mu         sync.Mutex
	status     shards.Status
	releaseErr error
	released   []int
	changed    chan struct{}
}

func (f *fakeSet) Peek() shards.Status { return f.Status() }

func (f *fakeSet) Status() shards.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

func (f *fakeSet) Alive() bool { return true }

func (f *fakeSet) Release(_ context.Context, i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, i)
	return f.releaseErr
}

func (f *fakeSet) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

func (f *fakeSet) set(s shards.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status = s
	if f.changed != nil {
		close(f.changed)
	}
	f.changed = make(chan struct{})
}

// owned is shard i held with token tok, valid for d (renewed at renewal).
func owned(i int, tok int64, d time.Duration, renewal int) shards.Owned {
	return shards.Owned{Index: i, Lease: "queue-" + string(rune('0'+i%10)), LeaseUID: "uid-" + string(rune('a'+i%26)), Token: tok,
		ExpiresIn: d, ValidUntil: time.Unix(int64(1000+renewal), 0)}
}

func setStatus(own ...shards.Owned) shards.Status {
	return shards.Status{Set: "team/queue", Identity: "pod-a", Shards: 16, Ready: true, Live: true,
		Members: []string{"pod-a", "pod-b"}, Owned: own}
}

func startShardSidecar(t *testing.T, s shards.Status) (*fakeSet, string) {
	t.Helper()
	set := &fakeSet{status: s}
	srv := httptest.NewServer(localapi.NewHandler(nil, nil, localapi.WithShards(set), localapi.WithHeartbeat(50*time.Millisecond)))
	t.Cleanup(srv.Close)
	return set, srv.URL
}

func TestShardsAndShardTokenAgainstTheSidecar(t *testing.T) {
	set, url := startShardSidecar(t, setStatus(owned(0, 3, 10*time.Second, 0), owned(5, 9, 10*time.Second, 0)))
	c := newClient(t, url)
	ctx := context.Background()
	before := time.Now()
	s, err := c.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Set != "team/queue" || s.Shards != 16 || !s.Ready || !s.Live || len(s.Members) != 2 || len(s.Owned) != 2 || s.ETag == "" {
		t.Fatalf("Shards: %+v", s)
	}
	if o := s.Owned[1]; o.Index != 5 || o.Token != 9 || o.Lease != "team/queue-5" || o.LeaseUID != "uid-f" ||
		o.Deadline.Before(before.Add(10*time.Second)) || o.Deadline.After(time.Now().Add(10*time.Second)) {
		t.Fatalf("shard 5: %+v", o)
	}
	// The fake answers expiresInMs 10000: the Deadline is the request's
	// send plus 10 s, which lies between these two instants plus 10 s.
	before = time.Now()
	tok, err := c.ShardToken(ctx, 5)
	after := time.Now()
	if err != nil || tok.Token != 9 || tok.Index != 5 || tok.Fencing().Value != 9 || tok.Fencing().LeaseUID != "uid-f" ||
		tok.Deadline.Before(before.Add(10*time.Second)) || tok.Deadline.After(after.Add(10*time.Second)) {
		t.Fatalf("ShardToken(5): %+v %v", tok, err)
	}
	_, err = c.ShardToken(ctx, 4)
	var no *client.NotShardOwnerError
	if !errors.Is(err, client.ErrNotShardOwner) || !errors.As(err, &no) || no.Index != 4 || no.StatusCode != 409 {
		t.Fatalf("ShardToken(4) of a shard not owned: %v", err)
	}
	var se *client.StatusError
	if _, err := c.ShardToken(ctx, 16); !errors.As(err, &se) || se.StatusCode != 404 || !strings.Contains(se.Message, "no shard 16") {
		t.Fatalf("ShardToken(16): %v", err)
	}
	if _, err := c.ShardToken(ctx, -1); err == nil {
		t.Fatal("ShardToken(-1) sent a request")
	}
	set.set(shards.Status{Set: "team/queue", Identity: "pod-a", Shards: 16})
	if _, err := c.ShardToken(ctx, 0); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("ShardToken before the set is listed: %v, want ErrUnavailable", err)
	}
}

func TestReleaseShard(t *testing.T) {
	set, url := startShardSidecar(t, setStatus(owned(0, 3, 10*time.Second, 0)))
	c := newClient(t, url)
	if err := c.ReleaseShard(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	set.mu.Lock()
	set.releaseErr = shards.ErrNotHeld
	set.mu.Unlock()
	if err := c.ReleaseShard(context.Background(), 4); !errors.Is(err, client.ErrNotShardOwner) {
		t.Fatalf("ReleaseShard(4) of a shard not held: %v", err)
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	if len(set.released) != 2 || set.released[0] != 0 || set.released[1] != 4 {
		t.Fatalf("released %v, want [0 4]", set.released)
	}
}

// TestShardCallsOnASingleLeaseSidecarSayNotAShardSet: every shard call to a
// sidecar without --shards fails with ErrNotShardSet, WatchShards and
// RunShards at once.
func TestShardCallsOnASingleLeaseSidecarSayNotAShardSet(t *testing.T) {
	sc := startSidecar(t, leading)
	c := newClient(t, sc.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Shards(ctx); !errors.Is(err, client.ErrNotShardSet) {
		t.Errorf("Shards: %v", err)
	}
	if _, err := c.ShardToken(ctx, 0); !errors.Is(err, client.ErrNotShardSet) {
		t.Errorf("ShardToken: %v", err)
	}
	if err := c.ReleaseShard(ctx, 0); !errors.Is(err, client.ErrNotShardSet) {
		t.Errorf("ReleaseShard: %v", err)
	}
	if err := c.WatchShards(ctx, func(client.ShardSet) { t.Error("WatchShards called fn") }); !errors.Is(err, client.ErrNotShardSet) {
		t.Errorf("WatchShards: %v", err)
	}
	if err := c.RunShards(ctx, func(context.Context, client.ShardToken) { t.Error("RunShards called fn") }); !errors.Is(err, client.ErrNotShardSet) {
		t.Errorf("RunShards: %v", err)
	}
}

func TestWaitShardsReturnsOnChangeOrAfterTheWait(t *testing.T) {
	set, url := startShardSidecar(t, setStatus(owned(0, 3, 10*time.Second, 0)))
	c := newClient(t, url)
	ctx := context.Background()
	s, err := c.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, changed, err := c.WaitShards(ctx, s.ETag, 20*time.Millisecond); err != nil || changed || got.ETag != s.ETag {
		t.Fatalf("WaitShards with nothing changed: %+v %v %v", got, changed, err)
	}
	type result struct {
		s       client.ShardSet
		changed bool
		err     error
	}
	out := make(chan result, 1)
	go func() {
		s, changed, err := c.WaitShards(ctx, s.ETag, time.Minute)
		out <- result{s, changed, err}
	}()
	// The long-poll wakes on the change whenever it comes; a change made
	// before it waits is answered at once.
	set.set(setStatus(owned(0, 3, 10*time.Second, 0), owned(7, 2, 10*time.Second, 0)))
	select {
	case r := <-out:
		if r.err != nil || !r.changed || len(r.s.Owned) != 2 || r.s.Owned[1].Index != 7 || r.s.ETag == s.ETag {
			t.Fatalf("WaitShards after a change: %+v %v %v", r.s, r.changed, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("WaitShards did not return after the change")
	}
	if _, _, err := c.WaitShards(ctx, s.ETag, 6*time.Minute); err == nil {
		t.Fatal("WaitShards accepted a wait over api.MaxWait")
	}
}

// watchShardsRun is a WatchShards in the background.
type watchShardsRun struct {
	states chan client.ShardSet
	cancel context.CancelFunc
	done   chan error
}

func startWatchShards(t *testing.T, url string) *watchShardsRun {
	t.Helper()
	c := newClient(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	wr := &watchShardsRun{states: make(chan client.ShardSet, 64), cancel: cancel, done: make(chan error, 1)}
	go func() { wr.done <- c.WatchShards(ctx, func(s client.ShardSet) { wr.states <- s }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-wr.done; !errors.Is(err, context.Canceled) {
			t.Errorf("WatchShards returned %v", err)
		}
	})
	return wr
}

// next returns the next state fn got with the owned shards want (indexes).
func (wr *watchShardsRun) next(t *testing.T, want ...int) client.ShardSet {
	t.Helper()
	select {
	case s := <-wr.states:
		var got []int
		for _, o := range s.Owned {
			got = append(got, o.Index)
		}
		if len(got) != len(want) {
			t.Fatalf("fn got owned %v, want %v (%+v)", got, want, s)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("fn got owned %v, want %v", got, want)
			}
		}
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("fn was not called within 20s (want owned %v)", want)
	}
	return client.ShardSet{}
}

// TestWatchShardsSeesEveryChangeAndDropsAShardPastItsValidity: fn gets the
// set at once and at every change; a shard whose validity runs out with no
// newer state is dropped from what fn gets at that moment.
func TestWatchShardsSeesEveryChangeAndDropsAShardPastItsValidity(t *testing.T) {
	set, url := startShardSidecar(t, setStatus(owned(0, 3, time.Minute, 0), owned(5, 9, time.Minute, 0)))
	wr := startWatchShards(t, url)
	first := wr.next(t, 0, 5)
	if first.ETag == "" || first.Owned[0].Token != 3 {
		t.Fatalf("first state %+v", first)
	}
	set.set(setStatus(owned(0, 3, time.Minute, 0)))
	wr.next(t, 0)
	set.set(setStatus(owned(0, 3, time.Minute, 0), owned(2, 1, 300*time.Millisecond, 0)))
	s := wr.next(t, 0, 2)
	// No renewal comes: shard 2's validity runs out.
	dropped := wr.next(t, 0)
	if time.Now().Before(s.Owned[1].Deadline) {
		t.Fatalf("shard 2 was dropped before its deadline %v", s.Owned[1].Deadline)
	}
	if dropped.Owned[0].Token != 3 {
		t.Fatalf("after shard 2 ran out: %+v", dropped)
	}
	// A renewal brings it back.
	set.set(setStatus(owned(0, 3, time.Minute, 1), owned(2, 1, time.Minute, 1)))
	wr.next(t, 0, 2)
}

// shardRun is a RunShards in the background: each fn call reports its
// start and the cause its context ended with.
type shardRun struct {
	started chan client.ShardToken
	ended   chan error
	cancel  context.CancelFunc
	done    chan error
}

func startRunShards(t *testing.T, url string) *shardRun {
	t.Helper()
	c := newClient(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	sr := &shardRun{started: make(chan client.ShardToken, 64), ended: make(chan error, 64), cancel: cancel, done: make(chan error, 1)}
	var mu sync.Mutex
	busy := map[int]bool{}
	go func() {
		sr.done <- c.RunShards(ctx, func(ctx context.Context, shard client.ShardToken) {
			mu.Lock()
			if busy[shard.Index] {
				t.Errorf("two fn calls for shard %d at once", shard.Index)
			}
			busy[shard.Index] = true
			mu.Unlock()
			sr.started <- shard
			<-ctx.Done()
			mu.Lock()
			busy[shard.Index] = false
			mu.Unlock()
			sr.ended <- context.Cause(ctx)
		})
	}()
	return sr
}

func (sr *shardRun) nextStart(t *testing.T) client.ShardToken {
	t.Helper()
	select {
	case s := <-sr.started:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no fn started within 20s")
	}
	return client.ShardToken{}
}

func (sr *shardRun) nextEnd(t *testing.T, want string) {
	t.Helper()
	select {
	case cause := <-sr.ended:
		if !errors.Is(cause, client.ErrShardLost) || !strings.Contains(cause.Error(), want) {
			t.Fatalf("fn's context ended with %v, want ErrShardLost with %q", cause, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no fn ended within 20s (want %q)", want)
	}
}

// TestRunShardsRunsOneWorkerPerOwnedShard: fn runs once per shard owned,
// its context ends when the shard moves away or its token changes (the new
// token's fn starts after the old one returned), renewals change nothing,
// and cancelling RunShards ends every fn before it returns.
func TestRunShardsRunsOneWorkerPerOwnedShard(t *testing.T) {
	set, url := startShardSidecar(t, setStatus(owned(0, 3, time.Minute, 0), owned(5, 9, time.Minute, 0)))
	sr := startRunShards(t, url)
	got := map[int]int64{}
	for range 2 {
		s := sr.nextStart(t)
		got[s.Index] = s.Token
		if s.LeaseUID == "" || time.Until(s.Deadline) < 30*time.Second {
			t.Fatalf("fn started with %+v", s)
		}
	}
	if got[0] != 3 || got[5] != 9 {
		t.Fatalf("fn started for %v, want shard 0 token 3 and shard 5 token 9", got)
	}
	// A renewal: nothing ends, nothing starts.
	set.set(setStatus(owned(0, 3, time.Minute, 1), owned(5, 9, time.Minute, 1)))
	// Shard 5 moves away.
	set.set(setStatus(owned(0, 3, time.Minute, 2)))
	sr.nextEnd(t, "shard 5 (token 9) is no longer owned")
	// Shard 0 comes back with a new token: the old fn ends, the new starts.
	set.set(setStatus(owned(0, 4, time.Minute, 3)))
	sr.nextEnd(t, "shard 0's token changed from 3 to 4")
	if s := sr.nextStart(t); s.Index != 0 || s.Token != 4 {
		t.Fatalf("fn started with %+v, want shard 0 token 4", s)
	}
	select {
	case s := <-sr.started:
		t.Fatalf("an extra fn started: %+v", s)
	case cause := <-sr.ended:
		t.Fatalf("an extra fn ended: %v", cause)
	default:
	}
	sr.cancel()
	select {
	case err := <-sr.done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunShards returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("RunShards did not return after its context was cancelled")
	}
	select {
	case cause := <-sr.ended:
		if !errors.Is(cause, context.Canceled) {
			t.Fatalf("the last fn ended with %v", cause)
		}
	default:
		t.Fatal("RunShards returned before the running fn did")
	}
}
