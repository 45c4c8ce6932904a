//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// shardCount is election.shards of the shard set tests.
const shardCount = 16

// TestShardsRollingUpdateKeepsOneOwnerPerShardAndFairShares installs the chart (the release's package and
// images that hack/e2e.sh built, as a user installs them; the checkout's only with ELECTOR_E2E_RELEASE_BUILD=0)
// with 3 replicas and election.shards=16, under the shard set's lease guard, and waits until every shard has
// one owner and every pod a fair share (5 or 6). Then a rolling update replaces every pod (helm upgrade with
// a new pod annotation) while GET /shards is sampled (through port-forwards) from every pod with a running
// sidecar and the set's Leases are followed with one watch. At every sample each shard has at most one pod
// serving a token (claims of two pods only while a move is in flight: their answer windows overlap), the
// served tokens of each shard only grow, every served token is the leaseTransitions of a version of the
// shard's Lease that names that pod, no shard Lease is deleted and no token lowered; after the rollout every
// shard is owned by exactly one new pod, each with a fair share, every shard moved (its token grew), and the
// Leases agree.
func TestShardsRollingUpdateKeepsOneOwnerPerShardAndFairShares(t *testing.T) {
	t.Parallel()
	r := newRelease(t, "shards")
	set := r.lease // election.leaseName unset: the full name is the set's name
	chart, img := suite.chart, releaseUnderTest{imageRepo: suite.imageRepo, imageTag: suite.imageTag, demoRepo: suite.demoRepo, demoTag: suite.demoTag}
	if rel := suite.release; rel != nil {
		chart, img = rel.chart, *rel
		t.Logf("installing the release: %s with images %s:%s and %s:%s", chart, img.imageRepo, img.imageTag, img.demoRepo, img.demoTag)
	} else {
		t.Logf("no release given (ELECTOR_E2E_RELEASE_BUILD=0): installing the checkout's chart %s with %s:%s", chart, img.imageRepo, img.imageTag)
	}
	// The app: the demo image's store, a long-running stand-in for an app (it does not read /token, which
	// answers 404 in shard mode).
	shardValues := filepath.Join(t.TempDir(), "shards.yaml")
	if err := os.WriteFile(shardValues, []byte(fmt.Sprintf(`image: {repository: %q, tag: %q, pullPolicy: %s}
demo:
  enabled: false
app:
  image: {repository: %q, tag: %q, pullPolicy: %s}
  command: ["/elector-demo", "store", "--listen", "127.0.0.1:7070"]
election:
  shards: %d
`, img.imageRepo, img.imageTag, suite.pullPolicy, img.demoRepo, img.demoTag, suite.pullPolicy, shardCount)), 0o644); err != nil {
		t.Fatal(err)
	}
	helmRun := func(verb string, extra ...string) {
		t.Helper()
		args := append([]string{verb, releaseName, chart, "--namespace", r.ns, "--values", r.values, "--values", shardValues}, extra...)
		r.helmOK(2*time.Minute, args...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, errOut, err := kubectl(ctx, "--namespace", r.ns, "get", "leases", "-l", "elector-sidecar.io/shard-set="+set,
				"-o", "custom-columns=NAME:.metadata.name,HOLDER:.spec.holderIdentity,TRANSITIONS:.spec.leaseTransitions,RENEWED:.spec.renewTime")
			t.Logf("$ kubectl get leases -l elector-sidecar.io/shard-set=%s\n%s%s%v", set, out, errOut, errString(err))
		}
	})

	start := time.Now()
	helmRun("install")
	r.waitPodsReady(replicas, 4*time.Minute)
	timing(t, "helm install -> 3 pods Ready", time.Since(start))
	pf := newPodForwards(r, 4040) // sidecar.httpPort
	defer pf.close()
	before, beforeTokens, oldPods := pf.waitSettledShards(set, shardCount, replicas, 3*time.Minute)
	timing(t, "helm install -> 16 shards settled", time.Since(start))

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	sw, err := r.watchShardSet(watchCtx, set)
	if err != nil {
		t.Fatalf("watching the set's Leases: %v", err)
	}

	// The sampler: GET /shards of every pod whose sidecar runs (terminating ones too: a member stopping
	// still serves its shards until it hands them off), one round at a time, each pod through its own
	// port-forward (kubectl exec would start a process in the container for every read: a few rounds a minute
	// on a loaded machine).
	var mu sync.Mutex
	var rounds [][]shardsAnswer
	stop, samplerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(samplerDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if pods, err := r.sidecarPods(ctx); err == nil && len(pods) > 0 {
				s := pf.sampleShards(ctx, pods)
				mu.Lock()
				rounds = append(rounds, s)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	stopSampler := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-samplerDone
	}
	defer stopSampler()
	waitRounds := func(n int, when string) {
		t.Helper()
		mu.Lock()
		from := len(rounds)
		mu.Unlock()
		if err := framework.Poll(ctx, 100*time.Millisecond, 2*time.Minute, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return len(rounds) >= from+n, nil
		}); err != nil {
			t.Fatalf("the /shards sampler did not complete %d rounds %s: %v", n, when, err)
		}
	}

	waitRounds(3, "before the rollout")
	rollout := fmt.Sprintf("%d", time.Now().UnixNano())
	rolloutValues := filepath.Join(t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(rolloutValues, []byte(fmt.Sprintf("workload:\n  podAnnotations:\n    e2e-rollout: %q\n", rollout)), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	helmRun("upgrade", "--values", rolloutValues)
	t.Logf("helm upgrade (pod annotation e2e-rollout=%s)", rollout)
	r.waitRolledOut(ctx, replicas, rollout, 6*time.Minute)
	timing(t, "helm upgrade -> all pods replaced and Ready", time.Since(start))
	after, afterTokens, newPods := pf.waitSettledShards(set, shardCount, replicas, 3*time.Minute)
	timing(t, "helm upgrade -> 16 shards settled on the new pods", time.Since(start))
	waitRounds(3, "after the rollout settled")
	stopSampler()
	stopWatch()
	<-sw.done
	versions, werr := sw.snapshot()
	if werr != nil {
		t.Errorf("the watch of the set's Leases ended early (its versions are incomplete): %v", werr)
	}

	// After the rollout: the owners are the new pods, and every shard moved (its token grew).
	for _, p := range newPods {
		if slices.Contains(oldPods, p) {
			t.Errorf("pod %s of before the rollout still runs after it: %v", p, newPods)
		}
	}
	for i := range shardCount {
		if afterTokens[i] <= beforeTokens[i] {
			t.Errorf("shard %d: token %d (owner %s) after the rollout, %d (owner %s) before: every pod was replaced, so it must have moved", i, afterTokens[i], after[i], beforeTokens[i], before[i])
		}
	}

	mu.Lock()
	defer mu.Unlock()
	var all []shardsAnswer
	doubled, errs := 0, 0
	for _, s := range rounds {
		all = append(all, s...)
		for _, a := range s {
			if a.err != nil || a.status != 200 {
				errs++
			}
		}
		if d := doubleClaims(s); len(d) > 0 {
			doubled++
			t.Logf("sample with shards %v claimed by two pods (checked below against the answer windows):\n%s", d, shardAnswersString(s))
		}
	}
	claims := claimsOf(all)
	moves := int64(0)
	for i := range shardCount {
		moves += afterTokens[i] - beforeTokens[i]
	}
	note(t, "samples during the rollout", len(rounds))
	note(t, "shard claims sampled", len(claims))
	note(t, "samples with a shard claimed twice (move in flight)", doubled)
	note(t, "answers that failed (pod stopping/starting)", errs)
	note(t, "shard moves (sum of token deltas)", moves)
	note(t, "Lease versions watched", len(versions))
	if len(rounds) < 10 {
		t.Errorf("only %d samples during the rollout", len(rounds))
	}
	if v := shardClaimViolations(claims); len(v) > 0 {
		t.Errorf("%d shard ownership violations in the pods' answers:\n  %s", len(v), strings.Join(v, "\n  "))
	}
	holders, v := shardLeaseViolations(set, shardCount, versions)
	if len(v) > 0 {
		t.Errorf("%d violations in the shard Leases' versions:\n  %s", len(v), strings.Join(v, "\n  "))
	}
	// Every token a pod served is a version of the shard's Lease that names it: no pod serves a shard the
	// Lease never gave it (the watch starts with a list of the set, before the first sample).
	unseen := 0
	for _, c := range claims {
		h, ok := holders[c.shard][c.token]
		if !ok || h != c.pod {
			unseen++
			if unseen <= 20 {
				t.Errorf("%s: no version of Lease %s with holder %s and leaseTransitions %d was watched (holder of that token: %q, seen: %v)",
					c, fmt.Sprintf("%s-%d", set, c.shard), c.pod, c.token, h, ok)
			}
		}
	}
	t.Logf("before: %s", ownersString(before, beforeTokens))
	t.Logf("after:  %s", ownersString(after, afterTokens))
}

func shardAnswersString(as []shardsAnswer) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "  %s\n", a)
	}
	return b.String()
}
