package chart

import (
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	corev1 "k8s.io/api/core/v1"
)

// TestDependency: a parent chart (testdata/parent) lists elector-sidecar as a dependency, renders its
// own Deployment with the named templates, and gets the subchart's RBAC and lease guard.
func TestDependency(t *testing.T) {
	parent, err := loader.Load(filepath.Join("testdata", "parent"))
	if err != nil {
		t.Fatal(err)
	}
	parent.AddDependency(loadChart(t)) // what `helm dependency build` would put into charts/

	r := mustRender(t, renderOpts{Chart: parent})
	pod, _ := podSpec(t, r, "Deployment")
	const fullname = "demo-elector-sidecar"
	if pod.Spec.ServiceAccountName != fullname {
		t.Errorf("serviceAccountName = %q, want %q", pod.Spec.ServiceAccountName, fullname)
	}
	if len(pod.Spec.InitContainers) != 1 {
		t.Fatalf("initContainers: %d, want the sidecar", len(pod.Spec.InitContainers))
	}
	sc := pod.Spec.InitContainers[0]
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("sidecar restartPolicy = %v, want Always", sc.RestartPolicy)
	}
	if env := envMap(&sc); env["ELECTOR_LEASE_NAME"] != "my-app" || env["POD_NAME"] != "fieldRef:metadata.name" {
		t.Errorf("sidecar env = %v", env)
	}
	// The subchart renders no workload: it does not know the replica count, so no hint unless given.
	if v, ok := envMap(&sc)["ELECTOR_EXPECTED_CANDIDATES"]; ok {
		t.Errorf("sidecar env ELECTOR_EXPECTED_CANDIDATES = %q without election.expectedCandidates, want unset", v)
	}
	hinted := mustRender(t, renderOpts{Chart: parent, Set: []string{"elector-sidecar.election.expectedCandidates=4"}})
	hpod, _ := podSpec(t, hinted, "Deployment")
	if v := envMap(&hpod.Spec.InitContainers[0])["ELECTOR_EXPECTED_CANDIDATES"]; v != "4" {
		t.Errorf("with elector-sidecar.election.expectedCandidates=4: ELECTOR_EXPECTED_CANDIDATES = %q, want 4", v)
	}
	if want := "ghcr.io/elector-sidecar/elector-sidecar:0.2.0"; sc.Image != want {
		t.Errorf("sidecar image = %q, want %q (the subchart's appVersion, not the parent's)", sc.Image, want)
	}
	checkHardened(t, "sidecar", sc.SecurityContext)
	if app := findContainer(pod.Spec.Containers, "my-app"); app == nil || envMap(app)["ELECTOR_URL"] != "http://127.0.0.1:4040" {
		t.Errorf("my-app container = %+v", app)
	}
	// The subchart renders RBAC for the lease, and no workload of its own; nothing cluster-scoped by default.
	if r.has("StatefulSet") || len(r.kinds()) != 4 {
		t.Errorf("objects = %v, want my-app's Deployment + ServiceAccount, Role, RoleBinding", r.kinds())
	}
	// With the lease guard (a cluster admin's install), also the policy and its binding.
	guarded := mustRender(t, renderOpts{Chart: parent, Set: []string{"elector-sidecar.leaseGuard.enabled=true"}})
	if len(guarded.kinds()) != 6 {
		t.Errorf("objects with the lease guard = %v, want my-app's Deployment + ServiceAccount, Role, RoleBinding, policy, binding", guarded.kinds())
	}
	checkGuard(t, guarded, "my-app")
	if !strings.Contains(r.Manifest, `resourceNames: ["my-app"]`) {
		t.Errorf("Role does not name the lease my-app")
	}

	// Bad subchart values fail the parent's render with the subchart's message.
	if _, err := render(t, renderOpts{Chart: parent, Set: []string{"elector-sidecar.election.renewDeadline=20s"}}); err == nil ||
		!strings.Contains(err.Error(), "election.leaseDuration (15s): must be greater than election.renewDeadline (20s)") {
		t.Errorf("bad subchart values: err = %v", err)
	}
}
