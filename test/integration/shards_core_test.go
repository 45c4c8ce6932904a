package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/elector-sidecar/elector-sidecar/internal/testsupport"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
)

// shardMember is one in-process member of a set on the real apiserver,
// whose connection the test can cut (a partition: every request fails).
type shardMember struct {
	id   string
	set  *shards.Set
	cut  atomic.Bool
	stop context.CancelFunc
	done chan error
}

type cutTransport struct {
	rt  http.RoundTripper
	cut *atomic.Bool
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("cut off by the test")
	}
	return c.rt.RoundTrip(r)
}

// shardTest runs members of one set and samples them.
type shardTest struct {
	t       *testing.T
	ns, set string
	n       int
	timing  election.Config
	mu      sync.Mutex
	members []*shardMember
	// served: per shard, per token, the member that served it.
	served  []map[int64]string
	lastTok []int64 // the highest token sampled per shard
	bad     []string
	samples int
}

func newShardTest(t *testing.T, n int) *shardTest {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := env.cp.CreateNamespace(ctx, "shards")
	if err != nil {
		t.Fatal(err)
	}
	st := &shardTest{t: t, ns: ns, set: "work", n: n, served: make([]map[int64]string, n), lastTok: make([]int64, n),
		timing: election.Config{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond, ClockSkewMargin: 100 * time.Millisecond}}
	for i := range st.served {
		st.served[i] = map[int64]string{}
	}
	sctx, stopSampling := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { st.sample(sctx) })
	t.Cleanup(func() {
		stopSampling()
		wg.Wait()
		for _, m := range st.members {
			m.stop()
		}
		for _, m := range st.members {
			if err := <-m.done; err != nil {
				t.Errorf("%s's Run: %v", m.id, err)
			}
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if len(st.bad) > 0 {
			t.Errorf("%d broken claims over %d samples, first: %s", len(st.bad), st.samples, st.bad[0])
		} else {
			t.Logf("every shard's tokens were served by one member each and only grew over %d samples", st.samples)
		}
	})
	return st
}

func (st *shardTest) start(id string) *shardMember {
	st.t.Helper()
	m := &shardMember{id: id, done: make(chan error, 1)}
	cfg := rest.CopyConfig(env.cp.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cutTransport{rt: rt, cut: &m.cut} })
	client, err := kubeclient.NewForConfig(cfg)
	if err != nil {
		st.t.Fatal(err)
	}
	ec := st.timing
	ec.Client, ec.Namespace, ec.Name, ec.Identity = client, st.ns, st.set, id
	ec.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("member", id)
	m.set, err = shards.New(shards.Config{Config: ec, Shards: st.n})
	if err != nil {
		st.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	go func() { m.done <- m.set.Run(ctx) }()
	st.mu.Lock()
	st.members = append(st.members, m)
	st.mu.Unlock()
	return m
}

// sample reads every member's Status in rounds and checks each shard: a
// token value is served by one member only, a shard is served by at most
// one member in a round, and the tokens served only grow.
func (st *shardTest) sample(ctx context.Context) {
	for ctx.Err() == nil {
		st.mu.Lock()
		members := append([]*shardMember(nil), st.members...)
		st.mu.Unlock()
		round := make([][]string, st.n)
		type got struct {
			id  string
			own shards.Owned
		}
		var all []got
		for _, m := range members {
			for _, o := range m.set.Status().Owned {
				all = append(all, got{m.id, o})
				round[o.Index] = append(round[o.Index], m.id)
			}
		}
		st.mu.Lock()
		st.samples++
		for _, g := range all {
			i, tok := g.own.Index, g.own.Token
			if prev, ok := st.served[i][tok]; ok && prev != g.id {
				st.bad = append(st.bad, fmt.Sprintf("shard %d token %d served by %s and %s", i, tok, prev, g.id))
			}
			st.served[i][tok] = g.id
			if tok < st.lastTok[i] {
				st.bad = append(st.bad, fmt.Sprintf("shard %d: %s served token %d after token %d was served", i, g.id, tok, st.lastTok[i]))
			}
			st.lastTok[i] = max(st.lastTok[i], tok)
		}
		for i, ids := range round {
			if len(ids) > 1 {
				st.bad = append(st.bad, fmt.Sprintf("shard %d served by %v in one round", i, ids))
			}
		}
		st.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// owners is who serves each shard now ("" none), and how many each serves.
func (st *shardTest) owners(members ...*shardMember) ([]string, map[string]int) {
	out := make([]string, st.n)
	count := map[string]int{}
	for _, m := range members {
		for _, o := range m.set.Status().Owned {
			out[o.Index] = m.id
			count[m.id]++
		}
	}
	return out, count
}

// waitFair waits until the members serve every shard in fair shares.
func (st *shardTest) waitFair(timeout time.Duration, members ...*shardMember) []string {
	st.t.Helper()
	var owner []string
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := testsupport.Eventually(ctx, 20*time.Millisecond, timeout, "every shard served, in fair shares", func(context.Context) error {
		var count map[string]int
		owner, count = st.owners(members...)
		for i, o := range owner {
			if o == "" {
				return fmt.Errorf("shard %d served by nobody (%v)", i, count)
			}
		}
		lo, hi := st.n/len(members), (st.n+len(members)-1)/len(members)
		for _, m := range members {
			if c := count[m.id]; c < lo || c > hi {
				return fmt.Errorf("%s serves %d, want %d–%d (%v)", m.id, c, lo, hi, count)
			}
		}
		return nil
	})
	if err != nil {
		st.t.Fatal(err)
	}
	return owner
}

// watchSet counts the set's Lease writes (watch events) by role and, for
// shards, the count increments per shard, until stop is called.
func (st *shardTest) watchSet() (stop func() (members int, shardMoves map[string]int)) {
	st.t.Helper()
	client, err := kubeclient.NewForConfig(env.cp.Config)
	if err != nil {
		st.t.Fatal(err)
	}
	w, err := client.Leases(st.ns).Watch(context.Background(), metav1.ListOptions{LabelSelector: shards.SetLabel + "=" + st.set})
	if err != nil {
		st.t.Fatal(err)
	}
	var mu sync.Mutex
	members, moves := 0, map[string]int{}
	last := map[string]int32{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || ev.Type == watch.Bookmark {
				continue
			}
			mu.Lock()
			if l.Labels[shards.RoleLabel] == shards.RoleMember {
				members++
			} else if c := ptrVal(l.Spec.LeaseTransitions); ev.Type != watch.Added || last[l.Name] != 0 {
				if c != last[l.Name] {
					moves[l.Name]++
				}
				last[l.Name] = c
			} else {
				last[l.Name] = c
			}
			mu.Unlock()
		}
	}()
	return func() (int, map[string]int) {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return members, moves
	}
}

func ptrVal(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func TestShardSetSpreadsShardsFairlyAndWritesOnlySessionsInSteadyState(t *testing.T) {
	st := newShardTest(t, 16)
	a, b, c := st.start("a"), st.start("b"), st.start("c")
	st.waitFair(30*time.Second, a, b, c)

	// Steady state: only the sessions are written (about one renew per
	// member per retry period), never a shard.
	stop := st.watchSet()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testsupport.Consistently(ctx, 50*time.Millisecond, 10*st.timing.RetryPeriod, "the fair share holds", func(context.Context) error {
		_, count := st.owners(a, b, c)
		if count["a"]+count["b"]+count["c"] != 16 {
			return fmt.Errorf("served: %v", count)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	renews, moves := stop()
	if len(moves) != 0 {
		t.Errorf("shard Leases written in steady state: %v", moves)
	}
	if renews == 0 || renews > 3*12 {
		t.Errorf("%d session writes over 10 retry periods by 3 members, want about 30", renews)
	}
	t.Logf("steady state over 10 retry periods: %d session writes, %d shard writes", renews, len(moves))
}

func TestShardSetJoiningMemberGetsItsShareWithEachShardMovedOnce(t *testing.T) {
	st := newShardTest(t, 16)
	a, b, c := st.start("a"), st.start("b"), st.start("c")
	before := st.waitFair(30*time.Second, a, b, c)
	stop := st.watchSet()
	d := st.start("d")
	after := st.waitFair(30*time.Second, a, b, c, d)
	_, moves := stop()
	changed := 0
	for i := range before {
		if before[i] != after[i] {
			changed++
		}
	}
	if changed != 4 {
		t.Errorf("%d shards changed hands, want 4 (before %v, after %v)", changed, before, after)
	}
	for name, n := range moves {
		if n != 1 {
			t.Errorf("%s moved %d times, want once", name, n)
		}
	}
}

func TestShardSetMemberShuttingDownHandsAllItsShardsOver(t *testing.T) {
	st := newShardTest(t, 16)
	a, b, c := st.start("a"), st.start("b"), st.start("c")
	st.waitFair(30*time.Second, a, b, c)
	c.stop()
	if err := <-c.done; err != nil {
		t.Fatalf("c's Run: %v", err)
	}
	c.done <- nil // for the cleanup
	// Right after Run returned, no shard Lease names c any more.
	client, _ := kubeclient.NewForConfig(env.cp.Config)
	list, err := client.Leases(st.ns).List(context.Background(), metav1.ListOptions{LabelSelector: shards.RoleLabel + "=" + shards.RoleShard})
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, l := range list.Items {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "c" {
			named = append(named, l.Name)
		}
	}
	sort.Strings(named)
	if len(named) > 0 {
		t.Errorf("after c's shutdown these shards still name it: %v", named)
	}
	st.waitFair(10*time.Second, a, b)
}

func TestShardSetCutOffMembersShardsAreTakenAfterItsSessionRunsOut(t *testing.T) {
	st := newShardTest(t, 16)
	a, b, c := st.start("a"), st.start("b"), st.start("c")
	st.waitFair(30*time.Second, a, b, c)
	c.cut.Store(true)
	st.waitFair(4*st.timing.LeaseDuration, a, b)
	if owned := c.set.Status().Owned; len(owned) != 0 {
		t.Errorf("the cut-off member still serves %d shards", len(owned))
	}
}
