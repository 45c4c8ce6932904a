package chart

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// shardLeaseRules: the Role's Lease rules in shard mode, every verb a member uses on the namespace's Leases.
func shardLeaseRules() []string {
	var r []string
	for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
		r = append(r, "coordination.k8s.io/leases/*:"+v)
	}
	return r
}

// TestShardsValueRendersTheSetsEnvRoleAndGuard: election.shards=N gives the sidecar ELECTOR_SHARDS=N (as a
// native sidecar and as a plain container), a Role with every Lease verb of a member (a label-selected list
// and watch cannot be limited by name) and the shard set's lease guard; 0 (the default) renders the single
// Lease's env, Role and guard exactly as before.
func TestShardsValueRendersTheSetsEnvRoleAndGuard(t *testing.T) {
	const fullname = "demo-elector-sidecar"
	demoStoreRules := []string{"/configmaps/" + fullname + "-demo-store:get", "/configmaps/" + fullname + "-demo-store:update"}
	tests := []struct {
		name   string
		files  []string
		set    []string
		shards string // ELECTOR_SHARDS, "" = absent
		lease  string // the set's (or the one Lease's) name
		rules  []string
	}{
		{name: "default: one Lease", lease: fullname, rules: sorted(baseRules, leaseRules(fullname), demoStoreRules)},
		{name: "shards 0 is one Lease", set: []string{"election.shards=0"}, lease: fullname, rules: sorted(baseRules, leaseRules(fullname), demoStoreRules)},
		{name: "testdata/values/shards.yaml", files: []string{"shards.yaml"}, shards: "16", lease: fullname,
			rules: sorted([]string{"/events/*:create"}, shardLeaseRules(), demoStoreRules)},
		{name: "one shard, own set name, plain container", set: []string{"election.shards=1", "election.leaseName=jobs", "sidecar.native=false", "leaseGuard.enabled=true"},
			shards: "1", lease: "jobs", rules: sorted([]string{"/events/*:create"}, shardLeaseRules(), demoStoreRules)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{ValueFiles: tt.files, Set: append(slices.Clone(tt.set), "leaseGuard.enabled=true")})
			sidecar, _ := sidecarAndApp(t, r, "app")
			env := envMap(sidecar)
			if got, ok := env["ELECTOR_SHARDS"]; got != tt.shards || ok != (tt.shards != "") {
				t.Errorf("ELECTOR_SHARDS = %q (set: %v), want %q", got, ok, tt.shards)
			}
			if env["ELECTOR_LEASE_NAME"] != tt.lease {
				t.Errorf("ELECTOR_LEASE_NAME = %q, want %q: the Lease name is the set's name", env["ELECTOR_LEASE_NAME"], tt.lease)
			}
			var role rbacv1.Role
			toTyped(t, r.get(t, "Role", fullname), &role)
			if got := ruleSet(role.Rules); !slices.Equal(got, tt.rules) {
				t.Errorf("Role rules:\n got %q\nwant %q", got, tt.rules)
			}
			if tt.shards == "" {
				checkGuard(t, r, tt.lease)
				if !slices.ContainsFunc(r.Hooks, func(h *unstructured.Unstructured) bool { return h.GetKind() == "Pod" }) {
					t.Errorf("one Lease: no helm test Pod among the hooks")
				}
				return
			}
			checkShardSetGuard(t, r, tt.lease, "system:serviceaccount:"+releaseNamespace+":"+fullname)
			for _, h := range r.Hooks {
				if h.GetKind() == "Pod" {
					t.Errorf("shard mode: helm test Pod %s rendered; it waits for one leader, which a set does not have", h.GetName())
				}
			}
			for _, want := range []string{"-l elector-sidecar.io/shard-set=" + tt.lease, "/shards", tt.lease + "-0", "The Leases of shard set " + tt.lease + " are guarded"} {
				if !strings.Contains(r.Notes, want) {
					t.Errorf("NOTES.txt does not contain %q:\n%s", want, r.Notes)
				}
			}
		})
	}
}

// checkShardSetGuard asserts the shard set's lease guard: the single Lease's guard name and binding, CREATE,
// UPDATE and DELETE of leases matched without resourceNames, the set picked by name and label in the match
// condition (and every write of its ServiceAccount), and the rules carried over from the single Lease.
func checkShardSetGuard(t *testing.T, r rendered, set, sa string) {
	t.Helper()
	var p admissionv1.ValidatingAdmissionPolicy
	var b admissionv1.ValidatingAdmissionPolicyBinding
	u := leaseGuard(r)
	if u == nil {
		t.Fatalf("no lease guard rendered: %v", r.kinds())
	}
	toTyped(t, u, &p)
	toTyped(t, r.get(t, "ValidatingAdmissionPolicyBinding", p.Name), &b)
	if b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("binding = %+v, want Deny for policy %s", b.Spec, p.Name)
	}
	if sel := b.Spec.MatchResources.NamespaceSelector; sel == nil || sel.MatchLabels["kubernetes.io/metadata.name"] != releaseNamespace {
		t.Errorf("binding namespaceSelector = %+v, want the release namespace", sel)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("failurePolicy = %v, want Fail", p.Spec.FailurePolicy)
	}
	rules := p.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"leases"}) || len(rules[0].ResourceNames) != 0 ||
		!slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}) {
		t.Errorf("matchConstraints = %+v, want leases CREATE/UPDATE/DELETE without resourceNames", rules)
	}
	if len(p.Spec.MatchConditions) != 1 {
		t.Fatalf("matchConditions = %+v, want one", p.Spec.MatchConditions)
	}
	match := p.Spec.MatchConditions[0].Expression
	for _, want := range []string{"'^" + strings.ReplaceAll(set, ".", "[.]") + "-[0-9]+$'", "startsWith('" + set + "-member-')",
		"['elector-sidecar.io/shard-set'] == '" + set + "'", "request.userInfo.username == '" + sa + "'"} {
		if !strings.Contains(match, want) {
			t.Errorf("match condition does not contain %q:\n%s", want, match)
		}
	}
	all := ""
	for _, v := range p.Spec.Variables {
		all += v.Expression + "\n"
	}
	for _, v := range p.Spec.Validations {
		all += v.Expression + "\n"
	}
	for _, want := range []string{"namespaceObject.metadata.deletionTimestamp", "request.operation != 'DELETE' || !variables.isShard",
		"leaseTransitions >= oldObject.spec.leaseTransitions", "<= 10000", "system:serviceaccount:kube-system:namespace-controller",
		"'elector-sidecar.io/shard-index'"} {
		if !strings.Contains(all, want) {
			t.Errorf("policy does not contain %q:\n%s", want, all)
		}
	}
}

// TestShardsBadValues: what shard mode rules out fails at render time, naming the values.
func TestShardsBadValues(t *testing.T) {
	long := strings.Repeat("a", 64)
	tests := []struct {
		name string
		set  []string
		want []string
	}{
		{"negative", []string{"election.shards=-1"}, []string{"/election/shards", "minimum"}},
		{"not a number", []string{"election.shards=many"}, []string{"/election/shards", "integer"}},
		{"fraction", []string{"election.shards=1.5"}, []string{"/election/shards", "integer"}},
		{"with the leader label", []string{"election.shards=4", "leaderLabel.enabled=true"},
			[]string{"leaderLabel.enabled=true with election.shards=4", "no one leader pod to label", "set leaderLabel.enabled=false"}},
		{"with the fence's holder check", []string{"election.shards=4", "fence.enabled=true", "fence.holderCheck.enabled=true"},
			[]string{"fence.holderCheck.enabled=true with election.shards=4", "set fence.holderCheck.enabled=false"}},
		{"with the one-leader alerts", []string{"election.shards=4", "metrics.prometheusRule.enabled=true"},
			[]string{"metrics.prometheusRule.enabled=true with election.shards=4", "set metrics.prometheusRule.enabled=false"}},
		{"with the one-leader alerts, dependency mode", []string{"election.shards=4", "workload.enabled=false", "metrics.prometheusRule.enabled=true"},
			[]string{"metrics.prometheusRule.enabled=true with election.shards=4"}},
		{"more than the sidecar takes", []string{"election.shards=10001"}, []string{"/election/shards", "maximum"}},
		{"set name too long for the set's label", []string{"election.shards=4", "election.leaseName=" + long},
			[]string{"is 64 characters", "label elector-sidecar.io/shard-set", "at most 63"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, renderOpts{Set: tt.set})
			if err == nil {
				t.Fatalf("rendered with %v, want an error", tt.set)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
	// The same combinations render without shards, a 64-character Lease name too, and a 63-character set name renders.
	for _, set := range [][]string{
		{"leaderLabel.enabled=true"}, {"fence.enabled=true", "fence.holderCheck.enabled=true"}, {"metrics.prometheusRule.enabled=true"},
		{"election.leaseName=" + long}, {"election.shards=4", "election.leaseName=" + long[:63]}, {"election.shards=4", "fence.enabled=true"},
	} {
		if _, err := render(t, renderOpts{Set: set}); err != nil {
			t.Errorf("%v: %v", set, err)
		}
	}
}

// shardsVerdict runs the sidecar binary with --shards and --lease-name (and everything else it needs, with a
// kubeconfig that does not exist): "" when the flags pass validation (it exits 1 on the kubeconfig), else
// its one-line reason (exit 2).
func shardsVerdict(t *testing.T, bin, shards, lease string) string {
	t.Helper()
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	args := []string{"--lease-name=" + lease, "--lease-namespace=ns", "--identity=pod-0", "--kubeconfig=" + missing, "--shards=" + shards}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{} // no ELECTOR_*, POD_* or KUBECONFIG from the test's environment
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("elector-sidecar %v: %v (want exit 1 or 2)\n%s", args, err, stderr.String())
	}
	out := strings.TrimSpace(stderr.String())
	switch {
	case exit.ExitCode() == 1 && strings.Contains(out, "loading kubernetes client config"):
		return ""
	case exit.ExitCode() == 2 && !strings.Contains(out, "\n"):
		return out
	}
	t.Fatalf("elector-sidecar %v: exit %d, want 1 (the kubeconfig) or 2 (one line)\n%s", args, exit.ExitCode(), out)
	return ""
}

// TestChartAndBinaryAgreeOnShards: the chart renders election.shards with a Lease name exactly when the
// sidecar binary starts with the same --shards and --lease-name, at the bounds of both (0 and 10000 shards,
// a 63-character set name), so a release that renders never has sidecars that exit 2 in every pod.
func TestChartAndBinaryAgreeOnShards(t *testing.T) {
	bin := buildSidecar(t) // ./cmd/elector-sidecar of this checkout, or $ELECTOR_SIDECAR_BIN
	name63 := strings.Repeat("s", 63)
	tests := []struct {
		shards, lease string
		valid         bool
	}{
		{"0", "jobs", true}, {"1", "jobs", true}, {"16", "jobs", true}, {"10000", "jobs", true},
		{"-1", "jobs", false}, {"10001", "jobs", false},
		{"16", name63, true}, {"16", name63 + "s", false}, {"0", name63 + "s", true},
		{"16", "jobs.v1", true},
	}
	for _, tt := range tests {
		t.Run(tt.shards+"/"+tt.lease, func(t *testing.T) {
			_, err := render(t, renderOpts{Set: []string{"election.shards=" + tt.shards, "election.leaseName=" + tt.lease}})
			chart := "renders"
			if err != nil {
				chart = err.Error()
			}
			bin := shardsVerdict(t, bin, tt.shards, tt.lease)
			if (err == nil) != tt.valid || (bin == "") != tt.valid {
				t.Errorf("--shards=%s --lease-name=%s: want valid=%v\nchart:   %s\nsidecar: %s", tt.shards, tt.lease, tt.valid,
					chart, cmp.Or(bin, "starts (fails only on the missing kubeconfig)"))
			}
		})
	}
}
