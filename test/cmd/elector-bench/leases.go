package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// ---- 9. many Leases on one apiserver ----
//
// --leases groups of --leases-candidates candidates, each group on its own
// Lease, all on the one local apiserver. The candidates of one kind run in
// one `elector-bench lease-host` process (leasehost.go says what that
// simulates and how it differs from pods); the two kinds run one after the
// other, each in a fresh namespace. Per kind: start every candidate, wait
// until every Lease has a holder, let the start-up burst pass, then a
// steady-state window (apiserver_request_total for leases by verb, CPU of
// kube-apiserver, etcd and the host from /proc/PID/stat, RSS from
// /proc/PID/status), then handoffs: the bench stops one group's leader
// (its Run context is cancelled: both kinds release the Lease, as on
// SIGTERM) and times until its own informer sees another candidate of the
// group hold the Lease.

// leaseTable is the bench's informer on one namespace's Leases.
type leaseTable struct {
	mu      sync.Mutex
	holders map[string]string
	// changes counts holder changes from one identity to another, or to
	// none (a release or a lost term); a first holder is not counted.
	changes int
	changed chan struct{} // closed and replaced on every change
	stop    chan struct{}
}

func (e *env) watchLeaseTable(ns string) (*leaseTable, error) {
	t := &leaseTable{holders: map[string]string{}, changed: make(chan struct{}), stop: make(chan struct{})}
	lw := cache.NewListWatchFromClient(e.cp.Client.CoordinationV1().RESTClient(), "leases", ns, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{})
	set := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		t.mu.Lock()
		h := framework.HolderOf(l)
		if old := t.holders[l.Name]; old != "" && old != h {
			t.changes++
		}
		t.holders[l.Name] = h
		close(t.changed)
		t.changed = make(chan struct{})
		t.mu.Unlock()
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, n any) { set(n) },
	}); err != nil {
		return nil, err
	}
	go inf.Run(t.stop)
	if !cache.WaitForCacheSync(t.stop, inf.HasSynced) {
		close(t.stop)
		return nil, fmt.Errorf("lease informer on %s did not sync", ns)
	}
	return t, nil
}

func (t *leaseTable) close() { close(t.stop) }

// held returns how many Leases have a holder.
func (t *leaseTable) held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, h := range t.holders {
		if h != "" {
			n++
		}
	}
	return n
}

func (t *leaseTable) changeCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changes
}

func (t *leaseTable) holder(name string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holders[name]
}

// waitNewHolder waits until name is held by someone other than old and
// returns when the bench saw it.
func (t *leaseTable) waitNewHolder(ctx context.Context, name, old string, timeout time.Duration) (time.Time, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		h, ch := t.holders[name], t.changed
		t.mu.Unlock()
		if h != "" && h != old {
			return time.Now(), nil
		}
		select {
		case <-ch:
		case <-deadline.C:
			return time.Time{}, fmt.Errorf("%s: no new holder within %v after stopping %s (holder %q)", name, timeout, old, h)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// ---- /proc ----

// clockTicks is USER_HZ, 100 on every Linux the bench runs on.
const clockTicks = 100

// procCPUSeconds reads utime+stime of pid from /proc/PID/stat.
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(string(b))
}

// parseProcStatCPU returns (utime+stime)/USER_HZ from a /proc/PID/stat line.
func parseProcStatCPU(s string) (float64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bad /proc stat line %q", s)
	}
	f := strings.Fields(s[i+1:])
	// After the command: state (field 3) ... utime (14), stime (15).
	if len(f) < 13 {
		return 0, fmt.Errorf("bad /proc stat line %q", s)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc stat line %q", s)
	}
	return float64(u+st) / clockTicks, nil
}

// apiserverCPU is the CPU time, in seconds, the control plane's
// kube-apiserver has spent so far (NaN: not found).
func (e *env) apiserverCPU() float64 {
	pid, err := e.apiserverPid()
	if err != nil {
		return math.NaN()
	}
	v, err := procRunSeconds(pid)
	if err != nil {
		return math.NaN()
	}
	return v
}

// procRunSeconds is the CPU time of every thread of process pid so far,
// in seconds: the sum of /proc/PID/task/*/schedstat's first field
// (nanoseconds on a CPU: exact, where /proc/PID/stat counts 10 ms ticks;
// /proc/PID/schedstat is the main thread's alone).
func procRunSeconds(pid int) (float64, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var ns float64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				ns += v
			}
		}
	}
	return ns / 1e9, nil
}

// apiserverPid finds the control plane's kube-apiserver process.
func (e *env) apiserverPid() (int, error) {
	return findPid("kube-apiserver", e.cp.Env.ControlPlane.APIServer.CertDir)
}

// findPid finds the process whose argv[0] has base name base and whose
// command line contains needle (e.g. the control plane's data directory).
func findPid(base, needle string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == base && strings.Contains(string(b), needle) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no %s process with %s in its command line", base, needle)
}

// procUsage is the CPU and memory of one process over a window.
type procUsage struct {
	CPUPerSecond float64 `json:"cpuSecondsPerSecond"`
	RSSBytes     int64   `json:"rssBytesAtEnd"`
	PeakRSSBytes int64   `json:"peakRssBytes"` // VmHWM: since the process started
}

// cpu and rss are u's figures, NaN when it was not measured (nil);
// cpuCell and rssCell the same as table cells ("n/a").
func (u *procUsage) cpu() float64 {
	if u == nil {
		return math.NaN()
	}
	return u.CPUPerSecond
}

func (u *procUsage) rss() float64 {
	if u == nil {
		return math.NaN()
	}
	return float64(u.RSSBytes)
}

func (u *procUsage) cpuCell() string {
	if u == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", u.CPUPerSecond)
}

func (u *procUsage) rssCell() string {
	if u == nil {
		return "n/a"
	}
	return fmtMiB(float64(u.RSSBytes))
}

type cpuMark struct {
	pid  int
	cpu  float64
	at   time.Time
	ok   bool
	name string
}

func markCPU(name string, pid int) cpuMark {
	c, err := procCPUSeconds(pid)
	return cpuMark{pid: pid, cpu: c, at: time.Now(), ok: err == nil && pid > 0, name: name}
}

func (m cpuMark) usage() *procUsage {
	if !m.ok {
		return nil
	}
	c, err := procCPUSeconds(m.pid)
	if err != nil {
		return nil
	}
	u := &procUsage{CPUPerSecond: (c - m.cpu) / time.Since(m.at).Seconds()}
	if st, err := procStatus(m.pid); err == nil {
		u.RSSBytes, u.PeakRSSBytes = st["VmRSS"], st["VmHWM"]
	}
	return u
}

// ---- the section ----

// LeasesKindResult is one kind's run.
type LeasesKindResult struct {
	Kind string `json:"kind"`
	// StartSeconds: from starting the host until every Lease had a holder.
	StartSeconds  float64    `json:"startSeconds"`
	WindowSeconds float64    `json:"windowSeconds"`
	Requests      verbCounts `json:"requests"`
	PerSecond     verbCounts `json:"perSecond"`
	// LeaseWatches open on the apiserver during the window (all of them,
	// including the apiserver's own and the bench's informer).
	LeaseWatches float64 `json:"leaseWatches"`
	// HolderChanges in the window: a holder replaced or gone, none asked
	// for (a steady state has none); HeldAtEnd: Leases with a holder then.
	HolderChanges int `json:"holderChangesInWindow"`
	HeldAtEnd     int `json:"leasesHeldAtEndOfWindow"`
	// APIServerFreshRSS: the restarted kube-apiserver's RSS before the host started.
	APIServerFreshRSS int64      `json:"kubeApiserverFreshRssBytes"`
	APIServer         *procUsage `json:"kubeApiserver"`
	Etcd              *procUsage `json:"etcd"`
	Host              *procUsage `json:"host"`
	Handoff           Dist       `json:"handoff"`
	Error             string     `json:"error,omitempty"`
}

// LeasesResult is section 9's data.
type LeasesResult struct {
	Leases     int                          `json:"leases"`
	Candidates int                          `json:"candidatesPerLease"`
	Timings    framework.Timings            `json:"timings"`
	Kinds      map[string]*LeasesKindResult `json:"kinds"`
}

func (e *env) runLeases(ctx context.Context, o *options) (*LeasesResult, error) {
	res := &LeasesResult{Leases: o.leases, Candidates: o.leasesCandidates, Kinds: map[string]*LeasesKindResult{},
		Timings: framework.Timings{LeaseDuration: election.DefaultLeaseDuration, RenewDeadline: election.DefaultRenewDeadline,
			RetryPeriod: election.DefaultRetryPeriod, ClockSkewMargin: election.DefaultClockSkewMargin}}
	etcdPid, err := findPid("etcd", e.cp.Env.ControlPlane.Etcd.DataDir)
	if err != nil {
		etcdPid = 0 // reported as n/a
	}
	// A kind that fails does not keep the other from being measured.
	var errs []error
	for _, kind := range e.kinds() {
		r := &LeasesKindResult{Kind: string(kind)}
		res.Kinds[string(kind)] = r
		if err := e.runLeasesKind(ctx, o, kind, etcdPid, r); err != nil {
			r.Error = err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", kind, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	return res, errors.Join(errs...)
}

func (e *env) runLeasesKind(ctx context.Context, o *options, kind framework.CandidateKind, etcdPid int, r *LeasesKindResult) error {
	// A fresh kube-apiserver for each kind (same etcd): its RSS and caches
	// do not carry the previous kind's run.
	e.progress("    %s: restarting kube-apiserver", kind)
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
		r.APIServerFreshRSS = st["VmRSS"]
	}
	ns, err := e.cp.CreateNamespace(ctx, "bench-leases")
	if err != nil {
		return err
	}
	table, err := e.watchLeaseTable(ns)
	if err != nil {
		return err
	}
	defer table.close()
	// The next kind's apiserver must not cache this kind's Leases (envtest
	// runs no namespace controller: delete them).
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.cp.Client.CoordinationV1().Leases(ns).DeleteCollection(dctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			e.progress("    delete the Leases of %s: %v", ns, err)
		}
	}()
	addr, err := framework.FreeAddress()
	if err != nil {
		return err
	}
	start := time.Now()
	host, err := framework.StartProcess(framework.ProcessSpec{Name: "lease-host-" + string(kind), Path: e.selfPath, LogDir: e.logDir,
		Args: []string{"lease-host", "--kind=" + string(kind), "--kubeconfig=" + e.cp.Kubeconfig, "--namespace=" + ns,
			"--leases=" + strconv.Itoa(o.leases), "--candidates=" + strconv.Itoa(o.leasesCandidates), "--control-addr=" + addr}})
	if err != nil {
		return err
	}
	// Every leader releases on SIGTERM: give them time. (Deferred after the
	// Lease deletion, so it runs first.)
	defer host.Stop(90 * time.Second)
	total := o.leases * o.leasesCandidates
	e.progress("    %s: %d Leases x %d candidates in one lease-host process (pid %d)", kind, o.leases, o.leasesCandidates, host.Pid())
	// Wait until the host started every candidate and every Lease is held.
	deadline := time.Now().Add(time.Duration(total)*20*time.Millisecond + 3*time.Minute)
	for {
		st, err := hostStatus(ctx, addr)
		if err == nil && st.Started && st.Candidates == total && table.held() == o.leases {
			break
		}
		if host.Exited() {
			return fmt.Errorf("lease-host exited; log:\n%s", host.LogTail(20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %d of %d Leases held, host status %+v %v; log:\n%s", time.Since(start).Round(time.Second), table.held(), o.leases, st, err, host.LogTail(20))
		}
		if err := settle(ctx, time.Second, 0); err != nil {
			return err
		}
	}
	r.StartSeconds = time.Since(start).Seconds()
	e.progress("    %s: every Lease held after %.0f s; settling %v", kind, r.StartSeconds, o.leasesSettle)
	if err := settle(ctx, o.leasesSettle, 0); err != nil {
		return err
	}

	e.progress("    %s: steady-state window %v", kind, o.leasesWindow)
	before, err := e.scrapeLeases(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	changes0 := table.changeCount()
	apiM, etcdM, hostM := markCPU("kube-apiserver", apiPid), markCPU("etcd", etcdPid), markCPU("host", host.Pid())
	if err := settle(ctx, o.leasesWindow/2, 0); err != nil {
		return err
	}
	if r.LeaseWatches, err = e.leaseWatches(ctx); err != nil {
		return err
	}
	if err := settle(ctx, o.leasesWindow-o.leasesWindow/2, 0); err != nil {
		return err
	}
	r.APIServer, r.Etcd, r.Host = apiM.usage(), etcdM.usage(), hostM.usage()
	r.HolderChanges, r.HeldAtEnd = table.changeCount()-changes0, table.held()
	after, err := e.scrapeLeases(ctx)
	if err != nil {
		return err
	}
	r.WindowSeconds = time.Since(t0).Seconds()
	r.Requests = after.sub(before)
	r.PerSecond = verbCounts{}
	for k, v := range r.Requests {
		if v == 0 {
			delete(r.Requests, k)
			continue
		}
		r.PerSecond[k] = v / r.WindowSeconds
	}
	e.progress("    %s: %s req/s (%s); apiserver %s; %d leader changes in the window, %d of %d Leases held at its end",
		kind, fmtNum(r.PerSecond.total()), r.PerSecond, fmtUsage(r.APIServer), r.HolderChanges, r.HeldAtEnd, o.leases)

	// Handoffs, on Leases spread over the groups, one at a time.
	var lats []time.Duration
	defer func() { r.Handoff = NewDist(lats, true) }()
	step := max(1, o.leases/o.leasesTrials)
	client := &http.Client{Timeout: 5 * time.Second}
	for i := 0; i < o.leasesTrials; i++ {
		lease := leaseName((i * step) % o.leases)
		old := table.holder(lease)
		if old == "" {
			return fmt.Errorf("%s has no holder before handoff %d", lease, i+1)
		}
		sent := time.Now()
		resp, err := client.Post(fmt.Sprintf("http://%s/stop?lease=%s&id=%s", addr, lease, old), "", nil)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("stop %s on %s: %s", old, lease, resp.Status)
		}
		seen, err := table.waitNewHolder(ctx, lease, old, 60*time.Second)
		if err != nil {
			return err
		}
		lats = append(lats, seen.Sub(sent))
		if e.verbose {
			e.progress("      handoff %d/%d on %s: %s", i+1, o.leasesTrials, lease, fmtMs(float64(seen.Sub(sent))/float64(time.Millisecond)))
		}
		// A replacement for the stopped candidate, as a new pod would come;
		// let it start before the next trial.
		resp, err = client.Post(fmt.Sprintf("http://%s/add?lease=%s", addr, lease), "", nil)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("add a candidate to %s: %s", lease, resp.Status)
		}
		if err := settle(ctx, 500*time.Millisecond, 500*time.Millisecond); err != nil {
			return err
		}
	}
	h := NewDist(lats, false)
	e.progress("    %s: handoff p50 %s, p99 %s (n=%d)", kind, fmtMs(h.P50), fmtMs(h.P99), h.N)
	return nil
}

type hostStatusBody struct {
	Candidates int  `json:"candidates"`
	Started    bool `json:"started"`
}

func hostStatus(ctx context.Context, addr string) (hostStatusBody, error) {
	var st hostStatusBody
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer func() { _ = resp.Body.Close() }()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func fmtUsage(u *procUsage) string {
	if u == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f CPU s/s, RSS %s", u.CPUPerSecond, fmtMiB(float64(u.RSSBytes)))
}

func leasesRows(r *LeasesResult) []Row {
	o, b := r.Kinds[string(sc)], r.Kinds[string(cg)]
	if o == nil || o.PerSecond == nil {
		return nil
	}
	noBase := b == nil || b.PerSecond == nil
	if noBase {
		b = &LeasesKindResult{PerSecond: verbCounts{}, Handoff: Dist{P50: math.NaN(), P99: math.NaN()}}
	}
	n := fmt.Sprintf("%d Leases x %d", r.Leases, r.Candidates)
	ms := func(d Dist, v float64) string {
		if d.N == 0 {
			return "n/a"
		}
		return fmtMs(v)
	}
	if o.Handoff.N == 0 {
		o.Handoff.P50, o.Handoff.P99 = math.NaN(), math.NaN()
	}
	if b.Handoff.N == 0 {
		b.Handoff.P50, b.Handoff.P99 = math.NaN(), math.NaN()
	}
	noWorse := func(g *Goal, row Row, ours, base float64) Row {
		if !noBase && !math.IsNaN(ours) && !math.IsNaN(base) {
			g.judge(&row, ours, base)
		}
		return row
	}
	stable := Row{Metric: n + ": unplanned leader changes in the window (a holder replaced or gone); Leases held at its end",
		Ours: fmt.Sprintf("%d; %d", o.HolderChanges, o.HeldAtEnd), Baseline: fmt.Sprintf("%d; %d", b.HolderChanges, b.HeldAtEnd)}
	goalLeasesStable.judge(&stable, float64(o.HolderChanges+r.Leases-o.HeldAtEnd), math.NaN())
	rows := []Row{
		noWorse(goalLeasesRequests, Row{Metric: n + ": Lease requests/s at the apiserver, steady state (apiserver_request_total)", Ours: fmtNum(o.PerSecond.total()), Baseline: fmtNum(b.PerSecond.total()),
			Ratio: ratio(o.PerSecond.total(), b.PerSecond.total())}, o.PerSecond.total(), b.PerSecond.total()),
		{Metric: n + ": by verb, req/s", Ours: o.PerSecond.String(), Baseline: b.PerSecond.String()},
		stable,
		noWorse(goalLeasesCPU, Row{Metric: n + ": kube-apiserver CPU, s/s", Ours: o.APIServer.cpuCell(), Baseline: b.APIServer.cpuCell(), Ratio: ratio(o.APIServer.cpu(), b.APIServer.cpu())},
			o.APIServer.cpu(), b.APIServer.cpu()),
		noWorse(goalLeasesRSS, Row{Metric: n + ": kube-apiserver RSS at the end of the window", Ours: o.APIServer.rssCell(), Baseline: b.APIServer.rssCell(), Ratio: ratio(o.APIServer.rss(), b.APIServer.rss())},
			o.APIServer.rss(), b.APIServer.rss()),
		{Metric: n + ": kube-apiserver RSS after its restart, before the candidates started", Ours: fmtMiB(float64(o.APIServerFreshRSS)), Baseline: fmtMiB(float64(b.APIServerFreshRSS))},
		{Metric: n + ": etcd CPU, s/s", Ours: o.Etcd.cpuCell(), Baseline: b.Etcd.cpuCell(), Ratio: ratio(o.Etcd.cpu(), b.Etcd.cpu())},
		{Metric: n + ": open Lease watches at the apiserver (incl. its own and the bench's)", Ours: fmtNum(o.LeaseWatches), Baseline: fmtNum(b.LeaseWatches)},
		noWorse(goalLeasesHandoff, Row{Metric: fmt.Sprintf("%s: handoff p99 (leader stopped -> another candidate holds the Lease, n=%d)", n, o.Handoff.N), Ours: ms(o.Handoff, o.Handoff.P99), Baseline: ms(b.Handoff, b.Handoff.P99),
			Ratio: ratio(o.Handoff.P99, b.Handoff.P99)}, o.Handoff.P99, b.Handoff.P99),
		{Metric: n + ": handoff p50", Ours: ms(o.Handoff, o.Handoff.P50), Baseline: ms(b.Handoff, b.Handoff.P50), Ratio: ratio(o.Handoff.P50, b.Handoff.P50)},
		{Metric: n + ": all candidates in one process (simulation): its CPU s/s, RSS", Ours: hostCell(o.Host), Baseline: hostCell(b.Host), Ratio: ratio(o.Host.cpu(), b.Host.cpu())},
		{Metric: n + ": start until every Lease held", Ours: fmt.Sprintf("%.0f s", o.StartSeconds), Baseline: fmt.Sprintf("%.0f s", b.StartSeconds)},
	}
	if noBase {
		for i := range rows {
			rows[i].Baseline, rows[i].Ratio = "n/a", "n/a"
		}
	}
	return rows
}

func hostCell(u *procUsage) string {
	if u == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.3f, %s", u.CPUPerSecond, fmtMiB(float64(u.RSSBytes)))
}
