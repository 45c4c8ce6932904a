package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/elector-sidecar/elector-sidecar/internal/kubectlelector"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// kubectlElectorPackage is the kubectl plugin; built as "kubectl-elector",
// the name kubectl looks for on PATH for `kubectl elector`.
const kubectlElectorPackage = "./cmd/kubectl-elector"

// pluginBinary builds the plugin (once per test process).
func pluginBinary(t *testing.T) string {
	t.Helper()
	bin, err := framework.BuildBinary(kubectlElectorPackage)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

type cmdResult struct {
	stdout, stderr string
	code           int
}

func (r cmdResult) String() string {
	return fmt.Sprintf("exit %d, stdout:\n%s\nstderr: %q", r.code, r.stdout, r.stderr)
}

// runCommand runs argv with extra environment variables and returns its output and exit code.
func runCommand(t *testing.T, ctx context.Context, env []string, argv ...string) cmdResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cmdResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	return res
}

// statusRow is the first data row of `kubectl elector status`'s table.
type statusRow struct {
	lease, holder string
	token         int64
	renewed       string // "1s ago"
	duration      string
	expiresIn     string
}

var statusHeader = []string{"LEASE", "HOLDER", "TOKEN", "RENEWED", "DURATION", "EXPIRES", "IN"}

// parseStatus parses the table of `status LEASE` (one row).
func parseStatus(out string) (statusRow, error) {
	lines := nonEmptyLines(out)
	if len(lines) < 2 {
		return statusRow{}, fmt.Errorf("want a header and a row, got %q", out)
	}
	if h := strings.Fields(lines[0]); strings.Join(h, " ") != strings.Join(statusHeader, " ") {
		return statusRow{}, fmt.Errorf("header %q, want %q", lines[0], strings.Join(statusHeader, " "))
	}
	f := strings.Fields(lines[1])
	if len(f) != 7 || f[4] != "ago" {
		return statusRow{}, fmt.Errorf("row %q: want LEASE HOLDER TOKEN Ns ago DURATION EXPIRES", lines[1])
	}
	tok, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return statusRow{}, fmt.Errorf("row %q: TOKEN: %w", lines[1], err)
	}
	return statusRow{lease: f[0], holder: f[1], token: tok, renewed: f[3] + " " + f[4], duration: f[5], expiresIn: f[6]}, nil
}

// checkStatusRow checks a row against the Lease as the API serves it right
// after: the same holder and token (leaseTransitions), RENEWED within the
// lease duration, DURATION the Lease's, EXPIRES IN a duration (the holder renews).
func (g *electionGroup) checkStatusRow(ctx context.Context, out string) (statusRow, error) {
	row, err := parseStatus(out)
	if err != nil {
		return row, err
	}
	l, err := env.cp.GetLease(ctx, g.namespace, g.lease)
	if err != nil {
		return row, err
	}
	holder, transitions := framework.LeaseHolder(l)
	wantDuration := fmt.Sprintf("%ds", *l.Spec.LeaseDurationSeconds)
	switch {
	case row.lease != g.lease:
		return row, fmt.Errorf("LEASE %q, want %q", row.lease, g.lease)
	case row.holder != holder || row.token != transitions:
		return row, fmt.Errorf("HOLDER %s TOKEN %d, the Lease has holder %q leaseTransitions %d", row.holder, row.token, holder, transitions)
	case !regexp.MustCompile(`^[0-3]s ago$`).MatchString(row.renewed):
		return row, fmt.Errorf("RENEWED %q, want within the %s lease duration of a renewing holder", row.renewed, wantDuration)
	case row.duration != wantDuration:
		return row, fmt.Errorf("DURATION %q, want %q", row.duration, wantDuration)
	case !regexp.MustCompile(`^[0-3]s$`).MatchString(row.expiresIn):
		return row, fmt.Errorf("EXPIRES IN %q, want at most %s", row.expiresIn, wantDuration)
	}
	return row, nil
}

func TestKubectlElectorStatusShowsTheLeaseHolderTokenAndEvents(t *testing.T) {
	plugin := pluginBinary(t)
	g := newGroup(t, testTimings)
	g.start("pod-a", "pod-b")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitRenewed(leader, tok.Token)
	kubeconfig := []string{"--kubeconfig", env.cp.Kubeconfig, "-n", g.namespace}
	becameLeader := fmt.Sprintf("%s became leader with fencing token %d", leader.Identity(), tok.Token)

	// The table: the Lease's holder and token, and the leader's Event.
	var last cmdResult
	g.waitFor(10*time.Second, "`kubectl-elector status` to show the Lease and the leader's Event", func(ctx context.Context) error {
		last = runCommand(t, ctx, nil, append([]string{plugin, "status", g.lease}, kubeconfig...)...)
		if last.code != 0 || last.stderr != "" {
			return fmt.Errorf("%v", last)
		}
		row, err := g.checkStatusRow(ctx, last.stdout)
		if err != nil {
			return fmt.Errorf("%w\n%v", err, last)
		}
		if row.holder != leader.Identity() || row.token != tok.Token {
			return fmt.Errorf("holder %s token %d, want the leader %s with %d", row.holder, row.token, leader.Identity(), tok.Token)
		}
		for _, l := range nonEmptyLines(last.stdout) {
			if f := strings.Fields(l); len(f) > 5 && f[3] == "LeaderElection" && f[4] == leader.Identity() &&
				strings.Join(f[5:], " ") == becameLeader {
				return nil
			}
		}
		return fmt.Errorf("no Event line from %s %q\n%v", leader.Identity(), becameLeader, last)
	})
	t.Logf("kubectl-elector status:\n%s", last.stdout)

	// The same through kubectl's plugin dispatch: kubectl finds kubectl-elector on PATH.
	path := "PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + os.Getenv("PATH")
	g.waitFor(10*time.Second, "`kubectl elector status` (through kubectl) to show the Lease", func(ctx context.Context) error {
		r := runCommand(t, ctx, []string{path}, append([]string{filepath.Join(env.cp.AssetsDir, "kubectl"), "elector", "status", g.lease}, kubeconfig...)...)
		if r.code != 0 || r.stderr != "" {
			return fmt.Errorf("%v", r)
		}
		_, err := g.checkStatusRow(ctx, r.stdout)
		return err
	})

	// -o json: the structured object.
	g.waitFor(10*time.Second, "`kubectl-elector status -o json` to show the Lease", func(ctx context.Context) error {
		r := runCommand(t, ctx, nil, append([]string{plugin, "status", g.lease, "-o", "json"}, kubeconfig...)...)
		if r.code != 0 || r.stderr != "" {
			return fmt.Errorf("%v", r)
		}
		var st kubectlelector.LeaseStatus
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			return fmt.Errorf("%w\n%v", err, r)
		}
		l, err := env.cp.GetLease(ctx, g.namespace, g.lease)
		if err != nil {
			return err
		}
		holder, transitions := framework.LeaseHolder(l)
		maxMs := int64(*l.Spec.LeaseDurationSeconds) * 1000
		switch {
		case st.Kind != "LeaseStatus" || st.APIVersion != kubectlelector.OutputVersion.String():
			return fmt.Errorf("kind %q apiVersion %q", st.Kind, st.APIVersion)
		case st.Namespace != g.namespace || st.Name != g.lease || st.UID != string(l.UID):
			return fmt.Errorf("%s/%s uid %s, want %s/%s uid %s", st.Namespace, st.Name, st.UID, g.namespace, g.lease, l.UID)
		case st.Holder != holder || st.Token != transitions:
			return fmt.Errorf("holder %q token %d, the Lease has %q %d", st.Holder, st.Token, holder, transitions)
		case st.Expired || st.ExpiresInMs == nil || *st.ExpiresInMs <= 0 || *st.ExpiresInMs > maxMs:
			return fmt.Errorf("expired %v expiresInMs %v, want in (0, %d]", st.Expired, st.ExpiresInMs, maxMs)
		case st.RenewTime == nil || st.LeaseDurationSeconds == nil || *st.LeaseDurationSeconds != *l.Spec.LeaseDurationSeconds:
			return fmt.Errorf("renewTime %v leaseDurationSeconds %v", st.RenewTime, st.LeaseDurationSeconds)
		}
		for _, e := range st.Events {
			if e.Message == becameLeader && e.Source == leader.Identity() && e.Reason == "LeaderElection" {
				return nil
			}
		}
		return fmt.Errorf("no event %q in %+v", becameLeader, st.Events)
	})

	// Errors: a missing Lease is exit 1 with kubectl's message; a bad flag exit 2.
	r := runCommand(t, g.ctx, nil, append([]string{plugin, "status", "nope"}, kubeconfig...)...)
	if want := `Error from server (NotFound): leases.coordination.k8s.io "nope" not found` + "\n"; r.code != 1 || r.stderr != want || r.stdout != "" {
		t.Errorf("status of a missing Lease: %v\nwant exit 1, stderr %q", r, want)
	}
	r = runCommand(t, g.ctx, nil, append([]string{plugin, "status", "--output=table"}, kubeconfig...)...)
	if want := `error: --output "table": must be one of json, yaml, wide, name, jsonpath=TEMPLATE (see 'kubectl elector status --help')` + "\n"; r.code != 2 || r.stderr != want {
		t.Errorf("a bad -o: %v\nwant exit 2, stderr %q", r, want)
	}
}

// watchProcess is `kubectl-elector watch` running, its lines collected.
type watchProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	stderr framework.SyncBuffer
	done   chan error
}

func startWatchProcess(t *testing.T, env []string, argv ...string) *watchProcess {
	t.Helper()
	w := &watchProcess{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan error, 1)}
	w.cmd.Env = append(os.Environ(), env...)
	w.cmd.Stdout = framework.NewLineWriter(func(l string) {
		w.mu.Lock()
		w.lines = append(w.lines, l)
		w.mu.Unlock()
	})
	w.cmd.Stderr = &w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			<-w.done //nolint:errcheck // killed: its exit status says nothing
		}
	})
	return w
}

func (w *watchProcess) Lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

// waitLine waits until a line after the first skip lines ends in suffix and
// returns its index.
func (w *watchProcess) waitLine(t *testing.T, g *electionGroup, skip int, suffix string) int {
	t.Helper()
	idx := -1
	g.waitFor(20*time.Second, fmt.Sprintf("a watch line ending in %q", suffix), func(context.Context) error {
		ls := w.Lines()
		for i := skip; i < len(ls); i++ {
			if strings.HasSuffix(ls[i], suffix) {
				idx = i
				return nil
			}
		}
		return fmt.Errorf("watch lines %q, stderr %q", ls, w.stderr.String())
	})
	return idx
}

// interrupt sends Ctrl-C (SIGINT) and checks the watch exits 0.
func (w *watchProcess) interrupt(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("watch after Ctrl-C: %v, want exit 0; stderr %q", err, w.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("watch did not exit within 10s of Ctrl-C")
	}
}

var watchLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)  (holder=\S+  token=\d+(  \(released\))?|lease deleted|lease not found)$`)

// checkWatchLines checks every line has the documented format.
func checkWatchLines(t *testing.T, lines []string) {
	t.Helper()
	for _, l := range lines {
		if !watchLine.MatchString(l) {
			t.Errorf("watch line %q does not match %s", l, watchLine)
		}
	}
}

// TestKubectlElectorWatchPrintsALineWhenTheLeaderChanges: with sidecars that release the Lease free on
// SIGTERM (--direct-handoff=false), `watch` prints the leader, the release and the takeover, nothing for
// renewals. (The default direct handoff never leaves the Lease free: TestKubectlElectorWatchShowsADirectHandoff.)
func TestKubectlElectorWatchPrintsALineWhenTheLeaderChanges(t *testing.T) {
	plugin := pluginBinary(t)
	g := newGroup(t, testTimings).withArgs("--direct-handoff=false")
	g.start("pod-a", "pod-b")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitRenewed(leader, tok.Token)

	w := startWatchProcess(t, nil, plugin, "watch", g.lease, "--kubeconfig", env.cp.Kubeconfig, "-n", g.namespace)
	first := w.waitLine(t, g, 0, fmt.Sprintf("  holder=%s  token=%d", leader.Identity(), tok.Token))

	// SIGTERM: the leader releases the Lease and the other takes it with token+1.
	if err := leader.Terminate(); err != nil {
		t.Fatal(err)
	}
	next, tok2 := g.waitLeader(startupTimeout, leader)
	if tok2.Token != tok.Token+1 {
		t.Fatalf("the new leader's token is %d, want %d", tok2.Token, tok.Token+1)
	}
	released := w.waitLine(t, g, first+1, fmt.Sprintf("  holder=<none>  token=%d  (released)", tok.Token))
	w.waitLine(t, g, released+1, fmt.Sprintf("  holder=%s  token=%d", next.Identity(), tok2.Token))
	w.interrupt(t)
	lines := w.Lines()
	t.Logf("kubectl-elector watch:\n%s", strings.Join(lines, "\n"))
	checkWatchLines(t, lines)
	if len(lines) != 3 {
		t.Errorf("%d watch lines, want 3 (the leader, the release, the takeover): renewals print nothing", len(lines))
	}
	if e := w.stderr.String(); e != "" {
		t.Errorf("watch wrote to stderr: %q", e)
	}
}

// TestKubectlElectorWatchShowsADirectHandoff: with the sidecars' default direct handoff, a SIGTERM of the
// leader hands the Lease to the other sidecar in one write; `watch` goes from the leader's line to the new
// holder's with the next token, and every line in between (if any) is in the documented format with no
// lower token.
func TestKubectlElectorWatchShowsADirectHandoff(t *testing.T) {
	plugin := pluginBinary(t)
	g := newGroup(t, testTimings)
	g.start("pod-a", "pod-b")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitRenewed(leader, tok.Token)

	w := startWatchProcess(t, nil, plugin, "watch", g.lease, "--kubeconfig", env.cp.Kubeconfig, "-n", g.namespace)
	first := w.waitLine(t, g, 0, fmt.Sprintf("  holder=%s  token=%d", leader.Identity(), tok.Token))
	if err := leader.Terminate(); err != nil {
		t.Fatal(err)
	}
	next, tok2 := g.waitLeader(startupTimeout, leader)
	if tok2.Token != tok.Token+1 {
		t.Fatalf("the new leader's token is %d, want %d", tok2.Token, tok.Token+1)
	}
	w.waitLine(t, g, first+1, fmt.Sprintf("  holder=%s  token=%d", next.Identity(), tok2.Token))
	w.interrupt(t)
	lines := w.Lines()
	t.Logf("kubectl-elector watch:\n%s", strings.Join(lines, "\n"))
	checkWatchLines(t, lines)
	token := regexp.MustCompile(`  token=(\d+)`)
	for _, l := range lines {
		if m := token.FindStringSubmatch(l); m != nil {
			if n, _ := strconv.ParseInt(m[1], 10, 64); n < tok.Token {
				t.Errorf("watch line %q: token below the first leader's %d", l, tok.Token)
			}
		}
	}
	if e := w.stderr.String(); e != "" {
		t.Errorf("watch wrote to stderr: %q", e)
	}
}

// The "Watching the election" snippets of README.md, run as written against
// the real API server: `kubectl get lease -o custom-columns=...`, the plugin's
// `go install` package, `kubectl elector status` and `kubectl elector watch`
// through the real kubectl (the plugin on PATH, KUBECONFIG set). The README's
// namespace "team" and Lease "nightly-run" become the test's. Outputs are
// checked by shape: the same header, the Lease's holder and token in the row.
func TestReadmeWatchingTheElectionSnippetsRunAgainstARealAPIServer(t *testing.T) {
	requireTools(t, "bash")
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme := readmeDoc(t, root, "README.md")
	var commands []readmeCommand
	for _, b := range readme.blocks {
		if b.Under("Watching the election") {
			if b.Lang != "console" {
				t.Fatalf("README.md %s: only console blocks can run here", b.Where())
			}
			for _, c := range framework.ConsoleCommands(b.Code) {
				commands = append(commands, readmeCommand{block: b, ConsoleCommand: c})
			}
		}
	}
	if len(commands) < 4 {
		t.Fatalf("README.md: want the kubectl get, go install, status and watch commands under \"Watching the election\", found %d", len(commands))
	}

	plugin := pluginBinary(t)
	g := newGroup(t, testTimings)
	g.start("pod-a", "pod-b")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitRenewed(leader, tok.Token)
	shellEnv := []string{
		"KUBECONFIG=" + env.cp.Kubeconfig,
		"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + env.cp.AssetsDir + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	rewrite := func(c readmeCommand) string {
		s := strings.ReplaceAll(c.Command, "-n team", "-n "+g.namespace)
		return strings.ReplaceAll(s, "nightly-run", g.lease)
	}
	seen := map[string]bool{}
	for _, c := range commands {
		cmd := rewrite(c)
		where := fmt.Sprintf("README.md line %d %q", c.line(), c.Command)
		switch {
		case strings.HasPrefix(cmd, "kubectl get lease "):
			seen["get"] = true
			g.waitFor(10*time.Second, where, func(ctx context.Context) error {
				r := runCommand(t, ctx, shellEnv, "bash", "-c", cmd)
				if r.code != 0 || r.stderr != "" {
					return fmt.Errorf("%v", r)
				}
				got, want := nonEmptyLines(r.stdout), c.Output
				if len(got) != 2 || len(want) != 2 || strings.Join(strings.Fields(got[0]), " ") != strings.Join(strings.Fields(want[0]), " ") {
					return fmt.Errorf("output %q, want the shape of %q", got, want)
				}
				f := strings.Fields(got[1])
				holder, transitions := g.leaseState()
				if len(f) != 4 || f[0] != g.lease || f[1] != holder || f[2] != strconv.FormatInt(transitions, 10) {
					return fmt.Errorf("row %q: want %s %s %d RENEWED", got[1], g.lease, holder, transitions)
				}
				if _, err := time.Parse(time.RFC3339Nano, f[3]); err != nil {
					return fmt.Errorf("RENEWED %q: %w", f[3], err)
				}
				return nil
			})
		case strings.HasPrefix(cmd, "go install "):
			seen["install"] = true
			// Offline, @latest cannot be fetched: check that the path is
			// this module's main package the test built as the plugin.
			pkg, _, ok := strings.Cut(strings.Fields(cmd)[2], "@")
			if !ok || !strings.HasSuffix(pkg, strings.TrimPrefix(kubectlElectorPackage, ".")) {
				t.Fatalf("%s: want `go install <module>/cmd/kubectl-elector@<version>`", where)
			}
			list := exec.Command("go", "list", "-f", "{{.Name}} {{.Module.Path}}", pkg)
			list.Dir = root
			out, err := list.CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "main "+strings.TrimSuffix(pkg, strings.TrimPrefix(kubectlElectorPackage, "."))) {
				t.Fatalf("%s: go list %s: %v: %s (want package main of this module)", where, pkg, err, out)
			}
		case strings.HasPrefix(cmd, "kubectl elector status "):
			seen["status"] = true
			g.waitFor(10*time.Second, where, func(ctx context.Context) error {
				r := runCommand(t, ctx, shellEnv, "bash", "-c", cmd)
				if r.code != 0 || r.stderr != "" {
					return fmt.Errorf("%v", r)
				}
				if _, err := g.checkStatusRow(ctx, r.stdout); err != nil {
					return fmt.Errorf("%w\n%v", err, r)
				}
				// The Events section: the same headings as the README.
				got, want := nonEmptyLines(r.stdout), c.Output
				if len(got) < 4 || len(want) < 4 || got[2] != want[2] ||
					strings.Join(strings.Fields(got[3]), " ") != strings.Join(strings.Fields(want[3]), " ") {
					return fmt.Errorf("output %q, want an Events section shaped as %q", got, want)
				}
				return nil
			})
		case strings.HasPrefix(cmd, "kubectl elector watch "):
			seen["watch"] = true
			if len(c.Output) == 0 {
				t.Fatalf("%s: no output shown", where)
			}
			checkWatchLines(t, c.Output)
			w := startWatchProcess(t, shellEnv, "bash", "-c", "exec "+cmd)
			first := w.waitLine(t, g, 0, fmt.Sprintf("  holder=%s  token=%d", leader.Identity(), tok.Token))
			if err := leader.Terminate(); err != nil {
				t.Fatal(err)
			}
			next, tok2 := g.waitLeader(startupTimeout, leader)
			w.waitLine(t, g, first+1, fmt.Sprintf("  holder=%s  token=%d", next.Identity(), tok2.Token))
			w.interrupt(t)
			checkWatchLines(t, w.Lines())
		default:
			t.Fatalf("%s: this test does not know how to run it", where)
		}
	}
	for _, k := range []string{"get", "install", "status", "watch"} {
		if !seen[k] {
			t.Errorf("README.md \"Watching the election\": no %q command ran", k)
		}
	}
}

// TestKubectlElectorStatusFiltersBySelectorOutputAndSidecarLeases: on a real API server, `status -A` lists
// the Leases a real sidecar wrote and leaves out a Lease no sidecar touched (a node heartbeat's, and the API
// server's own identity Leases), which --all-leases adds back; -l selects by the labels the sidecar put on
// its Lease (--lease-labels) on the server; -o name, -o wide and -o jsonpath print the same Lease.
func TestKubectlElectorStatusFiltersBySelectorOutputAndSidecarLeases(t *testing.T) {
	plugin := pluginBinary(t)
	g := newGroup(t, testTimings).withArgs("--lease-labels=app.kubernetes.io/instance=billing")
	g.start("pod-a")
	_, tok := g.waitLeader(startupTimeout)
	kube := kubernetes.NewForConfigOrDie(env.cp.Config)
	heartbeat := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-heartbeat", Namespace: g.namespace,
		Labels: map[string]string{"app.kubernetes.io/instance": "billing"}}}
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "other-app", Namespace: g.namespace,
		Labels: map[string]string{"app.kubernetes.io/instance": "other"}}}
	for _, l := range []*coordinationv1.Lease{heartbeat, other} {
		if _, err := kube.CoordinationV1().Leases(g.namespace).Create(g.ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kc := []string{"--kubeconfig", env.cp.Kubeconfig}
	run := func(args ...string) cmdResult {
		t.Helper()
		r := runCommand(t, g.ctx, nil, append(append([]string{plugin}, args...), kc...)...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("kubectl-elector %v: %v", args, r)
		}
		return r
	}
	keys := `jsonpath={range .items[*]}{.namespace}/{.name}{"\n"}{end}`
	mine, hb, oth := g.namespace+"/"+g.lease, g.namespace+"/node-heartbeat", g.namespace+"/other-app"
	// The sidecar labels its Lease with its first write; wait for it (the list reads what the server has).
	g.waitFor(10*time.Second, "the sidecar's Lease labels", func(ctx context.Context) error {
		l, err := env.cp.GetLease(ctx, g.namespace, g.lease)
		if err != nil || l.Labels["app.kubernetes.io/instance"] != "billing" {
			return fmt.Errorf("labels %v, err %v", l.GetLabels(), err)
		}
		return nil
	})

	all := nonEmptyLines(run("status", "-A", "-o", keys).stdout)
	if !slices.Contains(all, mine) || slices.Contains(all, hb) || slices.Contains(all, oth) ||
		slices.ContainsFunc(all, func(k string) bool { return strings.HasPrefix(k, "kube-system/") }) {
		t.Errorf("status -A lists %v; want %s and no Lease that no sidecar wrote (%s, %s, kube-system's)", all, mine, hb, oth)
	}
	every := nonEmptyLines(run("status", "-A", "--all-leases", "-o", keys).stdout)
	if !slices.Contains(every, mine) || !slices.Contains(every, hb) || !slices.Contains(every, oth) ||
		!slices.ContainsFunc(every, func(k string) bool { return strings.HasPrefix(k, "kube-system/") }) {
		t.Errorf("status -A --all-leases lists %v; want %s, %s, %s and the API server's kube-system Leases", every, mine, hb, oth)
	}
	if got := nonEmptyLines(run("status", "-A", "-l", "app.kubernetes.io/instance=billing", "-o", keys).stdout); !slices.Equal(got, []string{mine}) {
		t.Errorf("status -A -l app.kubernetes.io/instance=billing lists %v, want only %s", got, mine)
	}
	if got := nonEmptyLines(run("status", "-n", g.namespace, "-l", "app.kubernetes.io/instance=billing", "-o", "name").stdout); !slices.Equal(got,
		[]string{"lease.coordination.k8s.io/" + g.lease, "lease.coordination.k8s.io/node-heartbeat"}) {
		t.Errorf("status -n NS -l ... -o name printed %v, want the sidecar's Lease and node-heartbeat (a namespace lists every Lease)", got)
	}

	l, err := env.cp.GetLease(g.ctx, g.namespace, g.lease)
	if err != nil {
		t.Fatal(err)
	}
	wide := nonEmptyLines(run("status", g.lease, "-n", g.namespace, "-o", "wide", "--events=0").stdout)
	if len(wide) != 2 || !strings.HasSuffix(strings.Join(strings.Fields(wide[0]), " "), "EXPIRES IN RENEW TIME UID") || !strings.HasSuffix(wide[1], " "+string(l.UID)) ||
		!strings.HasPrefix(wide[1], g.lease+" ") {
		t.Errorf("status -o wide printed %q, want the table with RENEW TIME and UID %s", wide, l.UID)
	}
	want := fmt.Sprintf("%s %d %s", "pod-a", tok.Token, l.UID)
	if got := run("status", g.lease, "-n", g.namespace, "-o", "jsonpath={.holder} {.token} {.uid}").stdout; got != want {
		t.Errorf("status -o jsonpath printed %q, want %q", got, want)
	}
}

// TestKubectlElectorReleaseMakesTheRealHolderStepDown: `kubectl elector release` finds the holder's pod on a
// real API server (the Pod objects stand in for the pods: this tier has no kubelet), sends POST /release to
// that pod's real sidecar (reached directly here: the port-forward through a kubelet is e2e's, see
// test/e2e/kubectl_elector_test.go), and the other candidate takes the Lease with the next token; with --for
// the released sidecar stays out, so releasing the new holder leaves the Lease free.
func TestKubectlElectorReleaseMakesTheRealHolderStepDown(t *testing.T) {
	g := newGroup(t, testTimings)
	g.start("pod-a", "pod-b")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitAllSee(leader, tok.Token)
	kube := kubernetes.NewForConfigOrDie(env.cp.Config)
	for _, name := range []string{"pod-a", "pod-b"} {
		p, err := kube.CoreV1().Pods(g.namespace).Create(g.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.namespace},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		if _, err := kube.CoreV1().Pods(g.namespace).UpdateStatus(g.ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var forwarded []string
	deps := kubectlelector.Deps{Forward: func(_ context.Context, _ *genericclioptions.ConfigFlags, ns, pod string, port int) (string, func(), error) {
		forwarded = append(forwarded, fmt.Sprintf("%s/%s:%d", ns, pod, port))
		c := g.Get(pod)
		if c == nil {
			return "", nil, fmt.Errorf("no sidecar for pod %s", pod)
		}
		return c.URL, func() {}, nil
	}}
	release := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		code := kubectlelector.Run(g.ctx, append(args, "--kubeconfig", env.cp.Kubeconfig, "-n", g.namespace),
			genericiooptions.IOStreams{In: strings.NewReader(""), Out: &stdout, ErrOut: &stderr}, deps)
		return stdout.String(), stderr.String(), code
	}

	out, errOut, code := release("release", g.lease, "--for=5m")
	if want := fmt.Sprintf("lease %s/%s: pod %s released (the Lease was at token %d); it stays out of the election for 5m0s\n", g.namespace, g.lease,
		leader.Identity(), tok.Token); code != 0 || out != want || errOut != "" {
		t.Fatalf("release: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errOut, want)
	}
	if want := fmt.Sprintf("%s/%s:%d", g.namespace, leader.Identity(), kubectlelector.DefaultLocalAPIPort); !slices.Equal(forwarded, []string{want}) {
		t.Errorf("forwarded to %v, want %s", forwarded, want)
	}
	next, ntok := g.waitLeader(startupTimeout, leader)
	if ntok.Token != tok.Token+1 {
		t.Errorf("%s took over with token %d, want %d", next, ntok.Token, tok.Token+1)
	}
	g.waitAllSee(next, ntok.Token)

	// The first holder sits out its 5 minutes: released again, the Lease stays free.
	if out, errOut, code := release("release", g.lease); code != 0 || errOut != "" || !strings.Contains(out, "pod "+next.Identity()+" released") {
		t.Fatalf("second release: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	g.waitFor(10*time.Second, "the Lease to be free", func(ctx context.Context) error {
		if holder, _ := g.leaseState(); holder != "" {
			return fmt.Errorf("held by %s", holder)
		}
		return nil
	})
	if out, errOut, code := release("release", g.lease); code != 1 || out != "" ||
		errOut != fmt.Sprintf("error: lease %s/%s is free: no holder to release (token %d)\n", g.namespace, g.lease, ntok.Token) {
		t.Errorf("release of the free Lease: exit %d, stdout %q, stderr %q; want exit 1 and the reason", code, out, errOut)
	}
}

// TestKubectlElectorReleaseReportsAPortForwardThatCannotOpen: the plugin binary's own port-forward, through
// the real API server, to a holder pod that no kubelet runs (this tier has none) fails with one line naming
// the pod and port, exit 1, and the holder keeps the Lease with its token.
func TestKubectlElectorReleaseReportsAPortForwardThatCannotOpen(t *testing.T) {
	plugin := pluginBinary(t)
	g := newGroup(t, testTimings)
	g.start("pod-a")
	leader, tok := g.waitLeader(startupTimeout)
	kube := kubernetes.NewForConfigOrDie(env.cp.Config)
	p, err := kube.CoreV1().Pods(g.namespace).Create(g.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: leader.Identity(), Namespace: g.namespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if _, err := kube.CoreV1().Pods(g.namespace).UpdateStatus(g.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := runCommand(t, g.ctx, nil, plugin, "release", g.lease, "-n", g.namespace, "--kubeconfig", env.cp.Kubeconfig)
	prefix := fmt.Sprintf("error: port-forward to pod %s/%s port %d: ", g.namespace, leader.Identity(), kubectlelector.DefaultLocalAPIPort)
	if r.code != 1 || r.stdout != "" || !strings.HasPrefix(r.stderr, prefix) || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("release to a pod without a kubelet: %v\nwant exit 1 and one line starting %q", r, prefix)
	}
	t.Logf("kubectl-elector release: exit %d: %s", r.code, r.stderr)
	if holder, transitions := g.leaseState(); holder != leader.Identity() || transitions != tok.Token {
		t.Errorf("after the failed release the Lease has holder %q token %d, want %s still with %d", holder, transitions, leader.Identity(), tok.Token)
	}
}
