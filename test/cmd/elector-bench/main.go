// Command elector-bench compares elector-sidecar with client-go's
// leaderelection (the test/cmd/clientgo-candidate program: a plain
// LeaderElector on a LeaseLock with ReleaseOnCancel) on one local
// kube-apiserver, in one run, and prints a table: ours, the baseline, the
// ratio, the goal and whether it was met (the goals table, goals.go).
//
// Sections (select with --only, comma-separated):
//
//	handoff    graceful handoff: leader SIGTERMed (both; ours with --shutdown-handoff=immediate, as a native sidecar runs) or POST /release (ours) -> next leader
//	failover   crash failover: leader SIGKILLed -> next leader, minus leaseDuration
//	api        apiserver Lease requests by verb: an idle follower, a leader
//	localapi   /leader and /token throughput and latency vs a bare net/http handler
//	footprint  RSS after a minute, binary size
//	scale      3, 10 and 100 candidates on one Lease: handoff latency, writes, requests/s
//	fence      fenced write throughput and p99 through the PostgreSQL and Redis fences
//	           vs the same writes unfenced (throwaway servers, test/framework/dbserver)
//	push       Lease write -> app: GET /watch and the long-poll vs polling /leader, at the
//	           new leader and a follower; then 1,000 /watch streams on one sidecar
//	leases     1,000 Leases x 3 candidates on one apiserver (simulated: all candidates
//	           of a kind in one `elector-bench lease-host` process): apiserver
//	           requests/s by verb, CPU and RSS, handoff latency
//	idleconns  /token latency and throughput at a fixed rate with 1,000 idle
//	           connections open to the sidecar vs none; silent ones cut at ReadHeaderTimeout
//	shards     one set of 1,000 shard Leases, 3 members (--shards=N; client-go: one
//	           elector per shard Lease per process): steady-state requests, apiserver
//	           CPU/RSS, watches; a 4th member joins; SIGTERM and SIGKILL a member
//
// Results go to --out (Markdown, JSON and a PNG CDF plot of handoff latency).
// `elector-bench bare-server --addr=HOST:PORT` is the baseline HTTP server
// and `elector-bench lease-host ...` the leases section's candidate host
// (both started by the bench itself).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// allSections are the section keys in their numbered order, the order of
// the report (they run in another order, to share time).
var allSections = []string{"handoff", "failover", "api", "localapi", "footprint", "scale", "fence", "push", "leases", "idleconns", "objfence", "shards"}

type options struct {
	only           map[string]bool
	trials         int
	failoverTrials int
	candidates     int
	window         time.Duration
	footprintWait  time.Duration
	conns          int
	rate           float64
	maxDur         time.Duration
	fixedDur       time.Duration
	repeats        int
	localAPIPin    bool
	scaleSizes     []int
	scaleTrials    int
	scaleWindow    time.Duration
	fenceWriters   int
	fenceDuration  time.Duration
	pushRounds     int
	pushWatchers   int
	pushFanRounds  int
	out            string
	png            string
	keepLogs       bool
	verbose        bool
	quick          bool
	skipBaseline   bool
	// leases section
	leases           int
	leasesCandidates int
	leasesWindow     time.Duration
	leasesSettle     time.Duration
	leasesTrials     int
	// idleconns section
	idleConns int
	idleRate  float64
	// shards section (shards.go)
	shards shardsOptions
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("elector-bench", flag.ContinueOnError)
	only := fs.String("only", strings.Join(allSections, ","), "sections to run: "+strings.Join(allSections, ","))
	fs.IntVar(&o.trials, "trials", 30, "trials per series in the handoff section (and failover unless --failover-trials)")
	fs.IntVar(&o.failoverTrials, "failover-trials", 0, "trials per series in the failover section (0: --trials)")
	fs.IntVar(&o.candidates, "candidates", 3, "candidates per Lease in the handoff and failover sections")
	fs.DurationVar(&o.window, "window", 30*time.Second, "measurement window per client in the api section")
	fs.DurationVar(&o.footprintWait, "footprint-wait", time.Minute, "age of the processes when their RSS is read")
	fs.IntVar(&o.conns, "conns", 50, "concurrent keep-alive connections in the localapi section")
	fs.Float64Var(&o.rate, "rate", 5000, "fixed request rate (req/s) in the localapi section")
	fs.DurationVar(&o.maxDur, "max-duration", 3*time.Second, "length of one max-throughput run in the localapi section")
	fs.DurationVar(&o.fixedDur, "fixed-duration", 4*time.Second, "length of one fixed-rate run in the localapi section")
	fs.IntVar(&o.repeats, "repeats", 5, "repeats of each run in the localapi, fence and idleconns sections (interleaved; their tables show the median and min–max)")
	fs.BoolVar(&o.localAPIPin, "localapi-pin", false, "in the localapi section, pin the server being measured alone to one CPU and the load generator, the control plane and the other server to the others (needs 2 or more CPUs; off by default: on the shared 2-core machine it did not lower the p99 or its spread)")
	sizes := fs.String("scale-sizes", "3,10,100", "candidate counts in the scale section (3 and 100 carry goals)")
	fs.IntVar(&o.scaleTrials, "scale-trials", 10, "handoff trials per size and kind in the scale section")
	fs.DurationVar(&o.scaleWindow, "scale-window", 20*time.Second, "steady-state window per size and kind in the scale section")
	fs.IntVar(&o.fenceWriters, "fence-writers", 8, "concurrent writers in the fence section")
	fs.DurationVar(&o.fenceDuration, "fence-duration", 5*time.Second, "length of one run (fenced or plain, per database) in the fence section; --repeats runs of each, interleaved")
	fs.IntVar(&o.pushRounds, "push-rounds", 25, "SIGTERM handoffs in the push section's latency part")
	fs.IntVar(&o.pushWatchers, "push-watchers", 1000, "concurrent /watch streams on one sidecar in the push section (the sidecar serves at most 1024 streams and long-polls)")
	fs.IntVar(&o.pushFanRounds, "push-fanout-rounds", 5, "leader changes pushed to the push section's --push-watchers streams")
	fs.IntVar(&o.leases, "leases", 1000, "Leases (candidate groups) in the leases section")
	fs.IntVar(&o.leasesCandidates, "leases-candidates", 3, "candidates per Lease in the leases section")
	fs.DurationVar(&o.leasesWindow, "leases-window", 30*time.Second, "steady-state window per kind in the leases section")
	fs.DurationVar(&o.leasesSettle, "leases-settle", 15*time.Second, "wait after every Lease is held, before the leases section's window")
	fs.IntVar(&o.leasesTrials, "leases-trials", 20, "handoffs per kind in the leases section (each on another Lease)")
	fs.IntVar(&o.idleConns, "idle-conns", 1000, "idle connections opened to the sidecar in the idleconns section")
	fs.Float64Var(&o.idleRate, "idle-rate", 1000, "fixed /token request rate (req/s) of the idleconns section's client")
	o.shards.register(fs)
	fs.StringVar(&o.out, "out", "results", "directory for the Markdown, JSON and PNG results")
	fs.StringVar(&o.png, "png", "", "also write the handoff plot here (e.g. docs/benchmarks.png)")
	fs.BoolVar(&o.keepLogs, "keep-logs", false, "keep the candidates' logs (kept anyway when a section fails)")
	fs.BoolVar(&o.verbose, "v", false, "echo every candidate's log lines")
	fs.BoolVar(&o.skipBaseline, "skip-baseline", false, "run elector-sidecar only (to compare a patched core, with ELECTOR_SIDECAR_BINARY, against an earlier run)")
	fs.BoolVar(&o.quick, "quick", false, "development run: 10 trials, 10 s windows, 10 s footprint wait, 1 localapi repeat, scale 10 only, 100 Leases (explicit flags win)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		quick := map[string]func(){
			"trials":             func() { o.trials = 10 },
			"window":             func() { o.window = 10 * time.Second },
			"footprint-wait":     func() { o.footprintWait = 10 * time.Second },
			"repeats":            func() { o.repeats = 1 },
			"scale-sizes":        func() { *sizes = "10" },
			"scale-trials":       func() { o.scaleTrials = 5 },
			"scale-window":       func() { o.scaleWindow = 10 * time.Second },
			"fence-duration":     func() { o.fenceDuration = 2 * time.Second },
			"push-rounds":        func() { o.pushRounds = 10 },
			"push-fanout-rounds": func() { o.pushFanRounds = 3 },
			"leases":             func() { o.leases = 100 },
			"leases-window":      func() { o.leasesWindow = 10 * time.Second },
			"leases-settle":      func() { o.leasesSettle = 5 * time.Second },
			"leases-trials":      func() { o.leasesTrials = 5 },
		}
		for name, f := range quick {
			if !set[name] {
				f()
			}
		}
		o.shards.quick(set)
	}
	if o.failoverTrials == 0 {
		o.failoverTrials = o.trials
	}
	o.only = map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		known := false
		for _, k := range allSections {
			known = known || k == s
		}
		if !known {
			return nil, fmt.Errorf("--only: unknown section %q (known: %s)", s, strings.Join(allSections, ","))
		}
		o.only[s] = true
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			return nil, fmt.Errorf("--scale-sizes: %q is not a candidate count >= 2", s)
		}
		o.scaleSizes = append(o.scaleSizes, n)
	}
	if o.trials < 1 || o.failoverTrials < 1 || o.scaleTrials < 1 || o.candidates < 2 || o.conns < 1 || o.repeats < 1 || o.fenceWriters < 1 {
		return nil, errors.New("--trials, --failover-trials, --scale-trials, --repeats, --conns and --fence-writers must be >= 1, --candidates >= 2")
	}
	if o.pushRounds < 1 || o.pushWatchers < 1 || o.pushFanRounds < 1 {
		return nil, errors.New("--push-rounds, --push-watchers and --push-fanout-rounds must be >= 1")
	}
	if o.pushWatchers > 1024 {
		return nil, errors.New("--push-watchers: at most 1024 (the sidecar's cap on streams and long-polls; one more gets a 503)")
	}
	if o.leases < 1 || o.leasesCandidates < 2 || o.leasesTrials < 1 || o.idleConns < 1 || o.idleRate <= 0 {
		return nil, errors.New("--leases, --leases-trials and --idle-conns must be >= 1, --leases-candidates >= 2, --idle-rate > 0")
	}
	if o.leasesWindow < 2*time.Second || o.leasesSettle < 0 {
		return nil, errors.New("--leases-window must be at least 2s, --leases-settle not negative")
	}
	if err := o.shards.validate(); err != nil {
		return nil, err
	}
	if o.fenceDuration < time.Second {
		return nil, errors.New("--fence-duration must be at least 1s")
	}
	if o.window < 6*time.Second || o.scaleWindow < 6*time.Second {
		return nil, errors.New("--window and --scale-window must be at least 6s")
	}
	return o, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "bare-server" {
		fs := flag.NewFlagSet("bare-server", flag.ExitOnError)
		addr := fs.String("addr", "127.0.0.1:0", "listen address")
		_ = fs.Parse(os.Args[2:])
		if err := serveBare(*addr); err != nil {
			fmt.Fprintln(os.Stderr, "bare-server:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "lease-host" {
		if err := runLeaseHost(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "lease-host:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "elector-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "elector-bench: FAIL:", err)
		os.Exit(1)
	}
}

func (e *env) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func run(ctx context.Context, o *options) error {
	started := time.Now()
	rep := &Report{Started: started, Command: commandLine(), Machine: machineInfo()}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	e := &env{verbose: o.verbose, selfPath: self, skipBaseline: o.skipBaseline}
	e.progress("machine: %s", rep.Machine)
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(o.out) {
		o.out = filepath.Join(root, o.out)
	}
	stamp := started.Format("20060102-150405")
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "elector-bench-")
	if err != nil {
		return err
	}
	e.logDir = filepath.Join(tmp, "logs")
	failed := false
	defer func() {
		if failed || o.keepLogs {
			e.progress("candidate logs kept in %s", e.logDir)
			_ = os.RemoveAll(filepath.Join(tmp, "bin"))
		} else {
			_ = os.RemoveAll(tmp)
		}
	}()

	// Every section but fence runs candidates on the control plane.
	needCP := false
	for s := range o.only {
		needCP = needCP || s != "fence"
	}
	if needCP {
		e.progress("building elector-sidecar and clientgo-candidate (static, -trimpath -s -w)")
		if e.bins, err = buildBinaries(filepath.Join(tmp, "bin")); err != nil {
			return err
		}
		e.progress("starting etcd + kube-apiserver")
		cp, err := framework.StartControlPlane(framework.ControlPlaneOptions{})
		if err != nil {
			return err
		}
		e.cp = cp
		defer func() {
			if err := cp.Stop(); err != nil {
				e.progress("%v", err)
			}
		}()
		e.progress("control plane at %s", cp.APIServerURL())
		if e.baseWatches, err = e.leaseWatches(ctx); err != nil {
			return err
		}
	}

	handoffT := framework.Timings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, ClockSkewMargin: 500 * time.Millisecond}
	failoverT := framework.TestTimings

	section := func(key, title, setup, baseline string, f func(s *Section) error) {
		if !o.only[key] || ctx.Err() != nil {
			return
		}
		s := &Section{Key: key, Title: title, Setup: setup, Baseline: baseline}
		rep.Sections = append(rep.Sections, s)
		e.progress("%s", title)
		t0 := time.Now()
		if err := f(s); err != nil {
			failed = true
			s.Error = err.Error()
			e.progress("  %s FAILED: %v", key, err)
		}
		s.Seconds = time.Since(t0).Seconds()
	}

	// The footprint processes start first and are read after the handoff
	// section, so the minute they need overlaps other work. They leave
	// before the api section, whose windows must see only the client under test.
	var fp *FootprintResult
	if o.only["footprint"] {
		e.progress("5. footprint: starting a leader and a follower of each kind")
		if fp, err = e.beginFootprint(ctx, o.footprintWait); err != nil {
			return fmt.Errorf("footprint: %w", err)
		}
		defer fp.stop()
	}

	var handoff map[string]*TrialsResult
	section("localapi", "4. Local API: /leader and /token under load vs a bare net/http handler",
		fmt.Sprintf("one leading sidecar; %d keep-alive connections from a Go load generator on the same machine; %s; max throughput %v per run, fixed rate %.0f req/s %v per run; %d repeats interleaved (median and min–max shown); latency from writing the request to reading the response, at fixed rate also from the scheduled send",
			o.conns, localAPIPinText(o.localAPIPin), o.maxDur, o.rate, o.fixedDur, o.repeats), "bare net/http",
		func(s *Section) error {
			r, err := e.runLocalAPI(ctx, o)
			s.Data = r
			if r != nil {
				s.Rows = r.rows()
			}
			return err
		})

	section("handoff", "1. Graceful handoff: leader leaves -> next candidate has acquired the Lease",
		fmt.Sprintf("%d candidates on one Lease, timings %s for both, client-go with ReleaseOnCancel, ours with --expected-candidates=%[1]d (as the chart sets it from its replicas); %[3]d trials per series; leader SIGTERMed (both; ours with --shutdown-handoff=immediate, as a native sidecar runs) or POST /release (ours); the old leader is replaced by a new process each trial; end = the new leader logs its successful acquiring write",
			o.candidates, fmtTimings(handoffT), o.trials), "client-go",
		func(s *Section) error {
			handoff = map[string]*TrialsResult{}
			s.Data = handoff
			for _, run := range []struct {
				kind framework.CandidateKind
				mode string
			}{{sc, modeSIGTERM}, {cg, modeSIGTERM}, {sc, modeRelease}} {
				if run.kind == cg && o.skipBaseline {
					continue
				}
				e.progress("  %s, %s", run.kind, run.mode)
				r, err := e.runTrials(ctx, run.kind, run.mode, handoffT, o.candidates, o.trials)
				handoff[string(run.kind)+"/"+run.mode] = r
				if err != nil {
					return err
				}
			}
			s.Rows = handoffRows(handoff)
			return nil
		})

	if fp != nil {
		section("footprint", "5. Footprint", fmt.Sprintf("one leader and one follower of each kind on their own Leases (timings %s), idle; RSS read from /proc/PID/status when they are %v old (while the next sections run); binaries built as the image builds them", fmtTimings(handoffT), o.footprintWait),
			"client-go", func(s *Section) error {
				s.Data = fp
				err := fp.finish(ctx, e)
				s.Rows = fp.rows()
				return err
			})
	}

	section("failover", "2. Crash failover: leader SIGKILLed -> next candidate has acquired the Lease",
		fmt.Sprintf("%d candidates on one Lease, timings %s for both; %d trials per series; a replacement process starts right after the kill; overhead = failover time minus leaseDuration",
			o.candidates, fmtTimings(failoverT), o.failoverTrials), "client-go",
		func(s *Section) error {
			res := map[string]*TrialsResult{}
			s.Data = res
			for _, kind := range e.kinds() {
				e.progress("  %s, kill", kind)
				r, err := e.runTrials(ctx, kind, modeKill, failoverT, o.candidates, o.failoverTrials)
				res[string(kind)] = r
				if err != nil {
					return err
				}
			}
			s.Rows = failoverRows(res[string(sc)], res[string(cg)], failoverT)
			return nil
		})

	section("api", "3. API server load: Lease requests by verb, idle follower and leader",
		fmt.Sprintf("timings %s; one client under test at a time, %v window each, in 10 s sub-windows; its Lease requests counted by verb when they start, by a counting proxy in front of the apiserver (the client's kubeconfig points at it), and cross-checked with the apiserver's apiserver_request_total; idle follower = one candidate beside a stand-in leader the bench runs (renewing every retryPeriod); leader = one candidate alone",
			fmtTimings(handoffT), o.window), "client-go",
		func(s *Section) error {
			r, err := e.runAPILoad(ctx, handoffT, o.window)
			s.Data = r
			if err == nil {
				s.Rows = apiRows(r)
			}
			return err
		})

	section("scale", "6. Scale: many candidates on one Lease",
		fmt.Sprintf("sizes %v, timings %s for both, ours with --expected-candidates=SIZE (as the chart sets it from its replicas); %v steady-state window (Lease requests of all candidates, after the start-up burst), then %[4]d SIGTERM handoffs each; ours then %[4]d POST /release handoffs, after the bench probed one Lease write and one write + one watch delivery (40 writes of a Lease of its own, the pool running)",
			o.scaleSizes, fmtTimings(handoffT), o.scaleWindow, o.scaleTrials), "client-go",
		func(s *Section) error {
			pts, err := e.runScale(ctx, o)
			s.Data = pts
			s.Rows = scaleRows(pts)
			return err
		})

	section("push", "8. Push: Lease write -> app, GET /watch and the long-poll vs polling GET /leader",
		fmt.Sprintf("%d elector-sidecar candidates on one Lease, timings %s; on every candidate four apps at once: a GET /watch stream, a GET /leader?wait=30s long-poll (If-None-Match: the last ETag), GET /leader every 100 ms and every 1 s; %d rounds: the leader is SIGTERMed after a random 0.3–1.0 s pause and replaced by a new process; latency from the acquiring write's spec.acquireTime (stamped by the new leader right before it sends the write; read from the bench's own Lease watch; same machine, same clock) to the app's client reading the new state: isLeader at the new leader, the new holder at the candidate that lost the race. Then %d /watch streams (one connection each, from the bench) on a further sidecar that is out of the election (POST /release?for=24h), %d SIGTERM handoffs among the others (each pushes two changes: the old leader's release write, from its renewTime, then the acquiring write, from its acquireTime); memory from /proc/PID/status and the sidecar's /metrics, idle and with the streams open",
			o.candidates, fmtTimings(handoffT), o.pushRounds, o.pushWatchers, o.pushFanRounds), "poll /leader every 1 s",
		func(s *Section) error {
			r, err := e.runPush(ctx, o, handoffT)
			s.Data = r
			if r != nil {
				s.Rows = r.rows()
				s.Notes = r.notes()
			}
			return err
		})

	section("fence", "7. Fence: fenced writes vs the same writes unfenced, PostgreSQL and Redis",
		fmt.Sprintf("one throwaway server per database (test/framework/dbserver), fenced and plain on the same server; %d concurrent writers of the one fenced resource with the same token (a leader's concurrent writes: PostgreSQL runs them in parallel under the resource's shared lock, Redis one script at a time), then 1 writer (the fence's own cost), each a closed loop on its own connection (PostgreSQL: one pgx connection each; Redis: go-redis's pool), all with the same (accepted) token; %v per run, %d repeats interleaved fenced/plain after a 1 s warm-up of each (median and min–max shown); latency of one write, call to return",
			o.fenceWriters, o.fenceDuration, o.repeats), "unfenced",
		func(s *Section) error {
			r, err := e.runFence(ctx, o)
			s.Data = r
			if r != nil {
				s.Rows = r.rows()
				s.Notes = r.Servers
			}
			return err
		})

	section("leases", "9. Many Leases: one candidate group per Lease on one apiserver",
		fmt.Sprintf("%d Leases x %d candidates per kind, default timings %s; simulated: every candidate of a kind in one `elector-bench lease-host` process, each with its own client and TCP+TLS connection (ours: a pkg/election Elector built as the sidecar builds it from its flags, with --expected-candidates=%[2]d as the chart sets it and --shutdown-handoff=immediate, without its local API; client-go: a LeaderElector on a LeaseLock with ReleaseOnCancel); the kinds one after the other, each in a fresh namespace; after every Lease is held and %[4]v more, a %[5]v window: apiserver_request_total for leases by verb, CPU from /proc/PID/stat and RSS from /proc/PID/status; then %[6]d handoffs on different Leases, one at a time: the leader's Run context is cancelled (it releases, as on SIGTERM), latency until the bench's informer sees another candidate of the group hold the Lease",
			o.leases, o.leasesCandidates, fmtTimings(handoffT), o.leasesSettle, o.leasesWindow, o.leasesTrials), "client-go",
		func(s *Section) error {
			r, err := e.runLeases(ctx, o)
			s.Data = r
			if r != nil {
				s.Rows = leasesRows(r)
			}
			return err
		})

	section("idleconns", fmt.Sprintf("10. Idle connections: /token for others with %d idle connections open", o.idleConns),
		fmt.Sprintf("one leading sidecar; a client on %d keep-alive connections at a fixed %.0f req/s (latency from writing the request to reading the response) measures GET /token with nothing else connected, with %d keep-alive connections that made one request and went idle, and with %d connections that never send a byte (run cut to %v, before ReadHeaderTimeout); measured %v after the idle connections are open; %d repeats interleaved, %v per run (median and min–max shown); then the silent connections closed by the server are counted",
			idleClientConns, o.idleRate, o.idleConns, o.idleConns, idleSilentDuration(o.fixedDur), idleSettle, o.repeats, o.fixedDur), "no idle connections",
		func(s *Section) error {
			r, err := e.runIdleConns(ctx, o)
			s.Data = r
			if r != nil {
				s.Rows = r.rows()
			}
			return err
		})

	section("objfence", "11. Kubernetes object fence: a ConfigMap update with and without the fence policy",
		fmt.Sprintf("the control plane's kube-apiserver; config/fence's ValidatingAdmissionPolicy bound to one namespace; 1 writer, a closed loop of compare-and-swap updates of one labelled ConfigMap carrying the same (accepted) token, in that namespace (fenced) and in a namespace no binding selects (plain); %v per run, %d repeats interleaved after a 1 s warm-up of each (median and min–max shown); latency of one update, call to return",
			o.fenceDuration, o.repeats), "no policy",
		func(s *Section) error {
			r, err := e.runObjFence(ctx, o)
			s.Data = r
			if r != nil {
				s.Rows = r.rows()
			}
			return err
		})

	section("shards", "12. Shards: one set of shard Leases, a fair share each",
		fmt.Sprintf("%d shards, %d members per kind, default timings %s; ours: elector-sidecar processes with --shards=%[1]d; client-go: clientgo-candidate processes with --shards=%[1]d (one LeaderElector per shard Lease in each process, on one client with its client-side rate limit off); the kinds one after the other, each on a restarted kube-apiserver and in a fresh namespace; once every shard Lease is held (ours: and every shard served once, at a fair share) and %[4]v more, a %[5]v window: apiserver_request_total for leases by verb minus other namespaces' Lease writes, CPU and RSS of kube-apiserver, etcd and the members, the members' Lease watches; then a member joins (fair share timed from its session Lease seen, ours, or its process start, client-go, which does not rebalance and is given 5 retry periods; moves counted until 2 retry periods after), then the member holding the most shards is SIGTERMed, then the next SIGKILLed: per shard, signal -> another member's GET /shards (long-polled by the bench) lists it with a higher token",
			o.shards.shards, o.shards.members, fmtTimings(defaultTimings()), o.shards.settle, o.shards.window), "client-go",
		func(s *Section) error {
			r, err := e.runShards(ctx, o.shards)
			s.Data = r
			if r != nil {
				s.Rows = shardsRows(r)
			}
			return err
		})

	rep.Seconds = time.Since(started).Seconds()
	rep.Sections = inSectionOrder(rep.Sections)
	rep.printText(os.Stdout)

	base := filepath.Join(o.out, "bench-"+stamp)
	md := "### elector-bench results\n\n" + rep.markdown()
	if err := os.WriteFile(base+".md", []byte(md), 0o644); err != nil {
		return err
	}
	js, err := rep.json()
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".json", js, 0o644); err != nil {
		return err
	}
	written := []string{base + ".md", base + ".json"}
	if handoff != nil {
		var series []Series
		for _, s := range []struct {
			key, label string
			col        func() Series
		}{
			{"elector-sidecar/sigterm", "ours, sigterm", nil},
			{"elector-sidecar/release", "ours, post /release", nil},
			{"clientgo-candidate/sigterm", "client-go, sigterm", nil},
		} {
			if r := handoff[s.key]; r != nil && len(r.Latency.Raw) > 0 {
				c := colOurs
				switch s.key {
				case "elector-sidecar/release":
					c = colOurs2
				case "clientgo-candidate/sigterm":
					c = colBase
				}
				series = append(series, Series{Label: s.label, Color: c, Ms: r.Latency.Raw})
			}
		}
		if len(series) > 0 {
			title := fmt.Sprintf("graceful handoff latency, cdf (%s, %d candidates)", fmtTimings(handoffT), o.candidates)
			paths := []string{base + "-handoff.png"}
			if o.png != "" {
				paths = append(paths, o.png)
			}
			for _, p := range paths {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return err
				}
				if err := writeCDFPlot(p, title, series); err != nil {
					return err
				}
				written = append(written, p)
			}
		}
	}
	fmt.Printf("\nwrote %s\n", strings.Join(written, ", "))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if failed {
		return errors.New("one or more sections failed (see above)")
	}
	return nil
}

// inSectionOrder returns ss in allSections' order.
func inSectionOrder(ss []*Section) []*Section {
	out := make([]*Section, 0, len(ss))
	for _, k := range allSections {
		for _, s := range ss {
			if s.Key == k {
				out = append(out, s)
			}
		}
	}
	return out
}

func commandLine() string {
	args := append([]string{"elector-bench"}, os.Args[1:]...)
	if c := os.Getenv("ELECTOR_BENCH_COMMAND"); c != "" {
		return c
	}
	return strings.Join(args, " ")
}

func fmtTimings(t framework.Timings) string {
	return fmt.Sprintf("%v/%v/%v", t.LeaseDuration, t.RenewDeadline, t.RetryPeriod)
}

// ---- rows of sections 1-3 ----

func distRows(prefix string, o, b *Dist, goal50, goal99 *Goal) []Row {
	cell := func(d *Dist, f func(Dist) float64) string {
		if d == nil || d.N == 0 {
			return "n/a"
		}
		return fmtMs(f(*d))
	}
	rat := func(f func(Dist) float64) string {
		if o == nil || b == nil || o.N == 0 || b.N == 0 {
			return "n/a"
		}
		return ratio(f(*o), f(*b))
	}
	p50 := func(d Dist) float64 { return d.P50 }
	p95 := func(d Dist) float64 { return d.P95 }
	p99 := func(d Dist) float64 { return d.P99 }
	n := 0
	if o != nil {
		n = o.N
	}
	rows := []Row{
		{Metric: fmt.Sprintf("%s p50", prefix), Ours: cell(o, p50), Baseline: cell(b, p50), Ratio: rat(p50)},
		{Metric: fmt.Sprintf("%s p95", prefix), Ours: cell(o, p95), Baseline: cell(b, p95), Ratio: rat(p95)},
		{Metric: fmt.Sprintf("%s p99 (n=%d: the maximum below n=100)", prefix, n), Ours: cell(o, p99), Baseline: cell(b, p99), Ratio: rat(p99)},
		{Metric: fmt.Sprintf("%s spread: IQR; min–max", prefix), Ours: spreadCell(o), Baseline: spreadCell(b)},
	}
	if goal50 != nil && o != nil && o.N > 0 {
		goal50.judge(&rows[0], o.P50, math.NaN())
	}
	if goal99 != nil && o != nil && o.N > 0 {
		goal99.judge(&rows[2], o.P99, math.NaN())
	}
	return rows
}

func spreadCell(d *Dist) string {
	if d == nil || d.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s–%s; %s–%s", fmtMs(d.P25), fmtMs(d.P75), fmtMs(d.Min), fmtMs(d.Max))
}

func latency(r *TrialsResult) *Dist {
	if r == nil {
		return nil
	}
	return &r.Latency
}

func handoffRows(h map[string]*TrialsResult) []Row {
	rows := distRows("SIGTERM -> next leader:", latency(h["elector-sidecar/sigterm"]), latency(h["clientgo-candidate/sigterm"]), goalHandoffP50, goalHandoffP99)
	rel := distRows("POST /release -> next leader:", latency(h["elector-sidecar/release"]), nil, goalHandoffP50, goalHandoffP99)
	for i := range rel {
		rel[i].Baseline = "n/a (no release call)"
	}
	return append(rows, rel...)
}

func failoverRows(o, b *TrialsResult, t framework.Timings) []Row {
	if o == nil {
		return nil
	}
	if b == nil {
		b = &TrialsResult{Latency: Dist{P50: math.NaN()}}
	}
	rows := distRows("overhead (SIGKILL -> next leader, minus leaseDuration):", o.OverKill, b.OverKill, nil, goalFailoverP99)
	for i := range rows {
		rows[i].Ratio = "n/a" // may be negative: the last renew came before the kill
	}
	r2 := distRows("overhead vs last renew seen + leaseDuration:", o.OverRenew, b.OverRenew, nil, goalFailoverP99)
	for i := range r2 {
		r2[i].Ratio = "n/a"
	}
	rows = append(rows, r2[0], r2[2])
	rows = append(rows, Row{Metric: fmt.Sprintf("failover time (SIGKILL -> next leader) p50 (leaseDuration %v)", t.LeaseDuration),
		Ours: fmtMs(o.Latency.P50), Baseline: fmtMs(b.Latency.P50), Ratio: ratio(o.Latency.P50, b.Latency.P50)})
	return rows
}

func apiRows(r *APILoadResult) []Row {
	o, b := r.Follower[string(sc)], r.Follower[string(cg)]
	ol, bl := r.Leader[string(sc)], r.Leader[string(cg)]
	if o == nil || ol == nil {
		return nil
	}
	noBase := b == nil || bl == nil
	if noBase {
		b, bl = &WindowResult{}, &WindowResult{}
	}
	perRenew := func(w *WindowResult) float64 {
		if w.LeaseWrites == 0 {
			return 0
		}
		return w.Requests.total() / w.LeaseWrites
	}
	rows := []Row{
		{Metric: "idle follower: Lease requests/s (sub-window min–max)", Ours: fmtRate(o), Baseline: fmtRate(b), Ratio: ratio(o.PerSecond.total(), b.PerSecond.total())},
		{Metric: fmt.Sprintf("idle follower: requests in the %.0f s window, by verb", o.Seconds), Ours: o.Requests.String(), Baseline: b.Requests.String()},
		{Metric: "idle follower, cross-check: apiserver_request_total in the window, minus the stand-in leader's and the apiserver's own writes", Ours: o.FromMetrics.String(), Baseline: b.FromMetrics.String()},
		{Metric: "leader: Lease requests/s (sub-window min–max)", Ours: fmtRate(ol), Baseline: fmtRate(bl), Ratio: ratio(ol.PerSecond.total(), bl.PerSecond.total())},
		{Metric: fmt.Sprintf("leader: requests in the %.0f s window, by verb", ol.Seconds), Ours: ol.Requests.String(), Baseline: bl.Requests.String()},
		{Metric: "leader, cross-check: apiserver_request_total in the window, minus the apiserver's own writes", Ours: ol.FromMetrics.String(), Baseline: bl.FromMetrics.String()},
		{Metric: "leader: requests per renew (renews = writes seen on a watch)", Ours: fmt.Sprintf("%.2f (%.0f / %.0f)", perRenew(ol), ol.Requests.total(), ol.LeaseWrites),
			Baseline: fmt.Sprintf("%.2f (%.0f / %.0f)", perRenew(bl), bl.Requests.total(), bl.LeaseWrites), Ratio: ratio(perRenew(ol), perRenew(bl))},
	}
	goalAPIFollower.judge(&rows[0], o.PerSecond.total(), b.PerSecond.total())
	// PUTs are among all requests: one check covers both.
	goalAPIRenew.judge(&rows[6], ol.Requests.total()-ol.LeaseWrites, math.NaN())
	if noBase {
		for i := range rows {
			rows[i].Baseline, rows[i].Ratio = "n/a", "n/a"
		}
	}
	return rows
}
