package integration

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// withArgs adds flags to every sidecar the group starts from now on.
func (g *electionGroup) withArgs(args ...string) *electionGroup {
	g.Template.ExtraArgs = append(g.Template.ExtraArgs, args...)
	return g
}

// The chart's labels: the Lease a sidecar creates carries them, so a label
// selector finds it (kubectl get lease -A -l app.kubernetes.io/instance=...).
func TestLeaseCreatedWithLeaseLabelsIsFoundByALabelSelector(t *testing.T) {
	g := newGroup(t, testTimings)
	instance := g.namespace // unique in the apiserver
	g.withArgs("--lease-labels=app.kubernetes.io/name=elector-sidecar,app.kubernetes.io/instance=" + instance)
	g.start("a", "b")
	g.waitLeader(startupTimeout)

	leases, err := env.cp.Client.CoordinationV1().Leases(metav1.NamespaceAll).List(g.ctx,
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + instance})
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Items) != 1 || leases.Items[0].Namespace != g.namespace || leases.Items[0].Name != g.lease {
		t.Fatalf("Leases with app.kubernetes.io/instance=%s in all namespaces: %v, want exactly %s/%s", instance, leaseKeys(leases.Items), g.namespace, g.lease)
	}
	want := map[string]string{"app.kubernetes.io/name": "elector-sidecar", "app.kubernetes.io/instance": instance}
	if got := leases.Items[0].Labels; !maps.Equal(got, want) {
		t.Fatalf("Lease labels %v, want %v", got, want)
	}
}

// A Lease that exists without the labels (created by an older sidecar, or
// by hand) gets the missing ones with the leader's next write; a label it
// already has keeps its value.
func TestLeaderAddsMissingLeaseLabelsToAnExistingLease(t *testing.T) {
	g := newGroup(t, testTimings)
	_, err := env.cp.Client.CoordinationV1().Leases(g.namespace).Create(g.ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: g.lease, Labels: map[string]string{"team": "payments"}},
		Spec:       coordinationv1.LeaseSpec{LeaseTransitions: ptrTo(int32(3))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g.withArgs("--lease-labels=app.kubernetes.io/instance=" + g.namespace + ",team=billing")
	g.start("a")
	g.waitLeader(startupTimeout)
	want := map[string]string{"app.kubernetes.io/instance": g.namespace, "team": "payments"}
	g.waitFor(10*time.Second, fmt.Sprintf("the Lease's labels to be %v", want), func(ctx context.Context) error {
		l, err := env.cp.GetLease(ctx, g.namespace, g.lease)
		if err != nil {
			return err
		}
		if !maps.Equal(l.Labels, want) {
			return fmt.Errorf("labels %v", l.Labels)
		}
		return nil
	})
}

// The README's one-leader alert, `sum by (lease) (elector_is_leader) != 1`,
// evaluated by hand over the /metrics of real sidecars on two Leases of the
// same name in two namespaces: every elector_* series carries its lease,
// and each lease sums to exactly 1. The sidecars run with a client-side
// rate limit of their own (--kube-api-qps, --kube-api-burst).
func TestOneLeaderPerLeaseFromTheLeaseLabelOfTheMetrics(t *testing.T) {
	groups := []*electionGroup{
		newGroup(t, testTimings).withArgs("--kube-api-qps=5", "--kube-api-burst=10"),
		newGroup(t, testTimings).withArgs("--kube-api-qps=5", "--kube-api-burst=10"),
	}
	var all []*framework.Candidate
	for _, g := range groups {
		all = append(all, g.start("a", "b")...)
	}
	for _, g := range groups {
		g.waitLeader(startupTimeout)
		g.waitFor(10*time.Second, "exactly one leader", g.exactlyOneLeader)
	}
	sums := map[string]float64{}
	for _, c := range all {
		text := scrape(t, groups[0].ctx, c)
		lease := c.Spec.Namespace + "/" + c.Spec.LeaseName
		series := regexp.MustCompile(`(?m)^(elector_[a-z_]+)(\{[^}]*\})? (\S+)$`).FindAllStringSubmatch(text, -1)
		if len(series) < 10 {
			t.Fatalf("%s: only %d elector_* series in /metrics:\n%s", c, len(series), text)
		}
		for _, s := range series {
			if !strings.Contains(s[2], fmt.Sprintf("lease=%q", lease)) {
				t.Errorf("%s: %s%s has no lease=%q", c, s[1], s[2], lease)
			}
			if s[1] == "elector_is_leader" {
				v, err := strconv.ParseFloat(s[3], 64)
				if err != nil {
					t.Fatal(err)
				}
				sums[lease] += v
			}
		}
		if !regexp.MustCompile(`(?m)^elector_build_info\{goversion="go[^"]+",lease="` + regexp.QuoteMeta(lease) + `",revision="[^"]+",version="[^"]+"\} 1$`).MatchString(text) {
			t.Errorf("%s: no elector_build_info{goversion,lease,revision,version} 1 in /metrics", c)
		}
		if regexp.MustCompile(`(?m)^(go|process)_[a-z_]+\{[^}]*lease=`).MatchString(text) {
			t.Errorf("%s: Go or process metrics carry the lease label", c)
		}
	}
	if len(sums) != 2 {
		t.Fatalf("sum by (lease) (elector_is_leader) = %v, want two leases", sums)
	}
	for lease, sum := range sums {
		if sum != 1 {
			t.Errorf("sum by (lease) (elector_is_leader){lease=%q} = %v, want 1", lease, sum)
		}
	}
}

// scrape returns c's /metrics.
func scrape(t *testing.T, ctx context.Context, c *framework.Candidate) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Spec.HTTPAddress+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /metrics: %d %v", c, resp.StatusCode, err)
	}
	return string(b)
}

func leaseKeys(ls []coordinationv1.Lease) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Namespace+"/"+l.Name)
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }
