package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// kustomize renders a config/ directory like `kubectl kustomize`.
func kustomize(t *testing.T, dir string) rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot(t), "config", dir))
	if err != nil {
		t.Fatalf("kustomize build config/%s: %v", dir, err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeManifest(string(y))
	if err != nil {
		t.Fatalf("config/%s: %v", dir, err)
	}
	return rendered{Objects: objs, Manifest: string(y)}
}

// TestKustomizeBuilds: every base, component user and sample renders.
func TestKustomizeBuilds(t *testing.T) {
	for _, tt := range []struct {
		dir   string
		kinds []string
	}{
		{"rbac", []string{"Role/elector-sidecar", "RoleBinding/elector-sidecar", "ServiceAccount/elector-sidecar"}},
		{"lease-guard", []string{"ValidatingAdmissionPolicy/elector-sidecar.lease-guard", "ValidatingAdmissionPolicyBinding/elector-sidecar.lease-guard"}},
		{"samples/demo", []string{"ConfigMap/elector-sidecar-demo-store", "Deployment/elector-sidecar", "Namespace/elector-demo", "Role/elector-sidecar", "RoleBinding/elector-sidecar",
			"ServiceAccount/elector-sidecar", "ValidatingAdmissionPolicy/elector-sidecar.lease-guard", "ValidatingAdmissionPolicyBinding/elector-sidecar.lease-guard"}},
		{"samples/statefulset", []string{"ConfigMap/elector-sidecar-demo-store", "Namespace/elector-demo-sts", "Role/elector-sidecar", "RoleBinding/elector-sidecar", "Service/elector-sidecar",
			"ServiceAccount/elector-sidecar", "StatefulSet/elector-sidecar", "ValidatingAdmissionPolicy/elector-sidecar.lease-guard",
			"ValidatingAdmissionPolicyBinding/elector-sidecar.lease-guard"}},
	} {
		t.Run(tt.dir, func(t *testing.T) {
			r := kustomize(t, tt.dir)
			if got := strings.Join(r.kinds(), " "); got != strings.Join(tt.kinds, " ") {
				t.Errorf("objects:\n got  %s\n want %s", got, strings.Join(tt.kinds, " "))
			}
			// The real `kubectl kustomize` (built by hack/build-binaries.sh) renders the same.
			kubectl := filepath.Join(framework.CacheBinDir(), "kubectl")
			if _, err := os.Stat(kubectl); err != nil {
				if requireBuiltBinaries() {
					t.Fatalf("no %s: run hack/build-binaries.sh", kubectl)
				}
				t.Logf("no %s: checked with the kustomize library only", kubectl)
				return
			}
			out, err := exec.Command(kubectl, "kustomize", filepath.Join(repoRoot(t), "config", tt.dir)).Output()
			if err != nil {
				t.Fatalf("kubectl kustomize config/%s: %v", tt.dir, err)
			}
			objs, err := decodeManifest(string(out))
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]string{}
			for _, o := range r.Objects {
				byName[o.GetKind()+"/"+o.GetName()] = mustYAML(t, o.Object)
			}
			if len(objs) != len(byName) {
				t.Errorf("kubectl kustomize config/%s: %d objects, the library %d", tt.dir, len(objs), len(byName))
			}
			for _, o := range objs {
				if got := mustYAML(t, o.Object); got != byName[o.GetKind()+"/"+o.GetName()] {
					t.Errorf("kubectl kustomize config/%s: %s/%s differs from the library's:\n%s", tt.dir, o.GetKind(), o.GetName(), got)
				}
			}
		})
	}
}

// TestKustomizeMatchesChart: config/samples/* renders the same RBAC, guard, sidecar and demo container
// as the chart installed as release "elector-sidecar" in the sample's namespace.
func TestKustomizeMatchesChart(t *testing.T) {
	for _, tt := range []struct {
		dir, namespace, kind string
		set                  []string
	}{
		// The samples include config/lease-guard (they create a Namespace: a cluster admin's install).
		{"samples/demo", "elector-demo", "Deployment", []string{"leaseGuard.enabled=true"}},
		{"samples/statefulset", "elector-demo-sts", "StatefulSet", []string{"workload.kind=StatefulSet", "leaseGuard.enabled=true"}},
	} {
		t.Run(tt.dir, func(t *testing.T) {
			k := kustomize(t, tt.dir)
			h := mustRenderAs(t, "elector-sidecar", tt.namespace, renderOpts{Set: tt.set})

			// RBAC: same rules, same binding.
			var kr, hr rbacv1.Role
			toTyped(t, k.get(t, "Role", "elector-sidecar"), &kr)
			toTyped(t, h.get(t, "Role", "elector-sidecar"), &hr)
			if !equality.Semantic.DeepEqual(ruleSet(kr.Rules), ruleSet(hr.Rules)) {
				t.Errorf("Role rules differ:\n config %v\n chart  %v", ruleSet(kr.Rules), ruleSet(hr.Rules))
			}
			var krb, hrb rbacv1.RoleBinding
			toTyped(t, k.get(t, "RoleBinding", "elector-sidecar"), &krb)
			toTyped(t, h.get(t, "RoleBinding", "elector-sidecar"), &hrb)
			if !equality.Semantic.DeepEqual(krb.Subjects, hrb.Subjects) || krb.RoleRef != hrb.RoleRef {
				t.Errorf("RoleBinding differs:\n config %+v %+v\n chart  %+v %+v", krb.RoleRef, krb.Subjects, hrb.RoleRef, hrb.Subjects)
			}
			for _, o := range k.Objects {
				if o.GetKind() != "Namespace" && !strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") && o.GetNamespace() != tt.namespace {
					t.Errorf("config %s %s: namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), tt.namespace)
				}
			}

			// Lease guard: same policy (up to its name), binding on the same namespace.
			var kp, hp admissionv1.ValidatingAdmissionPolicy
			var kb, hb admissionv1.ValidatingAdmissionPolicyBinding
			toTyped(t, k.get(t, "ValidatingAdmissionPolicy", ""), &kp)
			toTyped(t, h.get(t, "ValidatingAdmissionPolicy", ""), &hp)
			toTyped(t, k.get(t, "ValidatingAdmissionPolicyBinding", ""), &kb)
			toTyped(t, h.get(t, "ValidatingAdmissionPolicyBinding", ""), &hb)
			// The Lease's name: config's guard has it only in the match condition, set from the workload's Lease
			// name (samples/*/lease-name.yaml); its messages read it from the object, where the chart's print it.
			hPod0, _ := podSpec(t, h, tt.kind)
			lease := envMap(&hPod0.Spec.InitContainers[0])["ELECTOR_LEASE_NAME"]
			for i, v := range kp.Spec.Validations {
				from := "object"
				if i == 0 { // the DELETE rule: only oldObject is set
					from = "oldObject"
				}
				named := "'/' + " + from + ".metadata.name + ' is guarded"
				if !strings.Contains(v.MessageExpression, named) {
					t.Errorf("config lease guard validation %d: message %q does not name the Lease with %s", i, v.MessageExpression, named)
				}
				kp.Spec.Validations[i].MessageExpression = strings.ReplaceAll(v.MessageExpression, named, "'/"+lease+" is guarded")
			}
			hSpec := strings.ReplaceAll(mustYAML(t, hp.Spec), hp.Name, kp.Name)
			if kSpec := mustYAML(t, kp.Spec); kSpec != hSpec {
				t.Errorf("ValidatingAdmissionPolicy spec differs:\n config:\n%s\n chart:\n%s", kSpec, hSpec)
			}
			if !equality.Semantic.DeepEqual(kb.Spec.MatchResources, hb.Spec.MatchResources) || kb.Spec.PolicyName != kp.Name ||
				!equality.Semantic.DeepEqual(kb.Spec.ValidationActions, hb.Spec.ValidationActions) {
				t.Errorf("binding differs:\n config %+v\n chart  %+v", kb.Spec, hb.Spec)
			}

			// Workload: same pod spec (sidecar, app, security context, service account).
			kPod, _ := podSpec(t, k, tt.kind)
			hPod, _ := podSpec(t, h, tt.kind)
			// config/sidecar reads the Lease name from the pod annotation the workload's name is copied into (the
			// one place, config/README.md); the chart writes it: compare the values.
			for i, e := range kPod.Spec.InitContainers[0].Env {
				if e.Name == "ELECTOR_LEASE_NAME" {
					want := "metadata.annotations['" + leaseNameAnnotation + "']"
					if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != want {
						t.Errorf("config ELECTOR_LEASE_NAME %+v, want the downward API's %s", e, want)
					}
					kPod.Spec.InitContainers[0].Env[i] = corev1.EnvVar{Name: e.Name, Value: kPod.Annotations[leaseNameAnnotation]}
				}
			}
			if !equality.Semantic.DeepEqual(kPod.Spec, hPod.Spec) {
				t.Errorf("pod spec differs:\n config:\n%s\n chart:\n%s", mustYAML(t, kPod.Spec), mustYAML(t, hPod.Spec))
			}
			if !equality.Semantic.DeepEqual(kPod.Labels, hPod.Labels) {
				t.Errorf("pod labels differ: config %v, chart %v", kPod.Labels, hPod.Labels)
			}
			if tt.kind == "StatefulSet" {
				var ks, hs corev1.Service
				toTyped(t, k.get(t, "Service", ""), &ks)
				toTyped(t, h.get(t, "Service", ""), &hs)
				if !equality.Semantic.DeepEqual(ks.Spec, hs.Spec) {
					t.Errorf("Service differs:\n config %+v\n chart  %+v", ks.Spec, hs.Spec)
				}
			}
		})
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
