//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/kubeobject"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// fencedObject is the ConfigMap the demo app writes through the API server's fence in
// TestFrozenAppsLateObjectWriteRejectedByTheAPIServer (elector-demo --store kubeobject:NS/NAME).
const fencedObject = "e2e-fenced-plan"

// fencePolicyName: the chart's fence ValidatingAdmissionPolicy for release "e2e" in ns.
func fencePolicyName(ns string) string {
	return fmt.Sprintf("%s.%s.fence.elector-sidecar", fullname, ns)
}

// TestFrozenAppsLateObjectWriteRejectedByTheAPIServer: the fence for Kubernetes objects in real pods. The chart is
// installed with the app's fence Role (fence.rbac.create) and the policy left out, as a namespace admin would;
// a cluster admin then adds the policy with the command helm's NOTES print, run as printed with the real helm
// and kubectl against the packaged chart. The demo app writes a ConfigMap through pkg/fencing/kubeobject
// (server-side apply stamped with its token). The leader's app container is frozen (SIGSTOP of its host
// process) past the lease: its sidecar, whose app health probe times out, steps down and another pod leads and
// writes the ConfigMap. The frozen app is then resumed (SIGCONT) with a SIGUSR1 already pending, so the first
// thing it does is the write it was about to do with the token it held before the pause (a write held up by a
// long GC pause): the API server rejects it, its message naming both tokens and the fence, and the ConfigMap
// still holds the new leader's data and token.
func TestFrozenAppsLateObjectWriteRejectedByTheAPIServer(t *testing.T) {
	t.Parallel()
	r := newRelease(t, "objfence")
	extra := fmt.Sprintf(`appHealth:
  enabled: true
  period: 1s
  timeout: 500ms
  failureThreshold: 2
fence:
  rbac:
    create: true
app:
  args: ["--store", "kubeobject:%s/%s"]
`, r.ns, fencedObject)
	appendValues(t, r.values, extra)
	t.Cleanup(func() { deleteFencePolicy(r.ns) }) // cluster-scoped: never left behind
	r.install()

	// The cluster admin's step, from the release's NOTES.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	notes := r.helmOK(time.Minute, "get", "notes", releaseName, "--namespace", r.ns)
	start := time.Now()
	out := r.runNotesAdminCommand(fenceAdminCommand(t, notes))
	t.Logf("the NOTES' admin command:\n%s", out)
	policy := fencePolicyName(r.ns)
	if _, err := suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policy, metav1.GetOptions{}); err != nil {
		t.Fatalf("ValidatingAdmissionPolicy %s after the NOTES' command: %v", policy, err)
	}

	leader, t1 := r.mustLeader(t)
	// The policy is in force once a write without a token is refused (the API server loads new policies
	// asynchronously); a dry run, so the object is untouched.
	err := framework.Eventually(ctx, 500*time.Millisecond, time.Minute, "the fence to refuse a write without a token", func(ctx context.Context) error {
		cm, err := suite.cs.CoreV1().ConfigMaps(r.ns).Get(ctx, fencedObject, metav1.GetOptions{})
		if err != nil {
			return err
		}
		delete(cm.Annotations, kubeobject.TokenAnnotation)
		_, err = suite.cs.CoreV1().ConfigMaps(r.ns).Update(ctx, cm, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			return fmt.Errorf("an update without %s was admitted", kubeobject.TokenAnnotation)
		case !strings.Contains(err.Error(), "missing fencing token") || !strings.Contains(err.Error(), policy):
			return fmt.Errorf("an update without a token: %v; want the fence %s's missing fencing token", err, policy)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	timing(t, "admin command -> fence in force", time.Since(start))
	r.waitFencedObject(ctx, leader, t1)

	pod, err := suite.cs.CoreV1().Pods(r.ns).Get(ctx, leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	appPID, err := hostPID(hostContainerID(pod, appName), "/elector-demo")
	if err != nil {
		skipUnlessRoot(t, fmt.Sprintf("cannot find the leader's app host process: %v", err))
	}
	appRestarts := containerStatus(pod, appName).RestartCount
	frozen := true
	t.Cleanup(func() {
		if frozen {
			_ = syscall.Kill(appPID, syscall.SIGCONT)
		}
	})
	freeze := time.Now()
	if err := syscall.Kill(appPID, syscall.SIGSTOP); err != nil {
		skipUnlessRoot(t, fmt.Sprintf("cannot SIGSTOP pid %d: %v", appPID, err))
	}
	if err := framework.Poll(ctx, 50*time.Millisecond, 5*time.Second, func(context.Context) (bool, error) {
		s, err := procState(appPID)
		return s == "T", err
	}); err != nil {
		t.Fatalf("app pid %d not stopped: %v", appPID, err)
	}
	t.Logf("froze %s's app (host pid %d), its token %d", leader, appPID, t1)

	newLeader, t2 := r.waitNewHolder(leader, t1, 90*time.Second)
	timing(t, "app SIGSTOP -> another pod holds the Lease", time.Since(freeze))
	r.waitFencedObject(ctx, newLeader, t2)
	timing(t, "app SIGSTOP -> new leader's write in the object", time.Since(freeze))
	if s, err := procState(appPID); err != nil || s != "T" {
		t.Fatalf("%s's app (pid %d) is not frozen any more (state %q, %v)", leader, appPID, s, err)
	}

	// The held write: SIGUSR1 is pending while the process is stopped and is its first act after SIGCONT.
	if err := syscall.Kill(appPID, syscall.SIGUSR1); err != nil {
		t.Fatalf("SIGUSR1 to the app (pid %d): %v", appPID, err)
	}
	resumed := time.Now()
	if err := syscall.Kill(appPID, syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT pid %d: %v", appPID, err)
	}
	frozen = false
	timing(t, "app frozen for", resumed.Sub(freeze))
	if frozenFor := resumed.Sub(freeze); frozenFor < leaseDuration {
		t.Fatalf("the app was frozen %v, not past the lease (%v)", frozenFor, leaseDuration)
	}

	// Its next write after SIGCONT: the late one, with token t1, rejected by the API server.
	writeRe := regexp.MustCompile(`result=(accepted|rejected-stale|store-error) token=(\d+)`)
	var next logLine
	err = framework.Eventually(ctx, 300*time.Millisecond, time.Minute, leader+"'s app to write after SIGCONT", func(ctx context.Context) error {
		out, err := r.logs(ctx, leader, appName, false)
		if err != nil {
			return err
		}
		for _, l := range parseLogs(out) {
			if !l.ts.Before(resumed.Add(-time.Second)) && strings.Contains(l.text, "late=true") {
				next = l
				return nil
			}
		}
		return fmt.Errorf("no late write logged yet; last lines:\n%s", linesString(parseLogs(out), 5))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s's app after SIGCONT: %s", leader, next.text)
	out, err = r.logs(ctx, leader, appName, false)
	if err != nil {
		t.Fatal(err)
	}
	// Every write outcome it logged after the resume, up to the late one: all rejected, with t1.
	for _, l := range parseLogs(out) {
		if l.ts.Before(resumed.Add(-time.Second)) || !strings.Contains(l.text, "time=") {
			continue
		}
		if m := writeRe.FindStringSubmatch(l.text); m != nil && (m[1] != "rejected-stale" || m[2] != strconv.FormatInt(t1, 10)) {
			t.Errorf("%s's app after SIGCONT: %q; want every write rejected-stale with its old token %d", leader, l.text, t1)
		}
		if l.text == next.text {
			break
		}
	}
	wantMsg := fmt.Sprintf("stale fencing token %d: resource already accepted token %d", t1, t2)
	for _, want := range []string{
		fmt.Sprintf("result=rejected-stale token=%d highest=%d ", t1, t2),
		`apiserver="`, wantMsg, "configmaps " + r.ns + "/" + fencedObject, policy,
	} {
		if !strings.Contains(next.text, want) {
			t.Errorf("the frozen app's late write: %q; want %q in it (rejected by the API server's fence, both tokens named)", next.text, want)
		}
	}

	// The object still holds the new leader's write, and its token.
	cm, err := suite.cs.CoreV1().ConfigMaps(r.ns).Get(ctx, fencedObject, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := strconv.ParseInt(cm.Annotations[kubeobject.TokenAnnotation], 10, 64)
	if tok < t2 || cm.Data["writer"] == leader || strings.HasPrefix(cm.Data["value"], leader+" ") {
		t.Errorf("ConfigMap %s after the late write: token %q writer %q value %q; want the new leader %s's data (token >= %d)",
			fencedObject, cm.Annotations[kubeobject.TokenAnnotation], cm.Data["writer"], cm.Data["value"], newLeader, t2)
	}
	t.Logf("ConfigMap %s: token %d writer %s value %q", fencedObject, tok, cm.Data["writer"], cm.Data["value"])
	if p, err := suite.cs.CoreV1().Pods(r.ns).Get(ctx, leader, metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if cs := containerStatus(p, appName); cs == nil || cs.RestartCount != appRestarts {
		t.Errorf("%s's app restarted during the test (restarts %d -> %v): the late write is not the frozen process's", leader, appRestarts, cs)
	}
}

// waitFencedObject waits until the fenced ConfigMap carries token (or higher) written by writer.
func (r *release) waitFencedObject(ctx context.Context, writer string, token int64) {
	r.t.Helper()
	start := time.Now()
	err := framework.Eventually(ctx, 250*time.Millisecond, time.Minute, fmt.Sprintf("%s's write with token %d in ConfigMap %s", writer, token, fencedObject), func(ctx context.Context) error {
		cm, err := suite.cs.CoreV1().ConfigMaps(r.ns).Get(ctx, fencedObject, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got := cm.Annotations[kubeobject.TokenAnnotation]
		if got != strconv.FormatInt(token, 10) || cm.Data["writer"] != writer || !strings.HasPrefix(cm.Data["value"], writer+" ") {
			return fmt.Errorf("token %q writer %q value %q", got, cm.Data["writer"], cm.Data["value"])
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	timing(r.t, fmt.Sprintf("-> %s's write (token %d)", writer, token), time.Since(start))
}

// fenceAdminCommand: the command NOTES print for the cluster admin who adds the fence policy.
func fenceAdminCommand(t *testing.T, notes string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)they are not fenced \(fence\.enabled=false\).*?\n  (helm get values .*?\| kubectl apply --server-side -f -)\n`).FindStringSubmatch(notes)
	if m == nil {
		t.Fatalf("NOTES have no command for the cluster admin to add the fence:\n%s", notes)
	}
	if !strings.Contains(m[1], "--show-only templates/fence-policy.yaml") {
		t.Fatalf("the NOTES' admin command does not render the fence policy:\n%s", m[1])
	}
	return m[1]
}

// runNotesAdminCommand runs a NOTES command as printed (bash -euo pipefail) with this suite's helm and kubectl
// as `helm` and `kubectl`, in a directory that holds the packaged chart under the name the command uses
// (NAME-VERSION.tgz): the release's package itself, or this checkout's chart packaged by helm.
func (r *release) runNotesAdminCommand(command string) string {
	r.t.Helper()
	dir := r.t.TempDir()
	pkg := regexp.MustCompile(`\s(\S+-\S+\.tgz)\s`).FindStringSubmatch(command)
	if pkg == nil {
		r.t.Fatalf("the command names no packaged chart (NAME-VERSION.tgz):\n%s", command)
	}
	if strings.HasSuffix(suite.chart, ".tgz") {
		if filepath.Base(suite.chart) != pkg[1] {
			r.t.Fatalf("the command names %s, the chart under test is %s", pkg[1], suite.chart)
		}
		copyFile(r.t, suite.chart, filepath.Join(dir, pkg[1]))
	} else {
		r.helmOK(time.Minute, "package", suite.chart, "--destination", dir)
		if _, err := os.Stat(filepath.Join(dir, pkg[1])); err != nil {
			r.t.Fatalf("helm package did not write the %s the command names: %v", pkg[1], err)
		}
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		r.t.Fatal(err)
	}
	for name, path := range map[string]string{"helm": suite.helm, "kubectl": suite.kubectl} {
		if err := os.Symlink(path, filepath.Join(bin, name)); err != nil {
			r.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+suite.kubeconfig,
		"HELM_CONFIG_HOME="+filepath.Join(suite.helmHome, "config"),
		"HELM_CACHE_HOME="+filepath.Join(suite.helmHome, "cache"),
		"HELM_DATA_HOME="+filepath.Join(suite.helmHome, "data"),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("the NOTES' admin command failed: %v\n$ %s\n%s", err, command, out)
	}
	return string(out)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// appendValues adds YAML at the end of a values file.
func appendValues(t *testing.T, file, yaml string) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(yaml)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// deleteFencePolicy removes the release's cluster-scoped fence policy and binding (not helm's: the admin's).
func deleteFencePolicy(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fencePolicyName(ns)
	for _, err := range []error{
		suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}),
		suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}),
	} {
		if err != nil && !apierrors.IsNotFound(err) {
			fmt.Fprintf(os.Stderr, "cleanup: deleting %s: %v\n", name, err)
		}
	}
}
