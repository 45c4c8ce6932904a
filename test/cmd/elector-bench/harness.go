package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Markers the candidates log right after their acquiring write succeeded:
// elector-sidecar's "became leader" (slog), client-go's own klog line in
// LeaderElector.acquire. Both are printed at the same point (the write
// returned OK), before the process serves /token, so neither side pays for
// its local API here. The client-go candidate additionally GETs the Lease
// before /token turns 200; that GET is not counted against it.
var acquiredMarker = map[framework.CandidateKind]string{
	framework.KindSidecar:  `msg="became leader"`,
	framework.KindClientGo: `Successfully acquired lease`,
}

// env is what every section shares.
type env struct {
	cp       *framework.ControlPlane
	bins     map[framework.CandidateKind]string
	logDir   string
	verbose  bool
	seq      atomic.Int64
	selfPath string
	// skipBaseline runs elector-sidecar only.
	skipBaseline bool
	// baseWatches is the number of Lease watches open on a fresh control
	// plane (the apiserver's own informer).
	baseWatches float64
}

// kinds returns the candidate kinds to measure: ours first.
func (e *env) kinds() []framework.CandidateKind {
	if e.skipBaseline {
		return []framework.CandidateKind{framework.KindSidecar}
	}
	return []framework.CandidateKind{framework.KindSidecar, framework.KindClientGo}
}

// acqEvent is one "acquired" log line, stamped when the bench read it.
type acqEvent struct {
	identity string
	at       time.Time
}

// pool is a set of candidates of one kind on one Lease.
type pool struct {
	env     *env
	kind    framework.CandidateKind
	ns      string
	lease   string
	timings framework.Timings
	prefix  string
	// kubeconfig overrides the control plane's (e.g. the counting proxy's).
	kubeconfig string
	// countRequests: scrape the apiserver's Lease request counts around
	// every trial.
	countRequests bool
	// expected, if > 0, is passed to our sidecars as --expected-candidates
	// (as the chart passes workload.replicas).
	expected int
	// extraArgs are added to our sidecars' arguments.
	extraArgs []string

	events chan acqEvent

	mu      sync.Mutex
	members []*framework.Candidate
}

func (e *env) newPool(ctx context.Context, kind framework.CandidateKind, lease string, t framework.Timings) (*pool, error) {
	ns, err := e.cp.CreateNamespace(ctx, "bench")
	if err != nil {
		return nil, err
	}
	short := "sc"
	if kind == framework.KindClientGo {
		short = "cg"
	}
	return &pool{env: e, kind: kind, ns: ns, lease: lease, timings: t, prefix: short, events: make(chan acqEvent, 4096)}, nil
}

// spec returns the candidate spec for a fresh identity. Every (re)start gets
// a new identity, as a Deployment's replacement pod gets a new name; a
// client-go candidate restarted with its old identity would otherwise resume
// the dead holder's term at once.
func (p *pool) spec() framework.CandidateSpec {
	id := fmt.Sprintf("%s-%d", p.prefix, p.env.seq.Add(1))
	s := framework.CandidateSpec{
		Kind:       p.kind,
		Binary:     p.env.bins[p.kind],
		Identity:   id,
		LeaseName:  p.lease,
		Namespace:  p.ns,
		Kubeconfig: cmp.Or(p.kubeconfig, p.env.cp.Kubeconfig),
		Timings:    p.timings,
		LogDir:     p.env.logDir,
		// Scale runs start many processes at once on 2 cores.
		ReadyTimeout: 90 * time.Second,
	}
	if p.kind == framework.KindSidecar {
		// The framework turns debug logging on for tests; benchmark what ships.
		// The SIGTERM handoffs are measured as the chart runs a native
		// sidecar (the app has exited first): --shutdown-handoff=immediate.
		s.ExtraArgs = []string{"--log-level=info", "--shutdown-handoff=immediate"}
		if p.expected > 0 {
			s.ExtraArgs = append(s.ExtraArgs, fmt.Sprintf("--expected-candidates=%d", p.expected))
		}
		s.ExtraArgs = append(s.ExtraArgs, p.extraArgs...)
	}
	marker := acquiredMarker[p.kind]
	s.Output = framework.NewLineWriter(func(line string) {
		if strings.Contains(line, marker) {
			now := time.Now()
			select {
			case p.events <- acqEvent{identity: id, at: now}:
			default:
			}
		}
		if p.env.verbose {
			fmt.Fprintf(os.Stderr, "    [%s] %s\n", id, line)
		}
	})
	return s
}

// start starts one candidate and waits until it serves /healthz (and, for the
// sidecar, /readyz: it has observed the Lease).
func (p *pool) start(ctx context.Context) (*framework.Candidate, error) {
	c, err := framework.StartCandidate(ctx, p.spec())
	if err != nil {
		return nil, err
	}
	if p.kind == framework.KindSidecar {
		if err := waitStatus(ctx, c, "/readyz", 60*time.Second); err != nil {
			c.Stop(2 * time.Second)
			return nil, err
		}
	}
	p.mu.Lock()
	p.members = append(p.members, c)
	p.mu.Unlock()
	return c, nil
}

// startN starts n candidates, at most par at a time.
func (p *pool) startN(ctx context.Context, n, par int) error {
	sem := make(chan struct{}, par)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := p.start(ctx); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func waitStatus(ctx context.Context, c *framework.Candidate, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		code, err := c.API.Status(rctx, path)
		cancel()
		if err == nil && code == http.StatusOK {
			return nil
		}
		if c.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not OK within %v (last %d %v); log:\n%s", c.Instance, path, timeout, code, err, c.LogTail(15))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// remove drops c from the pool (it has been or will be stopped).
func (p *pool) remove(c *framework.Candidate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, m := range p.members {
		if m == c {
			p.members = append(p.members[:i], p.members[i+1:]...)
			return
		}
	}
}

func (p *pool) byIdentity(id string) *framework.Candidate {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.members {
		if m.Identity() == id {
			return m
		}
	}
	return nil
}

func (p *pool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.members)
}

// drain forgets acquisition events read so far.
func (p *pool) drain() {
	for {
		select {
		case <-p.events:
		default:
			return
		}
	}
}

// nextAcquisition waits for an acquisition by any identity except not.
func (p *pool) nextAcquisition(ctx context.Context, not string, timeout time.Duration) (acqEvent, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ev := <-p.events:
			if ev.identity != not {
				return ev, nil
			}
		case <-t.C:
			return acqEvent{}, fmt.Errorf("%s: no new leader within %v", p.lease, timeout)
		case <-ctx.Done():
			return acqEvent{}, ctx.Err()
		}
	}
}

// leader waits for the first acquisition (after a fresh start) and returns
// the leading candidate.
func (p *pool) leader(ctx context.Context, timeout time.Duration) (*framework.Candidate, error) {
	l, err := p.env.cp.GetLease(ctx, p.ns, p.lease)
	if err == nil {
		if h, _ := framework.LeaseHolder(l); h != "" {
			if c := p.byIdentity(h); c != nil {
				return c, nil
			}
		}
	}
	ev, err := p.nextAcquisition(ctx, "", timeout)
	if err != nil {
		return nil, err
	}
	c := p.byIdentity(ev.identity)
	if c == nil {
		return nil, fmt.Errorf("leader %s is not a running member", ev.identity)
	}
	return c, nil
}

// stopAll stops every member, in parallel.
func (p *pool) stopAll() {
	p.mu.Lock()
	ms := p.members
	p.members = nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Stop(3 * time.Second)
		}()
	}
	wg.Wait()
}

// settle sleeps d plus up to jitter, so trials do not lock onto the phase of
// a polling candidate's retry timer.
func settle(ctx context.Context, d, jitter time.Duration) error {
	if jitter > 0 {
		d += time.Duration(rand.Int64N(int64(jitter)))
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// buildBinaries builds elector-sidecar and the client-go candidate the way
// the image does (static, stripped, trimmed), so the footprint is the
// shipped one and both sides get the same flags.
func buildBinaries(dir string) (map[framework.CandidateKind]string, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	out := map[framework.CandidateKind]string{}
	for kind, pkg := range map[framework.CandidateKind]string{
		framework.KindSidecar:  framework.SidecarPackage,
		framework.KindClientGo: framework.CandidatePackage,
	} {
		if ev := framework.BinaryOverrideEnv[pkg]; os.Getenv(ev) != "" {
			out[kind] = os.Getenv(ev)
			continue
		}
		bin := filepath.Join(dir, filepath.Base(pkg))
		cmd := framework.GoBuildCommand(root, pkg, "-trimpath", "-ldflags", "-s -w", "-o", bin)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
		out[kind] = bin
	}
	return out, nil
}
