package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// ---- 12. shards: one set of N shard Leases, M members ----
//
// --shards shards, --shards-members members, default timings, ours and
// client-go one after the other, each on a freshly restarted kube-apiserver
// (same etcd) and in a fresh namespace. Ours: elector-sidecar processes with
// --shards=N --lease-name=<set>. client-go: clientgo-candidate processes with
// --shards=N (one LeaderElector per shard Lease in each process, the only
// way to do this with client-go today), its client-side rate limit off (at
// its default, 5 requests/s, one process cannot hold 1,000 Leases). Per kind:
//
//  1. start the members; wait until every shard Lease is held and every
//     shard is served (the members' GET /shards), ours at a fair share;
//  2. after --shards-settle, a --shards-window steady state: Lease requests
//     by verb (apiserver_request_total minus the Lease writes of other
//     namespaces, seen on a cluster-wide watch), kube-apiserver and etcd CPU
//     and RSS, the members' CPU and RSS, the Lease watches the members hold
//     (apiserver_longrunning_requests now minus before they started);
//  3. join: one more member; time until a fair share (from the Leases and
//     from the members' GET /shards), the moves of every shard until two
//     retry periods after it (or the wait ends);
//  4. SIGTERM the member holding the most shards: per shard, time until
//     another member serves it with a higher token (its GET /shards);
//  5. SIGKILL the member then holding the most: the same.

// shardsOptions are the section's flags.
type shardsOptions struct {
	shards   int
	members  int
	window   time.Duration
	settle   time.Duration
	joinWait time.Duration
}

func (so *shardsOptions) register(fs *flag.FlagSet) {
	fs.IntVar(&so.shards, "shards", 1000, "shards of the set in the shards section")
	fs.IntVar(&so.members, "shards-members", 3, "members of the set in the shards section (one more joins later)")
	fs.DurationVar(&so.window, "shards-window", 30*time.Second, "steady-state window per kind in the shards section")
	fs.DurationVar(&so.settle, "shards-settle", 10*time.Second, "wait in the shards section after every shard is served, before the window")
	fs.DurationVar(&so.joinWait, "shards-join-wait", time.Minute, "how long the shards section waits for ours to reach a fair share after a member joins (client-go, which does not rebalance: at most 5 retry periods)")
}

// quick is --quick's: 100 shards, 10 s window, 5 s settle (explicit flags win).
func (so *shardsOptions) quick(set map[string]bool) {
	if !set["shards"] {
		so.shards = 100
	}
	if !set["shards-window"] {
		so.window = 10 * time.Second
	}
	if !set["shards-settle"] {
		so.settle = 5 * time.Second
	}
}

func (so *shardsOptions) validate() error {
	if so.shards < 1 || so.members < 2 {
		return errors.New("--shards must be >= 1, --shards-members >= 2")
	}
	if so.window < 2*time.Second || so.settle < 0 || so.joinWait < time.Second {
		return errors.New("--shards-window must be at least 2s, --shards-join-wait at least 1s, --shards-settle not negative")
	}
	return nil
}

// shardsSetName is the set's name (the members' --lease-name).
const shardsSetName = "bench-shards"

// ShardsPhase is one member leaving (SIGTERM or SIGKILL): per shard it
// held, the time until another member served it with a higher token.
type ShardsPhase struct {
	Victim string `json:"victim"`
	Held   int    `json:"shardsHeld"`
	// Served: shards served by another member before the wait ended.
	Served int `json:"served"`
	// Latency: signal -> another member's GET /shards lists the shard with
	// a higher token (the bench's read of it), per shard.
	Latency Dist `json:"latency"`
	// LeaseLatency: signal -> the bench's informer sees the shard's Lease
	// held by another member with a higher token.
	LeaseLatency Dist `json:"leaseLatency"`
}

// ShardsJoin is one member joining.
type ShardsJoin struct {
	Members int `json:"membersAfter"`
	// FairLeaseMs, FairServedMs: from the join to a fair share on the
	// Leases and in the members' GET /shards; -1: not within the wait.
	FairLeaseMs  float64 `json:"fairLeaseMs"`
	FairServedMs float64 `json:"fairServedMs"`
	// JoinedFrom: what the join is timed from: the new member's session
	// Lease first seen (ours), or its process start (client-go: no session).
	JoinedFrom string `json:"joinedFrom"`
	// StartToJoinMs: process start -> its session Lease seen (ours).
	StartToJoinMs float64 `json:"startToJoinMs,omitempty"`
	// Moved: shards that changed hands; MovedTwice: of them, more than once.
	Moved      int            `json:"moved"`
	MovedTwice int            `json:"movedTwice"`
	MaxMoves   int            `json:"maxMoves"`
	Holdings   map[string]int `json:"holdingsAtEnd"`
	// Serving: the shards each member's GET /shards listed when the wait
	// for a fair share ended.
	Serving map[string]int `json:"servingAtEndOfWait"`
	// WaitedMs: how long the fair share was waited for (client-go: at most 5 retry periods).
	WaitedMs float64 `json:"waitedMs"`
	NewHolds int     `json:"newMemberHolds"`
}

// ShardsKindResult is one kind's run.
type ShardsKindResult struct {
	Kind          string     `json:"kind"`
	StartSeconds  float64    `json:"startSeconds"`
	WindowSeconds float64    `json:"windowSeconds"`
	Requests      verbCounts `json:"requests"`
	// OtherWrites: the Lease writes outside the run's namespace in the
	// window (the apiserver's own), taken out of Requests.
	OtherWrites verbCounts `json:"otherNamespacesWrites"`
	PerSecond   verbCounts `json:"perSecond"`
	// Writes: POST, PUT, PATCH and DELETE in the window (any status).
	Writes float64 `json:"writes"`
	// HandsChanged: shard Leases that changed hands in the window (a
	// steady state has none).
	HandsChanged int `json:"shardMovesInWindow"`
	// ServedAtEnd: distinct shards the members' GET /shards listed at the
	// window's end.
	ServedAtEnd int `json:"servedAtEndOfWindow"`
	// Watches: Lease watches the members held (open watches in the window
	// minus those open before they started).
	Watches float64 `json:"memberWatches"`
	// WatchesBefore, WatchesOpen: all open Lease watches (the apiserver's
	// own and the bench's included) before the members started, and in the
	// window.
	WatchesBefore     float64      `json:"leaseWatchesBefore"`
	WatchesOpen       float64      `json:"leaseWatchesInWindow"` // the median of one reading a second
	WatchesSpread     Spread       `json:"leaseWatchesInWindowSpread"`
	APIServerFreshRSS int64        `json:"kubeApiserverFreshRssBytes"`
	APIServer         *procUsage   `json:"kubeApiserver"`
	Etcd              *procUsage   `json:"etcd"`
	Members           *procUsage   `json:"members"` // summed over the members
	Join              *ShardsJoin  `json:"join,omitempty"`
	Term              *ShardsPhase `json:"sigterm,omitempty"`
	Kill              *ShardsPhase `json:"sigkill,omitempty"`
	Error             string       `json:"error,omitempty"`
}

// ShardsResult is section 12's data.
type ShardsResult struct {
	Shards  int                          `json:"shards"`
	Members int                          `json:"members"`
	Timings framework.Timings            `json:"timings"`
	Kinds   map[string]*ShardsKindResult `json:"kinds"`
}

func defaultTimings() framework.Timings {
	return framework.Timings{LeaseDuration: election.DefaultLeaseDuration, RenewDeadline: election.DefaultRenewDeadline,
		RetryPeriod: election.DefaultRetryPeriod, ClockSkewMargin: election.DefaultClockSkewMargin}
}

func (e *env) runShards(ctx context.Context, so shardsOptions) (*ShardsResult, error) {
	res := &ShardsResult{Shards: so.shards, Members: so.members, Timings: defaultTimings(), Kinds: map[string]*ShardsKindResult{}}
	etcdPid, err := findPid("etcd", e.cp.Env.ControlPlane.Etcd.DataDir)
	if err != nil {
		etcdPid = 0 // reported as n/a
	}
	// A kind that fails does not keep the other from being measured.
	var errs []error
	for _, kind := range e.kinds() {
		r := &ShardsKindResult{Kind: string(kind)}
		res.Kinds[string(kind)] = r
		run := &shardsRun{env: e, so: so, kind: kind, t: res.Timings, r: r}
		if err := run.run(ctx, etcdPid); err != nil {
			r.Error = err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", kind, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	return res, errors.Join(errs...)
}

// shardsRun is one kind's run.
type shardsRun struct {
	env    *env
	so     shardsOptions
	kind   framework.CandidateKind
	t      framework.Timings
	r      *ShardsKindResult
	ns     string
	leases *shardLeases
	served *serveTracker
	obsCtx context.Context

	mu      sync.Mutex
	live    []*framework.Candidate
	observe map[string]context.CancelFunc // by identity: ends its observer
}

func (s *shardsRun) progress(format string, args ...any) {
	s.env.progress("    %s: "+format, append([]any{s.kind}, args...)...)
}

func (s *shardsRun) run(ctx context.Context, etcdPid int) error {
	e := s.env
	// A fresh kube-apiserver for each kind (same etcd), as in the leases section.
	s.progress("restarting kube-apiserver")
	if err := e.cp.StopAPIServer(30 * time.Second); err != nil {
		return err
	}
	if err := e.cp.StartAPIServer(); err != nil {
		return err
	}
	apiPid, err := e.apiserverPid()
	if err != nil {
		return err
	}
	if st, err := procStatus(apiPid); err == nil {
		s.r.APIServerFreshRSS = st["VmRSS"]
	}
	if s.ns, err = e.cp.CreateNamespace(ctx, "bench-shards"); err != nil {
		return err
	}
	cw, err := e.watchOtherWrites(ctx, s.ns)
	if err != nil {
		return err
	}
	defer cw.stop()
	if s.leases, err = e.watchShardLeases(s.ns, shardsSetName, s.so.shards); err != nil {
		return err
	}
	defer s.leases.close()
	// The next kind's apiserver must not cache this kind's Leases (envtest
	// runs no namespace controller: delete them). Deferred first, runs last.
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := e.cp.Client.CoordinationV1().Leases(s.ns).DeleteCollection(dctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			e.progress("    delete the Leases of %s: %v", s.ns, err)
		}
	}()
	baseWatches, err := s.steadyWatches(ctx)
	if err != nil {
		return err
	}
	s.r.WatchesBefore = baseWatches
	s.served = newServeTracker()
	obsCtx, cancelObs := context.WithCancel(ctx)
	defer cancelObs()
	s.obsCtx = obsCtx
	defer s.stopAll()

	if err := s.start(ctx); err != nil {
		return err
	}
	if err := settle(ctx, s.so.settle, 0); err != nil {
		return err
	}
	if err := s.window(ctx, cw, apiPid, etcdPid, baseWatches); err != nil {
		return err
	}
	if s.r.Join, err = s.join(ctx); err != nil {
		return err
	}
	if s.r.Term, err = s.leave(ctx, false); err != nil {
		return err
	}
	s.r.Kill, err = s.leave(ctx, true)
	return err
}
