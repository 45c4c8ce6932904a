package examples

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The shard workers' scenario: a set of shardCount shards over three
// sidecars started with --shards, a worker next to each.
const (
	shardCount    = 4
	shardResource = "partition" // WORKER_RESOURCE: shard i writes partition-<i>
)

var shardWorkerEnv = []string{"WORKER_RESOURCE=" + shardResource, "WORKER_INTERVAL=200ms", "WORKER_WORK=1s"}

// shardJobStarted is the line both shard workers log when a job starts on a
// shard: the index, the job's number and the shard's token it runs with.
var shardJobStarted = regexp.MustCompile(`shard (\d+) job (\d+) started: token=(\d+)\b`)

// Each shard worker, started with README.md's command next to one of three
// sidecars of a set of 4 shards (--shards=4), writes to every partition the
// set spreads over the pods, each partition fenced with its own shard's
// token. One pod's worker is frozen (SIGSTOP) in the middle of a job on one
// of its shards, then its sidecar: once its session has run out, another pod
// owns that shard with a higher token and writes; the frozen worker, thawed
// (SIGCONT), finishes its job with the old token and PostgreSQL rejects it
// (EF001, in the database's log). From the database: every partition got
// writes, and each partition's accepted tokens (the fence's history and the
// rows) only grow.
func TestShardWorkerStaleWriteAfterTakeoverIsRejectedAndEveryPartitionIsWritten(t *testing.T) {
	for _, ex := range []struct{ name, command string }{
		{"go", "bin/go-shard-worker"},
		{"python", "/usr/bin/python3 examples/python-shard-worker/worker.py"},
	} {
		t.Run(ex.name, func(t *testing.T) { shardScenario(t, ex.name, ex.command) })
	}
}

// shardsAnswer is the part of GET /shards the test reads.
type shardsAnswer struct {
	Identity string `json:"identity"`
	Live     bool   `json:"live"`
	Members  []string
	Owned    []struct {
		Index    int    `json:"index"`
		LeaseUID string `json:"leaseUID"`
		Token    int64  `json:"token"`
	} `json:"owned"`
}

func (a shardsAnswer) token(i int) (int64, bool) {
	for _, o := range a.Owned {
		if o.Index == i {
			return o.Token, true
		}
	}
	return 0, false
}

func getShards(ctx context.Context, c *framework.Candidate) (shardsAnswer, error) {
	var a shardsAnswer
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/shards", nil)
	if err != nil {
		return a, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return a, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return a, err
	}
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("GET /shards of %s: %d %s", c.Instance, resp.StatusCode, b)
	}
	return a, json.Unmarshal(b, &a)
}

// shardRow is one row of example_writes of a partition.
type shardRow struct {
	id, token int64
	resource  string
	holder    string
}

func partitionRows(ctx context.Context, conn *pgx.Conn) (map[string][]shardRow, error) {
	rs, err := conn.Query(ctx, "SELECT id, resource, token, holder FROM example_writes WHERE resource LIKE $1 ORDER BY id", shardResource+"-%")
	if err != nil {
		return nil, err
	}
	rows, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (shardRow, error) {
		var x shardRow
		err := r.Scan(&x.id, &x.resource, &x.token, &x.holder)
		return x, err
	})
	out := map[string][]shardRow{}
	for _, r := range rows {
		out[r.resource] = append(out[r.resource], r)
	}
	return out, err
}

func partition(i int) string { return shardResource + "-" + strconv.Itoa(i) }

func shardScenario(t *testing.T, name, workerPrefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root := repoRoot(t)
	srv, _, dbEnv := readmeDatabase(t)
	if name == "go" {
		runCommand(t, readmeCommand(t, "go build -o bin/go-shard-worker "), nil)
	}
	workerCmd := readmeCommand(t, workerPrefix)
	conn, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()

	ns, err := env.cp.CreateNamespace(ctx, "shards-"+name)
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(env.logDir, t.Name())
	sidecars := map[string]*framework.Candidate{}
	workers := map[string]*worker{}
	ids := []string{"pod-a", "pod-b", "pod-c"}
	t.Cleanup(func() {
		for _, c := range sidecars {
			_ = c.Resume()
			c.Stop(3 * time.Second)
		}
		for _, w := range workers {
			_ = w.Resume()
			w.Stop(3 * time.Second)
		}
		if t.Failed() {
			for id, c := range sidecars {
				t.Logf("----- sidecar %s (%s) -----\n%s", id, c.LogPath, c.LogTail(30))
			}
			for id, w := range workers {
				t.Logf("----- worker %s (%s) -----\n%s", id, w.LogPath, w.LogTail(40))
			}
			t.Logf("----- PostgreSQL (%s) -----\n%s", srv.LogPath, srv.LogTail(20))
		}
	})
	for _, id := range ids {
		c, err := framework.StartCandidate(ctx, framework.CandidateSpec{
			Binary: env.sidecarBin, Identity: id, LeaseName: "orders", Namespace: ns, Kubeconfig: env.cp.Kubeconfig,
			Timings: timings, LogDir: logDir, ExtraArgs: []string{"--shards=" + strconv.Itoa(shardCount)},
		})
		if err != nil {
			t.Fatal(err)
		}
		sidecars[id] = c
		w := &worker{}
		p, err := framework.StartProcess(framework.ProcessSpec{
			Name: name + "-shard-worker-" + id, Path: "bash",
			// exec: the worker is the process the test signals.
			Args:   []string{"-c", "cd " + root + " && exec " + workerCmd},
			Env:    append(append([]string{"ELECTOR_URL=" + c.URL, "POD_NAME=" + id}, dbEnv...), shardWorkerEnv...),
			LogDir: logDir,
			Output: framework.NewLineWriter(w.line),
		})
		if err != nil {
			t.Fatal(err)
		}
		w.Process = p
		workers[id] = w
	}

	// Every partition gets rows, each from the pod that owns its shard.
	waitFor(t, ctx, 2*startupTimeout, fmt.Sprintf("two rows in each of the %d partitions", shardCount), func(ctx context.Context) error {
		byRes, err := partitionRows(ctx, conn)
		if err != nil {
			return err
		}
		for i := range shardCount {
			if n := len(byRes[partition(i)]); n < 2 {
				return fmt.Errorf("%s has %d rows", partition(i), n)
			}
		}
		return nil
	})

	// The victim: a pod that owns a shard now. Freeze its worker the moment
	// it starts a job (it works for WORKER_WORK before writing), then its sidecar.
	var victim string
	for _, id := range ids {
		if a, err := getShards(ctx, sidecars[id]); err == nil && len(a.Owned) > 0 {
			victim = id
			break
		}
	}
	if victim == "" {
		t.Fatal("no sidecar owns a shard")
	}
	type frozenJob struct {
		shard      int
		job, token int64
		err        error
	}
	frozen := make(chan frozenJob, 1)
	old := workers[victim]
	old.mu.Lock()
	old.hook = func(l string) {
		m := shardJobStarted.FindStringSubmatch(l)
		if m == nil {
			return
		}
		old.hook = nil
		shard, _ := strconv.Atoi(m[1])
		job, _ := strconv.ParseInt(m[2], 10, 64)
		token, _ := strconv.ParseInt(m[3], 10, 64)
		frozen <- frozenJob{shard, job, token, old.Pause()}
	}
	old.mu.Unlock()
	var fj frozenJob
	select {
	case fj = <-frozen:
	case <-time.After(startupTimeout):
		t.Fatalf("%s's worker started no job within %v", victim, startupTimeout)
	}
	if fj.err != nil {
		t.Fatal(fj.err)
	}
	if err := sidecars[victim].Pause(); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	t.Logf("froze %s's worker in job %d on shard %d with token %d, then its sidecar", victim, fj.job, fj.shard, fj.token)

	// Another pod owns the shard with a higher token, and writes to its partition.
	var next string
	var nextToken int64
	waitFor(t, ctx, failoverTimeout, fmt.Sprintf("another pod owns shard %d with a token above %d", fj.shard, fj.token), func(ctx context.Context) error {
		for _, id := range ids {
			if id == victim {
				continue
			}
			a, err := getShards(ctx, sidecars[id])
			if err != nil {
				return err
			}
			if tok, ok := a.token(fj.shard); ok {
				if tok <= fj.token {
					return fmt.Errorf("%s owns shard %d with token %d, not above the frozen %d", id, fj.shard, tok, fj.token)
				}
				next, nextToken = id, tok
				return nil
			}
		}
		return fmt.Errorf("no other pod owns shard %d yet", fj.shard)
	})
	var firstNew int64
	waitFor(t, ctx, startupTimeout, fmt.Sprintf("a row of %s in %s with token %d", next, partition(fj.shard), nextToken), func(ctx context.Context) error {
		byRes, err := partitionRows(ctx, conn)
		if err != nil {
			return err
		}
		for _, r := range byRes[partition(fj.shard)] {
			if r.holder == next && r.token == nextToken {
				firstNew = r.id
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	t.Logf("%s owns shard %d with token %d %v after the freeze; its first row is id %d", next, fj.shard, nextToken,
		time.Since(frozenAt).Round(time.Millisecond), firstNew)

	// Thaw the worker (its sidecar stays frozen): its job writes with the old
	// token, and PostgreSQL rejects it: the database logs the stale token, the
	// worker logs the rejection, and no row of it comes after the new owner's.
	if err := old.Resume(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("stale fencing token %d for resource '%s': the resource already accepted token ", fj.token, partition(fj.shard))
	rejected := regexp.MustCompile(fmt.Sprintf(`shard %d job %d rejected: .*EF001`, fj.shard, fj.job))
	committed := regexp.MustCompile(fmt.Sprintf(`shard %d job %d committed`, fj.shard, fj.job))
	waitFor(t, ctx, 20*time.Second, fmt.Sprintf("PostgreSQL rejects the thawed job %d on shard %d (token %d)", fj.job, fj.shard, fj.token), func(ctx context.Context) error {
		if m := old.find(committed); m != nil {
			return fmt.Errorf("job %d committed: %q", fj.job, m[0])
		}
		b, err := os.ReadFile(srv.LogPath)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), stale) {
			return fmt.Errorf("the database's log has no %q yet", stale)
		}
		if old.find(rejected) == nil {
			return fmt.Errorf("the worker has not logged it; last lines:\n%s", old.LogTail(5))
		}
		return nil
	})
	if m := old.find(committed); m != nil {
		t.Fatalf("the frozen job committed: %q", m[0])
	}
	t.Logf("the stale write was rejected: %q", old.find(rejected)[0])

	// Once the new owner has written two more rows: after its first row,
	// the partition has only its rows; every partition's accepted tokens
	// only grow, in the rows and in the fence's own history.
	var byRes map[string][]shardRow
	waitFor(t, ctx, startupTimeout, fmt.Sprintf("two more rows in %s after id %d", partition(fj.shard), firstNew), func(ctx context.Context) error {
		var err error
		if byRes, err = partitionRows(ctx, conn); err != nil {
			return err
		}
		rs := byRes[partition(fj.shard)]
		i := slices.IndexFunc(rs, func(r shardRow) bool { return r.id == firstNew })
		if n := len(rs) - i - 1; n < 2 {
			return fmt.Errorf("%d rows after it", n)
		}
		return nil
	})
	for _, r := range byRes[partition(fj.shard)] {
		if r.id > firstNew && r.holder == victim {
			t.Errorf("%s row %d of %s (token %d) after the new owner's first row %d", partition(fj.shard), r.id, victim, r.token, firstNew)
		}
	}
	for i := range shardCount {
		res := partition(i)
		rs := byRes[res]
		if len(rs) == 0 {
			t.Errorf("%s: no rows", res)
		}
		for j := 1; j < len(rs); j++ {
			if rs[j].token < rs[j-1].token {
				t.Errorf("%s: row %d has token %d after row %d with token %d", res, rs[j].id, rs[j].token, rs[j-1].id, rs[j-1].token)
			}
		}
		hist, err := conn.Query(ctx, "SELECT token FROM elector_fence_history WHERE resource = $1 ORDER BY id", res)
		if err != nil {
			t.Fatal(err)
		}
		toks, err := pgx.CollectRows(hist, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		if len(toks) < len(rs) || !slices.IsSorted(toks) {
			t.Errorf("%s: the fence's history has %d rows for %d written, tokens %v: want at least one per row, never going down", res, len(toks), len(rs), toks)
		}
	}

	// SIGTERM: every worker stops cleanly (exit 0).
	if err := sidecars[victim].Resume(); err != nil {
		t.Fatal(err)
	}
	for id, w := range workers {
		if err := w.Terminate(); err != nil {
			t.Fatal(err)
		}
		if code, err := w.Wait(15 * time.Second); err != nil || code != 0 {
			t.Errorf("worker %s after SIGTERM: exit %d (%v)", id, code, err)
		}
	}
}
