package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The fence for Kubernetes objects (templates/fence-*.yaml): what each value
// renders. The policy's behaviour on a real API server is
// test/integration's TestKubeObjectFence*.

func fenceObjects(r rendered) []string {
	var out []string
	for _, k := range r.kinds() {
		if strings.Contains(k, "fence") {
			out = append(out, k)
		}
	}
	return out
}

func TestFenceIsOffByDefault(t *testing.T) {
	r := mustRender(t, renderOpts{})
	if got := fenceObjects(r); len(got) != 0 {
		t.Fatalf("the defaults render fence objects: %v", got)
	}
	if strings.Contains(r.Notes, "Kubernetes objects") || strings.Contains(r.Notes, "fence.enabled") {
		t.Fatalf("NOTES mention the fence with the defaults:\n%s", r.Notes)
	}
}

func TestFenceValuesRenderThePolicyBindingHolderCheckAndRole(t *testing.T) {
	r := mustRender(t, renderOpts{Set: []string{"fence.enabled=true", "fence.holderCheck.enabled=true", "fence.rbac.create=true",
		"fence.rules[0].apiGroups[0]=example.com", "fence.rules[0].resources={widgets,widgets/status}"}})
	name := "demo-elector-sidecar.elector-test.fence.elector-sidecar"
	holder := "demo-elector-sidecar.elector-test.fence-holder.elector-sidecar"
	anchor := "demo-elector-sidecar.elector-test.fence-lease-anchor.elector-sidecar"
	want := []string{"Role/demo-elector-sidecar-fence", "RoleBinding/demo-elector-sidecar-fence",
		"ValidatingAdmissionPolicy/" + name, "ValidatingAdmissionPolicy/" + holder, "ValidatingAdmissionPolicy/" + anchor,
		"ValidatingAdmissionPolicyBinding/" + name, "ValidatingAdmissionPolicyBinding/" + holder, "ValidatingAdmissionPolicyBinding/" + anchor}
	slices.Sort(want)
	if got := fenceObjects(r); !slices.Equal(got, want) {
		t.Fatalf("fence objects:\n got  %v\n want %v", got, want)
	}

	var p, hp admissionv1.ValidatingAdmissionPolicy
	toTyped(t, r.get(t, "ValidatingAdmissionPolicy", name), &p)
	toTyped(t, r.get(t, "ValidatingAdmissionPolicy", holder), &hp)
	for _, pol := range []admissionv1.ValidatingAdmissionPolicy{p, hp} {
		rules := pol.Spec.MatchConstraints.ResourceRules
		if len(rules) != 1 || !slices.Equal(rules[0].APIGroups, []string{"example.com"}) || !slices.Equal(rules[0].Resources, []string{"widgets", "widgets/status"}) ||
			!slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
			t.Errorf("%s: resource rules %+v, want widgets and widgets/status of example.com, CREATE and UPDATE only (no DELETE)", pol.Name, rules)
		}
		if pol.Spec.FailurePolicy == nil || *pol.Spec.FailurePolicy != admissionv1.Fail {
			t.Errorf("%s: failurePolicy %v, want Fail", pol.Name, pol.Spec.FailurePolicy)
		}
	}
	if hp.Spec.ParamKind == nil || hp.Spec.ParamKind.Kind != "Lease" || hp.Spec.ParamKind.APIVersion != "coordination.k8s.io/v1" {
		t.Errorf("holder check paramKind %+v, want the Lease", hp.Spec.ParamKind)
	}
	if len(hp.Spec.MatchConditions) != 1 || !strings.Contains(hp.Spec.MatchConditions[0].Expression, "system:serviceaccount:elector-test:demo-elector-sidecar") {
		t.Errorf("holder check match conditions %+v, want the chart's ServiceAccount", hp.Spec.MatchConditions)
	}

	var b, hb admissionv1.ValidatingAdmissionPolicyBinding
	toTyped(t, r.get(t, "ValidatingAdmissionPolicyBinding", name), &b)
	toTyped(t, r.get(t, "ValidatingAdmissionPolicyBinding", holder), &hb)
	for _, bind := range []admissionv1.ValidatingAdmissionPolicyBinding{b, hb} {
		m := bind.Spec.MatchResources
		if m.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "elector-test" || m.ObjectSelector.MatchLabels["elector-sidecar.io/fenced"] != "true" ||
			!slices.Equal(bind.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
			t.Errorf("%s: %+v, want Deny, the release namespace and the fenced label", bind.Name, bind.Spec)
		}
	}
	if b.Spec.ParamRef != nil {
		t.Errorf("the base fence has a paramRef: %+v", b.Spec.ParamRef)
	}
	if pr := hb.Spec.ParamRef; pr == nil || pr.Name != "demo-elector-sidecar" || pr.Namespace != "elector-test" ||
		pr.ParameterNotFoundAction == nil || *pr.ParameterNotFoundAction != admissionv1.DenyAction {
		t.Errorf("holder check paramRef %+v, want the release's Lease, Deny if missing", pr)
	}

	// The Lease anchor (kubernetes/kubernetes#130887): a binding of a policy
	// with a Lease parameter that helm keeps, matching no request.
	var ap admissionv1.ValidatingAdmissionPolicy
	var ab admissionv1.ValidatingAdmissionPolicyBinding
	toTyped(t, r.get(t, "ValidatingAdmissionPolicy", anchor), &ap)
	toTyped(t, r.get(t, "ValidatingAdmissionPolicyBinding", anchor), &ab)
	for _, m := range []metav1.ObjectMeta{ap.ObjectMeta, ab.ObjectMeta} {
		if m.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%s: annotations %v, want helm.sh/resource-policy: keep", m.Name, m.Annotations)
		}
	}
	if ap.Spec.ParamKind == nil || *ap.Spec.ParamKind != *hp.Spec.ParamKind {
		t.Errorf("the Lease anchor's paramKind %+v, want the holder check's %+v", ap.Spec.ParamKind, hp.Spec.ParamKind)
	}
	if rules := ap.Spec.MatchConstraints.ResourceRules; len(rules) != 1 || !slices.Equal(rules[0].APIGroups, []string{"elector-sidecar.io"}) {
		t.Errorf("the Lease anchor's resource rules %+v, want only the elector-sidecar.io group, which serves nothing", rules)
	}
	if pr := ab.Spec.ParamRef; ab.Spec.PolicyName != anchor || pr == nil || pr.Name != "demo-elector-sidecar" || pr.Namespace != "elector-test" ||
		pr.ParameterNotFoundAction == nil || *pr.ParameterNotFoundAction != admissionv1.AllowAction {
		t.Errorf("the Lease anchor's binding %+v, want its policy and the release's Lease, Allow if missing", ab.Spec)
	}

	var role rbacv1.Role
	toTyped(t, r.get(t, "Role", "demo-elector-sidecar-fence"), &role)
	if got := ruleSet(role.Rules); !slices.Equal(got, ruleSet([]rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"widgets", "widgets/status"}, Verbs: []string{"get", "create", "update", "patch"}}})) {
		t.Errorf("the app's fence Role: %v", got)
	}
	var rb rbacv1.RoleBinding
	toTyped(t, r.get(t, "RoleBinding", "demo-elector-sidecar-fence"), &rb)
	if len(rb.Subjects) != 1 || rb.Subjects[0].Name != "demo-elector-sidecar" || rb.RoleRef.Name != role.Name {
		t.Errorf("the fence RoleBinding: %+v %+v", rb.Subjects, rb.RoleRef)
	}
}

func TestFenceNeedsRulesAndValidatingAdmissionPolicyV1(t *testing.T) {
	if _, err := render(t, renderOpts{Set: []string{"fence.enabled=true", "fence.rules=null"}}); err == nil || !strings.Contains(err.Error(), "fence.rules") {
		t.Errorf("fence.enabled without rules: %v, want an error naming fence.rules", err)
	}
	if _, err := render(t, renderOpts{Set: []string{"fence.enabled=true"}, KubeVersion: "v1.29.0"}); err == nil || !strings.Contains(err.Error(), "1.30") {
		t.Errorf("fence.enabled on Kubernetes 1.29: %v, want an error naming 1.30", err)
	}
	if _, err := render(t, renderOpts{Set: []string{"fence.rules[0].resources[0]=Config Maps", "fence.rules[0].apiGroups[0]="}}); err == nil {
		t.Error("a resource name with a space and upper case rendered")
	}
}

// With the app's Role but no policy (a namespace admin's install), NOTES warns
// and prints the command an admin runs; that command renders the policy.
func TestFenceNotesPrintTheAdminCommand(t *testing.T) {
	r := mustRender(t, renderOpts{Set: []string{"fence.rbac.create=true"}})
	if got := fenceObjects(r); !slices.Equal(got, []string{"Role/demo-elector-sidecar-fence", "RoleBinding/demo-elector-sidecar-fence"}) {
		t.Fatalf("fence objects without fence.enabled: %v", got)
	}
	if !strings.Contains(r.Notes, "they are not fenced (fence.enabled=false)") ||
		!strings.Contains(r.Notes, "--set fence.enabled=true --show-only templates/fence-policy.yaml") {
		t.Fatalf("NOTES:\n%s", r.Notes)
	}
	on := mustRender(t, renderOpts{Set: []string{"fence.rbac.create=true", "fence.enabled=true"}})
	if !strings.Contains(on.Notes, "Kubernetes objects are fenced by ValidatingAdmissionPolicy demo-elector-sidecar.elector-test.fence.elector-sidecar") ||
		strings.Contains(on.Notes, "not fenced") {
		t.Fatalf("NOTES with the fence on:\n%s", on.Notes)
	}
	if strings.Contains(on.Notes, "Lease anchor") {
		t.Fatalf("NOTES name the Lease anchor without the holder check:\n%s", on.Notes)
	}
	holder := mustRender(t, renderOpts{Set: []string{"fence.rbac.create=true", "fence.enabled=true", "fence.holderCheck.enabled=true"}})
	if !strings.Contains(holder.Notes, "Lease anchor demo-elector-sidecar.elector-test.fence-lease-anchor.elector-sidecar") ||
		!strings.Contains(holder.Notes, "stays after helm uninstall") {
		t.Fatalf("NOTES with the holder check:\n%s", holder.Notes)
	}
}

// The README's values block under "Fencing Kubernetes objects" renders both
// policies, their bindings and the Role for its rules.
func TestReadmeFenceValuesRender(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var blocks []framework.CodeBlock
	for _, b := range framework.MarkdownCodeBlocks(readFile(t, filepath.Join(root, "README.md"))) {
		if b.Under("Fencing Kubernetes objects") && b.Lang == "yaml" {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) != 1 {
		t.Fatalf("README \"Fencing Kubernetes objects\": %d yaml blocks, want the values block", len(blocks))
	}
	f := filepath.Join(t.TempDir(), "fence.yaml")
	if err := os.WriteFile(f, []byte(blocks[0].Code), 0o600); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(f)
	if err != nil {
		t.Fatal(err)
	}
	valuesDir, err := filepath.Abs(filepath.Join("testdata", "values"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(valuesDir, abs)
	if err != nil {
		t.Fatal(err)
	}
	r := mustRender(t, renderOpts{ValueFiles: []string{rel}})
	if got := fenceObjects(r); len(got) != 8 {
		t.Fatalf("README %s renders %v, want three policies and their bindings (the fence, the holder check, the Lease anchor), a Role and a RoleBinding", blocks[0].Where(), got)
	}
	var role rbacv1.Role
	toTyped(t, r.get(t, "Role", "demo-elector-sidecar-fence"), &role)
	if len(role.Rules) != 2 || slices.Contains(role.Rules[0].Verbs, "delete") {
		t.Fatalf("README values: Role rules %+v", role.Rules)
	}
}

// config/fence (and holder-check/, lease-anchor/, role/) are the chart's fence for release
// elector-sidecar in namespace default, up to the objects' names.
func TestKustomizeFenceMatchesChart(t *testing.T) {
	h := mustRenderAs(t, "elector-sidecar", "default", renderOpts{Set: []string{"fence.enabled=true", "fence.holderCheck.enabled=true", "fence.rbac.create=true"}})
	for _, tt := range []struct{ dir, chartName string }{
		{"fence", "elector-sidecar.default.fence.elector-sidecar"},
		{"fence/holder-check", "elector-sidecar.default.fence-holder.elector-sidecar"},
		{"fence/lease-anchor", "elector-sidecar.default.fence-lease-anchor.elector-sidecar"},
	} {
		k := kustomize(t, tt.dir)
		var kp, hp admissionv1.ValidatingAdmissionPolicy
		var kb, hb admissionv1.ValidatingAdmissionPolicyBinding
		toTyped(t, k.get(t, "ValidatingAdmissionPolicy", ""), &kp)
		toTyped(t, h.get(t, "ValidatingAdmissionPolicy", tt.chartName), &hp)
		toTyped(t, k.get(t, "ValidatingAdmissionPolicyBinding", ""), &kb)
		toTyped(t, h.get(t, "ValidatingAdmissionPolicyBinding", tt.chartName), &hb)
		if kSpec, hSpec := mustYAML(t, kp.Spec), strings.ReplaceAll(mustYAML(t, hp.Spec), hp.Name, kp.Name); kSpec != hSpec {
			t.Errorf("config/%s policy differs from the chart's:\n config:\n%s\n chart:\n%s", tt.dir, kSpec, hSpec)
		}
		hb.Spec.PolicyName = kp.Name
		if !equality.Semantic.DeepEqual(kb.Spec, hb.Spec) {
			t.Errorf("config/%s binding differs:\n config %+v\n chart  %+v", tt.dir, kb.Spec, hb.Spec)
		}
	}
	k := kustomize(t, "fence/role")
	var kr, hr rbacv1.Role
	toTyped(t, k.get(t, "Role", "elector-sidecar-fence"), &kr)
	toTyped(t, h.get(t, "Role", "elector-sidecar-fence"), &hr)
	if !slices.Equal(ruleSet(kr.Rules), ruleSet(hr.Rules)) {
		t.Errorf("config/fence/role rules %v, chart %v", ruleSet(kr.Rules), ruleSet(hr.Rules))
	}
}
