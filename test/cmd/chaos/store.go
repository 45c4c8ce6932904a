package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

// The store behind the soak's fenced HTTP store (--store): the writers always
// write through httpstore; what changes is the fencing.Store it fronts.
//
//   - memory: fencing.NewMemory() in the soak's process (the default).
//   - postgres: pkg/fencing/postgres on a throwaway PostgreSQL
//     (test/framework/dbserver); history = elector_fence_history.
//   - redis: pkg/fencing/redis on a throwaway redis-server
//     (test/framework/dbserver, append-only); history = the fence's stream.
//
// With a database, the soak also restarts it mid-run (fault db-restart) and
// checks invariant 1 from the database's own history.
const (
	storeMemory   = "memory"
	storePostgres = "postgres"
	storeRedis    = "redis"
)

var storeKinds = []string{storeMemory, storePostgres, storeRedis}

// parseStoreKind validates --store.
func parseStoreKind(s string) (string, error) {
	for _, k := range storeKinds {
		if s == k {
			return k, nil
		}
	}
	return "", fmt.Errorf("--store %q: want one of %s", s, strings.Join(storeKinds, ", "))
}

// historyRow is one accepted write as the database recorded it, in the
// database's order (postgres: by id; redis: by stream entry ID).
type historyRow struct {
	ID       string
	Token    int64
	LeaseUID string
	Writer   string
}

// checkHistory is invariant 1 on the database's record: a violation for
// every row whose token is lower than a token recorded in an earlier row.
func checkHistory(rows []historyRow) []string {
	var problems []string
	var high int64
	highID := ""
	for i, r := range rows {
		if i > 0 && r.Token < high {
			who := ""
			if r.Writer != "" {
				who = " by " + r.Writer
			}
			problems = append(problems, fmt.Sprintf("history row %d (id %s)%s has token %d after token %d (row id %s)", i+1, r.ID, who, r.Token, high, highID))
		}
		if i == 0 || r.Token > high {
			high, highID = r.Token, r.ID
		}
	}
	return problems
}

// reconciliation compares the database's count of accepted writes with what
// the soak's HTTP store and its writers saw.
type reconciliation struct {
	History        int64 // rows in the database's history
	ServerAccepted int64 // commits the HTTP store saw succeed
	WriterAccepted int64 // 200 answers the writers got
	WriteErrors    int64 // writes that ended in neither 200 nor 409 (all of them)
	// LostReplies: committed, and the HTTP store knew, but the writer got an
	// error (its request timed out). Unknown: committed in the database
	// while the HTTP store's commit call failed (the reply of the commit was
	// lost, e.g. in a database restart). Both are "unknown" outcomes to the
	// writer.
	LostReplies, Unknown int64
}

// reconcile explains the gap between the database's history and the writes
// the writers saw accepted. Every history row must be a write a writer saw
// accepted or one whose outcome it could not know (it got an error): the
// database never holds fewer rows than accepted writes, and never more than
// accepted writes plus errors.
func reconcile(history, serverAccepted, writerAccepted, writeErrors int64) (reconciliation, []string) {
	r := reconciliation{History: history, ServerAccepted: serverAccepted, WriterAccepted: writerAccepted, WriteErrors: writeErrors,
		LostReplies: serverAccepted - writerAccepted, Unknown: history - serverAccepted}
	var problems []string
	if history < writerAccepted {
		problems = append(problems, fmt.Sprintf("the database's history has %d rows but the writers saw %d writes accepted: %d accepted writes are missing from it",
			history, writerAccepted, writerAccepted-history))
	}
	if history < serverAccepted {
		problems = append(problems, fmt.Sprintf("the database's history has %d rows but the HTTP store saw %d commits succeed", history, serverAccepted))
	}
	if serverAccepted < writerAccepted {
		problems = append(problems, fmt.Sprintf("the writers saw %d writes accepted but the HTTP store committed only %d", writerAccepted, serverAccepted))
	}
	if gap := history - writerAccepted; gap > writeErrors {
		problems = append(problems, fmt.Sprintf("the database's history has %d rows more than the writers saw accepted, but only %d writes ended in an error (an unknown outcome)",
			gap, writeErrors))
	}
	return r, problems
}

func (r reconciliation) String() string {
	return fmt.Sprintf("history %d = accepted %d + reply lost after the commit %d + unknown outcome (commit reply lost) %d",
		r.History, r.WriterAccepted, r.LostReplies, r.Unknown)
}

// backend is the store behind the HTTP store.
type backend struct {
	kind     string
	name     string // "PostgreSQL", "Redis", "memory"
	addr     string // the database's host:port; "" for memory
	url      string // the database's URL; "" for memory
	describe string
	store    fencing.Store
	// restart restarts the database (same port, same data): cleanly, or
	// after a SIGKILL when crash is set; nil for memory.
	restart func(ctx context.Context, crash bool) error
	// history reads the database's record of accepted writes; nil for memory.
	history func(ctx context.Context) ([]historyRow, error)
	close   func()
}

// openBackend starts the store of kind (a throwaway database for postgres
// and redis, under dir).
func openBackend(ctx context.Context, kind, dir string) (*backend, error) {
	switch kind {
	case storeMemory:
		return &backend{kind: kind, name: "memory", describe: "in-memory fencing.Memory", store: fencing.NewMemory(), close: func() {}}, nil
	case storePostgres:
		return openPostgres(ctx, dir)
	case storeRedis:
		return openRedis(ctx, dir)
	}
	return nil, fmt.Errorf("unknown store %q", kind)
}

// restartServer restarts srv, after killing it first if crash. A start
// right after a SIGKILL can fail while the old server's processes are still
// going away (PostgreSQL: "pre-existing shared memory block is still in
// use"), so it tries a few times.
func restartServer(srv *dbserver.Server) func(ctx context.Context, crash bool) error {
	return func(ctx context.Context, crash bool) error {
		if crash {
			srv.Kill()
		}
		var err error
		for attempt := 0; attempt < 10; attempt++ {
			if err = srv.Restart(ctx); err == nil || ctx.Err() != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond)
		}
		return err
	}
}

// restartWindows remembers when the database was down, so a write error can
// be told apart: one during a restart (expected) or another one.
type restartWindows struct {
	mu    sync.Mutex
	spans [][2]time.Time // [begin, end]; end zero while in progress
}

// restartGrace is how long after a restart returns errors still count as
// "during a restart": pooled connections to the old server fail on first use.
const restartGrace = 2 * time.Second

func (w *restartWindows) begin() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.spans = append(w.spans, [2]time.Time{time.Now()})
	return len(w.spans) - 1
}

func (w *restartWindows) end(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.spans[i][1] = time.Now()
}

// overlaps reports whether [from, to] overlaps a restart (plus restartGrace).
func (w *restartWindows) overlaps(from, to time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.spans {
		end := s[1]
		if end.IsZero() {
			end = to // still in progress
		}
		if !from.After(end.Add(restartGrace)) && !to.Before(s[0]) {
			return true
		}
	}
	return false
}
