package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// How the leader is made to go away in a trial.
const (
	modeSIGTERM = "sigterm" // graceful: the leader releases the Lease and exits
	modeRelease = "release" // graceful: POST /release, the process stays up
	modeKill    = "kill"    // crash: SIGKILL, the Lease expires
)

// TrialsResult is one series of leadership changes on one pool.
type TrialsResult struct {
	Kind       string            `json:"kind"`
	Mode       string            `json:"mode"`
	Candidates int               `json:"candidates"`
	Timings    framework.Timings `json:"timings"`
	// Latency: from the signal (or the release call) being sent to the next
	// candidate's "acquired" log line.
	Latency Dist `json:"latency"`
	// For kill trials: Latency minus leaseDuration (the definition),
	// and the time from when the last renew became visible to a watcher
	// plus leaseDuration to the new leader (what a follower that judges
	// expiry on its own clock can achieve at best: 0).
	OverKill  *Dist `json:"overheadVsKill,omitempty"`
	OverRenew *Dist `json:"overheadVsLastRenewSeen,omitempty"`
	// PerHandoff (when counted): mean Lease requests by "verb code" from
	// just before the signal to 1 s after the new leader acquired
	// (apiserver-wide, so it includes the apiserver's own, ~0.1/s).
	PerHandoff verbCounts `json:"leaseRequestsPerHandoff,omitempty"`
	// Writes (when counted): the Lease writes (PUT and POST, any status
	// code: won, lost with a 409, or failed) of each handoff, in the same
	// window: the old leader's release, the acquiring attempts, and the
	// apiserver's own (~0.1/s).
	Writes []float64 `json:"leaseWritesEachHandoff,omitempty"`
	// FollowersCPU and APIServerCPU (when counted): the CPU time, in
	// seconds, the other candidates (all together) and the kube-apiserver
	// spent during each handoff, from the trigger to the new leader's
	// acquisition (procRunSeconds): on one machine, what the successor's
	// acquisition queues behind (each follower waking on the Lease's
	// changes, the apiserver sending them; client-go's polls meanwhile).
	FollowersCPU []float64 `json:"followersCpuSecondsEachHandoff,omitempty"`
	APIServerCPU []float64 `json:"apiserverCpuSecondsEachHandoff,omitempty"`
	Error        string    `json:"error,omitempty"`
}

// leaseWatcher records when each version of one Lease became visible to a
// watcher (the bench), with its holder.
type leaseWatcher struct {
	mu     sync.Mutex
	seen   []leaseSeen
	cancel context.CancelFunc
}

type leaseSeen struct {
	at     time.Time
	holder string
}

func (e *env) watchLease(ctx context.Context, ns, name string) (*leaseWatcher, error) {
	wctx, cancel := context.WithCancel(ctx)
	lw := &leaseWatcher{cancel: cancel}
	timeout := int64(3600)
	w, err := e.cp.Client.CoordinationV1().Leases(ns).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, TimeoutSeconds: &timeout})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch lease %s/%s: %w", ns, name, err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			h, _ := framework.LeaseHolder(l)
			lw.mu.Lock()
			lw.seen = append(lw.seen, leaseSeen{at: time.Now(), holder: h})
			lw.mu.Unlock()
		}
	}()
	return lw, nil
}

// lastBy returns when the last version held by holder was seen before t.
func (lw *leaseWatcher) lastBy(holder string, t time.Time) (time.Time, bool) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for i := len(lw.seen) - 1; i >= 0; i-- {
		s := lw.seen[i]
		if s.at.Before(t) && s.holder == holder {
			return s.at, true
		}
	}
	return time.Time{}, false
}

func (lw *leaseWatcher) stop() { lw.cancel() }

// startPool starts n candidates of kind on a fresh Lease: the first takes
// the Lease alone, then the others join. It returns the leader. Our
// sidecars get --expected-candidates=n, as the chart sets it.
func (e *env) startPool(ctx context.Context, kind framework.CandidateKind, lease string, t framework.Timings, n int, extraArgs ...string) (*pool, *framework.Candidate, error) {
	p, err := e.newPool(ctx, kind, lease, t)
	if err != nil {
		return nil, nil, err
	}
	p.expected = n
	p.extraArgs = extraArgs
	if _, err := p.start(ctx); err != nil {
		return p, nil, err
	}
	leader, err := p.leader(ctx, 2*t.LeaseDuration+30*time.Second)
	if err != nil {
		return p, nil, err
	}
	if err := p.startN(ctx, n-1, 4); err != nil {
		return p, nil, err
	}
	return p, leader, nil
}

// runTrials starts candidates on a fresh Lease and makes the leader go away
// trials times (mode), replacing the old leader by a new follower each time.
func (e *env) runTrials(ctx context.Context, kind framework.CandidateKind, mode string, t framework.Timings, candidates, trials int) (*TrialsResult, error) {
	p, leader, err := e.startPool(ctx, kind, "bench-"+mode, t, candidates)
	if p != nil {
		defer p.stopAll()
	}
	if err != nil {
		return &TrialsResult{Kind: string(kind), Mode: mode, Candidates: candidates, Timings: t, Error: err.Error()}, err
	}
	return p.trials(ctx, leader, mode, trials)
}

// trials makes the leader go away n times (mode) and replaces it by a new
// follower each time.
func (p *pool) trials(ctx context.Context, leader *framework.Candidate, mode string, trials int) (*TrialsResult, error) {
	e, t, kind := p.env, p.timings, p.kind
	res := &TrialsResult{Kind: string(kind), Mode: mode, Candidates: p.size(), Timings: t}
	var lw *leaseWatcher
	if mode == modeKill {
		var err error
		if lw, err = e.watchLease(ctx, p.ns, p.lease); err != nil {
			return res, err
		}
		defer lw.stop()
	}

	var lats, overKill, overRenew []time.Duration
	finish := func(err error) (*TrialsResult, error) {
		res.Latency = NewDist(lats, true)
		for k, v := range res.PerHandoff {
			if v == 0 {
				delete(res.PerHandoff, k)
			} else {
				res.PerHandoff[k] = v / float64(max(len(lats), 1))
			}
		}
		if mode == modeKill {
			ok, or := NewDist(overKill, true), NewDist(overRenew, true)
			res.OverKill, res.OverRenew = &ok, &or
		}
		if err != nil {
			res.Error = err.Error()
		}
		return res, err
	}
	settleFor, jitter := 300*time.Millisecond, 700*time.Millisecond
	if mode == modeKill {
		settleFor, jitter = 200*time.Millisecond, 300*time.Millisecond
	}
	for i := 0; i < trials; i++ {
		if err := settle(ctx, settleFor, jitter); err != nil {
			return finish(err)
		}
		if leader.Exited() {
			return finish(fmt.Errorf("trial %d: leader %s exited on its own; log:\n%s", i, leader.Instance, leader.LogTail(20)))
		}
		p.drain()
		var err error
		var before verbCounts
		var followersBefore, apiBefore float64
		if p.countRequests {
			if before, err = e.scrapeLeasesBy(ctx, true); err != nil {
				return finish(err)
			}
			followersBefore, apiBefore = p.followersCPU(leader), e.apiserverCPU()
		}
		releaseErr := make(chan error, 1)
		var replaced chan error
		t0 := time.Now()
		switch mode {
		case modeSIGTERM:
			err = leader.Terminate()
		case modeRelease:
			go func(c *framework.Candidate) { releaseErr <- c.API.Release(ctx) }(leader)
		case modeKill:
			err = leader.Kill()
			// The replacement pod starts while the Lease runs out, as a
			// Deployment would start it.
			replaced = make(chan error, 1)
			go func() { _, err := p.start(ctx); replaced <- err }()
		}
		if err != nil {
			return finish(fmt.Errorf("trial %d: %w", i, err))
		}
		ev, err := p.nextAcquisition(ctx, leader.Identity(), 2*t.LeaseDuration+15*time.Second)
		if err != nil {
			return finish(fmt.Errorf("trial %d (%s %s): %w", i, mode, leader.Instance, err))
		}
		lat := ev.at.Sub(t0)
		lats = append(lats, lat)
		if p.countRequests {
			res.FollowersCPU = append(res.FollowersCPU, p.followersCPU(leader)-followersBefore)
			res.APIServerCPU = append(res.APIServerCPU, e.apiserverCPU()-apiBefore)
		}
		if mode == modeKill {
			overKill = append(overKill, lat-t.LeaseDuration)
			// A renew in flight at the kill may land after it: the last
			// version of the old term is the last one seen before the new
			// leader's.
			if seen, ok := lw.lastBy(leader.Identity(), ev.at); ok {
				overRenew = append(overRenew, ev.at.Sub(seen.Add(t.LeaseDuration)))
			}
		}
		if mode == modeRelease {
			if err := <-releaseErr; err != nil {
				return finish(fmt.Errorf("trial %d: %w", i, err))
			}
		}
		if p.countRequests {
			time.Sleep(time.Second) // let the losers' conflicts land
			after, err := e.scrapeLeasesBy(ctx, true)
			if err != nil {
				return finish(err)
			}
			if res.PerHandoff == nil {
				res.PerHandoff = verbCounts{}
			}
			var writes float64
			for k, v := range after.sub(before) {
				res.PerHandoff[k] += v
				if strings.HasPrefix(k, "PUT ") || strings.HasPrefix(k, "POST ") {
					writes += v
				}
			}
			res.Writes = append(res.Writes, writes)
		}
		// The old leader is replaced by a new process with a new name.
		old := leader
		p.remove(old)
		old.Stop(3 * time.Second)
		if mode == modeKill {
			err = <-replaced
		} else {
			_, err = p.start(ctx)
		}
		if err != nil {
			return finish(fmt.Errorf("trial %d: restart: %w", i, err))
		}
		leader = p.byIdentity(ev.identity)
		if leader == nil {
			return finish(fmt.Errorf("trial %d: new leader %s is not a member", i, ev.identity))
		}
		if err := waitToken(ctx, leader, 10*time.Second); err != nil {
			return finish(fmt.Errorf("trial %d: %w", i, err))
		}
		e.progress("    %s %s trial %d/%d: %s", kind, mode, i+1, trials, fmtMs(float64(lat)/1e6))
	}
	return finish(nil)
}

// followersCPU is the CPU time, in seconds, that the pool's members other
// than leader have spent so far (procRunSeconds).
func (p *pool) followersCPU(leader *framework.Candidate) float64 {
	p.mu.Lock()
	members := slices.Clone(p.members)
	p.mu.Unlock()
	var sum float64
	for _, c := range members {
		if c == leader {
			continue
		}
		if v, err := procRunSeconds(c.Pid()); err == nil {
			sum += v
		} // else: exited
	}
	return sum
}

// waitToken waits until c's /token answers 200 (a sanity check that the
// process that logged the acquisition really serves as leader).
func waitToken(ctx context.Context, c *framework.Candidate, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		r := c.Token(rctx)
		cancel()
		if r.Valid() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s logged an acquisition but /token is %s", c.Instance, r)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
