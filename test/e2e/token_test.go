//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The ServiceAccount token as client-go's in-cluster config reads it.
const saTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// TestOnlyTheSidecarHoldsTheServiceAccountTokenAndIsProbedOverHTTP: the chart with an app container that is not
// the ConfigMap demo (the image's /elector-demo store, which needs no API access). The pods become Ready with the
// sidecar's startup, readiness and liveness probes as httpGet on the diagnostics port (container port metrics),
// never an exec; the pod automounts no token. At runtime, in the leader's pod, while its sidecar leads:
//   - the token file is absent in the app container (its mount namespace, /proc/PID/root on the node, and
//     /elector-sidecar run inside it with kubectl exec, which fails to read it) and present in the sidecar's
//     (a JWT, on a mount of its own);
//   - the diagnostics port on the pod IP answers /readyz, /healthz and /metrics and 404s /token and /release,
//     and the local API is not on the pod IP at all.
func TestOnlyTheSidecarHoldsTheServiceAccountTokenAndIsProbedOverHTTP(t *testing.T) {
	t.Parallel()
	r := newRelease(t, "token")
	b, err := os.ReadFile(r.values)
	if err != nil {
		t.Fatal(err)
	}
	demo := demoValues()
	if !strings.Contains(string(b), demo) {
		t.Fatalf("newRelease's values changed: no %q in\n%s", demo, b)
	}
	ownApp := fmt.Sprintf(`demo:
  enabled: false
app:
  image:
    repository: %q
    tag: %q
    pullPolicy: %s
  command: ["/elector-demo", "store", "--listen", "127.0.0.1:7070"]
`, suite.demoRepo, suite.demoTag, suite.pullPolicy)
	if err := os.WriteFile(r.values, []byte(strings.Replace(string(b), demo, ownApp, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.install() // waits for 3 Running and Ready pods: the httpGet probes passed
	leader, token := r.mustLeader(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pod, err := suite.cs.CoreV1().Pods(r.ns).Get(ctx, leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The pod as the API server stored it (after admission): no automounted token, httpGet probes.
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("pod automountServiceAccountToken = %v, want false", a)
	}
	var sidecar, app *corev1.Container
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == sidecarName {
			sidecar = &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == appName {
			app = &pod.Spec.Containers[i]
		}
	}
	if sidecar == nil || app == nil {
		t.Fatalf("pod %s: sidecar initContainer %v, app container %v", leader, sidecar != nil, app != nil)
	}
	for _, m := range app.VolumeMounts {
		if strings.HasPrefix(m.MountPath, "/var/run/secrets/kubernetes.io") {
			t.Errorf("app container mounts %s at %s (after admission); want no token", m.Name, m.MountPath)
		}
	}
	for _, p := range []struct {
		name, path string
		probe      *corev1.Probe
	}{{"startup", "/readyz", sidecar.StartupProbe}, {"liveness", "/healthz", sidecar.LivenessProbe}, {"readiness", "/readyz", sidecar.ReadinessProbe}} {
		if p.probe == nil || p.probe.Exec != nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "metrics" {
			t.Errorf("sidecar %s probe %+v, want httpGet %s on port metrics", p.name, p.probe, p.path)
		}
	}
	var diagPort int32
	for _, p := range sidecar.Ports {
		if p.Name == "metrics" {
			diagPort = p.ContainerPort
		}
	}
	if diagPort == 0 {
		t.Fatalf("sidecar has no container port metrics: %+v", sidecar.Ports)
	}
	if cs := containerStatus(pod, sidecarName); cs == nil || cs.Started == nil || !*cs.Started || !cs.Ready || cs.RestartCount != 0 {
		t.Errorf("sidecar status %+v, want started and ready (its httpGet probes passed) with no restart", cs)
	}
	if !podReady(pod) {
		t.Errorf("pod %s not Ready: %s", leader, podSummary(pod))
	}

	// Inside the app container: client-go's in-cluster config finds no token (the demo image's
	// /elector-chart-test, the helm test program, run with kubectl exec, stops at reading it; with a token
	// it would go on to list the Service's endpoints).
	ectx, ecancel := context.WithTimeout(ctx, time.Minute)
	out, errOut, err := kubectl(ectx, "--namespace", r.ns, "exec", leader, "-c", appName, "--",
		"/elector-chart-test", "--namespace="+r.ns, "--service=e2e-token-check", "--timeout=5s")
	ecancel()
	if err == nil || !strings.Contains(errOut+out, saTokenFile+": no such file or directory") {
		t.Errorf("in the app container, /elector-chart-test: %v; want it to fail reading %s (no such file):\n%s%s", err, saTokenFile, out, errOut)
	} else {
		t.Logf("app container: /elector-chart-test: %s", lineWith(errOut+out, saTokenFile))
	}

	// On the node: the containers' own file systems (their mount namespaces), while the sidecar leads.
	appPID, err := hostPID(hostContainerID(pod, appName), "/elector-demo")
	if err != nil {
		skipUnlessRoot(t, fmt.Sprintf("cannot find the app's host process: %v", err))
	}
	sidecarPID, err := hostPID(hostContainerID(pod, sidecarName), "/elector-sidecar")
	if err != nil {
		skipUnlessRoot(t, fmt.Sprintf("cannot find the sidecar's host process: %v", err))
	}
	if a := r.api(ctx, leader, "/token"); a.err != nil || a.status != 200 || a.token.Token != token {
		t.Fatalf("%s does not lead with token %d any more: %v", leader, token, a)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", appPID, saTokenFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("app container (host pid %d): stat %s: %v, want it not to exist", appPID, saTokenFile, err)
	}
	tok, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s", sidecarPID, saTokenFile))
	if err != nil || strings.Count(strings.TrimSpace(string(tok)), ".") != 2 {
		t.Errorf("sidecar container (host pid %d): %s: %v (%d bytes), want a JWT", sidecarPID, saTokenFile, err, len(tok))
	}
	const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	appMount, sidecarMount := hasMountAt(t, appPID, tokenDir), hasMountAt(t, sidecarPID, tokenDir)
	if appMount || !sidecarMount {
		t.Errorf("a mount at %s: app container %v, sidecar %v; want only the sidecar", tokenDir, appMount, sidecarMount)
	}
	t.Logf("leader %s with token %d: %s absent in the app container (pid %d), a %d-byte token in the sidecar (pid %d)",
		leader, token, saTokenFile, appPID, len(tok), sidecarPID)

	// The diagnostics port on the pod IP, as the kubelet and Prometheus reach it.
	ip := r.podIP(ctx, leader)
	client := &http.Client{Timeout: 5 * time.Second}
	for path, want := range map[string]int{"/readyz": 200, "/healthz": 200, "/metrics": 200, "/token": 404, "/release": 404, "/leader": 404} {
		method := http.MethodGet
		if path == "/release" {
			method = http.MethodPost
		}
		req, _ := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://%s/%s", net.JoinHostPort(ip, fmt.Sprint(diagPort)), strings.TrimPrefix(path, "/")), nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("%s %s on %s's diagnostics port: %v", method, path, leader, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want || (path == "/metrics" && !strings.Contains(string(body), "elector_is_leader{")) {
			t.Errorf("%s %s on %s's diagnostics port: %d %.200q, want %d", method, path, leader, resp.StatusCode, body, want)
		}
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "4040"), 3*time.Second); err == nil {
		_ = c.Close()
		t.Errorf("the local API port 4040 answers on the pod IP %s; want it on 127.0.0.1 only", ip)
	}
	if a := r.api(ctx, leader, "/token"); a.err != nil || a.status != 200 || a.token.Token != token {
		t.Errorf("%s after POST /release on its diagnostics port: %v; want still leading with token %d", leader, a, token)
	}
}

// hasMountAt reports whether the mount namespace of pid has a mount point at dir (/proc/PID/mountinfo).
func hasMountAt(t *testing.T, pid int, dir string) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatalf("mountinfo of pid %d: %v", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint ...
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// lineWith returns the first line of s that contains sub.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
