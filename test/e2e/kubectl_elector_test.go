//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/elector-sidecar/elector-sidecar/internal/kubectlelector"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// TestKubectlElectorStatusShowsTheLeaseHolderAndToken: on the chart's Lease
// in the real cluster, `kubectl elector status e2e-elector-sidecar -n NS`
// (the real kubectl, which finds kubectl-elector on PATH, with KUBECONFIG
// set) shows exactly the holder and fencing token the Lease has, the lease
// duration, a running expiry and the holder's "became leader" Event; and
// `-o json` the same as a LeaseStatus object. The Lease is read with
// client-go right before and right after each command; an attempt during
// which it changed hands is retried, so a handoff cannot make the test flaky.
func TestKubectlElectorStatusShowsTheLeaseHolderAndToken(t *testing.T) {
	t.Parallel()
	plugin := kubectlElectorBinary(t)
	r := newRelease(t, "kubectl")
	r.install()
	leader, token := r.mustLeader(t)
	env := []string{
		"KUBECONFIG=" + suite.kubeconfig,
		"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	durationSeconds := int64(leaseDuration / time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The table, with the Events on the Lease.
	var table string
	var seen leaseSeen
	err := framework.Eventually(ctx, time.Second, time.Minute, "`kubectl elector status` to show the Lease", func(ctx context.Context) error {
		out, l, err := r.runStable(ctx, env, "elector", "status", r.lease, "-n", r.ns)
		if err != nil {
			return err
		}
		table = out
		row, err := parseStatusTable(out)
		if err != nil {
			return fmt.Errorf("%w\n%s", err, out)
		}
		seen = leaseSeen{holder: framework.HolderOf(l), token: framework.TransitionsOf(l)}
		switch {
		case seen.holder == "":
			return fmt.Errorf("the Lease has no holder")
		case row.lease != r.lease:
			return fmt.Errorf("LEASE %q, want %q\n%s", row.lease, r.lease, out)
		case row.holder != seen.holder || row.token != seen.token:
			return fmt.Errorf("HOLDER %s TOKEN %d, the Lease has holder %q leaseTransitions %d\n%s", row.holder, row.token, seen.holder, seen.token, out)
		case row.duration != fmt.Sprintf("%ds", durationSeconds):
			return fmt.Errorf("DURATION %q, want %ds\n%s", row.duration, durationSeconds, out)
		case !upTo(row.renewed, " ago", durationSeconds):
			return fmt.Errorf("RENEWED %q, want within the %ds lease duration of a renewing holder\n%s", row.renewed, durationSeconds, out)
		case !upTo(row.expiresIn, "", durationSeconds):
			return fmt.Errorf("EXPIRES IN %q, want at most %ds\n%s", row.expiresIn, durationSeconds, out)
		}
		became := fmt.Sprintf("%s became leader with fencing token %d", seen.holder, seen.token)
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 5 && f[3] == "LeaderElection" && f[4] == seen.holder && strings.Join(f[5:], " ") == became {
				return nil
			}
		}
		return fmt.Errorf("no Event line from %s %q\n%s", seen.holder, became, out)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("$ kubectl elector status %s -n %s   (the Lease: holder %s, leaseTransitions %d; /leader said %s with token %d)\n%s",
		r.lease, r.ns, seen.holder, seen.token, leader, token, table)

	// -o json: the same as a LeaseStatus object.
	err = framework.Eventually(ctx, time.Second, time.Minute, "`kubectl elector status -o json` to show the Lease", func(ctx context.Context) error {
		out, l, err := r.runStable(ctx, env, "elector", "status", r.lease, "-n", r.ns, "-o", "json")
		if err != nil {
			return err
		}
		var st kubectlelector.LeaseStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return fmt.Errorf("%w\n%s", err, out)
		}
		holder, transitions := framework.HolderOf(l), framework.TransitionsOf(l)
		maxMs := durationSeconds * 1000
		switch {
		case st.Kind != "LeaseStatus" || st.APIVersion != kubectlelector.OutputVersion.String():
			return fmt.Errorf("kind %q apiVersion %q, want LeaseStatus %s", st.Kind, st.APIVersion, kubectlelector.OutputVersion)
		case st.Namespace != r.ns || st.Name != r.lease || st.UID != string(l.UID):
			return fmt.Errorf("%s/%s uid %s, want %s/%s uid %s", st.Namespace, st.Name, st.UID, r.ns, r.lease, l.UID)
		case holder == "" || st.Holder != holder || st.Token != transitions:
			return fmt.Errorf("holder %q token %d, the Lease has holder %q leaseTransitions %d", st.Holder, st.Token, holder, transitions)
		case st.LeaseDurationSeconds == nil || int64(*st.LeaseDurationSeconds) != durationSeconds:
			return fmt.Errorf("leaseDurationSeconds %v, want %d", st.LeaseDurationSeconds, durationSeconds)
		case st.RenewTime == nil || st.RenewedAgoMs == nil || *st.RenewedAgoMs > maxMs:
			return fmt.Errorf("renewTime %v renewedAgoMs %v, want a renewal within %dms", st.RenewTime, st.RenewedAgoMs, maxMs)
		case st.Expired || st.ExpiresInMs == nil || *st.ExpiresInMs <= 0 || *st.ExpiresInMs > maxMs:
			return fmt.Errorf("expired %v expiresInMs %v, want in (0, %d]", st.Expired, st.ExpiresInMs, maxMs)
		}
		became := fmt.Sprintf("%s became leader with fencing token %d", holder, transitions)
		for _, e := range st.Events {
			if e.Message == became && e.Source == holder && e.Reason == "LeaderElection" && e.Type == "Normal" {
				return nil
			}
		}
		return fmt.Errorf("no Event %q from %s in %+v", became, holder, st.Events)
	})
	if err != nil {
		t.Fatal(err)
	}
}

type leaseSeen struct {
	holder string
	token  int64
}

// runStable runs `kubectl ARGS...` with env between two reads of the Lease
// and returns its stdout and the Lease, or an error if the command failed or
// the Lease changed hands (holder, leaseTransitions or UID) meanwhile.
func (r *release) runStable(ctx context.Context, env []string, args ...string) (string, *coordinationv1.Lease, error) {
	before, err := r.getLease(ctx)
	if err != nil || before == nil {
		return "", nil, fmt.Errorf("reading the Lease: %v (lease %v)", err, before)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, suite.kubectl, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		return "", nil, fmt.Errorf("kubectl %s: %v; stdout:\n%s\nstderr: %q", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	after, err := r.getLease(ctx)
	if err != nil || after == nil {
		return "", nil, fmt.Errorf("reading the Lease: %v (lease %v)", err, after)
	}
	if framework.HolderOf(before) != framework.HolderOf(after) || framework.TransitionsOf(before) != framework.TransitionsOf(after) || before.UID != after.UID {
		return "", nil, fmt.Errorf("the Lease changed during the command (holder %q token %d -> holder %q token %d): trying again",
			framework.HolderOf(before), framework.TransitionsOf(before), framework.HolderOf(after), framework.TransitionsOf(after))
	}
	return stdout.String(), after, nil
}

// statusTableRow is the row of `kubectl elector status LEASE`.
type statusTableRow struct {
	lease, holder       string
	token               int64
	renewed             string // "1s ago"
	duration, expiresIn string
}

// parseStatusTable parses the header and the row of `status LEASE`'s table.
func parseStatusTable(out string) (statusTableRow, error) {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	const header = "LEASE HOLDER TOKEN RENEWED DURATION EXPIRES IN"
	if len(lines) < 2 || strings.Join(strings.Fields(lines[0]), " ") != header {
		return statusTableRow{}, fmt.Errorf("want the header %q and a row", header)
	}
	f := strings.Fields(lines[1])
	if len(f) != 7 || f[4] != "ago" {
		return statusTableRow{}, fmt.Errorf("row %q: want LEASE HOLDER TOKEN Ns ago DURATION EXPIRES", lines[1])
	}
	tok, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return statusTableRow{}, fmt.Errorf("row %q: TOKEN: %w", lines[1], err)
	}
	return statusTableRow{lease: f[0], holder: f[1], token: tok, renewed: f[3] + " " + f[4], duration: f[5], expiresIn: f[6]}, nil
}

// upTo reports whether s is "<N>s"+suffix with N <= max.
func upTo(s, suffix string, max int64) bool {
	m := regexp.MustCompile(`^(\d+)s` + regexp.QuoteMeta(suffix) + `$`).FindStringSubmatch(s)
	if m == nil {
		return false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	return err == nil && n <= max
}

// kubectlElectorBinary returns the plugin as "kubectl-elector" (the name
// kubectl's plugin discovery looks for) in a directory of its own:
// $ELECTOR_E2E_KUBECTL_ELECTOR if set (hack/e2e.sh builds it as `make build`
// does), else built from this checkout.
func kubectlElectorBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-elector")
	if p := os.Getenv("ELECTOR_E2E_KUBECTL_ELECTOR"); p != "" {
		abs, err := filepath.Abs(p)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err == nil {
			err = os.Symlink(abs, bin)
		}
		if err != nil {
			t.Fatalf("ELECTOR_E2E_KUBECTL_ELECTOR=%s: %v", p, err)
		}
		return bin
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/kubectl-elector")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kubectl-elector: %v\n%s", err, out)
	}
	t.Logf("built kubectl-elector in %.1fs", time.Since(start).Seconds())
	return bin
}

// TestKubectlElectorReleaseThroughPortForward: `kubectl elector release LEASE --for=2m` (the real kubectl
// dispatching to the plugin) opens a port-forward through the API server and the kubelet to the holder pod's
// sidecar, which releases: another pod holds the Lease with a higher token, and the released pod stays out.
// Then `status -A` lists the release's Lease but none of the node heartbeats in kube-node-lease (no sidecar
// wrote them), which --all-leases adds; `-l app.kubernetes.io/instance=e2e` selects the chart's Lease.
func TestKubectlElectorReleaseThroughPortForward(t *testing.T) {
	t.Parallel()
	plugin := kubectlElectorBinary(t)
	r := newRelease(t, "kubectl-release")
	r.install()
	leader, token := r.mustLeader(t)
	env := []string{
		"KUBECONFIG=" + suite.kubeconfig,
		"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	run := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, suite.kubectl, args...)
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}

	start := time.Now()
	out, errOut, err := run("elector", "release", r.lease, "-n", r.ns, "--for=2m")
	if err != nil || errOut != "" || !strings.Contains(out, "pod "+leader+" released") {
		t.Fatalf("kubectl elector release: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	holder, newToken := r.waitNewHolder(leader, token, 30*time.Second)
	timing(t, "kubectl elector release to a new holder", time.Since(start))
	t.Logf("$ kubectl elector release %s -n %s --for=2m\n%s(new holder %s, token %d -> %d)", r.lease, r.ns, out, holder, token, newToken)

	keys := `jsonpath={range .items[*]}{.namespace}/{.name}{"\n"}{end}`
	out, errOut, err = run("elector", "status", "-A", "-o", keys)
	if err != nil || errOut != "" || !strings.Contains(out, r.ns+"/"+r.lease+"\n") || strings.Contains(out, "kube-node-lease/") {
		t.Errorf("status -A: %v, stderr %q; want %s/%s and no kube-node-lease heartbeat:\n%s", err, errOut, r.ns, r.lease, out)
	}
	out, errOut, err = run("elector", "status", "-A", "--all-leases", "-o", keys)
	if err != nil || errOut != "" || !strings.Contains(out, "kube-node-lease/") {
		t.Errorf("status -A --all-leases: %v, stderr %q; want the node heartbeats too:\n%s", err, errOut, out)
	}
	out, errOut, err = run("elector", "status", "-n", r.ns, "-l", "app.kubernetes.io/instance="+releaseName, "-o", "name")
	if err != nil || errOut != "" || out != "lease.coordination.k8s.io/"+r.lease+"\n" {
		t.Errorf("status -l app.kubernetes.io/instance=%s -o name: %v, stderr %q, stdout %q; want the chart's Lease", releaseName, err, errOut, out)
	}
}
