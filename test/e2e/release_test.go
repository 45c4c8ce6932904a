//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// release is one helm release of the chart in its own namespace.
type release struct {
	t      *testing.T
	ns     string
	values string // values file
	lease  string
}

// newRelease creates a namespace (e2e-PREFIX-xxxxx) and registers its cleanup:
// on failure a dump of pods, events, Lease and logs, then helm uninstall and
// the namespace deletion. It does not install anything yet.
func newRelease(t *testing.T, prefix string) *release {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := suite.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-" + prefix + "-", Labels: map[string]string{"elector-sidecar-e2e": "true"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	r := &release{t: t, ns: ns.Name, lease: fullname}
	t.Logf("namespace %s", r.ns)
	t.Cleanup(r.deleteNamespace)
	t.Cleanup(func() {
		if t.Failed() {
			r.dump()
		}
		r.uninstall(true)
		// Let the pods go before the namespace: the namespace controller, finding pods still
		// terminating, re-checks only after their grace period (30s).
		start := time.Now()
		if err := framework.Poll(context.Background(), 500*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
			pods, err := r.pods(ctx)
			return err == nil && len(pods) == 0, nil
		}); err != nil {
			t.Logf("cleanup: pods still there %.0fs after helm uninstall", time.Since(start).Seconds())
		}
	})

	r.values = filepath.Join(t.TempDir(), "values.yaml")
	values := fmt.Sprintf(`image:
  repository: %q
  tag: %q
  pullPolicy: %s
election:
  leaseDuration: %s
  renewDeadline: %s
  retryPeriod: %s
  clockSkewMargin: %s
workload:
  replicas: %d
sidecar:
  logFormat: json
  logLevel: %s
%sleaseGuard:
  enabled: true
`, suite.imageRepo, suite.imageTag, suite.pullPolicy, leaseDuration, renewDeadline, retryPeriod, clockSkewMargin, replicas,
		envOr("ELECTOR_E2E_LOG_LEVEL", "info"), demoValues())
	if err := os.WriteFile(r.values, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// install runs helm install and waits for the pods to be Running and Ready.
func (r *release) install() {
	r.t.Helper()
	start := time.Now()
	r.helmOK(2*time.Minute, "install", releaseName, suite.chart, "--namespace", r.ns, "--values", r.values)
	timing(r.t, "helm install (command)", time.Since(start))
	r.waitPodsReady(replicas, 4*time.Minute)
	timing(r.t, "helm install -> 3 pods Ready", time.Since(start))
}

// upgrade runs helm upgrade with the release's values plus extra YAML.
func (r *release) upgrade(extra string) {
	r.t.Helper()
	f := filepath.Join(r.t.TempDir(), "upgrade-values.yaml")
	if err := os.WriteFile(f, []byte(extra), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.helmOK(2*time.Minute, "upgrade", releaseName, suite.chart, "--namespace", r.ns, "--values", r.values, "--values", f)
}

// uninstall runs helm uninstall; in cleanup (quiet) a missing release is fine.
func (r *release) uninstall(quiet bool) {
	r.t.Helper()
	out, err := r.helm(2*time.Minute, "uninstall", releaseName, "--namespace", r.ns)
	switch {
	case err == nil:
	case quiet && strings.Contains(out, "not found"):
	case quiet:
		r.t.Logf("cleanup: helm uninstall: %v\n%s", err, out)
	default:
		r.t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
}

func (r *release) deleteNamespace() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The guard policies are cluster-scoped: never leave one behind, even if helm could not uninstall.
	for _, guard := range []string{guardName(r.ns), leaderLabelGuardName(r.ns)} {
		_ = suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, guard, metav1.DeleteOptions{})
		_ = suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, guard, metav1.DeleteOptions{})
	}
	start := time.Now()
	err := suite.cs.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		r.t.Logf("cleanup: deleting namespace %s: %v", r.ns, err)
		return
	}
	reported := false
	err = framework.Poll(ctx, 500*time.Millisecond, 3*time.Minute, func(ctx context.Context) (bool, error) {
		if _, err := suite.cs.CoreV1().Namespaces().Get(ctx, r.ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return true, nil
		}
		if !reported && time.Since(start) > 15*time.Second {
			// Slow: say what is still there (pods that do not stop on SIGTERM wait out the grace period).
			reported = true
			if pods, err := r.pods(ctx); err == nil {
				for i := range pods {
					r.t.Logf("cleanup: after 15s still there: pod %s", podSummary(&pods[i]))
					for _, c := range []string{sidecarName, appName} {
						out, err := r.logs(ctx, pods[i].Name, c, false)
						r.t.Logf("cleanup: logs %s -c %s:\n%s%s", pods[i].Name, c, tail(out, 6), errString(err))
					}
				}
			}
			out, errOut, _ := kubectl(ctx, "--namespace", r.ns, "get", "events", "--sort-by", ".lastTimestamp")
			r.t.Logf("cleanup: events:\n%s%s", tail(out, 25), errOut)
		}
		return false, nil
	})
	if err != nil {
		r.t.Logf("cleanup: WARNING: namespace %s still exists after %.0fs: %v", r.ns, time.Since(start).Seconds(), err)
		return
	}
	r.t.Logf("cleanup: namespace %s deleted in %.1fs", r.ns, time.Since(start).Seconds())
}

func guardName(ns string) string {
	return fmt.Sprintf("%s.%s.lease-guard.elector-sidecar", fullname, ns)
}

// leaderLabelGuardName: the leader label guard (with leaderLabel.enabled; leaderLabel.guard.enabled is on by default).
func leaderLabelGuardName(ns string) string {
	return fmt.Sprintf("%s.%s.leader-label-guard.elector-sidecar", fullname, ns)
}

// helm runs the helm CLI with its own config/cache dirs and a timeout.
func (r *release) helm(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.helm, append([]string{"--kubeconfig", suite.kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(suite.helmHome, "config"),
		"HELM_CACHE_HOME="+filepath.Join(suite.helmHome, "cache"),
		"HELM_DATA_HOME="+filepath.Join(suite.helmHome, "data"),
	)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (r *release) helmOK(timeout time.Duration, args ...string) string {
	r.t.Helper()
	out, err := r.helm(timeout, args...)
	if err != nil {
		r.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubectl runs the kubectl CLI; stdout and stderr separately.
func kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, suite.kubectl, append([]string{"--kubeconfig", suite.kubeconfig}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	return o.String(), e.String(), err
}

func (r *release) kubectlOK(args ...string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, errOut, err := kubectl(ctx, append([]string{"--namespace", r.ns}, args...)...)
	if err != nil {
		r.t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// pods lists the release's pods, sorted by name.
func (r *release) pods(ctx context.Context) ([]corev1.Pod, error) {
	l, err := suite.cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/name=elector-sidecar",
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items, nil
}

// waitRolledOut waits up to limit for a finished rollout: replicas Ready
// pods, all from the template with the pod annotation e2e-rollout=rollout,
// no old pod left; it fails the test with the pods' states if not.
func (r *release) waitRolledOut(ctx context.Context, replicas int, rollout string, limit time.Duration) {
	r.t.Helper()
	var last string
	if err := framework.Poll(ctx, time.Second, limit, func(ctx context.Context) (bool, error) {
		pods, err := r.pods(ctx)
		if err != nil {
			return false, nil
		}
		var states []string
		ok := len(pods) == replicas
		for i := range pods {
			p := &pods[i]
			states = append(states, podSummary(p))
			if !podReady(p) || p.Annotations["e2e-rollout"] != rollout {
				ok = false
			}
		}
		last = strings.Join(states, "; ")
		return ok, nil
	}); err != nil {
		r.t.Fatalf("rollout not finished: %v; pods: %s", err, last)
	}
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sidecarRunning: the pod is not being deleted and its sidecar container runs (so kubectl exec can reach it).
func sidecarRunning(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	cs := containerStatus(p, sidecarName)
	return cs != nil && cs.State.Running != nil
}

// containerStatus finds a container's status among the init (native sidecar) and app containers.
func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// Waiting reasons that will not go away by themselves.
var fatalWaiting = map[string]bool{
	"ErrImageNeverPull": true, "ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true,
}

// waitPodsReady waits until exactly n pods exist, none terminating, all Running and Ready.
func (r *release) waitPodsReady(n int, timeout time.Duration) []corev1.Pod {
	r.t.Helper()
	var last string
	var ready []corev1.Pod
	err := framework.Poll(context.Background(), time.Second, timeout, func(ctx context.Context) (bool, error) {
		pods, err := r.pods(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		var states []string
		ready = ready[:0]
		for i := range pods {
			p := &pods[i]
			if podReady(p) {
				ready = append(ready, *p)
			}
			states = append(states, podSummary(p))
			for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				if w := cs.State.Waiting; w != nil && fatalWaiting[w.Reason] {
					return false, fmt.Errorf("pod %s container %s: %s: %s", p.Name, cs.Name, w.Reason, w.Message)
				}
			}
		}
		last = strings.Join(states, "; ")
		return len(ready) == n && len(pods) == n, nil
	})
	if err != nil {
		r.t.Fatalf("waiting for %d Ready pods: %v; pods: %s", n, err, last)
	}
	return ready
}

func podSummary(p *corev1.Pod) string {
	s := fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, podReady(p))
	if p.DeletionTimestamp != nil {
		s += " terminating"
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf(" %s=waiting(%s)", cs.Name, cs.State.Waiting.Reason)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf(" %s=terminated(%s,%d)", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		}
		if cs.RestartCount > 0 {
			s += fmt.Sprintf(" %s.restarts=%d", cs.Name, cs.RestartCount)
		}
	}
	return s
}

// getLease returns the release's Lease (nil, nil if it does not exist).
func (r *release) getLease(ctx context.Context) (*coordinationv1.Lease, error) {
	l, err := suite.cs.CoordinationV1().Leases(r.ns).Get(ctx, r.lease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return l, err
}

// storeToken reads the demo store ConfigMap: the highest accepted token and the value (0, "" if absent).
func (r *release) storeToken(ctx context.Context) (int64, string, error) {
	cm, err := suite.cs.CoreV1().ConfigMaps(r.ns).Get(ctx, demoStoreName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", err
	}
	var tok int64
	if s := cm.Data["fencing-token"]; s != "" {
		if _, err := fmt.Sscan(s, &tok); err != nil {
			return 0, "", fmt.Errorf("configmap %s: fencing-token %q: %v", demoStoreName, s, err)
		}
	}
	return tok, cm.Data["value"], nil
}

// waitStoreToken waits until the demo store's highest token is at least min.
func (r *release) waitStoreToken(min int64, timeout time.Duration) (int64, string) {
	r.t.Helper()
	var tok int64
	var val string
	err := framework.Eventually(context.Background(), 250*time.Millisecond, timeout, fmt.Sprintf("the demo store's token to reach %d", min), func(ctx context.Context) error {
		var err error
		if tok, val, err = r.storeToken(ctx); err != nil {
			return err
		}
		if tok < min {
			return fmt.Errorf("token %d value %q", tok, val)
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return tok, val
}

// logs returns a container's log (with runtime timestamps), "" on error.
func (r *release) logs(ctx context.Context, pod, container string, previous bool) (string, error) {
	b, err := suite.cs.CoreV1().Pods(r.ns).GetLogs(pod, &corev1.PodLogOptions{
		Container: container, Timestamps: true, Previous: previous,
	}).DoRaw(ctx)
	return string(b), err
}

// dump logs everything useful to debug a failed test.
func (r *release) dump() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r.t.Logf("---- dump of namespace %s ----", r.ns)
	for _, args := range [][]string{
		{"get", "pods,deployments,replicasets", "-o", "wide"},
		{"get", "events", "--sort-by", ".lastTimestamp"},
		{"get", "lease", r.lease, "-o", "yaml"},
		{"get", "configmap", demoStoreName, "-o", "yaml"},
	} {
		out, errOut, err := kubectl(ctx, append([]string{"--namespace", r.ns}, args...)...)
		r.t.Logf("$ kubectl %s\n%s%s%v", strings.Join(args, " "), out, errOut, errString(err))
	}
	pods, err := r.pods(ctx)
	if err != nil {
		r.t.Logf("listing pods: %v", err)
		return
	}
	for i := range pods {
		p := &pods[i]
		r.t.Logf("pod %s: %s", p.Name, podSummary(p))
		for _, c := range []string{sidecarName, appName} {
			out, err := r.logs(ctx, p.Name, c, false)
			r.t.Logf("logs %s -c %s (last 60 lines):\n%s%v", p.Name, c, tail(out, 60), errString(err))
			if cs := containerStatus(p, c); cs != nil && cs.RestartCount > 0 {
				out, err := r.logs(ctx, p.Name, c, true)
				r.t.Logf("logs %s -c %s --previous (last 60 lines):\n%s%v", p.Name, c, tail(out, 60), errString(err))
			}
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return "error: " + err.Error()
}

func tail(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// poll is framework.Poll without a parent context, kept for localapi_test.go's
// stableLeader; new code calls framework.Poll.
func poll(interval, timeout time.Duration, f func(ctx context.Context) (bool, error)) error {
	return framework.Poll(context.Background(), interval, timeout, f)
}

// demoValues is the demo block of newRelease's values: the demo app from the demo image under test.
func demoValues() string {
	return fmt.Sprintf("demo:\n  interval: 500ms\n  image: {repository: %q, tag: %q}\n", suite.demoRepo, suite.demoTag)
}
