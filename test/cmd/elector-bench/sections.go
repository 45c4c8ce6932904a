package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

const (
	sc = framework.KindSidecar
	cg = framework.KindClientGo
)

// ---- 4. local API ----

// LocalAPIResult is section 4's data: every run, in the order made.
type LocalAPIResult struct {
	Conns   int          `json:"conns"`
	Rate    float64      `json:"fixedRateRps"`
	Runs    []LoadResult `json:"runs"`
	Targets []string     `json:"targets"`
	// Handlers: pkg/localapi's BenchmarkLocalAPI* (the handlers alone,
	// testing.B with -benchmem), by name: BareHandler, Leader,
	// LeaderNotModified, Token.
	Handlers map[string]HandlerCost `json:"handlerBenchmarks,omitempty"`
	// Pinned: the CPUs of the server being measured and of everything
	// else (--localapi-pin); nil when not pinned.
	Pinned *cpuPlan `json:"pinned,omitempty"`
}

// HandlerCost is one Go benchmark's figures per request.
type HandlerCost struct {
	NsPerOp     float64 `json:"nsPerOp"`
	BytesPerOp  float64 `json:"bytesPerOp"`
	AllocsPerOp float64 `json:"allocsPerOp"`
}

// benchHandlers runs pkg/localapi's handler benchmarks in the repository.
func benchHandlers(ctx context.Context) (map[string]HandlerCost, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^BenchmarkLocalAPI", "-benchmem", "-benchtime", "20000x", "-count", "1", "./pkg/localapi")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go test -bench ./pkg/localapi: %w\n%s", err, out)
	}
	res := parseBenchOutput(out)
	if len(res) == 0 {
		return nil, fmt.Errorf("go test -bench ./pkg/localapi: no BenchmarkLocalAPI results in:\n%s", out)
	}
	return res, nil
}

// parseBenchOutput reads `go test -bench -benchmem` lines of
// BenchmarkLocalAPI<Name>[-N].
func parseBenchOutput(b []byte) map[string]HandlerCost {
	res := map[string]HandlerCost{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkLocalAPI") {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkLocalAPI")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		var c HandlerCost
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				c.NsPerOp = v
			case "B/op":
				c.BytesPerOp = v
			case "allocs/op":
				c.AllocsPerOp = v
			}
		}
		res[name] = c
	}
	return res
}

type loadTarget struct {
	name, addr, path string
	pid              int // the server's process
}

func (e *env) runLocalAPI(ctx context.Context, o *options) (*LocalAPIResult, error) {
	res := &LocalAPIResult{Conns: o.conns, Rate: o.rate}
	e.progress("    go test -bench BenchmarkLocalAPI ./pkg/localapi (allocations per request)")
	h, err := benchHandlers(ctx)
	if err != nil {
		return res, err
	}
	res.Handlers = h
	// The sidecar under load leads its own Lease (so /token answers 200).
	p, _, err := e.startPool(ctx, sc, "bench-localapi", framework.Timings{}, 1)
	if p != nil {
		defer p.stopAll()
	}
	if err != nil {
		return res, err
	}
	sidecar := strings.TrimPrefix(p.members[0].URL, "http://")
	if err := waitToken(ctx, p.members[0], 10*time.Second); err != nil {
		return res, err
	}
	bareAddr, err := framework.FreeAddress()
	if err != nil {
		return res, err
	}
	bare, err := framework.StartProcess(framework.ProcessSpec{Name: "bare-server", Path: e.selfPath, Args: []string{"bare-server", "--addr=" + bareAddr}, LogDir: e.logDir})
	if err != nil {
		return res, err
	}
	defer bare.Stop(2 * time.Second)
	if err := waitDial(bareAddr, 10*time.Second); err != nil {
		return res, err
	}
	targets := []loadTarget{{"bare net/http", bareAddr, "/token", bare.Pid()}, {"/leader", sidecar, "/leader", p.members[0].Pid()}, {"/token", sidecar, "/token", p.members[0].Pid()}}
	for _, t := range targets {
		res.Targets = append(res.Targets, t.name)
	}
	// measure pins t's server alone to its CPU and the other server with
	// the rest, when pinning.
	measure := func(t loadTarget) error { return nil }
	if o.localAPIPin {
		pin, plan, err := pinLocalAPI()
		if pin != nil {
			defer func() {
				if err := pin.restore(); err != nil {
					e.progress("    restoring the CPU affinity: %v", err)
				}
			}()
		}
		if err != nil {
			return res, err
		}
		res.Pinned = &plan
		measure = func(t loadTarget) error {
			for _, other := range targets {
				if other.pid != t.pid {
					if err := pin.pin(other.pid, plan.Rest); err != nil {
						return err
					}
				}
			}
			return pin.pin(t.pid, []int{plan.Server})
		}
	}
	// Interleave targets in each repeat, so drift in the machine's load
	// hits all of them alike.
	for r := 0; r < o.repeats; r++ {
		for _, t := range targets {
			if err := measure(t); err != nil {
				return res, err
			}
			lr, err := runLoad(ctx, t.name, t.addr, t.path, o.conns, 0, o.maxDur)
			if err != nil {
				return res, err
			}
			res.Runs = append(res.Runs, lr)
			e.progress("    %s max: %.0f req/s, p99 %s", t.name, lr.RPS, fmtMs(lr.Latency.P99))
		}
		for _, t := range targets {
			if err := measure(t); err != nil {
				return res, err
			}
			lr, err := runLoad(ctx, t.name, t.addr, t.path, o.conns, o.rate, o.fixedDur)
			if err != nil {
				return res, err
			}
			res.Runs = append(res.Runs, lr)
			e.progress("    %s at %.0f req/s: achieved %.0f, p50 %s, p99 %s", t.name, o.rate, lr.RPS, fmtMs(lr.Latency.P50), fmtMs(lr.Latency.P99))
		}
	}
	return res, nil
}

func waitDial(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dial %s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *LocalAPIResult) spreads(target, mode string, f func(LoadResult) float64) Spread {
	var vs []float64
	for _, run := range r.Runs {
		if run.Target == target && run.Mode == mode {
			vs = append(vs, f(run))
		}
	}
	return NewSpread(vs)
}

func (r *LocalAPIResult) rows() []Row {
	rps := func(l LoadResult) float64 { return l.RPS }
	p50 := func(l LoadResult) float64 { return l.Latency.P50 }
	p99 := func(l LoadResult) float64 { return l.Latency.P99 }
	bare := "bare net/http"
	var rows []Row
	bmax := r.spreads(bare, "max", rps)
	for _, t := range []string{"/leader", "/token"} {
		s := r.spreads(t, "max", rps)
		rows = append(rows, Row{
			Metric: "GET " + t + ": max throughput, req/s (median; min–max)", Ours: fmtRateSpread(s), Baseline: fmtRateSpread(bmax),
			Ratio: ratio(s.Median, bmax.Median),
		})
		goalLocalMax.judge(&rows[len(rows)-1], s.Median, bmax.Median)
		goalLocalMaxRatio.judge(&rows[len(rows)-1], s.Median, bmax.Median)
	}
	bm99 := r.spreads(bare, "max", p99)
	for _, t := range []string{"/leader", "/token"} {
		s := r.spreads(t, "max", p99)
		rows = append(rows, Row{Metric: "GET " + t + ": p99 at max throughput", Ours: fmtMsSpread(s), Baseline: fmtMsSpread(bm99), Ratio: ratio(s.Median, bm99.Median)})
	}
	s99 := func(l LoadResult) float64 {
		if l.FromSchedule == nil {
			return 0
		}
		return l.FromSchedule.P99
	}
	b50, b99, bs99 := r.spreads(bare, "fixed", p50), r.spreads(bare, "fixed", p99), r.spreads(bare, "fixed", s99)
	bach := r.spreads(bare, "fixed", rps)
	for _, t := range []string{"/leader", "/token"} {
		o50, o99, os99, ach := r.spreads(t, "fixed", p50), r.spreads(t, "fixed", p99), r.spreads(t, "fixed", s99), r.spreads(t, "fixed", rps)
		p99 := Row{Metric: fmt.Sprintf("GET %s at %.0f req/s: p99 (send -> response)", t, r.Rate), Ours: fmtMsSpread(o99), Baseline: fmtMsSpread(b99), Ratio: ratio(o99.Median, b99.Median)}
		goalLocalP99.judge(&p99, o99.Median, b99.Median)
		goalLocalP99Ratio.judge(&p99, o99.Median, b99.Median)
		rows = append(rows,
			Row{Metric: fmt.Sprintf("GET %s at %.0f req/s: p50 (send -> response)", t, r.Rate), Ours: fmtMsSpread(o50), Baseline: fmtMsSpread(b50), Ratio: ratio(o50.Median, b50.Median)},
			p99,
			Row{Metric: fmt.Sprintf("GET %s at %.0f req/s: p99 from the scheduled send (incl. load-generator timer lateness)", t, r.Rate), Ours: fmtMsSpread(os99), Baseline: fmtMsSpread(bs99), Ratio: ratio(os99.Median, bs99.Median)},
			Row{Metric: fmt.Sprintf("GET %s at %.0f req/s: achieved rate", t, r.Rate), Ours: fmtRateSpread(ach), Baseline: fmtRateSpread(bach), Ratio: ratio(ach.Median, bach.Median)},
		)
	}
	if b, ok := r.Handlers["BareHandler"]; ok {
		for _, t := range []struct{ path, name string }{{"/leader", "Leader"}, {"/leader (304, If-None-Match)", "LeaderNotModified"}, {"/token", "Token"}} {
			o, ok := r.Handlers[t.name]
			if !ok {
				continue
			}
			rows = append(rows, Row{
				Metric: fmt.Sprintf("GET %s: allocations (bytes) per request, the handler alone (go test -bench BenchmarkLocalAPI%s -benchmem)", t.path, t.name),
				Ours:   fmt.Sprintf("%.0f (%.0f B)", o.AllocsPerOp, o.BytesPerOp), Baseline: fmt.Sprintf("%.0f (%.0f B)", b.AllocsPerOp, b.BytesPerOp),
				Ratio: ratio(o.AllocsPerOp, b.AllocsPerOp),
			})
			goalLocalAllocs.judge(&rows[len(rows)-1], o.AllocsPerOp, b.AllocsPerOp)
		}
	}
	return rows
}

func fmtRateSpread(s Spread) string {
	if s.N == 0 {
		return "n/a"
	}
	if s.N == 1 {
		return fmt.Sprintf("%.0f", s.Median)
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", s.Median, s.Min, s.Max)
}

func fmtMsSpread(s Spread) string {
	if s.N == 0 {
		return "n/a"
	}
	if s.N == 1 {
		return fmtMs(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtMs(s.Median), fmtMs(s.Min), fmtMs(s.Max))
}

// ---- 5. footprint ----

// ProcMem is one process's memory, read from /proc/PID/status.
type ProcMem struct {
	Role       string  `json:"role"`
	AgeSeconds float64 `json:"ageSeconds"`
	RSSBytes   int64   `json:"vmRSSBytes"`
	HWMBytes   int64   `json:"vmHWMBytes"`
	// RSS split: anonymous memory (heap, stacks) and file-backed pages
	// (the mapped binary, shared with other processes running it).
	AnonBytes int64 `json:"rssAnonBytes"`
	FileBytes int64 `json:"rssFileBytes"`
}

// FootprintResult is section 5's data.
type FootprintResult struct {
	WaitSeconds float64              `json:"waitSeconds"`
	Procs       map[string][]ProcMem `json:"procs"`
	BinaryBytes map[string]int64     `json:"binaryBytes"`
	BuildFlags  string               `json:"buildFlags"`
	pools       map[framework.CandidateKind]*pool
	leaders     map[framework.CandidateKind]*framework.Candidate
	started     time.Time
	done        chan struct{} // closed once read
	readErr     error
}

// beginFootprint starts a leader and a follower of each kind on their own
// Leases; finishFootprint reads their memory once they are old enough.
func (e *env) beginFootprint(ctx context.Context, wait time.Duration) (*FootprintResult, error) {
	res := &FootprintResult{WaitSeconds: wait.Seconds(), Procs: map[string][]ProcMem{}, BinaryBytes: map[string]int64{},
		BuildFlags: "CGO_ENABLED=0 go build -trimpath -ldflags '-s -w'", pools: map[framework.CandidateKind]*pool{}, leaders: map[framework.CandidateKind]*framework.Candidate{}}
	for _, kind := range e.kinds() {
		if st, err := os.Stat(e.bins[kind]); err == nil {
			res.BinaryBytes[string(kind)] = st.Size()
		}
		p, leader, err := e.startPool(ctx, kind, "bench-footprint", framework.Timings{}, 2)
		if p != nil {
			res.pools[kind] = p
		}
		if err != nil {
			res.stop()
			return res, err
		}
		res.leaders[kind] = leader
	}
	res.started = time.Now()
	res.done = make(chan struct{})
	go func() {
		defer close(res.done)
		select {
		case <-ctx.Done():
			res.readErr = ctx.Err()
		case <-time.After(wait):
			res.readErr = res.read()
		}
	}()
	return res, nil
}

func (r *FootprintResult) stop() {
	for _, p := range r.pools {
		p.stopAll()
	}
}

// read records every process's memory (called once, when they are old enough).
func (r *FootprintResult) read() error {
	for kind, p := range r.pools {
		for _, c := range p.members {
			role := "follower"
			if c == r.leaders[kind] {
				role = "leader"
			}
			m, err := procStatus(c.Pid())
			if err != nil {
				return err
			}
			r.Procs[string(kind)] = append(r.Procs[string(kind)], ProcMem{Role: role, AgeSeconds: time.Since(r.started).Seconds(),
				RSSBytes: m["VmRSS"], HWMBytes: m["VmHWM"], AnonBytes: m["RssAnon"], FileBytes: m["RssFile"]})
		}
	}
	return nil
}

// finish waits for the reading taken at the age asked for (while other
// sections ran), then stops the processes.
func (r *FootprintResult) finish(ctx context.Context, e *env) error {
	defer r.stop()
	select {
	case <-r.done:
	default:
		e.progress("    footprint: waiting until the processes are %v old", time.Duration(r.WaitSeconds*float64(time.Second)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.done:
		}
	}
	return r.readErr
}

// procStatus reads the kB fields of /proc/PID/status, in bytes.
func procStatus(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if !ok || len(fs) != 2 || fs[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		out[k] = n << 10
	}
	return out, sc.Err()
}

func (r *FootprintResult) mem(kind framework.CandidateKind, role string) (ProcMem, bool) {
	for _, p := range r.Procs[string(kind)] {
		if p.Role == role {
			return p, true
		}
	}
	return ProcMem{}, false
}

func (r *FootprintResult) rows() []Row {
	var rows []Row
	for _, role := range []string{"leader", "follower"} {
		o, ok := r.mem(sc, role)
		if !ok {
			continue
		}
		b, okb := r.mem(cg, role)
		base := "n/a"
		if okb {
			base = fmtProcMem(b)
		}
		rows = append(rows, Row{
			Metric:   fmt.Sprintf("RSS of an idle %s after %.0f s (VmRSS = anonymous + file-backed; peak VmHWM)", role, o.AgeSeconds),
			Ours:     fmtProcMem(o),
			Baseline: base,
			Ratio:    ratio(float64(o.RSSBytes), float64(b.RSSBytes)),
		})
		goalFootprintRSS.judge(&rows[len(rows)-1], float64(o.RSSBytes), float64(b.RSSBytes))
	}
	base := "n/a"
	if n, ok := r.BinaryBytes[string(cg)]; ok {
		base = fmtMiB(float64(n))
	}
	bin := Row{
		Metric: "binary size (static, -trimpath -s -w)", Ours: fmtMiB(float64(r.BinaryBytes[string(sc)])), Baseline: base,
		Ratio: ratio(float64(r.BinaryBytes[string(sc)]), float64(r.BinaryBytes[string(cg)])),
	}
	if n, ok := r.BinaryBytes[string(sc)]; ok {
		goalFootprintBinary.judge(&bin, float64(n), float64(r.BinaryBytes[string(cg)]))
	}
	return append(rows, bin)
}

func fmtProcMem(m ProcMem) string {
	return fmt.Sprintf("%s = %.1f + %.1f (peak %s)", fmtMiB(float64(m.RSSBytes)), float64(m.AnonBytes)/(1<<20), float64(m.FileBytes)/(1<<20), fmtMiB(float64(m.HWMBytes)))
}

// ---- 6. scale ----

// ScalePoint is one (kind, candidates) run.
type ScalePoint struct {
	Kind         string        `json:"kind"`
	Candidates   int           `json:"candidates"`
	StartSeconds float64       `json:"startSeconds"`
	Steady       *WindowResult `json:"steadyState"`
	Handoffs     *TrialsResult `json:"handoffs"`
	// Releases: ours only, POST /release handoffs after the SIGTERM ones.
	Releases *TrialsResult `json:"releases,omitempty"`
	// Limit: the bench's probe of one Lease write and one watch delivery,
	// with this pool running (ours only: the same apiserver as its
	// handoffs, just before them).
	Limit    *LimitResult `json:"limit,omitempty"`
	TotalRSS int64        `json:"totalRSSBytes"`
	Error    string       `json:"error,omitempty"`
}

func (e *env) runScale(ctx context.Context, o *options) ([]*ScalePoint, error) {
	var out []*ScalePoint
	t := framework.Timings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, ClockSkewMargin: 500 * time.Millisecond}
	cw, err := e.watchAllLeases(ctx)
	if err != nil {
		return nil, err
	}
	defer cw.stop()
	idleWatches := e.baseWatches + 1 // the apiserver's own and the bench's
	for _, n := range o.scaleSizes {
		for _, kind := range e.kinds() {
			pt := &ScalePoint{Kind: string(kind), Candidates: n}
			out = append(out, pt)
			err := func() error {
				if err := e.waitWatchesGone(ctx, idleWatches); err != nil {
					return err
				}
				start := time.Now()
				e.progress("    %s × %d: starting", kind, n)
				p, leader, err := e.startPool(ctx, kind, "bench-scale", t, n)
				if p != nil {
					defer p.stopAll()
				}
				if err != nil {
					return err
				}
				pt.StartSeconds = time.Since(start).Seconds()
				// Let the start-up burst (lists, watches, first GETs) pass.
				time.Sleep(5 * time.Second)
				for _, c := range p.members {
					if m, err := procStatus(c.Pid()); err == nil {
						pt.TotalRSS += m["VmRSS"]
					}
				}
				e.progress("    %s × %d: steady-state window %v", kind, n, o.scaleWindow)
				w, err := e.measureWindow(ctx, cw, nil, nil, p.ns, p.lease, o.scaleWindow, 10*time.Second, cw.lastWrite(p.ns, p.lease))
				if err != nil {
					return err
				}
				pt.Steady = w
				if kind == sc {
					e.progress("    %s × %d: probing one write + one watch delivery", kind, n)
					if pt.Limit, err = e.probeLimit(ctx, p.ns, limitProbes); err != nil {
						return err
					}
				}
				p.countRequests = true
				tr, err := p.trials(ctx, leader, modeSIGTERM, o.scaleTrials)
				pt.Handoffs = tr
				if err != nil || kind != sc {
					return err
				}
				leader, err = p.leader(ctx, 10*time.Second)
				if err != nil {
					return err
				}
				p.countRequests = false
				pt.Releases, err = p.trials(ctx, leader, modeRelease, o.scaleTrials)
				return err
			}()
			if err != nil {
				pt.Error = err.Error()
				return out, fmt.Errorf("%s × %d: %w", kind, n, err)
			}
		}
	}
	return out, nil
}

// handoffCPURow is the CPU time other processes spent during a handoff
// (median, from the trigger to the acquisition): the other candidates
// (all together, and per candidate) and the kube-apiserver.
func handoffCPURow(n int, o, b *TrialsResult) Row {
	cell := func(r *TrialsResult) string {
		f, a := NewSpread(r.FollowersCPU), NewSpread(r.APIServerCPU)
		if f.N == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%s (%.0f µs each); apiserver %s", fmtMs(f.Median*1e3), f.Median*1e6/float64(max(n-1, 1)), fmtMs(a.Median*1e3))
	}
	return Row{Metric: fmt.Sprintf("%d candidates: CPU time during a SIGTERM handoff, trigger to acquisition, median: the other candidates; the kube-apiserver", n),
		Ours: cell(o), Baseline: cell(b), Ratio: ratio(NewSpread(o.FollowersCPU).Median, NewSpread(b.FollowersCPU).Median)}
}

// scaleGoals are the goals table's, by candidates: SIGTERM handoff p50 and
// p99 (ms) and the median Lease writes per handoff (nil: none).
var scaleGoals = map[int]struct{ p50, p99, writes *Goal }{
	3:   {p50: goalScaleP50At3},
	10:  {p50: goalScaleP50At10},
	100: {p50: goalScaleP50At100, p99: goalScaleP99At100, writes: goalScaleWritesAt100},
}

func scaleRows(points []*ScalePoint) []Row {
	find := func(kind framework.CandidateKind, n int) *ScalePoint {
		for _, p := range points {
			if p.Kind == string(kind) && p.Candidates == n {
				return p
			}
		}
		return nil
	}
	var sizes []int
	for _, p := range points {
		if p.Kind == string(sc) {
			sizes = append(sizes, p.Candidates)
		}
	}
	var rows []Row
	for _, n := range sizes {
		o, b := find(sc, n), find(cg, n)
		noBase := b == nil || b.Steady == nil || b.Handoffs == nil
		if noBase {
			nan := math.NaN()
			b = &ScalePoint{Steady: &WindowResult{}, Handoffs: &TrialsResult{Latency: Dist{P50: nan, P99: nan}}}
		}
		if o == nil || o.Steady == nil || o.Handoffs == nil {
			continue
		}
		first := len(rows)
		ol, bl := o.Handoffs.Latency, b.Handoffs.Latency
		ow, bw := NewSpread(o.Handoffs.Writes), NewSpread(b.Handoffs.Writes)
		g := scaleGoals[n]
		p50 := Row{Metric: fmt.Sprintf("%d candidates: handoff p50 (SIGTERM, n=%d)", n, ol.N), Ours: fmtMs(ol.P50), Baseline: fmtMs(bl.P50), Ratio: ratio(ol.P50, bl.P50)}
		p99 := Row{Metric: fmt.Sprintf("%d candidates: handoff p99 (max of n=%d)", n, ol.N), Ours: fmtMs(ol.P99), Baseline: fmtMs(bl.P99), Ratio: ratio(ol.P99, bl.P99)}
		writes := Row{Metric: fmt.Sprintf("%d candidates: Lease writes per handoff, median (min–max): PUT and POST, any status, incl. the release and the apiserver's own", n),
			Ours: fmtRateSpread(ow), Baseline: fmtRateSpread(bw), Ratio: ratio(ow.Median, bw.Median)}
		if g.p50 != nil && ol.N > 0 {
			g.p50.judge(&p50, ol.P50, bl.P50)
		}
		if g.p99 != nil && ol.N > 0 {
			g.p99.judge(&p99, ol.P99, bl.P99)
		}
		if g.writes != nil && ow.N > 0 {
			g.writes.judge(&writes, ow.Median, bw.Median)
		}
		if g50 := goalScaleBelowClientGo; !noBase && ol.N > 0 {
			g50.judge(&p50, ol.P50, bl.P50)
			g50.judge(&p99, ol.P99, bl.P99)
		}
		rows = append(rows, p50, p99)
		rows = append(rows, limitRows(n, o)...)
		rows = append(rows, writes,
			Row{Metric: fmt.Sprintf("%d candidates: Lease requests/s, all candidates, steady state (sub-window min–max)", n),
				Ours: fmtRate(o.Steady), Baseline: fmtRate(b.Steady), Ratio: ratio(o.Steady.PerSecond.total(), b.Steady.PerSecond.total())},
			Row{Metric: fmt.Sprintf("%d candidates: by verb, req/s", n), Ours: o.Steady.PerSecond.String(), Baseline: b.Steady.PerSecond.String()},
			Row{Metric: fmt.Sprintf("%d candidates: Lease requests per handoff, by verb and code", n), Ours: o.Handoffs.PerHandoff.String(), Baseline: b.Handoffs.PerHandoff.String(),
				Ratio: ratio(o.Handoffs.PerHandoff.total(), b.Handoffs.PerHandoff.total())},
			handoffCPURow(n, o.Handoffs, b.Handoffs),
			Row{Metric: fmt.Sprintf("%d candidates: total RSS", n), Ours: fmtMiB(float64(o.TotalRSS)), Baseline: fmtMiB(float64(b.TotalRSS)), Ratio: ratio(float64(o.TotalRSS), float64(b.TotalRSS))},
		)
		if noBase {
			for i := first; i < len(rows); i++ {
				rows[i].Baseline, rows[i].Ratio = "n/a", "n/a"
			}
		}
	}
	return rows
}

func fmtRate(w *WindowResult) string {
	s := w.SubWindowRates
	if s.N <= 1 {
		return fmt.Sprintf("%s/s", fmtNum(w.PerSecond.total()))
	}
	return fmt.Sprintf("%s (%s–%s)", fmtNum(w.PerSecond.total()), fmtNum(s.Min), fmtNum(s.Max))
}

// limitProbes is how many probe writes each scale point's limit is made of.
const limitProbes = 40

// limitRows shows a scale point's handoffs against the limit measured with
// its pool running: the probe's figures, then each handoff p50 as a
// multiple of one write + one watch delivery (goalScaleLimit) and of two
// writes + one watch delivery (what the successor's own write adds).
func limitRows(n int, o *ScalePoint) []Row {
	if o.Limit == nil || o.Limit.WriteWatch.N == 0 {
		return nil
	}
	lim := o.Limit
	rows := []Row{
		{Metric: fmt.Sprintf("%d candidates: limit probe, one Lease write p50 / p99 (n=%d)", n, lim.Write.N), Ours: fmtMs(lim.Write.P50) + " / " + fmtMs(lim.Write.P99), Baseline: "n/a"},
		{Metric: fmt.Sprintf("%d candidates: limit probe, one write + one watch delivery p50 / p99", n), Ours: fmtMs(lim.WriteWatch.P50) + " / " + fmtMs(lim.WriteWatch.P99), Baseline: "n/a"},
	}
	for _, h := range []struct {
		how string
		r   *TrialsResult
	}{{"SIGTERM", o.Handoffs}, {"POST /release", o.Releases}} {
		if h.r == nil || h.r.Latency.N == 0 {
			continue
		}
		p50 := h.r.Latency.P50
		row := Row{Metric: fmt.Sprintf("%d candidates: %s handoff p50 (n=%d) ÷ (one write + one watch delivery); ÷ (two writes + one watch delivery)", n, h.how, h.r.Latency.N),
			Ours: fmt.Sprintf("%s: %.2f×; %.2f×", fmtMs(p50), p50/lim.WriteWatch.P50, p50/lim.twoWritesOneWatch()), Baseline: "n/a"}
		goalScaleLimit.judge(&row, p50, lim.WriteWatch.P50)
		rows = append(rows, row)
	}
	return rows
}
