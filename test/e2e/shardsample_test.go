//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The helpers of the shard set tests (shards_test.go): GET /shards read from the pods, the set's Leases
// followed with one label-selected watch, and the checks of both.

// shardsAnswer is one GET /shards of a pod, through a port-forward (answer: the window it was produced in).
type shardsAnswer struct {
	answer
	resp api.ShardsResponse
}

// shards reads GET /shards from a pod.
func (f *podForwards) shards(ctx context.Context, pod string) shardsAnswer {
	a := shardsAnswer{answer: f.get(ctx, pod, "/shards")}
	if a.err == nil && a.status == 200 {
		if err := json.Unmarshal([]byte(a.body), &a.resp); err != nil {
			a.err = fmt.Errorf("decoding /shards %q: %v", a.body, err)
		}
	}
	return a
}

// sampleShards reads GET /shards from every pod at once.
func (f *podForwards) sampleShards(ctx context.Context, pods []string) []shardsAnswer {
	out := make([]shardsAnswer, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = f.shards(ctx, p)
		}()
	}
	wg.Wait()
	return out
}

func (a shardsAnswer) String() string {
	if a.err != nil || a.status != 200 {
		return a.answer.String()
	}
	var owned []string
	for _, o := range a.resp.Owned {
		owned = append(owned, fmt.Sprintf("%d@%d", o.Index, o.Token))
	}
	return fmt.Sprintf("%s /shards [%s..%s]: ready=%v live=%v members=%v owned(shard@token)=%s", a.pod,
		a.sent.Format("15:04:05.000"), a.recv.Format("15:04:05.000"), a.resp.Ready, a.resp.Live, a.resp.Members, strings.Join(owned, ","))
}

// shardClaim is one shard a pod said it owns, with the token it served.
type shardClaim struct {
	pod        string
	shard      int
	token      int64
	leaseUID   string
	sent, recv time.Time
}

func (c shardClaim) String() string {
	return fmt.Sprintf("%s shard %d token %d [%s..%s]", c.pod, c.shard, c.token, c.sent.Format("15:04:05.000"), c.recv.Format("15:04:05.000"))
}

// claimsOf lists the owned shards of 200 answers.
func claimsOf(as []shardsAnswer) []shardClaim {
	var cs []shardClaim
	for _, a := range as {
		if a.err != nil || a.status != 200 {
			continue
		}
		for _, o := range a.resp.Owned {
			cs = append(cs, shardClaim{pod: a.pod, shard: o.Index, token: o.Token, leaseUID: o.LeaseUID, sent: a.sent, recv: a.recv})
		}
	}
	return cs
}

// shardClaimViolations checks shard ownership claims sampled from outside the pods, per shard, as
// leaderViolations does for one Lease: each answer was produced at an unknown instant in [sent, recv], so
// for one shard a claim with a lower token made certainly after (sent > recv) a claim with a higher token
// is two owners at once or a token going backwards, and one token claimed by two pods is two owners in one
// term. Claims of a shard by two pods whose windows overlap are a move during the sample, not a violation.
// A claim whose Lease UID differs from an earlier one's means the shard's Lease was recreated (its token
// restarted).
func shardClaimViolations(claims []shardClaim) []string {
	byShard := map[int][]shardClaim{}
	for _, c := range claims {
		byShard[c.shard] = append(byShard[c.shard], c)
	}
	var v []string
	for _, i := range sortedKeys(byShard) {
		cs := byShard[i]
		sort.SliceStable(cs, func(a, b int) bool { return cs[a].sent.Before(cs[b].sent) })
		for a := range cs {
			for b := range cs {
				x, y := cs[a], cs[b]
				switch {
				case x.token == y.token && x.pod != y.pod && a < b:
					v = append(v, fmt.Sprintf("shard %d: token %d served by two pods: %s and %s", i, x.token, x, y))
				case x.token < y.token && x.sent.After(y.recv):
					v = append(v, fmt.Sprintf("shard %d: %s served token %d after %s had served token %d", i, x, x.token, y, y.token))
				case x.leaseUID != y.leaseUID && a < b:
					v = append(v, fmt.Sprintf("shard %d: Lease UID %s in %s, %s in %s: the Lease was recreated", i, x.leaseUID, x, y.leaseUID, y))
				}
			}
		}
	}
	return v
}

// doubleClaims lists the shards two pods claimed in one sample round (a move in flight, or a violation
// that shardClaimViolations names).
func doubleClaims(round []shardsAnswer) []int {
	owners := map[int]map[string]bool{}
	for _, c := range claimsOf(round) {
		if owners[c.shard] == nil {
			owners[c.shard] = map[string]bool{}
		}
		owners[c.shard][c.pod] = true
	}
	var d []int
	for _, i := range sortedKeys(owners) {
		if len(owners[i]) > 1 {
			d = append(d, i)
		}
	}
	return d
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

// fairShare reports whether every one of pods owns ⌊n/len(pods)⌋ or ⌈n/len(pods)⌉ of the n shards in owners.
func fairShare(owners map[int]string, n int, pods []string) error {
	count := map[string]int{}
	for _, p := range owners {
		count[p]++
	}
	lo, hi := n/len(pods), (n+len(pods)-1)/len(pods)
	for _, p := range pods {
		if count[p] < lo || count[p] > hi {
			return fmt.Errorf("shards per pod %v: %s owns %d, want %d or %d", count, p, count[p], lo, hi)
		}
	}
	return nil
}

// settledShards: at one sample every pod of pods answers GET /shards (200, ready, live, its own identity,
// the same members: pods), each of the n shards is owned by exactly one of them, each pod a fair share, and
// each shard's Lease names that pod as holder with its token as leaseTransitions. It returns the owner and
// token of every shard.
func (f *podForwards) settledShards(ctx context.Context, set string, n int, pods []string) (map[int]string, map[int]int64, error) {
	r := f.r
	owners, tokens := map[int]string{}, map[int]int64{}
	for _, a := range f.sampleShards(ctx, pods) {
		switch {
		case a.err != nil || a.status != 200:
			return nil, nil, fmt.Errorf("%v", a.answer)
		case !a.resp.Ready || !a.resp.Live || a.resp.Identity != a.pod || a.resp.Shards != n || a.resp.Set != r.ns+"/"+set:
			return nil, nil, fmt.Errorf("not settled: %v (want set %s/%s of %d shards)", a, r.ns, set, n)
		case !slices.Equal(a.resp.Members, pods):
			return nil, nil, fmt.Errorf("%s sees members %v, want %v", a.pod, a.resp.Members, pods)
		}
		for _, o := range a.resp.Owned {
			if prev, ok := owners[o.Index]; ok {
				return nil, nil, fmt.Errorf("shard %d owned by %s and %s in one sample", o.Index, prev, a.pod)
			}
			if o.Index < 0 || o.Index >= n || o.Token <= 0 || o.Lease != r.ns+"/"+shards.ShardLeaseName(set, o.Index) {
				return nil, nil, fmt.Errorf("%s owns %+v: want an index below %d, a positive token and Lease %s/%s", a.pod, o, n, r.ns, shards.ShardLeaseName(set, o.Index))
			}
			owners[o.Index], tokens[o.Index] = a.pod, o.Token
		}
	}
	if len(owners) != n {
		return nil, nil, fmt.Errorf("%d of %d shards owned: %v", len(owners), n, owners)
	}
	if err := fairShare(owners, n, pods); err != nil {
		return nil, nil, err
	}
	leases, err := suite.cs.CoordinationV1().Leases(r.ns).List(ctx, metav1.ListOptions{LabelSelector: shards.SetLabel + "=" + set + "," + shards.RoleLabel + "=" + shards.RoleShard})
	if err != nil {
		return nil, nil, err
	}
	seen := 0
	for i := range leases.Items {
		l := &leases.Items[i]
		idx, err := strconv.Atoi(l.Labels[shards.IndexLabel])
		if err != nil || idx >= n || l.Name != shards.ShardLeaseName(set, idx) {
			continue // a shard of a larger N before: not served
		}
		seen++
		if h, tok := framework.LeaseHolder(l); h != owners[idx] || tok != tokens[idx] {
			return nil, nil, fmt.Errorf("Lease %s: holder %q leaseTransitions %d, but %s serves token %d", l.Name, h, tok, owners[idx], tokens[idx])
		}
	}
	if seen != n {
		return nil, nil, fmt.Errorf("%d shard Leases labelled %s=%s, want %d", seen, shards.SetLabel, set, n)
	}
	return owners, tokens, nil
}

// waitSettledShards waits for settledShards among the running pods, which must be want pods.
func (f *podForwards) waitSettledShards(set string, n, want int, timeout time.Duration) (map[int]string, map[int]int64, []string) {
	r := f.r
	r.t.Helper()
	var owners map[int]string
	var tokens map[int]int64
	var pods []string
	var last error
	start := time.Now()
	err := framework.Poll(context.Background(), time.Second, timeout, func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = r.runningPods(ctx); err != nil || len(pods) != want {
			last = fmt.Errorf("running pods %v (%v), want %d", pods, err, want)
			return false, nil
		}
		o, tok, err := f.settledShards(ctx, set, n, pods)
		if err == nil || ctx.Err() == nil { // a read cut short by the deadline leaves the last real answer
			owners, tokens, last = o, tok, err
		}
		return err == nil, nil
	})
	if err != nil {
		r.t.Fatalf("the %d shards of %s did not settle on %d pods (one owner each, a fair share, the Leases agreeing): %v; last: %v", n, set, want, err, last)
	}
	r.t.Logf("settled in %.1fs: %s", time.Since(start).Seconds(), ownersString(owners, tokens))
	return owners, tokens, pods
}

func ownersString(owners map[int]string, tokens map[int]int64) string {
	var b strings.Builder
	for _, i := range sortedKeys(owners) {
		fmt.Fprintf(&b, "%d:%s@%d ", i, owners[i], tokens[i])
	}
	return strings.TrimSpace(b.String())
}

// setLeaseVersion is one version of a Lease of the set, as the watch delivered it.
type setLeaseVersion struct {
	at          time.Time
	event       watch.EventType
	name        string
	uid         string
	holder      string
	transitions int64
}

// setWatch follows every Lease of a set with one label-selected watch (re-opened from the last
// resourceVersion when the server ends it), from a list's state on.
type setWatch struct {
	mu       sync.Mutex
	versions []setLeaseVersion
	err      error // why the watch stopped before its context ended
	done     chan struct{}
}

func (r *release) watchShardSet(ctx context.Context, set string) (*setWatch, error) {
	leases := suite.cs.CoordinationV1().Leases(r.ns)
	opts := metav1.ListOptions{LabelSelector: shards.SetLabel + "=" + set}
	list, err := leases.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	sw := &setWatch{done: make(chan struct{})}
	record := func(t watch.EventType, l *coordinationv1.Lease) {
		h, tok := framework.LeaseHolder(l)
		sw.mu.Lock()
		sw.versions = append(sw.versions, setLeaseVersion{at: time.Now(), event: t, name: l.Name, uid: string(l.UID), holder: h, transitions: tok})
		sw.mu.Unlock()
	}
	for i := range list.Items {
		record(watch.Added, &list.Items[i])
	}
	rv := list.ResourceVersion
	go func() {
		defer close(sw.done)
		for ctx.Err() == nil {
			o := opts
			o.ResourceVersion, o.AllowWatchBookmarks = rv, true
			w, err := leases.Watch(ctx, o)
			if err != nil {
				sw.fail(ctx, fmt.Errorf("watch from resourceVersion %s: %w", rv, err))
				return
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					// Also how the stream ends when ctx is cancelled ("context canceled"): not a failure then.
					sw.fail(ctx, fmt.Errorf("watch from resourceVersion %s: %v", rv, apierrors.FromObject(ev.Object)))
					w.Stop()
					return
				}
				l, ok := ev.Object.(*coordinationv1.Lease)
				if !ok {
					continue
				}
				rv = l.ResourceVersion
				if ev.Type != watch.Bookmark {
					record(ev.Type, l)
				}
			}
			w.Stop()
		}
	}()
	return sw, nil
}

// fail records why the watch stopped, unless it stopped because ctx ended.
func (sw *setWatch) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	sw.mu.Lock()
	sw.err = err
	sw.mu.Unlock()
}

// snapshot returns the versions so far and the watch's error.
func (sw *setWatch) snapshot() ([]setLeaseVersion, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return slices.Clone(sw.versions), sw.err
}

// shardLeaseViolations checks the versions of the set's shard Leases as the watch saw them: no shard Lease
// is deleted or recreated, its leaseTransitions (the token) never goes down, and one token value names one
// holder (a move is token + 1). It returns, per shard, the holder of every token seen.
func shardLeaseViolations(set string, n int, versions []setLeaseVersion) (holders map[int]map[int64]string, v []string) {
	holders = map[int]map[int64]string{}
	last := map[int]setLeaseVersion{}
	for _, x := range versions {
		i, ok := shardIndex(set, x.name)
		if !ok || i >= n {
			continue
		}
		if x.event == watch.Deleted {
			v = append(v, fmt.Sprintf("shard Lease %s deleted at %s", x.name, x.at.Format("15:04:05.000")))
			continue
		}
		if p, ok := last[i]; ok {
			if p.uid != x.uid {
				v = append(v, fmt.Sprintf("shard Lease %s recreated (UID %s, then %s) at %s", x.name, p.uid, x.uid, x.at.Format("15:04:05.000")))
			}
			if x.transitions < p.transitions {
				v = append(v, fmt.Sprintf("shard Lease %s: leaseTransitions %d after %d (holder %q, then %q) at %s", x.name, x.transitions, p.transitions, p.holder, x.holder, x.at.Format("15:04:05.000")))
			}
		}
		last[i] = x
		if holders[i] == nil {
			holders[i] = map[int64]string{}
		}
		if h, ok := holders[i][x.transitions]; ok && h != x.holder && x.holder != "" && h != "" {
			v = append(v, fmt.Sprintf("shard Lease %s: token %d names holder %q and then %q", x.name, x.transitions, h, x.holder))
		} else if !ok || h == "" {
			holders[i][x.transitions] = x.holder
		}
	}
	return holders, v
}

// shardIndex parses a shard Lease's name <set>-<i>.
func shardIndex(set, name string) (int, bool) {
	s, ok := strings.CutPrefix(name, set+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == s
}
