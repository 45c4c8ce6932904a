// Command chaos is the elector-sidecar soak (hack/chaos.sh, `make chaos`):
// several elector-sidecar candidates on one Lease against a real etcd +
// kube-apiserver, a fenced writer per candidate that writes with its token as
// fast as it can, and random faults: SIGKILL, SIGSTOP+SIGCONT (the writer is
// frozen with its token too, and writes late), SIGTERM, restarts with the
// same identity, apiserver restarts, Lease deletions, the Lease deleted
// during a handoff (the leader SIGTERMed and the Lease deleted the moment its
// release lands, or a follower's acquire, while the followers race), and the
// leader cut off from the apiserver while the Lease is deleted and a brand-new
// candidate starts, and a free Lease its holder did not release (holderIdentity
// cleared by hand, or the Lease deleted and created again free by another
// client; handedits.go), the holder sometimes frozen over it. Every candidate reaches the apiserver through its own
// local TCP proxy (framework.TCPProxy), which the soak can blackhole.
//
// The writers write through a fenced HTTP store (pkg/fencing/httpstore) that
// fronts a fencing.Store chosen with --store: memory (the default), or a
// throwaway PostgreSQL or redis-server (test/framework/dbserver) with the
// project's fence in it (pkg/fencing/postgres, pkg/fencing/redis). With a
// database the soak also restarts it (fault db-restart, at least once, at
// mid-run); the writes that fail meanwhile are reported apart, as errors
// during a database restart. At the end it prints the counts and checks the
// invariants:
//
//  1. the store never accepted a write with a token lower than one it had accepted before
//     (with a database: read from the database's own history, and that history
//     holds every write the writers saw accepted, plus at most the writes whose
//     outcome they could not know);
//  2. no two processes ever served a valid token at overlapping instants (the /token sampler);
//  3. tokens served later are greater (the sampler, per term);
//  4. every accepted token was used by one process only;
//  5. no two processes ever served the same token value (the sampler, over the whole run).
//  6. no process served a higher token while another process's answer still claimed
//     validity (sent time + expiresInMs; the sampler, framework.CheckClaims).
//
// With --shards=N it runs the shard soak instead (shards.go): the candidates
// run --shards=N and the invariants are checked per shard.
//
// It exits 1 if an invariant broke, 2 on bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/httpstore"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

type options struct {
	store      string
	duration   time.Duration
	candidates int
	faultEvery time.Duration
	seed       uint64
	timings    framework.Timings
	keepLogs   bool
	// shards > 0: the shard soak (shards.go) with --shards=N.
	shards int
}

// parseFlags parses the command line; the error is the one-line reason for
// exit code 2.
func parseFlags(args []string) (options, error) {
	o := options{}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.store, "store", storeMemory, "the fenced store behind the writers' HTTP store: "+strings.Join(storeKinds, ", ")+
		" (postgres and redis: a throwaway server, restarted mid-run)")
	fs.DurationVar(&o.duration, "duration", 2*time.Minute, "how long to inject faults")
	fs.IntVar(&o.candidates, "candidates", 5, "number of elector-sidecar candidates")
	fs.DurationVar(&o.faultEvery, "fault-every", 2*time.Second, "mean time between faults")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed (0: from the clock; printed)")
	fs.DurationVar(&o.timings.LeaseDuration, "lease-duration", 3*time.Second, "sidecars' --lease-duration")
	fs.DurationVar(&o.timings.RenewDeadline, "renew-deadline", 2*time.Second, "sidecars' --renew-deadline")
	fs.DurationVar(&o.timings.RetryPeriod, "retry-period", 500*time.Millisecond, "sidecars' --retry-period")
	fs.DurationVar(&o.timings.ClockSkewMargin, "clock-skew-margin", 200*time.Millisecond, "sidecars' --clock-skew-margin")
	fs.BoolVar(&o.keepLogs, "keep-logs", false, "keep process logs even if every invariant held")
	fs.IntVar(&o.shards, "shards", 0, "run the candidates with --shards=N and check the invariants per shard (needs --store=postgres; 0: one Lease)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fs.PrintDefaults()
		}
		return o, err
	}
	var err error
	if o.store, err = parseStoreKind(o.store); err != nil {
		return o, err
	}
	if fs.NArg() > 0 || o.duration <= 0 || o.candidates < 3 || o.faultEvery <= 0 {
		return o, errors.New("want --duration > 0, --candidates >= 3, --fault-every > 0 and no arguments")
	}
	if o.shards < 0 || (o.shards > 0 && o.store != storePostgres) {
		return o, fmt.Errorf("--shards=%d --store=%s: a shard soak judges every shard from PostgreSQL's history: want --shards >= 1 with --store=postgres (or --shards=0)", o.shards, o.store)
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	soak := run
	if o.shards > 0 {
		soak = runShards
	}
	ok, err := soak(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: FAILED:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (bool, error) {
	s, err := newSoak(o, "elector-chaos-")
	if err != nil {
		return false, err
	}
	s.logf("chaos soak: %d candidates, %v of faults (mean every %v), seed %d, timings %+v, store %s; logs in %s",
		o.candidates, o.duration, o.faultEvery, o.seed, o.timings, o.store, s.logDir)
	binary, stop, err := s.setUp(ctx)
	if err != nil {
		return false, err
	}
	defer stop()
	s.logf("fenced store: %s, behind the HTTP store the writers write to", s.db.describe)
	s.store = httpstore.NewServer(s.db.store)
	var stopStore func()
	s.url, stopStore, err = httpstore.Listen("127.0.0.1:0", s.store)
	if err != nil {
		return false, err
	}
	defer stopStore()

	s.g = framework.NewGroup(s.candidateSpec(binary))
	defer s.stopCandidates()
	if err := s.startCandidates(ctx); err != nil {
		return false, err
	}
	if _, _, err := s.g.WaitForLeader(ctx, 30*time.Second); err != nil {
		return false, err
	}
	s.logf("first leader elected; starting writers and faults")

	wctx, stopWriters := context.WithCancel(context.Background())
	s.wctx = wctx
	for _, sl := range s.slots {
		s.startWriter(sl)
	}

	fctx, stopFaults := context.WithTimeout(ctx, o.duration)
	if s.db.restart != nil {
		// one database restart at mid-run, while a leader writes
		s.restartDBMidRun(fctx, func(ctx context.Context) { _, _, _ = s.g.WaitForLeader(ctx, 10*time.Second) })
	}
	s.faultLoop(fctx, func() { s.inject(fctx) }, func() string { return fmt.Sprintf(", highest token %d", s.highest()) })
	stopFaults()
	s.settle("group")
	if _, _, err := s.g.WaitForLeader(context.Background(), 30*time.Second); err != nil {
		s.logf("no leader after the soak: %v", err)
	}
	time.Sleep(o.timings.LeaseDuration)
	stopWriters()
	s.writers.Wait()
	s.g.Sampler.Stop()

	return s.verdict(ctx, s.report())
}

// writer writes with its candidate's token as fast as it can. If its
// candidate is paused after it got a token, it freezes too and writes late.
func (s *soak) writer(ctx context.Context, sl *slot) {
	var client *httpstore.Client
	var cur *framework.Candidate
	seq := 0
	for ctx.Err() == nil {
		c := s.g.Get(sl.id)
		if c == nil || c.Exited() {
			sl.mu.Lock()
			retired := sl.retired
			sl.mu.Unlock()
			if retired {
				return
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if c != cur {
			cur, client = c, httpstore.NewClient(s.url, c.Instance)
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r := c.Token(rctx)
		cancel()
		if !r.Valid() {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		sl.mu.Lock()
		resume := sl.resume
		paused := sl.paused
		sl.lastToken, sl.lastTokenAt, sl.lastInstance = r.Token, time.Now(), c.Instance
		sl.mu.Unlock()
		if !thawed(ctx, paused, resume) { // frozen with a token in hand, like its process
			return
		}
		seq++
		s.attempted.Add(1)
		// Not cancelled by the end of the soak: a write in flight finishes, so
		// its outcome is known (a cancelled request could still commit).
		wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Second)
		began := time.Now()
		err := client.WriteToken(wctx, fencing.Token{Value: r.Token, LeaseUID: r.LeaseUID}, []byte(fmt.Sprintf("%s #%d token %d", c.Instance, seq, r.Token)))
		wcancel()
		switch {
		case err == nil:
			s.accepted.Add(1)
		case errors.Is(err, fencing.ErrStaleToken):
			s.stale.Add(1)
		default:
			s.writeError(began, err)
		}
	}
}

// lateWrite sends the write a frozen writer had in flight, with the token it
// held before the pause.
func (s *soak) lateWrite(instance string, token int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.attempted.Add(1)
	began := time.Now()
	err := httpstore.NewClient(s.url, instance).Write(ctx, token, []byte(fmt.Sprintf("%s late write token %d", instance, token)))
	result := "accepted (nobody took over during the pause)"
	switch {
	case err == nil:
		s.accepted.Add(1)
	case errors.Is(err, fencing.ErrStaleToken):
		s.stale.Add(1)
		result = "rejected as stale: " + err.Error()
	default:
		s.writeError(began, err)
		result = "error: " + err.Error()
	}
	s.logf("late write by %s with token %d after the pause: %s", instance, token, result)
}

func (s *soak) highest() int64 {
	h, _, _ := s.store.Read(context.Background())
	return h
}

// pick returns a slot that is up and has no fault in progress, preferring
// the leader half of the time; nil if none.
func (s *soak) pick(ctx context.Context) *slot {
	candidates := s.available()
	if len(candidates) == 0 {
		return nil
	}
	if s.intn(2) == 0 {
		for _, l := range s.g.Leaders(ctx) {
			for _, sl := range candidates {
				if sl.id == l.Identity() {
					return sl
				}
			}
		}
	}
	return candidates[s.intn(len(candidates))]
}

// inject starts a random fault (faults.go; deletion.go, handedits.go).
func (s *soak) inject(ctx context.Context) {
	kinds := []string{"sigkill", "sigstop", "sigterm", "restart", "apiserver-restart", "lease-delete", "handoff-delete", "partition-delete", "hand-clear", "recreate-free", "db-restart"}
	weights := []int{3, 3, 2, 2, 1, 1, 3, 2, 2, 2, 0}
	if s.db.restart != nil {
		weights[len(weights)-1] = 1
	}
	kind := s.drawFault(kinds, weights)
	if s.injectSoakFault(kind) {
		return
	}
	switch kind {
	case "lease-delete":
		if s.apiDown.Load() {
			return
		}
		s.count(kind)
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.cp.Client.CoordinationV1().Leases(s.ns).Delete(dctx, "chaos", metav1.DeleteOptions{})
		cancel()
		s.logf("fault: Lease deleted (%v)", err)
		return
	case "handoff-delete", "partition-delete":
		s.injectDeletion(ctx, kind)
		return
	case "hand-clear", "recreate-free":
		s.injectHandEdit(ctx, kind)
		return
	}
	sl := s.pick(ctx)
	if sl == nil {
		return
	}
	c := s.g.Get(sl.id)
	leading := func() bool { return c.Token(context.Background()).Valid() }
	s.processFault(sl, c, kind, leading, s.freeze)
}
