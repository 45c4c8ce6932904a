package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The shards section's member processes: starting, observing, stopping them, and waiting on the set.

// steadyWatches returns the open Lease watches once the count has held for
// a second (after the apiserver's restart its own informers and the bench's
// come up over a moment).
func (s *shardsRun) steadyWatches(ctx context.Context) (float64, error) {
	deadline := time.Now().Add(20 * time.Second)
	var last float64
	since := time.Now()
	for first := true; ; first = false {
		n, err := s.env.leaseWatches(ctx)
		if err != nil {
			return 0, err
		}
		if first || n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= time.Second {
			return n, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the open Lease watches did not hold still for a second within 20s (last %v)", n)
		}
		if err := settle(ctx, 200*time.Millisecond, 0); err != nil {
			return 0, err
		}
	}
}

// spec is a member's command line: a fresh identity, default timings.
func (s *shardsRun) spec() framework.CandidateSpec {
	short := "sc"
	extra := []string{"--shards=" + strconv.Itoa(s.so.shards)}
	if s.kind == cg {
		short = "cg"
		// client-go's default limit (5 requests/s) cannot keep 1,000 Leases.
		extra = append(extra, "--kube-api-qps=-1")
	} else {
		// What ships (the framework turns debug logging on for tests); the
		// SIGTERM handoff as the chart runs a native sidecar.
		extra = append(extra, "--log-level=info", "--shutdown-handoff=immediate")
	}
	return framework.CandidateSpec{
		Kind: s.kind, Binary: s.env.bins[s.kind], Identity: fmt.Sprintf("%s-shard-%d", short, s.env.seq.Add(1)),
		LeaseName: shardsSetName, Namespace: s.ns, Kubeconfig: s.env.cp.Kubeconfig, Timings: s.t,
		LogDir: s.env.logDir, ExtraArgs: extra, ReadyTimeout: 90 * time.Second,
	}
}

// startMember starts one member and its observer.
func (s *shardsRun) startMember(ctx context.Context) (*framework.Candidate, error) {
	c, err := framework.StartCandidate(ctx, s.spec())
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithCancel(s.obsCtx)
	s.mu.Lock()
	s.live = append(s.live, c)
	if s.observe == nil {
		s.observe = map[string]context.CancelFunc{}
	}
	s.observe[c.Identity()] = cancel
	s.mu.Unlock()
	go observeShards(octx, c.Identity(), c.URL, s.served)
	return c, nil
}

func (s *shardsRun) members() []*framework.Candidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*framework.Candidate(nil), s.live...)
}

func (s *shardsRun) identities() []string {
	var ids []string
	for _, c := range s.members() {
		ids = append(ids, c.Identity())
	}
	return ids
}

func (s *shardsRun) remove(c *framework.Candidate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range s.live {
		if m == c {
			s.live = append(s.live[:i], s.live[i+1:]...)
			break
		}
	}
}

// forget ends c's observer and drops what it served (c has exited).
func (s *shardsRun) forget(c *framework.Candidate) {
	s.mu.Lock()
	cancel := s.observe[c.Identity()]
	delete(s.observe, c.Identity())
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.served.forget(c.Identity())
}

// stopAll stops every member (SIGTERM: both kinds release their Leases).
func (s *shardsRun) stopAll() {
	var wg sync.WaitGroup
	for _, c := range s.members() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Stop(60 * time.Second)
		}()
	}
	wg.Wait()
	s.mu.Lock()
	s.live = nil
	s.mu.Unlock()
}

// ready reports whether every shard Lease is held by a live member and,
// for ours, every shard is served by exactly one member at a fair share.
// client-go's are not waited for to serve: on a loaded apiserver its
// electors lose and take terms again and again (each reads its token after
// acquiring), so that wait may never end; the rows show how many it served.
func (s *shardsRun) ready() bool {
	live := s.identities()
	cur, _ := s.leases.current()
	own := holdings(cur)
	held := 0
	for _, id := range live {
		held += own[id]
	}
	if held != s.so.shards {
		return false
	}
	if s.kind == cg {
		return true
	}
	counts, distinct, _ := s.served.counts()
	total := 0
	for _, id := range live {
		total += counts[id]
	}
	return distinct == s.so.shards && total == s.so.shards && fairShare(own, live, s.so.shards) && fairShare(counts, live, s.so.shards)
}

// waitUntil waits for cond, re-checked on every Lease change and every
// member's answer, until timeout.
func (s *shardsRun) waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		_, lc := s.leases.current()
		_, _, sc := s.served.counts()
		if cond() {
			return true
		}
		select {
		case <-lc:
		case <-sc:
		case <-deadline.C:
			return cond()
		case <-ctx.Done():
			return false
		}
	}
}

// start starts the members, all at once, and waits until ready.
func (s *shardsRun) start(ctx context.Context) error {
	t0 := time.Now()
	s.progress("starting %d members of a set of %d shards", s.so.members, s.so.shards)
	var wg sync.WaitGroup
	errs := make([]error, s.so.members)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.startMember(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !s.waitUntil(ctx, 5*time.Minute, s.ready) {
		return fmt.Errorf("after %v not every shard held%s: %s", time.Since(t0).Round(time.Second), map[bool]string{true: " and served once at a fair share"}[s.kind == sc], s.describe())
	}
	s.r.StartSeconds = time.Since(t0).Seconds()
	s.progress("ready after %.1f s: %s", s.r.StartSeconds, s.describe())
	return nil
}

// describe is the state for progress lines and errors.
func (s *shardsRun) describe() string {
	cur, _ := s.leases.current()
	own := holdings(cur)
	counts, distinct, _ := s.served.counts()
	var parts []string
	for _, id := range s.identities() {
		parts = append(parts, fmt.Sprintf("%s holds %d, serves %d", id, own[id], counts[id]))
	}
	out := fmt.Sprintf("%s; %d distinct shards served", strings.Join(parts, ", "), distinct)
	if errs := s.served.lastErrors(); errs != "" {
		out += "; GET /shards errors: " + errs
	}
	return out
}
