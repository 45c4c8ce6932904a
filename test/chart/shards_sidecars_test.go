package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// shardsOf GETs a sidecar's /shards.
func (p *sidecarProc) shardsOf(ctx context.Context) (api.ShardsResponse, error) {
	var s api.ShardsResponse
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/shards", nil)
	if err != nil {
		return s, err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET /shards: %s", resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// waitShardsSplit waits until the sidecars procs (named by pod) together own each of the n shards once,
// each a fair share, and all see the same members; it returns the owner of every shard.
func waitShardsSplit(t *testing.T, procs map[string]*sidecarProc, n int) map[int]string {
	t.Helper()
	var owners map[int]string
	pods := make([]string, 0, len(procs))
	for p := range procs {
		pods = append(pods, p)
	}
	slices.Sort(pods)
	err := framework.Eventually(context.Background(), waitInterval, 90*time.Second, fmt.Sprintf("%d shards split fairly over %v", n, pods), func(ctx context.Context) error {
		owners = map[int]string{}
		for _, pod := range pods {
			s, err := procs[pod].shardsOf(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", pod, err)
			}
			if !s.Ready || !s.Live || !slices.Equal(s.Members, pods) {
				return fmt.Errorf("%s: ready %v live %v members %v", pod, s.Ready, s.Live, s.Members)
			}
			for _, o := range s.Owned {
				if prev, ok := owners[o.Index]; ok {
					return fmt.Errorf("shard %d owned by %s and %s", o.Index, prev, pod)
				}
				owners[o.Index] = pod
			}
		}
		if len(owners) != n {
			return fmt.Errorf("%d of %d shards owned: %v", len(owners), n, owners)
		}
		count := map[string]int{}
		for _, p := range owners {
			count[p]++
		}
		for _, p := range pods {
			if c := count[p]; c < n/len(pods) || c > (n+len(pods)-1)/len(pods) {
				return fmt.Errorf("shards per member %v: not a fair share", count)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return owners
}

// testShardSidecarsWithChartRBAC: sidecars configured as the chart configures them with election.shards
// (ELECTOR_SHARDS) and running as the chart's ServiceAccount, under the shard set's lease guard, share the
// set fairly, hand a stopping member's shards to the others and end its session, and none of their writes
// is refused: the Role and the guard allow everything a member does.
func testShardSidecarsWithChartRBAC(t *testing.T, c *cluster) {
	ctx := context.Background()
	const ns, n = "elector-shard-sidecars", 4
	bin := buildSidecar(t)
	r := installChart(t, c, ns, []string{
		"election.leaseDuration=3s", "election.renewDeadline=2s", "election.retryPeriod=500ms", "election.clockSkewMargin=200ms",
		"sidecar.logFormat=text", "sidecar.logLevel=debug", "leaseGuard.enabled=true", fmt.Sprintf("election.shards=%d", n),
	})
	pod, _ := podSpec(t, r, "Deployment")
	container := pod.Spec.InitContainers[0]
	set := envMap(&container)["ELECTOR_LEASE_NAME"]
	kubeconfig := saKubeconfig(t, c, ns, pod.Spec.ServiceAccountName)

	procs := map[string]*sidecarProc{}
	for _, name := range []string{"pod-a", "pod-b"} {
		procs[name] = startSidecar(t, bin, container, name, ns, kubeconfig)
	}
	owners := waitShardsSplit(t, procs, n)
	t.Logf("owners with two members: %v", owners)
	// The guard is active by now (the set's Leases exist): a dry-run delete of a shard Lease is refused.
	waitGuardActive(t, c, ns, shards.ShardLeaseName(set, 0))
	leases, err := c.kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: shards.SetLabel + "=" + set})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range leases.Items {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	want := []string{shards.ShardLeaseName(set, 0), shards.ShardLeaseName(set, 1), shards.ShardLeaseName(set, 2), shards.ShardLeaseName(set, 3),
		shards.MemberLeaseName(set, "pod-a"), shards.MemberLeaseName(set, "pod-b")}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("the set's Leases %v, want %v", names, want)
	}

	// A third member joins (a rebalance), then pod-a stops (SIGTERM: its shards handed off, its session ended).
	procs["pod-c"] = startSidecar(t, bin, container, "pod-c", ns, kubeconfig)
	waitShardsSplit(t, procs, n)
	procs["pod-a"].stop(t)
	stopped := procs["pod-a"]
	delete(procs, "pod-a")
	owners = waitShardsSplit(t, procs, n)
	t.Logf("owners after pod-a stopped: %v", owners)
	for _, p := range []*sidecarProc{stopped, procs["pod-b"], procs["pod-c"]} {
		if out := p.out.String(); strings.Contains(out, "forbidden") || strings.Contains(out, "guarded by elector-sidecar") {
			t.Errorf("%s had a write refused by RBAC or the lease guard:\n%s", p.name, out)
		}
	}
	for _, p := range procs {
		p.stop(t)
	}
}
