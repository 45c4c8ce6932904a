package chart

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

const leaderKey = "elector-sidecar.io/leader"

var podLabelRules = []string{"/pods/*:get", "/pods/*:list", "/pods/*:patch"}

// leaderService returns the rendered leader Service, nil if there is none.
func leaderService(t *testing.T, r rendered) *corev1.Service {
	t.Helper()
	for _, o := range r.Objects {
		if o.GetKind() == "Service" && strings.HasSuffix(o.GetName(), "-leader") {
			var s corev1.Service
			toTyped(t, o, &s)
			return &s
		}
	}
	return nil
}

// TestLeaderLabelValues: leaderLabel.* becomes the sidecar's ELECTOR_LEADER_LABEL and the Role's pod
// permissions (only then); leaderService.* renders a Service that selects the release's pods plus the
// leader label, with the demo's port, the app's ports or its own.
func TestLeaderLabelValues(t *testing.T) {
	const fullname = "demo-elector-sidecar"
	selector := map[string]string{"app.kubernetes.io/name": "elector-sidecar", "app.kubernetes.io/instance": releaseName}
	withKey := func(key string) map[string]string {
		m := map[string]string{key: "true"}
		for k, v := range selector {
			m[k] = v
		}
		return m
	}
	demoStoreRules := []string{"/configmaps/" + fullname + "-demo-store:get", "/configmaps/" + fullname + "-demo-store:update"}
	tests := []struct {
		name         string
		files, set   []string
		appName      string
		wantEnv      string // ELECTOR_LEADER_LABEL; "" = absent
		wantRules    []string
		wantSelector map[string]string // nil = no leader Service
		wantPorts    []corev1.ServicePort
		wantType     corev1.ServiceType
	}{
		{name: "off by default", appName: "app", wantRules: sorted(baseRules, leaseRules(fullname), demoStoreRules)},
		{name: "label only", set: []string{"leaderLabel.enabled=true"}, appName: "app", wantEnv: leaderKey,
			wantRules: sorted(baseRules, leaseRules(fullname), demoStoreRules, podLabelRules)},
		{name: "values file: label and Service with the demo's port", files: []string{"leader-label.yaml"}, appName: "app", wantEnv: leaderKey,
			wantRules: sorted(baseRules, leaseRules(fullname), demoStoreRules, podLabelRules), wantSelector: withKey(leaderKey),
			wantPorts: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}}, wantType: corev1.ServiceTypeClusterIP},
		{name: "own key, own app: one port per app port", files: []string{"own-app.yaml", "leader-label.yaml"},
			set: []string{"leaderLabel.key=example.com/primary"}, appName: "web", wantEnv: "example.com/primary",
			wantRules: sorted(baseRules, leaseRules(fullname), podLabelRules), wantSelector: withKey("example.com/primary"),
			wantPorts: []corev1.ServicePort{{Name: "web", Port: 8080, TargetPort: intstr.FromString("web")}}, wantType: corev1.ServiceTypeClusterIP},
		{name: "explicit ports and type", files: []string{"leader-label.yaml"},
			set:     []string{"leaderService.type=NodePort", "leaderService.ports[0].name=api", "leaderService.ports[0].port=80", "leaderService.ports[0].targetPort=9000"},
			appName: "app", wantEnv: leaderKey, wantRules: sorted(baseRules, leaseRules(fullname), demoStoreRules, podLabelRules), wantSelector: withKey(leaderKey),
			wantPorts: []corev1.ServicePort{{Name: "api", Port: 80, TargetPort: intstr.FromInt32(9000)}}, wantType: corev1.ServiceTypeNodePort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{ValueFiles: tt.files, Set: tt.set})
			sidecar, _ := sidecarAndApp(t, r, tt.appName)
			if got, ok := envMap(sidecar)["ELECTOR_LEADER_LABEL"]; got != tt.wantEnv || ok != (tt.wantEnv != "") {
				t.Errorf("sidecar env ELECTOR_LEADER_LABEL = %q (set %v), want %q", got, ok, tt.wantEnv)
			}
			var role rbacv1.Role
			toTyped(t, r.get(t, "Role", ""), &role)
			if got := ruleSet(role.Rules); !reflect.DeepEqual(got, tt.wantRules) {
				t.Errorf("Role rules:\n got  %v\n want %v", got, tt.wantRules)
			}
			svc := leaderService(t, r)
			if tt.wantSelector == nil {
				if svc != nil {
					t.Fatalf("leader Service %s rendered, want none", svc.Name)
				}
				return
			}
			if svc == nil {
				t.Fatalf("no leader Service; rendered %v", r.kinds())
			}
			if svc.Name != fullname+"-leader" || svc.Namespace != releaseNamespace {
				t.Errorf("Service %s/%s, want %s/%s-leader", svc.Namespace, svc.Name, releaseNamespace, fullname)
			}
			if !reflect.DeepEqual(svc.Spec.Selector, tt.wantSelector) {
				t.Errorf("Service selector %v, want %v", svc.Spec.Selector, tt.wantSelector)
			}
			if !reflect.DeepEqual(svc.Spec.Ports, tt.wantPorts) || svc.Spec.Type != tt.wantType {
				t.Errorf("Service %s ports %+v, want %s %+v", svc.Spec.Type, svc.Spec.Ports, tt.wantType, tt.wantPorts)
			}
			// The selector picks the workload's pods (their template labels) once they carry the label.
			pod, _ := podSpec(t, r, "Deployment")
			podLabels := labels.Set{}
			for k, v := range pod.Labels {
				podLabels[k] = v
			}
			sel := labels.SelectorFromSet(svc.Spec.Selector)
			if sel.Matches(podLabels) {
				t.Errorf("Service selector %v matches a pod without the leader label", sel)
			}
			podLabels[tt.wantEnv] = "true"
			if !sel.Matches(podLabels) {
				t.Errorf("Service selector %v does not match the leader's pod labels %v", sel, podLabels)
			}
		})
	}
}

// TestLeaderLabelBadValues: impossible leader label values fail at render time, naming the value.
func TestLeaderLabelBadValues(t *testing.T) {
	tests := []struct {
		name string
		set  []string
		want []string
	}{
		{"Service without the label", []string{"leaderService.enabled=true"},
			[]string{"leaderService.enabled=true requires leaderLabel.enabled=true"}},
		{"key with a space", []string{"leaderLabel.enabled=true", "leaderLabel.key=my leader"},
			[]string{"/leaderLabel/key", "does not match pattern"}},
		{"key with two slashes", []string{"leaderLabel.key=a/b/c"},
			[]string{"/leaderLabel/key", "does not match pattern"}},
		{"key name longer than 63", []string{"leaderLabel.key=example.com/" + strings.Repeat("x", 64)},
			[]string{"/leaderLabel/key", "does not match pattern"}},
		{"unknown Service type", []string{"leaderService.type=ExternalName"},
			[]string{"/leaderService/type", "must be one of"}},
		{"Service port without a port", []string{"leaderService.ports[0].name=x"},
			[]string{"/leaderService/ports/0", "port"}},
		{"own app without ports", []string{"demo.enabled=false", "app.image.repository=r/app", "leaderLabel.enabled=true", "leaderService.enabled=true"},
			[]string{"leaderService.ports is required with leaderService.enabled"}},
		{"typo in a leader value", []string{"leaderLabel.enable=true"},
			[]string{"enable", "additional properties"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, renderOpts{Set: tt.set})
			if err == nil {
				t.Fatalf("render succeeded, want an error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// testLeaderLabelWithChartRBAC: sidecars configured as the chart renders them with leaderLabel and
// leaderService, authenticated as the chart's ServiceAccount, label the leader's Pod object and move the
// label on a SIGTERM handoff; the new leader removes a former leader's stale label; the rendered Service
// selects exactly the leader's pod. The Role is all they need, and it reaches no other namespace; they work
// under the leader label guard (on by default with the label), which stops the ServiceAccount from changing
// anything else on a pod.
func testLeaderLabelWithChartRBAC(t *testing.T, c *cluster) {
	ctx := context.Background()
	const ns = "elector-leaderlabel"
	bin := buildSidecar(t)
	r := installChart(t, c, ns, []string{
		"leaderLabel.enabled=true", "leaderService.enabled=true",
		"election.leaseDuration=3s", "election.renewDeadline=2s", "election.retryPeriod=500ms", "election.clockSkewMargin=200ms",
		"sidecar.logFormat=text", "sidecar.logLevel=debug",
	})
	tmpl, _ := podSpec(t, r, "Deployment")
	container := tmpl.Spec.InitContainers[0]
	kubeconfig := saKubeconfig(t, c, ns, tmpl.Spec.ServiceAccountName)

	// Pod objects as the Deployment would create them (envtest runs no kubelet: they stay Pending).
	// pod-old carries the label: a former leader that froze.
	for _, name := range []string{"pod-a", "pod-b", "pod-old"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
		}
		for k, v := range tmpl.Labels {
			p.Labels[k] = v
		}
		if name == "pod-old" {
			p.Labels[leaderKey] = "true"
		}
		if _, err := c.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The leader Service (the release also has its metrics Service).
	var svc corev1.Service
	toTyped(t, r.get(t, "Service", releaseName+"-elector-sidecar-leader"), &svc)
	selected := func(ctx context.Context) ([]string, error) {
		pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		return names, nil
	}
	waitSelected := func(want ...string) {
		t.Helper()
		err := framework.Eventually(ctx, waitInterval, 30*time.Second, fmt.Sprintf("Service %s to select %v", svc.Name, want), func(ctx context.Context) error {
			got, err := selected(ctx)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("selects %v", got)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	saCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	saKube := kubernetes.NewForConfigOrDie(saCfg)
	// From here on the leader label guard is in force (a dry-run patch of another label proves it is loaded).
	waitLeaderLabelGuardActive(t, saKube, ns, "pod-a")

	a := startSidecar(t, bin, container, "pod-a", ns, kubeconfig)
	a.waitLeader(t, true)
	waitSelected("pod-a") // pod-old's label removed by the new leader
	b := startSidecar(t, bin, container, "pod-b", ns, kubeconfig)
	b.waitLeader(t, false)
	a.stop(t)
	b.waitLeader(t, true)
	waitSelected("pod-b")
	for _, p := range []*sidecarProc{a, b} {
		if out := p.out.String(); strings.Contains(out, "forbidden") {
			t.Errorf("%s hit RBAC:\n%s", p.name, out)
		}
	}
	// The other labels of the pods are untouched.
	for _, name := range []string{"pod-a", "pod-b", "pod-old"} {
		p, err := c.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tmpl.Labels {
			if p.Labels[k] != v {
				t.Errorf("pod %s label %s = %q, want %q", name, k, p.Labels[k], v)
			}
		}
	}
	b.stop(t)
	waitSelected()

	// Least privilege: the pods permission stays in the release namespace, and the guard limits it to the label.
	if _, err := saKube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("ServiceAccount LIST of pods in default: %v, want Forbidden", err)
	}
	if _, err := saKube.CoreV1().Pods(ns).Patch(ctx, "pod-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+leaderKey+`":"true"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("ServiceAccount dry-run PATCH of the leader label of a pod in %s: %v, want allowed", ns, err)
	}
	if _, err := saKube.CoreV1().Pods(ns).Patch(ctx, "pod-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "leader label guard") {
		t.Errorf("ServiceAccount dry-run PATCH of another label of a pod in %s: %v, want Forbidden by the leader label guard", ns, err)
	}
	if err := saKube.CoreV1().Pods(ns).Delete(ctx, "pod-a", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("ServiceAccount DELETE of a pod: %v, want Forbidden", err)
	}
}
