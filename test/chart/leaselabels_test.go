package chart

import (
	"strings"
	"testing"
)

// TestLeaseLabelsAndKubeAPIValues: the sidecar gets the release's app.kubernetes.io/name and
// app.kubernetes.io/instance as its Lease labels (ELECTOR_LEASE_LABELS, sorted by key), merged with
// election.leaseLabels (which win), sidecar.kubeAPIQPS / kubeAPIBurst as ELECTOR_KUBE_API_*, and
// election.expectedCandidates (else workload.replicas) as ELECTOR_EXPECTED_CANDIDATES.
func TestLeaseLabelsAndKubeAPIValues(t *testing.T) {
	tests := []struct {
		name    string
		set     []string
		release string
		want    map[string]string
	}{
		{name: "defaults: the release's labels", want: map[string]string{
			"ELECTOR_LEASE_LABELS": "app.kubernetes.io/instance=demo,app.kubernetes.io/name=elector-sidecar",
			"ELECTOR_KUBE_API_QPS": "50", "ELECTOR_KUBE_API_BURST": "100"}},
		{name: "another release, nameOverride", release: "billing", set: []string{"nameOverride=jobs"}, want: map[string]string{
			"ELECTOR_LEASE_LABELS": "app.kubernetes.io/instance=billing,app.kubernetes.io/name=jobs"}},
		{name: "extra labels are added, sorted", set: []string{"election.leaseLabels.team=payments", "election.leaseLabels.example\\.com/tier=backend"},
			want: map[string]string{"ELECTOR_LEASE_LABELS": "app.kubernetes.io/instance=demo,app.kubernetes.io/name=elector-sidecar,example.com/tier=backend,team=payments"}},
		{name: "a given key wins over the release's, an empty value", set: []string{"election.leaseLabels.app\\.kubernetes\\.io/name=billing-jobs", "election.leaseLabels.tier="},
			want: map[string]string{"ELECTOR_LEASE_LABELS": "app.kubernetes.io/instance=demo,app.kubernetes.io/name=billing-jobs,tier="}},
		{name: "fractional qps from --set (a string), a large burst", set: []string{"sidecar.kubeAPIQPS=0.5", "sidecar.kubeAPIBurst=1000000"},
			want: map[string]string{"ELECTOR_KUBE_API_QPS": "0.5", "ELECTOR_KUBE_API_BURST": "1000000"}},
		{name: "integer qps", set: []string{"sidecar.kubeAPIQPS=200"}, want: map[string]string{"ELECTOR_KUBE_API_QPS": "200"}},
		{name: "expected candidates: the workload's replicas", want: map[string]string{"ELECTOR_EXPECTED_CANDIDATES": "3"}},
		{name: "expected candidates follow workload.replicas", set: []string{"workload.replicas=100"}, want: map[string]string{"ELECTOR_EXPECTED_CANDIDATES": "100"}},
		{name: "expected candidates unknown without replicas", set: []string{"workload.replicas=0"}, want: map[string]string{"ELECTOR_EXPECTED_CANDIDATES": ""}},
		{name: "a native sidecar hands over at once on SIGTERM (the app has exited)", want: map[string]string{"ELECTOR_SHUTDOWN_HANDOFF": "immediate"}},
		{name: "a plain container waits out the validity handed out", set: []string{"sidecar.native=false"}, want: map[string]string{"ELECTOR_SHUTDOWN_HANDOFF": "after-validity"}},
		{name: "the shutdown handoff given wins", set: []string{"election.shutdownHandoff=after-validity"}, want: map[string]string{"ELECTOR_SHUTDOWN_HANDOFF": "after-validity"}},
		{name: "expected candidates given win over the replicas", set: []string{"workload.replicas=5", "election.expectedCandidates=40"}, want: map[string]string{"ELECTOR_EXPECTED_CANDIDATES": "40"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := renderOpts{Set: tt.set}
			var r rendered
			if tt.release != "" {
				r = mustRenderAs(t, tt.release, releaseNamespace, o)
			} else {
				r = mustRender(t, o)
			}
			sidecar, _ := sidecarAndApp(t, r, "app")
			env := envMap(sidecar)
			for k, v := range tt.want {
				if env[k] != v {
					t.Errorf("sidecar env %s = %q, want %q", k, env[k], v)
				}
			}
		})
	}
}

// TestLeaseLabelsAndKubeAPIBadValues: what the sidecar would reject (exit 2 in every pod) fails at
// render time, naming the value.
func TestLeaseLabelsAndKubeAPIBadValues(t *testing.T) {
	tests := []struct {
		name string
		set  []string
		want []string
	}{
		{"label key with a space", []string{"election.leaseLabels.my team=x"}, []string{"invalid propertyName 'my team'"}},
		{"label key with two slashes", []string{"election.leaseLabels.a/b/c=x"}, []string{"invalid propertyName 'a/b/c'"}},
		{"label key with an upper-case prefix", []string{"election.leaseLabels.Example\\.com/team=x"}, []string{"invalid propertyName 'Example.com/team'"}},
		{"label value with a comma", []string{"election.leaseLabels.team=a\\,b"}, []string{"/election/leaseLabels/team", "does not match pattern"}},
		{"label value too long", []string{"election.leaseLabels.team=" + strings.Repeat("v", 64)}, []string{"/election/leaseLabels/team", "does not match pattern"}},
		{"label value a number", []string{"election.leaseLabels.tier=1"}, []string{"/election/leaseLabels/tier", "want string"}},
		{"qps zero", []string{"sidecar.kubeAPIQPS=0"}, []string{"/sidecar/kubeAPIQPS", "exclusiveMinimum"}},
		{"qps negative", []string{"sidecar.kubeAPIQPS=-1"}, []string{"/sidecar/kubeAPIQPS", "exclusiveMinimum"}},
		{"qps zero as a decimal string", []string{"sidecar.kubeAPIQPS=0.0"}, []string{"/sidecar/kubeAPIQPS", "does not match pattern"}},
		{"qps not a number", []string{"sidecar.kubeAPIQPS=fast"}, []string{"/sidecar/kubeAPIQPS", "does not match pattern"}},
		{"burst zero", []string{"sidecar.kubeAPIBurst=0"}, []string{"/sidecar/kubeAPIBurst", "minimum"}},
		{"burst fractional", []string{"sidecar.kubeAPIBurst=1.5"}, []string{"/sidecar/kubeAPIBurst", "want integer"}},
		{"expected candidates negative", []string{"election.expectedCandidates=-1"}, []string{"/election/expectedCandidates", "minimum"}},
		{"expected candidates too many", []string{"election.expectedCandidates=100001"}, []string{"/election/expectedCandidates", "maximum"}},
		{"expected candidates not a number", []string{"election.expectedCandidates=three"}, []string{"/election/expectedCandidates", "want integer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, renderOpts{Set: tt.set})
			if err == nil {
				t.Fatalf("render %v succeeded", tt.set)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("render %v: error does not contain %q:\n%v", tt.set, w, err)
				}
			}
		})
	}
}
