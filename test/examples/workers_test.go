package examples

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// Timings of the scenario: a short lease, and jobs that take longer than it
// takes the test to see a job start and freeze its worker.
var (
	timings = framework.TestTimings // 3s lease
	// workerEnv configures every worker (the README commands read these).
	workerEnv = []string{"WORKER_RESOURCE=orders", "WORKER_INTERVAL=200ms", "WORKER_WORK=1s"}
)

const (
	resource       = "orders"
	startupTimeout = 30 * time.Second
	// failover bounds a takeover after the leader froze: the lease plus slack for a loaded machine.
	failoverTimeout = 3*time.Second + 15*time.Second
)

// Each example, started with README.md's command, writes while it leads;
// the leader's sidecar and worker are frozen in the middle of a job past the
// lease; a new leader writes; the old worker, thawed, finishes its job with
// the token it started with, and PostgreSQL rejects that write (EF001):
// after the new leader's first row the table holds only the new leader's rows.
func TestExampleWorkerLateWriteAfterFailoverIsRejectedByTheFence(t *testing.T) {
	for _, ex := range []struct{ name, command string }{
		{"go", "bin/go-worker"},
		{"python", "/usr/bin/python3 examples/python-worker/worker.py"},
		{"shell", "examples/shell/worker.sh"},
	} {
		t.Run(ex.name, func(t *testing.T) { lateWriteScenario(t, ex.name, ex.command) })
	}
}

// readmeCommands returns the console commands of README.md's "Examples" section.
func readmeCommands(t *testing.T) []framework.ConsoleCommand {
	t.Helper()
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []framework.ConsoleCommand
	for _, blk := range framework.MarkdownCodeBlocks(string(b)) {
		if blk.Under("Examples") && blk.Lang == "console" {
			cmds = append(cmds, framework.ConsoleCommands(blk.Code)...)
		}
	}
	if len(cmds) == 0 {
		t.Fatal(`README.md: no console block under "Examples"`)
	}
	return cmds
}

// readmeCommand returns the one README "Examples" command starting with prefix.
func readmeCommand(t *testing.T, prefix string) string {
	t.Helper()
	var found []string
	for _, c := range readmeCommands(t) {
		if strings.HasPrefix(c.Command, prefix) {
			found = append(found, c.Command)
		}
	}
	if len(found) != 1 {
		t.Fatalf("README.md \"Examples\": %d commands start with %q, want 1: %q", len(found), prefix, found)
	}
	return found[0]
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// runCommand runs a README command through bash in the repository root.
func runCommand(t *testing.T, command string, envv []string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", command)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), envv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README.md command %q: %v\n%s", command, err, out)
	}
}

var buildGoWorker sync.Once

// worker is one example worker process and the lines it printed.
type worker struct {
	*framework.Process
	mu    sync.Mutex
	lines []string
	hook  func(line string) // called with each line, under mu
}

func (w *worker) line(l string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, l)
	if w.hook != nil {
		w.hook(l)
	}
}

// find returns the first line matching re, then re's submatches (nil if none).
func (w *worker) find(re *regexp.Regexp) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if m := re.FindStringSubmatch(l); m != nil {
			return append([]string{l}, m[1:]...)
		}
	}
	return nil
}

var jobStarted = regexp.MustCompile(`job (\d+) started: token=(\d+) `)

// row is one row of example_writes.
type row struct {
	id, token int64
	holder    string
}

func rows(ctx context.Context, conn *pgx.Conn) ([]row, error) {
	rs, err := conn.Query(ctx, "SELECT id, token, holder FROM example_writes WHERE resource = $1 ORDER BY id", resource)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.id, &x.token, &x.holder)
		return x, err
	})
}

// readmeDatabase starts a throwaway PostgreSQL and runs the README's psql
// command against it (the fence's migration and the examples' table): the
// database, the directory of its client programs and the environment the
// README's commands run in.
func readmeDatabase(t *testing.T) (srv *dbserver.Server, binDir string, dbEnv []string) {
	t.Helper()
	binDir, err := dbserver.PostgresBinDir()
	if err != nil {
		t.Fatal(err)
	}
	srv = dbserver.Postgres(t)
	dbEnv = []string{"DATABASE_URL=" + srv.URL, "PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	runCommand(t, readmeCommand(t, "psql "), dbEnv)
	return srv, binDir, dbEnv
}

func lateWriteScenario(t *testing.T, name, workerPrefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root := repoRoot(t)
	srv, binDir, dbEnv := readmeDatabase(t)
	if name == "go" {
		buildGoWorker.Do(func() { runCommand(t, readmeCommand(t, "go build -o bin/go-worker "), nil) })
		if _, err := os.Stat(filepath.Join(root, "bin", "go-worker")); err != nil {
			t.Fatal(err)
		}
	}
	workerCmd := readmeCommand(t, workerPrefix)
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()

	ns, err := env.cp.CreateNamespace(ctx, "ex-"+name)
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(env.logDir, t.Name())
	g := framework.NewGroup(framework.CandidateSpec{
		Kind: framework.KindSidecar, Binary: env.sidecarBin, LeaseName: "worker", Namespace: ns,
		Kubeconfig: env.cp.Kubeconfig, Timings: timings, LogDir: logDir,
	})
	workers := map[string]*worker{}
	t.Cleanup(func() {
		g.Sampler.Stop()
		if err := g.Sampler.Check(); err != nil {
			t.Errorf("sampled /token of the sidecars: %v", err)
		}
		g.StopAll(3 * time.Second)
		for _, w := range workers {
			w.Stop(3 * time.Second)
		}
		if t.Failed() {
			t.Logf("sidecar logs (last lines):\n%s", g.Logs(30))
			for id, w := range workers {
				t.Logf("----- worker %s (%s) -----\n%s", id, w.LogPath, w.LogTail(40))
			}
		}
	})
	for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
		c, err := g.Start(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		w := &worker{}
		p, err := framework.StartProcess(framework.ProcessSpec{
			Name: name + "-worker-" + id, Path: "bash",
			// exec: the worker is the process the test signals.
			Args: []string{"-c", "cd " + root + " && exec " + workerCmd},
			Env: append(append([]string{"ELECTOR_URL=" + c.URL, "POD_NAME=" + id, "PSQL=" + filepath.Join(binDir, "psql")},
				dbEnv...), workerEnv...),
			LogDir: logDir,
			Output: framework.NewLineWriter(w.line),
		})
		if err != nil {
			t.Fatal(err)
		}
		w.Process = p
		workers[id] = w
	}

	// A leader, and rows from its worker.
	leader, tok, err := g.WaitForLeader(ctx, startupTimeout)
	if err != nil {
		t.Fatal(err)
	}
	old := workers[leader.Identity()]
	waitFor(t, ctx, startupTimeout, fmt.Sprintf("two rows of %s with token %d", leader.Identity(), tok.Token), func(ctx context.Context) error {
		rs, err := rows(ctx, conn)
		if err != nil {
			return err
		}
		n := 0
		for _, r := range rs {
			if r.token == tok.Token && r.holder == leader.Identity() {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d such rows of %d: %v", n, len(rs), rs)
		}
		return nil
	})

	// Freeze the leader's worker the moment it starts its next job (it works
	// for WORKER_WORK before writing), then its sidecar.
	type frozenJob struct {
		job, token int64
		err        error
	}
	frozen := make(chan frozenJob, 1)
	old.mu.Lock()
	old.hook = func(l string) {
		m := jobStarted.FindStringSubmatch(l)
		if m == nil {
			return
		}
		old.hook = nil
		job, _ := strconv.ParseInt(m[1], 10, 64)
		token, _ := strconv.ParseInt(m[2], 10, 64)
		frozen <- frozenJob{job, token, old.Pause()}
	}
	old.mu.Unlock()
	var fj frozenJob
	select {
	case fj = <-frozen:
	case <-time.After(startupTimeout):
		t.Fatalf("the leader's worker started no job within %v", startupTimeout)
	}
	if fj.err != nil {
		t.Fatal(fj.err)
	}
	if err := leader.Pause(); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	t.Logf("froze %s and its worker in job %d with token %d", leader.Instance, fj.job, fj.token)
	if fj.token != tok.Token {
		t.Fatalf("the frozen job has token %d, the leader's token is %d", fj.token, tok.Token)
	}

	// A new leader takes over and its worker writes.
	next, tok2, err := g.WaitForLeader(ctx, failoverTimeout, leader)
	if err != nil {
		t.Fatal(err)
	}
	if tok2.Token <= fj.token {
		t.Fatalf("new leader %s has token %d, not above the frozen %d", next.Instance, tok2.Token, fj.token)
	}
	var firstNew int64
	waitFor(t, ctx, startupTimeout, fmt.Sprintf("a row of %s with token %d", next.Identity(), tok2.Token), func(ctx context.Context) error {
		rs, err := rows(ctx, conn)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.token == tok2.Token && r.holder == next.Identity() {
				firstNew = r.id
				return nil
			}
		}
		return fmt.Errorf("none yet: %d rows", len(rs))
	})
	t.Logf("%s took over with token %d %v after the freeze; its first row is id %d", next.Instance, tok2.Token,
		time.Since(frozenAt).Round(time.Millisecond), firstNew)
	if name == "go" { // go-worker follows /watch: the stream told it that it leads, with the token
		if workers[next.Identity()].find(regexp.MustCompile(fmt.Sprintf(`leading: token=%d$`, tok2.Token))) == nil {
			t.Errorf("the new leader's go-worker logged no \"leading: token=%d\" from /watch", tok2.Token)
		}
	}

	// Thaw the old worker (its sidecar stays frozen): it finishes the job it
	// started with the old token, and PostgreSQL rejects that write.
	if err := old.Resume(); err != nil {
		t.Fatal(err)
	}
	rejected := regexp.MustCompile(fmt.Sprintf(`job %d rejected: .*EF001.*token=%d stored=%d\b`, fj.job, fj.token, tok2.Token))
	committed := regexp.MustCompile(fmt.Sprintf(`job %d committed`, fj.job))
	waitFor(t, ctx, 20*time.Second, fmt.Sprintf("the old worker logs job %d rejected with EF001", fj.job), func(ctx context.Context) error {
		if m := old.find(committed); m != nil {
			return fmt.Errorf("job %d committed: %q", fj.job, m[0]) // reported if the wait ends
		}
		if old.find(rejected) == nil {
			return fmt.Errorf("not yet; last lines:\n%s", old.LogTail(5))
		}
		return nil
	})
	t.Logf("the late write was rejected: %q", old.find(rejected)[0])
	if m := old.find(committed); m != nil {
		t.Fatalf("the frozen job committed: %q", m[0])
	}

	// The table, once the new leader has written two more rows: after its
	// first row, only its rows, with its token.
	var rs []row
	waitFor(t, ctx, startupTimeout, "two more rows after the new leader's first", func(ctx context.Context) error {
		var err error
		if rs, err = rows(ctx, conn); err != nil {
			return err
		}
		if n := len(rs) - indexOf(rs, firstNew) - 1; n < 2 {
			return fmt.Errorf("%d rows after id %d", n, firstNew)
		}
		return nil
	})
	oldRows, newRows := 0, 0
	for _, r := range rs {
		if r.id > firstNew && (r.token != tok2.Token || r.holder != next.Identity()) {
			t.Errorf("row %d (token %d, %s) after the new leader's first row %d (token %d, %s)", r.id, r.token, r.holder, firstNew, tok2.Token, next.Identity())
		}
		switch {
		case r.holder == leader.Identity() && r.token == tok.Token:
			oldRows++
		case r.holder == next.Identity() && r.token == tok2.Token:
			newRows++
		default:
			t.Errorf("row %d: token %d of %s is neither the old leader's (%d of %s) nor the new one's (%d of %s)",
				r.id, r.token, r.holder, tok.Token, leader.Identity(), tok2.Token, next.Identity())
		}
	}
	var stored int64
	if err := conn.QueryRow(ctx, "SELECT token FROM elector_fence WHERE resource = $1", resource).Scan(&stored); err != nil || stored != tok2.Token {
		t.Errorf("elector_fence holds token %d (%v), want the new leader's %d", stored, err, tok2.Token)
	}
	t.Logf("%d rows: %d of the old leader (token %d), then %d of the new leader (token %d)", len(rs), oldRows, tok.Token, newRows, tok2.Token)

	// SIGTERM: every worker stops cleanly (exit 0) with its summary line.
	if err := leader.Resume(); err != nil {
		t.Fatal(err)
	}
	for id, w := range workers {
		if err := w.Terminate(); err != nil {
			t.Fatal(err)
		}
		code, err := w.Wait(10 * time.Second)
		if err != nil || code != 0 {
			t.Errorf("worker %s after SIGTERM: exit %d (%v)", id, code, err)
		}
		if w.find(regexp.MustCompile(`stopped: \d+ rows committed, \d+ rejected as stale`)) == nil {
			t.Errorf("worker %s printed no summary on SIGTERM", id)
		}
	}
	if m := old.find(regexp.MustCompile(`stopped: \d+ rows committed, ([1-9]\d*) rejected as stale`)); m == nil {
		t.Errorf("the old leader's worker counts no rejected write")
	} else {
		t.Logf("the old leader's worker on SIGTERM: %q", m[0])
	}
}

// indexOf returns the index of the row with id in rs (-1 if none).
func indexOf(rs []row, id int64) int {
	for i, r := range rs {
		if r.id == id {
			return i
		}
	}
	return -1
}

func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	if err := framework.Eventually(ctx, framework.PollInterval, timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}
