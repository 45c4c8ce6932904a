package chart

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	"helm.sh/helm/v4/pkg/kube"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
	"github.com/elector-sidecar/elector-sidecar/pkg/leaderlabel"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// TestGuards: the permission model on a real kube-apiserver. A user with only namespace rights (the
// built-in admin ClusterRole, bound in one namespace) installs the chart with its defaults, and cannot
// install the cluster-scoped guards; a cluster admin adds them with the command NOTES.txt prints, after
// which the namespace user's upgrades keep working and the Lease guard blocks deletes and lowered
// transitions. The leader label guard lets the sidecar's ServiceAccount change only the leader label
// of its release's pods: pkg/leaderlabel's own patches pass, anything else is rejected.
func TestGuards(t *testing.T) {
	c := startCluster(t)
	t.Run("a namespace admin installs without the guards; a cluster admin adds them from NOTES", func(t *testing.T) {
		testNamespaceAdminInstall(t, c)
	})
	t.Run("the leader label guard lets the ServiceAccount change only the leader label of its release's pods", func(t *testing.T) {
		testLeaderLabelGuard(t, c)
	})
}

// restGetter hands Helm's kube client a rest.Config (here: an impersonating one).
type restGetter struct {
	cfg *rest.Config
	ns  string
}

func (g restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(g.cfg))
	if err != nil {
		return nil, err
	}
	return memory.NewMemCacheClient(dc), nil
}

func (g restGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewDeferredDiscoveryRESTMapper(dc), nil
}

func (g restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: g.ns}})
}

// impersonate returns c's config acting as user (RBAC then decides as for that user).
func impersonate(c *cluster, user string) *rest.Config {
	cfg := rest.CopyConfig(c.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// helmConfig is a Helm action configuration that talks to the API server as cfg, releases stored as
// Secrets in ns (Helm's default).
func helmConfig(t *testing.T, cfg *rest.Config, ns string) *action.Configuration {
	t.Helper()
	ac := action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(io.Discard, nil)))
	if err := ac.Init(restGetter{cfg: cfg, ns: ns}, ns, "secret"); err != nil {
		t.Fatal(err)
	}
	return ac
}

func setValues(t *testing.T, set []string) map[string]any {
	t.Helper()
	vals, err := (&values.Options{Values: set}).MergeValues(getter.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// helmInstall is `helm install NAME charts/elector-sidecar -n NS --set ...` through the SDK, as cfg's user.
func helmInstall(t *testing.T, cfg *rest.Config, ns, name string, set []string) (notes string, err error) {
	t.Helper()
	install := action.NewInstall(helmConfig(t, cfg, ns))
	install.ReleaseName = name
	install.Namespace = ns
	install.ServerSideApply = true // the helm 4 CLI's default
	install.WaitStrategy = kube.HookOnlyStrategy
	install.Timeout = time.Minute
	rel, err := install.Run(loadChart(t), setValues(t, set))
	if err != nil {
		return "", err
	}
	r, err := toV1(rel)
	if err != nil {
		t.Fatal(err)
	}
	return r.Info.Notes, nil
}

// helmUpgrade is `helm upgrade NAME charts/elector-sidecar -n NS --set ...` through the SDK, as cfg's user.
func helmUpgrade(t *testing.T, cfg *rest.Config, ns, name string, set []string) error {
	t.Helper()
	up := action.NewUpgrade(helmConfig(t, cfg, ns))
	up.Namespace = ns
	up.ServerSideApply = "auto"
	up.WaitStrategy = kube.HookOnlyStrategy
	up.Timeout = time.Minute
	_, err := up.Run(name, loadChart(t), setValues(t, set))
	return err
}

// adminKubeconfig writes a kubeconfig for c's cluster admin (envtest's client certificate).
func adminKubeconfig(t *testing.T, c *cluster, ns string) string {
	t.Helper()
	return writeKubeconfig(t, c, "admin", &clientcmdapi.AuthInfo{ClientCertificateData: c.cfg.CertData, ClientKeyData: c.cfg.KeyData, Token: c.cfg.BearerToken}, ns)
}

// guardCommand returns the shell commands NOTES.txt prints for the cluster admin: from the
// `helm get values` line to the `kubectl apply` line.
func guardCommand(t *testing.T, notes string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)\n  (helm get values .*?\| kubectl apply --server-side -f -)\n`).FindStringSubmatch(notes)
	if m == nil {
		t.Fatalf("NOTES.txt has no command for the cluster admin:\n%s", notes)
	}
	return m[1]
}

// runGuardCommand runs NOTES.txt's cluster-admin command with the real helm and kubectl (built by
// hack/build-binaries.sh) as the cluster admin, with this repository's chart.
func runGuardCommand(t *testing.T, c *cluster, ns, command string) string {
	t.Helper()
	bin := framework.CacheBinDir()
	for _, b := range []string{"helm", "kubectl"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("no %s in %s: run hack/build-binaries.sh", b, bin)
		}
	}
	// The command names the packaged chart (NAME-VERSION.tgz, as a release ships it), in the directory it runs in.
	c0 := loadChart(t)
	pkg := c0.Metadata.Name + "-" + c0.Metadata.Version + ".tgz"
	if !strings.Contains(command, " "+pkg+" ") {
		t.Fatalf("the command does not name the packaged chart %s:\n%s", pkg, command)
	}
	script := command
	home := t.TempDir()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = t.TempDir() // the values file lands here, next to the packaged chart
	if saved, err := chartutil.Save(c0, cmd.Dir); err != nil || filepath.Base(saved) != pkg {
		t.Fatalf("packaging the chart: %s, %v", saved, err)
	}
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+adminKubeconfig(t, c, ns),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the cluster admin's command from NOTES.txt failed: %v\n%s\n%s", err, script, out)
	}
	return string(out)
}

// aggregateClusterRoles fills the rules of the aggregated ClusterRoles (admin, edit, view) as
// kube-controller-manager's clusterrole-aggregation controller does: envtest runs no controller manager,
// so the built-in admin role has no rules of its own until then.
func aggregateClusterRoles(t *testing.T, c *cluster) {
	t.Helper()
	ctx := context.Background()
	crs := c.kube.RbacV1().ClusterRoles()
	for round := 0; ; round++ {
		if round == 5 {
			t.Fatal("ClusterRole aggregation did not settle in 5 rounds")
		}
		all, err := crs.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		changed := false
		for _, cr := range all.Items {
			if cr.AggregationRule == nil {
				continue
			}
			var rules []rbacv1.PolicyRule
			for _, sel := range cr.AggregationRule.ClusterRoleSelectors {
				s, err := metav1.LabelSelectorAsSelector(&sel)
				if err != nil {
					t.Fatal(err)
				}
				for _, other := range all.Items { // sorted by name, as the controller does
					if other.Name == cr.Name || !s.Matches(labels.Set(other.Labels)) {
						continue
					}
					for _, r := range other.Rules {
						if !slices.ContainsFunc(rules, func(x rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(x, r) }) {
							rules = append(rules, r)
						}
					}
				}
			}
			if equality.Semantic.DeepEqual(rules, cr.Rules) {
				continue
			}
			cr.Rules = rules
			if _, err := crs.Update(ctx, &cr, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			changed = true
		}
		if !changed {
			return
		}
	}
}

// bindNamespaceAdmin binds user to the built-in admin ClusterRole in ns only (a RoleBinding), and waits
// until RBAC lets user read ServiceAccounts there (the authorizer's caches follow asynchronously).
func bindNamespaceAdmin(t *testing.T, c *cluster, ns, user string) {
	t.Helper()
	ctx := context.Background()
	aggregateClusterRoles(t, c)
	c.createNamespace(t, ns)
	_, err := c.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "namespace-admin", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	as := kubernetes.NewForConfigOrDie(impersonate(c, user))
	err = framework.Eventually(ctx, waitInterval, 30*time.Second, user+" to be admin of "+ns, func(ctx context.Context) error {
		_, err := as.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func guardNames(release, ns string) (lease, label string) {
	fullname := release + "-elector-sidecar"
	return fullname + "." + ns + ".lease-guard.elector-sidecar", fullname + "." + ns + ".leader-label-guard.elector-sidecar"
}

func testNamespaceAdminInstall(t *testing.T, c *cluster) {
	ctx := context.Background()
	const ns, user = "elector-nsadmin", "jane@example.com"
	bindNamespaceAdmin(t, c, ns, user)
	jane := impersonate(c, user)
	janeKube := kubernetes.NewForConfigOrDie(jane)
	vaps := c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()

	// The user really has namespace rights only.
	if _, err := kubernetes.NewForConfigOrDie(jane).AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("%s lists ValidatingAdmissionPolicies: %v, want Forbidden", user, err)
	}

	// Defaults: the install succeeds and creates nothing cluster-scoped; NOTES warns and tells the cluster admin what to run.
	notes, err := helmInstall(t, jane, ns, "demo", nil)
	if err != nil {
		t.Fatalf("helm install with the defaults as %s (admin of %s only): %v", user, ns, err)
	}
	for _, name := range []string{"demo-elector-sidecar"} {
		if _, err := c.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("Deployment %s after the install: %v", name, err)
		}
		if _, err := c.kube.RbacV1().Roles(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("Role %s after the install: %v", name, err)
		}
	}
	leaseGuard, _ := guardNames("demo", ns)
	if _, err := vaps.Get(ctx, leaseGuard, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ValidatingAdmissionPolicy %s after a default install: %v, want none", leaseGuard, err)
	}
	if !strings.Contains(notes, "WARNING: the Lease demo-elector-sidecar is not guarded (leaseGuard.enabled=false, the default)") {
		t.Errorf("NOTES.txt does not warn that the Lease is not guarded:\n%s", notes)
	}
	if cmd := guardCommand(t, notes); !strings.Contains(cmd, "--set leaseGuard.enabled=true --show-only templates/leaseguard.yaml") ||
		strings.Contains(cmd, "leaderlabelguard") {
		t.Errorf("the cluster admin's command does not add exactly the lease guard:\n%s", cmd)
	}

	// The guards are cluster-scoped: the same user cannot install them, and the error names the object.
	for _, tt := range []struct {
		name, policy string
		set          []string
	}{
		{"guarded", "", []string{"leaseGuard.enabled=true"}},
		{"labelled-guarded", "leader-label", []string{"leaderLabel.enabled=true"}},
	} {
		_, err := helmInstall(t, jane, ns, tt.name, tt.set)
		lg, llg := guardNames(tt.name, ns)
		want := lg
		if tt.policy == "leader-label" {
			want = llg
		}
		if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), "at the cluster scope") {
			t.Errorf("helm install %v as %s: %v, want forbidden on the cluster-scoped ValidatingAdmissionPolicy %s", tt.set, user, err, want)
		} else {
			t.Logf("helm install %v as %s fails as it should:\n  %v", tt.set, user, err)
		}
		if _, err := vaps.Get(ctx, want, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ValidatingAdmissionPolicy %s after the refused install: %v, want none", want, err)
		}
	}

	// What a namespace-only installer sets with the leader label: leaderLabel.guard.enabled=false. NOTES then
	// names both guards; a cluster admin runs its command.
	const release = "labelled"
	notes, err = helmInstall(t, jane, ns, release, []string{"leaderLabel.enabled=true", "leaderLabel.guard.enabled=false"})
	if err != nil {
		t.Fatalf("helm install with leaderLabel.guard.enabled=false as %s: %v", user, err)
	}
	if !strings.Contains(notes, "WARNING: the leader label is not guarded (leaderLabel.guard.enabled=false)") {
		t.Errorf("NOTES.txt does not warn that the leader label is not guarded:\n%s", notes)
	}
	command := guardCommand(t, notes)
	t.Logf("NOTES.txt's command for the cluster admin:\n%s", command)
	lease := release + "-elector-sidecar"
	if _, err := c.kube.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: lease, Namespace: ns},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-a"), LeaseTransitions: ptr.To[int32](4)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out := runGuardCommand(t, c, ns, command)
	t.Logf("as the cluster admin:\n%s", out)
	lg, llg := guardNames(release, ns)
	for _, name := range []string{lg, llg} {
		if _, err := vaps.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("ValidatingAdmissionPolicy %s after the cluster admin's command: %v", name, err)
		}
		if _, err := c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("ValidatingAdmissionPolicyBinding %s after the cluster admin's command: %v", name, err)
		}
	}
	waitGuardActive(t, c, ns, lease)
	sa := kubernetes.NewForConfigOrDie(impersonate(c, "system:serviceaccount:"+ns+":"+lease))
	p := releasePod(t, c, ns, "labelled-pod", release, nil)
	waitLeaderLabelGuardActive(t, sa, ns, p.Name)

	// The guards are not part of the release: the namespace admin's upgrade still works.
	if err := helmUpgrade(t, jane, ns, release, []string{"leaderLabel.enabled=true", "leaderLabel.guard.enabled=false", "workload.replicas=2"}); err != nil {
		t.Errorf("helm upgrade as %s with the guards added by the cluster admin: %v", user, err)
	}
	// The Lease guard holds against the namespace admin, and (b): deletes and lowered transitions are rejected.
	if err := janeKube.CoordinationV1().Leases(ns).Delete(ctx, lease, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "guarded by elector-sidecar") {
		t.Errorf("DELETE of the Lease as %s: %v, want Forbidden by the lease guard", user, err)
	}
	testGuardRejects(t, c, ns, lease)
}

// releasePod creates a Pod object (envtest runs no kubelet) with release's selector labels plus extra.
func releasePod(t *testing.T, c *cluster, ns, name, release string, extra map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			"app.kubernetes.io/name": "elector-sidecar", "app.kubernetes.io/instance": release, "team": "billing",
		}, Annotations: map[string]string{"note": "kept"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
	}
	for k, v := range extra {
		p.Labels[k] = v
	}
	p, err := c.kube.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitLeaderLabelGuardActive waits until the leader label guard rejects a (dry-run) patch of another label
// by the sidecar's ServiceAccount sa: policies reach the admission plugin asynchronously.
func waitLeaderLabelGuardActive(t *testing.T, sa kubernetes.Interface, ns, pod string) {
	t.Helper()
	err := framework.Eventually(context.Background(), 200*time.Millisecond, 60*time.Second, "the leader label guard to reject a dry-run patch of another label on "+ns+"/"+pod,
		func(ctx context.Context) error {
			_, err := sa.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, []byte(`{"metadata":{"labels":{"guard-probe":"x"}}}`),
				metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "leader label guard") {
				return nil
			}
			return fmt.Errorf("dry-run patch returned %v", err)
		})
	if err != nil {
		t.Fatal(err)
	}
}

func testLeaderLabelGuard(t *testing.T, c *cluster) {
	ctx := context.Background()
	const ns = "elector-llguard"
	r := installChart(t, c, ns, []string{"leaderLabel.enabled=true"})
	_, llg := guardNames(releaseName, ns)
	if !r.has("ValidatingAdmissionPolicy") {
		t.Fatalf("leaderLabel.enabled=true rendered no leader label guard: %v", r.kinds())
	}
	tmpl, _ := podSpec(t, r, "Deployment")
	saUser := "system:serviceaccount:" + ns + ":" + tmpl.Spec.ServiceAccountName
	sa := kubernetes.NewForConfigOrDie(impersonate(c, saUser))
	pods := c.kube.CoreV1().Pods(ns)

	podA := releasePod(t, c, ns, "pod-a", releaseName, nil)
	releasePod(t, c, ns, "pod-b", releaseName, map[string]string{leaderKey: "true"}) // a former leader that froze
	releasePod(t, c, ns, "pod-other", "other", nil)                                  // another release's pod
	waitLeaderLabelGuardActive(t, sa, ns, "pod-a")

	// pkg/leaderlabel's own patches, as the ServiceAccount: lead (remove pod-b's stale label, label pod-a),
	// then step down (remove pod-a's).
	labelOf := func(name string) (string, bool) {
		t.Helper()
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := p.Labels[leaderKey]
		return v, ok
	}
	lbl, err := leaderlabel.New(leaderlabel.Config{Client: clientset.Wrap(sa), Namespace: ns, PodName: "pod-a", Key: leaderKey,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := lbl.Sync(ctx, election.Status{IsLeader: true, Token: 1}); err != nil {
		t.Fatalf("the labeller as %s, leading: %v", saUser, err)
	}
	if v, ok := labelOf("pod-a"); v != leaderlabel.Value || !ok {
		t.Errorf("pod-a %s = %q (%v) after the labeller led, want %q", leaderKey, v, ok, leaderlabel.Value)
	}
	if _, ok := labelOf("pod-b"); ok {
		t.Errorf("pod-b still carries %s after the new leader's cleanup", leaderKey)
	}
	if err := lbl.Sync(ctx, election.Status{IsLeader: false}); err != nil {
		t.Fatalf("the labeller as %s, stepping down: %v", saUser, err)
	}
	if _, ok := labelOf("pod-a"); ok {
		t.Errorf("pod-a still carries %s after the labeller stepped down", leaderKey)
	}
	lbl.BeforeRelease(ctx)

	// Everything else the ServiceAccount's RBAC allows is rejected, each with the guard's message.
	const prefix = "elector-sidecar leader label guard (ValidatingAdmissionPolicy " + releaseName + "-elector-sidecar." + ns + ".leader-label-guard.elector-sidecar): " +
		"ServiceAccount " + ns + "/" + releaseName + "-elector-sidecar may change only the label " + leaderKey + ", only on the pods of release " + releaseName
	for _, tt := range []struct {
		name, pod string
		pt        types.PatchType
		patch     string
		want      string
	}{
		{"another label", "pod-a", types.MergePatchType, `{"metadata":{"labels":{"team":"payments"}}}`, "pod " + ns + "/pod-a: its other labels must not change"},
		{"a new label", "pod-a", types.MergePatchType, `{"metadata":{"labels":{"extra":"x"}}}`, "its other labels must not change"},
		{"a selector label removed", "pod-a", types.MergePatchType, `{"metadata":{"labels":{"app.kubernetes.io/instance":null}}}`, "its other labels must not change"},
		{"the leader label with another value", "pod-a", types.MergePatchType, `{"metadata":{"labels":{"` + leaderKey + `":"false"}}}`, `may only be set to "true" or removed`},
		{"an annotation", "pod-a", types.MergePatchType, `{"metadata":{"annotations":{"note":"changed"}}}`, "its annotations, finalizers, owner references and generateName must not change"},
		{"a finalizer", "pod-a", types.MergePatchType, `{"metadata":{"finalizers":["example.com/hold"]}}`, "its annotations, finalizers"},
		{"the image", "pod-a", types.JSONPatchType, `[{"op":"replace","path":"/spec/containers/0/image","value":"example.com/evil:1"}]`, "its spec must not change"},
		{"the leader label and the image at once", "pod-a", types.StrategicMergePatchType,
			`{"metadata":{"labels":{"` + leaderKey + `":"true"}},"spec":{"containers":[{"name":"app","image":"example.com/evil:1"}]}}`, "its spec must not change"},
		{"the leader label on another release's pod", "pod-other", types.MergePatchType, `{"metadata":{"labels":{"` + leaderKey + `":"true"}}}`,
			"pod " + ns + "/pod-other is not one of them (it lacks app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/name=elector-sidecar)"},
	} {
		_, err := sa.CoreV1().Pods(ns).Patch(ctx, tt.pod, tt.pt, []byte(tt.patch), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), prefix) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: patch of %s as the ServiceAccount: %v\n want Forbidden with %q and %q", tt.name, tt.pod, err, prefix, tt.want)
		}
	}
	after, err := pods.Get(ctx, "pod-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(after.Labels, podA.Labels) || !maps.Equal(after.Annotations, podA.Annotations) ||
		after.Spec.Containers[0].Image != podA.Spec.Containers[0].Image || len(after.Finalizers) != 0 {
		t.Errorf("pod-a changed by rejected patches: labels %v annotations %v image %s finalizers %v",
			after.Labels, after.Annotations, after.Spec.Containers[0].Image, after.Finalizers)
	}

	// Another release's pod that carries the same key stops the labeller (two releases in a namespace need
	// different keys): the new leader's cleanup of it is rejected, and the pass fails with the guard's message.
	if _, err := pods.Patch(ctx, "pod-other", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+leaderKey+`":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("labelling pod-other as the cluster admin (the guard binds only the ServiceAccount): %v", err)
	}
	if err := lbl.Sync(ctx, election.Status{IsLeader: true, Token: 2}); err == nil || !strings.Contains(err.Error(), "pod "+ns+"/pod-other is not one of them") {
		t.Errorf("the labeller with another release's pod carrying %s: %v, want the guard's rejection", leaderKey, err)
	}
	// Other users (the cluster admin, controllers) are not bound by it.
	if _, err := pods.Patch(ctx, "pod-other", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+leaderKey+`":null,"team":"x"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("patch of another label as the cluster admin: %v, want allowed", err)
	}
	t.Logf("leader label guard %s: the labeller's patches pass, every other patch is rejected", llg)
}

// TestReadmeShowsTheGuardCommandOfNotes: the chart README's example of the cluster admin's command is what
// NOTES.txt prints for that release (billing in team, with the defaults), and the NOTES of a guarded release
// print none.
func TestReadmeShowsTheGuardCommandOfNotes(t *testing.T) {
	readme := readFile(t, filepath.Join(chartDir(t), "README.md"))
	m := regexp.MustCompile("(?s)for release `billing` in namespace `team`:\n\n```console\n(.*?)```").FindStringSubmatch(readme)
	if m == nil {
		t.Fatal("the chart README has no example of the cluster admin's command for release billing in namespace team")
	}
	normalize := func(text string) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
			out = append(out, strings.TrimPrefix(strings.TrimSpace(l), "$ "))
		}
		return out
	}
	notes := mustRenderAs(t, "billing", "team", renderOpts{}).Notes
	if got, want := normalize(m[1]), normalize(guardCommand(t, notes)); !slices.Equal(got, want) {
		t.Errorf("the chart README's command:\n%s\nNOTES.txt prints:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, set := range [][]string{{"leaseGuard.enabled=true"}, {"leaseGuard.enabled=true", "leaderLabel.enabled=true"}} {
		if n := mustRender(t, renderOpts{Set: set}).Notes; strings.Contains(n, "WARNING: the") || strings.Contains(n, "helm get values") {
			t.Errorf("NOTES.txt with %v (every guard on) warns or prints the cluster admin's command:\n%s", set, n)
		}
	}
}

// TestLeaderLabelGuardValues: the leader label guard renders exactly with leaderLabel.enabled and
// leaderLabel.guard.enabled, for the release's ServiceAccount, key and selector labels, bound to the release
// namespace.
func TestLeaderLabelGuardValues(t *testing.T) {
	for _, tt := range []struct {
		name     string
		set      []string
		want     bool
		sa, key  string
		instance string
	}{
		{name: "leader label off", set: nil},
		{name: "leader label on: guarded by default", set: []string{"leaderLabel.enabled=true"}, want: true,
			sa: "demo-elector-sidecar", key: leaderKey, instance: releaseName},
		{name: "guard off", set: []string{"leaderLabel.enabled=true", "leaderLabel.guard.enabled=false"}},
		{name: "own ServiceAccount and key", set: []string{"leaderLabel.enabled=true", "leaderLabel.key=example.com/primary",
			"serviceAccount.create=false", "serviceAccount.name=existing-sa"}, want: true, sa: "existing-sa", key: "example.com/primary", instance: releaseName},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{Set: tt.set})
			name := "demo-elector-sidecar." + releaseNamespace + ".leader-label-guard.elector-sidecar"
			var found *unstructured.Unstructured
			for _, o := range r.Objects {
				if o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == name {
					found = o
				}
			}
			if (found != nil) != tt.want {
				t.Fatalf("leader label guard rendered: %v, want %v (%v)", found != nil, tt.want, r.kinds())
			}
			if !tt.want {
				return
			}
			var p admissionv1.ValidatingAdmissionPolicy
			var b admissionv1.ValidatingAdmissionPolicyBinding
			toTyped(t, found, &p)
			toTyped(t, r.get(t, "ValidatingAdmissionPolicyBinding", name), &b)
			if b.Spec.PolicyName != name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
				b.Spec.MatchResources.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != releaseNamespace {
				t.Errorf("binding = %+v, want Deny for %s in namespace %s", b.Spec, name, releaseNamespace)
			}
			if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
				t.Errorf("failurePolicy = %v, want Fail", p.Spec.FailurePolicy)
			}
			rules := p.Spec.MatchConstraints.ResourceRules
			if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"pods"}) || !slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Update}) {
				t.Errorf("matchConstraints = %+v, want pods UPDATE", rules)
			}
			wantUser := "request.userInfo.username == 'system:serviceaccount:" + releaseNamespace + ":" + tt.sa + "'"
			if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != wantUser {
				t.Errorf("matchConditions = %+v, want %s", p.Spec.MatchConditions, wantUser)
			}
			all := ""
			for _, v := range p.Spec.Validations {
				all += v.Expression + "\n"
			}
			for _, want := range []string{"k == '" + tt.key + "' ? variables.newLabels[k] == 'true'", "variables.oldLabels['app.kubernetes.io/instance'] == '" + tt.instance + "'",
				"object.spec == oldObject.spec", "object.metadata.annotations == oldObject.metadata.annotations"} {
				if !strings.Contains(all, want) {
					t.Errorf("policy does not contain %q:\n%s", want, all)
				}
			}
		})
	}
}
