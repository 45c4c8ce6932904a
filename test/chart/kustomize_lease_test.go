package chart

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// leaseNameAnnotation is where config/sidecar keeps each workload's Lease name (its ELECTOR_LEASE_NAME).
const leaseNameAnnotation = "elector-sidecar.io/lease-name"

// twoWorkloadsOverlay writes an overlay with two Deployments (billing-worker, report-worker) in one namespace,
// config/rbac, config/sidecar and one config/lease-guard per workload, with one replacement per workload from
// its Lease name (the annotation config/sidecar sets) into the Role's resourceNames and its guard, as
// config/README.md describes; appPatches (items of a patches list) are added to the patches of the overlay
// that uses config/sidecar. It returns the overlay.
func twoWorkloadsOverlay(t *testing.T, appPatches string) string {
	t.Helper()
	config := filepath.Join(repoRoot(t), "config")
	dir := t.TempDir()
	// kustomize wants relative paths to other kustomizations.
	rel := func(from, to string) string {
		t.Helper()
		r, err := filepath.Rel(filepath.Join(dir, from), filepath.Join(config, to))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []string{"billing-worker", "report-worker"} {
		write("app/"+w+".yaml", `apiVersion: apps/v1
kind: Deployment
metadata:
  name: `+w+`
spec:
  replicas: 2
  selector:
    matchLabels: {app: `+w+`}
  template:
    metadata:
      labels: {app: `+w+`}
    spec:
      containers:
        - name: app
          image: registry.example.com/`+w+`:1.0
`)
		// Each workload's own lease guard (cluster-scoped: its own names).
		write("guard-"+w+"/kustomization.yaml", `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
nameSuffix: -`+w+`
resources:
  - `+rel("guard-"+w, "lease-guard")+`
replacements:
  - source: {kind: ValidatingAdmissionPolicy, fieldPath: metadata.name}
    targets:
      - select: {kind: ValidatingAdmissionPolicyBinding}
        fieldPaths: [spec.policyName]
`)
	}
	write("app/kustomization.yaml", `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: team
resources:
  - `+rel("app", "rbac")+`
  - billing-worker.yaml
  - report-worker.yaml
components:
  - `+rel("app", "sidecar")+`
patches:
  # The Role names two Leases.
  - target: {kind: Role, name: elector-sidecar}
    patch: |-
      - op: add
        path: /rules/0/resourceNames/-
        value: second-lease
`+appPatches)
	replacement := func(w string, index int) string {
		return `
  - source:
      kind: Deployment
      name: ` + w + `
      fieldPath: spec.template.metadata.annotations.[` + leaseNameAnnotation + `]
    targets:
      - select: {kind: Role, name: elector-sidecar}
        fieldPaths:
          - rules.0.resourceNames.` + strconv.Itoa(index) + `
      - select: {kind: ValidatingAdmissionPolicy, name: elector-sidecar.lease-guard-` + w + `}
        fieldPaths:
          - spec.matchConditions.[name=guarded-lease].expression
        options: {delimiter: "'", index: 3}`
	}
	write("kustomization.yaml", `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - app
  - guard-billing-worker
  - guard-report-worker
replacements:
  # As samples/demo/lease-guard-namespace.yaml: the guards' bindings match the overlay's namespace.
  - source: {kind: ServiceAccount, name: elector-sidecar, fieldPath: metadata.namespace}
    targets:
      - select: {kind: ValidatingAdmissionPolicyBinding}
        fieldPaths:
          - spec.matchResources.namespaceSelector.matchLabels.[kubernetes.io/metadata.name]`+replacement("billing-worker", 0)+replacement("report-worker", 1)+"\n")
	return dir
}

func kustomizeDir(t *testing.T, dir string) rendered {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeManifest(string(y))
	if err != nil {
		t.Fatal(err)
	}
	return rendered{Objects: objs, Manifest: string(y)}
}

// leasesOf returns, per Deployment, the Lease its sidecar campaigns on (ELECTOR_LEASE_NAME, read through the
// downward API from the pod annotation), and the Role's and the guards' Lease names.
func leasesOf(t *testing.T, r rendered, workloads []string) (sidecars map[string]string, role []string, guards map[string]string) {
	t.Helper()
	sidecars, guards = map[string]string{}, map[string]string{}
	for _, w := range workloads {
		var d appsv1.Deployment
		toTyped(t, r.get(t, "Deployment", w), &d)
		pod := d.Spec.Template
		if len(pod.Spec.InitContainers) != 1 {
			t.Fatalf("%s: init containers %d, want the sidecar", w, len(pod.Spec.InitContainers))
		}
		env := envMap(&pod.Spec.InitContainers[0])
		if got := env["ELECTOR_LEASE_NAME"]; got != "fieldRef:metadata.annotations['"+leaseNameAnnotation+"']" {
			t.Fatalf("%s: ELECTOR_LEASE_NAME %q, want the pod annotation %s through the downward API", w, got, leaseNameAnnotation)
		}
		sidecars[w] = pod.Annotations[leaseNameAnnotation]
		var p admissionv1.ValidatingAdmissionPolicy
		toTyped(t, r.get(t, "ValidatingAdmissionPolicy", "elector-sidecar.lease-guard-"+w), &p)
		guards[w] = guardedLease(t, &p)
	}
	var rl rbacv1.Role
	toTyped(t, r.get(t, "Role", "elector-sidecar"), &rl)
	for _, rule := range rl.Rules {
		if len(rule.ResourceNames) > 0 && slices.Contains(rule.Resources, "leases") {
			return sidecars, rule.ResourceNames, guards
		}
	}
	t.Fatalf("Role elector-sidecar: no rule on leases by name: %+v", rl.Rules)
	return nil, nil, nil
}

// guardedLease: the Lease name in a lease guard's match condition.
func guardedLease(t *testing.T, p *admissionv1.ValidatingAdmissionPolicy) string {
	t.Helper()
	for _, mc := range p.Spec.MatchConditions {
		if mc.Name == "guarded-lease" {
			parts := strings.Split(mc.Expression, "'")
			if len(parts) != 5 {
				t.Fatalf("guard %s: match condition %q", p.Name, mc.Expression)
			}
			return parts[3]
		}
	}
	t.Fatalf("guard %s has no guarded-lease match condition", p.Name)
	return ""
}

// TestKustomizeGivesEachWorkloadItsOwnLease: with config/sidecar, two Deployments of one overlay campaign on
// two Leases, each named after its workload, with nothing set; the Role names both and each workload's lease
// guard guards its own.
func TestKustomizeGivesEachWorkloadItsOwnLease(t *testing.T) {
	workloads := []string{"billing-worker", "report-worker"}
	sidecars, role, guards := leasesOf(t, kustomizeDir(t, twoWorkloadsOverlay(t, "")), workloads)
	for _, w := range workloads {
		if sidecars[w] != w {
			t.Errorf("%s's sidecar campaigns on Lease %q, want its own, %q", w, sidecars[w], w)
		}
		if guards[w] != sidecars[w] {
			t.Errorf("%s's lease guard guards %q, its sidecar's Lease is %q", w, guards[w], sidecars[w])
		}
	}
	if sidecars[workloads[0]] == sidecars[workloads[1]] {
		t.Errorf("both workloads campaign on Lease %q", sidecars[workloads[0]])
	}
	if !slices.Equal(role, []string{sidecars[workloads[0]], sidecars[workloads[1]]}) {
		t.Errorf("Role resourceNames %v, want both Leases %v", role, sidecars)
	}
}

// configReadmeLeasePatch: config/README.md's patch that gives a workload another Lease name (its workload and
// the name it sets), as written.
func configReadmeLeasePatch(t *testing.T) (patches, workload, lease string) {
	t.Helper()
	var found []string
	for _, b := range framework.MarkdownCodeBlocks(readFile(t, filepath.Join(repoRoot(t), "config", "README.md"))) {
		if b.Lang == "yaml" && strings.HasPrefix(b.Code, "patches:\n") && strings.Contains(b.Code, "elector-sidecar.io~1lease-name") {
			found = append(found, b.Code)
		}
	}
	if len(found) != 1 {
		t.Fatalf("config/README.md has %d yaml blocks patching the lease-name annotation, want 1", len(found))
	}
	var p struct {
		Patches []struct {
			Target struct{ Name string } `json:"target"`
			Patch  string                `json:"patch"`
		} `json:"patches"`
	}
	if err := yaml.Unmarshal([]byte(found[0]), &p); err != nil || len(p.Patches) != 1 {
		t.Fatalf("config/README.md's patch: %v\n%s", err, found[0])
	}
	var ops []struct{ Value string }
	if err := yaml.Unmarshal([]byte(p.Patches[0].Patch), &ops); err != nil || len(ops) != 1 || ops[0].Value == "" {
		t.Fatalf("config/README.md's JSON patch: %v\n%s", err, p.Patches[0].Patch)
	}
	return strings.TrimPrefix(found[0], "patches:\n"), p.Patches[0].Target.Name, ops[0].Value
}

// TestKustomizeLeaseNameIsSetInOnePlace: the pod annotation is the one place: config/README.md's patch of it in
// the overlay (after config/sidecar) renames that workload's Lease in its sidecar, the Role and its guard, and
// nothing of the other workload changes.
func TestKustomizeLeaseNameIsSetInOnePlace(t *testing.T) {
	workloads := []string{"billing-worker", "report-worker"}
	before, roleBefore, guardsBefore := leasesOf(t, kustomizeDir(t, twoWorkloadsOverlay(t, "")), workloads)
	patches, renamed, custom := configReadmeLeasePatch(t)
	if renamed != workloads[0] {
		t.Fatalf("config/README.md's patch renames the Lease of %q, this test's overlay has %v", renamed, workloads)
	}
	r := kustomizeDir(t, twoWorkloadsOverlay(t, patches))
	after, roleAfter, guardsAfter := leasesOf(t, r, workloads)
	if after[renamed] != custom || guardsAfter[renamed] != custom || !slices.Equal(roleAfter, []string{custom, workloads[1]}) {
		t.Errorf("after setting %s's Lease to %s: sidecar %q, guard %q, Role %v; want %s in each",
			renamed, custom, after[renamed], guardsAfter[renamed], roleAfter, custom)
	}
	other := workloads[1]
	if after[other] != before[other] || guardsAfter[other] != guardsBefore[other] || roleAfter[1] != roleBefore[1] {
		t.Errorf("%s's Lease changed too: sidecar %q -> %q, guard %q -> %q, Role %v -> %v",
			other, before[other], after[other], guardsBefore[other], guardsAfter[other], roleBefore, roleAfter)
	}
	// The old name is gone from every reference of the Lease (the Deployment keeps its own name).
	for _, o := range r.Objects {
		if o.GetKind() == "Deployment" {
			continue
		}
		if y := mustYAML(t, o.Object); strings.Contains(y, renamed+"'") || strings.Contains(y, "- "+renamed+"\n") {
			t.Errorf("%s %s still names the Lease %s:\n%s", o.GetKind(), o.GetName(), renamed, y)
		}
	}
}

// TestKustomizeLeasesPerWorkloadOnTheAPIServer: the two-workload overlay with config/README.md's renamed Lease,
// applied to a real kube-apiserver (everything but the Deployments: envtest runs no pods). Each guard protects its
// own workload's Lease, naming it in its messages, and the Lease's old name is not guarded any more; the
// ServiceAccount may update both Leases and no other (RBAC).
func TestKustomizeLeasesPerWorkloadOnTheAPIServer(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	patches, renamed, custom := configReadmeLeasePatch(t)
	r := kustomizeDir(t, twoWorkloadsOverlay(t, patches))
	const ns = "team"
	c.createNamespace(t, ns)
	for _, o := range r.Objects {
		if o.GetKind() == "Deployment" {
			continue
		}
		if err := c.apply(ctx, o, false); err != nil {
			t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, o := range r.Objects {
			if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
				_ = c.dyn.Resource(admissionv1.SchemeGroupVersion.WithResource(strings.ToLower(o.GetKind())+"s")).Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
			}
		}
	})
	leases := c.kube.CoordinationV1().Leases(ns)
	for _, name := range []string{custom, "report-worker", renamed} {
		if _, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-a"), LeaseTransitions: ptr.To[int32](7)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitGuardActive(t, c, ns, custom)
	waitGuardActive(t, c, ns, "report-worker")

	err := leases.Delete(ctx, custom, metav1.DeleteOptions{})
	if want := "lease " + ns + "/" + custom + " is guarded"; !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("DELETE of Lease %s: %v; want forbidden, %q", custom, err, want)
	}
	l, err := leases.Get(ctx, "report-worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.LeaseTransitions = ptr.To[int32](6)
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	if want := "lease " + ns + "/report-worker is guarded by elector-sidecar: spec.leaseTransitions (the fencing token) must not decrease (from 7 to 6)"; !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("lowering Lease report-worker's transitions: %v; want forbidden, %q", err, want)
	}
	// The workload's old Lease name is just another Lease now.
	if err := leases.Delete(ctx, renamed, metav1.DeleteOptions{}); err != nil {
		t.Errorf("DELETE of Lease %s (the name before the patch): %v, want allowed", renamed, err)
	}

	sa := "system:serviceaccount:" + ns + ":elector-sidecar"
	for name, want := range map[string]bool{custom: true, "report-worker": true, renamed: false, "other": false} {
		sar, err := c.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: name},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != want {
			t.Errorf("%s may update Lease %s: %v, want %v (%s)", sa, name, sar.Status.Allowed, want, sar.Status.Reason)
		}
	}
}
