package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/httpstore"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// What both soaks stand on (the single-Lease soak, run in main.go, and the
// shard soak, runShards in shards.go): the candidates' slots, the soak's
// state and counters, its setup (binaries, control plane, store, candidates)
// and its end (the verdict, the logs).

// slot is one candidate identity: its current process and its writer's state.
type slot struct {
	id string
	// kubeconfig points at proxy, this identity's way to the apiserver.
	kubeconfig string
	proxy      *framework.TCPProxy
	newcomer   bool // started by a partition-delete fault; retired after it

	mu      sync.Mutex
	retired bool          // a newcomer that was stopped for good: its writer ends
	down    bool          // killed or terminated, waiting for its restart
	paused  bool          // SIGSTOPped
	resume  chan struct{} // closed on SIGCONT
	pending bool          // a fault is in progress on this slot
	// the writer's last token, when it got it, and from which process
	lastToken    int64
	lastTokenAt  time.Time
	lastInstance string
}

type soak struct {
	o      options
	rng    *rand.Rand
	rngMu  sync.Mutex
	start  time.Time
	cp     *framework.ControlPlane
	g      *framework.Group
	ns     string
	store  *httpstore.Server
	db     *backend
	url    string
	slots  []*slot
	faults sync.Map // kind -> *atomic.Int64
	// upstream is the apiserver's host:port, behind every candidate's proxy.
	upstream string
	logDir   string

	// writers: one per slot, and one per newcomer while it runs.
	wctx    context.Context
	writers sync.WaitGroup

	newcomerMu  sync.Mutex
	newcomers   []*slot
	partitioned atomic.Bool // a partition-delete fault is in progress

	attempted, accepted, stale, writeErrs atomic.Int64
	// dbRestartErrs counts the writeErrs that overlapped a database restart.
	dbRestartErrs atomic.Int64
	dbRestarts    restartWindows
	dbDown        atomic.Bool // a db-restart fault is in progress
	errMu         sync.Mutex
	errSamples    []string // the first other write errors
	apiDown       atomic.Bool
	bg            sync.WaitGroup
}

// newSoak returns a soak seeded from o, with its process logs in a new
// temporary directory named after logPrefix.
func newSoak(o options, logPrefix string) (*soak, error) {
	s := &soak{o: o, rng: rand.New(rand.NewPCG(o.seed, o.seed^0x5eed)), start: time.Now()}
	logDir, err := os.MkdirTemp("", logPrefix)
	if err != nil {
		return nil, err
	}
	s.logDir = logDir
	return s, nil
}

func (s *soak) logf(format string, a ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, a...))
}

func (s *soak) intn(n int) int {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.IntN(n)
}

func (s *soak) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.intn(int(hi-lo)+1))
}

func (s *soak) count(kind string) {
	v, _ := s.faults.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (s *soak) countOf(kind string) int64 {
	if v, ok := s.faults.Load(kind); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// setUp builds the sidecar and starts the control plane (its namespace
// "chaos"; s.upstream, the apiserver every proxy forwards to) and the store
// (s.db). It returns the sidecar's binary and the function that stops what
// it started, in reverse order; on an error, that is already done.
func (s *soak) setUp(ctx context.Context) (binary string, stop func(), err error) {
	var stops []func()
	undo := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			undo()
		}
	}()
	bins, err := framework.BuildBinaries(framework.SidecarPackage)
	if err != nil {
		return "", nil, err
	}
	stops = append(stops, framework.CleanupBinaries)
	s.cp, err = framework.StartControlPlane(framework.ControlPlaneOptions{Dir: filepath.Join(s.logDir, "controlplane")})
	if err != nil {
		return "", nil, err
	}
	stops = append(stops, func() { _ = s.cp.Stop() })
	if s.ns, err = s.cp.CreateNamespace(ctx, "chaos"); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(s.cp.APIServerURL())
	if err != nil {
		return "", nil, err
	}
	s.upstream = u.Host
	if s.db, err = openBackend(ctx, s.o.store, s.logDir); err != nil {
		return "", nil, err
	}
	stops = append(stops, s.db.close)
	return bins[framework.SidecarPackage], undo, nil
}

// candidateSpec is the group's template: binary on the Lease "chaos" (the
// shard soak: the set's name) with the soak's timings, and extraArgs.
func (s *soak) candidateSpec(binary string, extraArgs ...string) framework.CandidateSpec {
	return framework.CandidateSpec{
		Binary:     binary,
		LeaseName:  "chaos",
		Namespace:  s.ns,
		Kubeconfig: s.cp.Kubeconfig,
		Timings:    s.o.timings,
		LogDir:     s.logDir,
		ExtraArgs:  extraArgs,
	}
}

// startCandidates starts --candidates candidates, cand-0, cand-1, ..., each
// in its slot behind its own proxy.
func (s *soak) startCandidates(ctx context.Context) error {
	for i := 0; i < s.o.candidates; i++ {
		sl, err := s.newSlot(fmt.Sprintf("cand-%d", i), false)
		if err != nil {
			return err
		}
		s.slots = append(s.slots, sl)
		if _, err := s.startSlot(ctx, sl); err != nil {
			return err
		}
	}
	return nil
}

// stopCandidates stops every process the group started, then the proxies
// (after the candidates, so they can release on the way out).
func (s *soak) stopCandidates() {
	s.g.StopAll(3 * time.Second)
	s.closeProxies()
}

// restartDBMidRun restarts the database once, at mid-run (after ready, if
// set), unless ctx ends first.
func (s *soak) restartDBMidRun(ctx context.Context, ready func(ctx context.Context)) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		select {
		case <-ctx.Done():
		case <-time.After(s.o.duration / 2):
			if ready != nil {
				ready(ctx)
			}
			s.restartDB()
		}
	}()
}

// settle waits for the faults in progress once the faults are over, and
// starts the apiserver again in case the last one left it down.
func (s *soak) settle(what string) {
	s.logf("faults over; letting pending faults finish and the %s settle", what)
	s.bg.Wait()
	if err := s.cp.StartAPIServer(); err != nil {
		s.logf("restarting the apiserver: %v", err)
	}
}

// verdict is the soak's result: the process logs are removed after a pass
// (unless --keep-logs or the soak was interrupted), kept and named otherwise.
func (s *soak) verdict(ctx context.Context, ok bool) (bool, error) {
	if ok && !s.o.keepLogs && ctx.Err() == nil {
		_ = os.RemoveAll(s.logDir)
	} else {
		s.logf("process logs kept in %s", s.logDir)
	}
	if ctx.Err() != nil {
		return ok, errors.New("interrupted")
	}
	return ok, nil
}

// writeError counts a write that ended in neither 200 nor 409, apart if it
// overlapped a database restart; the first few others are kept for the
// report.
func (s *soak) writeError(began time.Time, err error) {
	s.writeErrs.Add(1)
	if s.dbRestarts.overlaps(began, time.Now()) {
		s.dbRestartErrs.Add(1)
		return
	}
	s.errMu.Lock()
	if len(s.errSamples) < 5 {
		s.errSamples = append(s.errSamples, fmt.Sprintf("[%6.1fs] %v", time.Since(s.start).Seconds(), err))
	}
	s.errMu.Unlock()
}

// restartDB restarts the database (same port, same data) and logs how long
// it took.
func (s *soak) restartDB() {
	if !s.dbDown.CompareAndSwap(false, true) {
		return
	}
	defer s.dbDown.Store(false)
	s.count("db-restart")
	crash := s.intn(2) == 0
	how := map[bool]string{true: "SIGKILLed and restarted", false: "shut down cleanly and restarted"}[crash]
	i := s.dbRestarts.begin()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err := s.db.restart(ctx, crash)
	cancel()
	s.dbRestarts.end(i)
	s.logf("fault: %s %s (same port, same data) in %v (%v)", s.db.name, how, time.Since(t0).Round(time.Millisecond), errOr(err, "ok"))
}

// restart starts sl's identity again (three tries) and marks it up.
func (s *soak) restart(sl *slot) {
	for attempt := 0; attempt < 3; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := s.startSlot(ctx, sl)
		cancel()
		if err == nil {
			break
		}
		s.logf("restart %s: %v", sl.id, err)
	}
	sl.mu.Lock()
	sl.down = false
	sl.mu.Unlock()
}

// up counts slots that are not killed or terminated.
func (s *soak) up() int {
	n := 0
	for _, sl := range s.slots {
		sl.mu.Lock()
		if !sl.down {
			n++
		}
		sl.mu.Unlock()
	}
	return n
}
