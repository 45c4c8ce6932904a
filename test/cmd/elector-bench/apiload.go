package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Lease requests are read from the apiserver's own apiserver_request_total
// (resource="leases"), which has no label that tells clients apart. So each
// window runs one client under test alone, and the two other sources of
// Lease requests are taken out exactly:
//   - the bench's own requests (the stand-in leader's renews), which it counts;
//   - the apiserver's own Lease writes (its identity lease in kube-system,
//     one PUT every 10 s), seen on a cluster-wide watch the bench holds open
//     across all windows (a watch is counted when it ends, after the last
//     window).

// verbCounts maps verb -> requests.
type verbCounts map[string]float64

func (v verbCounts) total() float64 {
	var t float64
	for _, n := range v {
		t += n
	}
	return t
}

func (v verbCounts) sub(o verbCounts) verbCounts {
	out := verbCounts{}
	for k, n := range v {
		out[k] = n
	}
	for k, n := range o {
		out[k] -= n
	}
	return out
}

func (v verbCounts) String() string {
	var keys []string
	for k, n := range v {
		if n != 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %s", k, fmtNum(v[k])))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// scrapeLeases reads apiserver_request_total{resource="leases"} by verb.
func (e *env) scrapeLeases(ctx context.Context) (verbCounts, error) {
	return e.scrapeLeasesBy(ctx, false)
}

// scrapeLeasesBy reads the counts by verb, or by "verb code" if byCode.
func (e *env) scrapeLeasesBy(ctx context.Context, byCode bool) (verbCounts, error) {
	b, err := e.cp.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape apiserver /metrics: %w", err)
	}
	return parseLeaseRequests(b, byCode), nil
}

func parseLeaseRequests(b []byte, byCode bool) verbCounts {
	out := verbCounts{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_request_total{") || !strings.Contains(l, `resource="leases"`) || !strings.Contains(l, `subresource=""`) {
			continue
		}
		i := strings.LastIndexByte(l, '}')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(l[i+1:]), 64)
		if err != nil {
			continue
		}
		key := labelValue(l[:i], "verb")
		if byCode {
			key += " " + labelValue(l[:i], "code")
		}
		out[key] += v
	}
	return out
}

// leaseWatches reads the apiserver's gauge of open WATCH requests on Leases.
func (e *env) leaseWatches(ctx context.Context) (float64, error) {
	b, err := e.cp.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("scrape apiserver /metrics: %w", err)
	}
	var n float64
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_longrunning_requests{") || !strings.Contains(l, `resource="leases"`) || !strings.Contains(l, `verb="WATCH"`) {
			continue
		}
		if i := strings.LastIndexByte(l, '}'); i >= 0 {
			v, _ := strconv.ParseFloat(strings.TrimSpace(l[i+1:]), 64)
			n += v
		}
	}
	return n, sc.Err()
}

// waitWatchesGone waits until at most n Lease watches are open: a watch is
// counted in apiserver_request_total when it ends, so the watches of the
// processes just stopped must end before the next window starts.
func (e *env) waitWatchesGone(ctx context.Context, n float64) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, err := e.leaseWatches(ctx)
		if err != nil {
			return err
		}
		if cur <= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%v Lease watches still open 30s after the candidates stopped (expected %v)", cur, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func labelValue(s, name string) string {
	k := name + `="`
	i := strings.Index(s, k)
	if i < 0 {
		return ""
	}
	s = s[i+len(k):]
	j := strings.IndexByte(s, '"')
	if j < 0 {
		return ""
	}
	return s[:j]
}

// clusterWatch sees every Lease write in the cluster.
type clusterWatch struct {
	mu     sync.Mutex
	events []leaseEvent
	cancel context.CancelFunc
}

type leaseEvent struct {
	at        time.Time
	namespace string
	name      string
	verb      string
}

func (e *env) watchAllLeases(ctx context.Context) (*clusterWatch, error) {
	wctx, cancel := context.WithCancel(ctx)
	timeout := int64(3 * 3600)
	w, err := e.cp.Client.CoordinationV1().Leases("").Watch(wctx, metav1.ListOptions{TimeoutSeconds: &timeout})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch all leases: %w", err)
	}
	cw := &clusterWatch{cancel: cancel}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			verb := map[watch.EventType]string{watch.Added: "POST", watch.Modified: "PUT", watch.Deleted: "DELETE"}[ev.Type]
			if verb == "" {
				continue
			}
			cw.mu.Lock()
			cw.events = append(cw.events, leaseEvent{at: time.Now(), namespace: l.Namespace, name: l.Name, verb: verb})
			cw.mu.Unlock()
		}
	}()
	// The watch first lists what exists as ADDED events; let them pass.
	time.Sleep(500 * time.Millisecond)
	return cw, nil
}

// writes returns the writes seen in (from, to] for which keep is true.
func (cw *clusterWatch) writes(from, to time.Time, keep func(leaseEvent) bool) verbCounts {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	out := verbCounts{}
	for _, ev := range cw.events {
		if ev.at.After(from) && !ev.at.After(to) && keep(ev) {
			out[ev.verb]++
		}
	}
	return out
}

func (cw *clusterWatch) stop() { cw.cancel() }

// lastWrite returns when the latest write to ns/name was seen (now if none):
// the phase of a leader's renews, so scrapes can fall between them.
func (cw *clusterWatch) lastWrite(ns, name string) time.Time {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for i := len(cw.events) - 1; i >= 0; i-- {
		if ev := cw.events[i]; ev.namespace == ns && ev.name == name {
			return ev.at
		}
	}
	return time.Now()
}

// ownRequests counts the bench's own Lease requests by completion time.
type ownRequests struct {
	mu   sync.Mutex
	done []struct {
		at   time.Time
		verb string
	}
}

func (o *ownRequests) add(verb string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done = append(o.done, struct {
		at   time.Time
		verb string
	}{time.Now(), verb})
}

func (o *ownRequests) between(from, to time.Time) verbCounts {
	out := verbCounts{}
	if o == nil {
		return out
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, d := range o.done {
		if d.at.After(from) && !d.at.After(to) {
			out[d.verb]++
		}
	}
	return out
}

// WindowResult is the Lease traffic of one client over a window.
type WindowResult struct {
	Seconds float64 `json:"seconds"`
	// Source of Requests: "counting proxy" (the client's own requests,
	// counted when they start) or "apiserver_request_total" (minus the
	// bench's and the apiserver's own writes; a watch counts when it ends).
	Source string `json:"source"`
	// Requests by verb in the window.
	Requests verbCounts `json:"requests"`
	// FromMetrics is the apiserver_request_total count, minus the bench's
	// and the apiserver's own writes, as a cross-check of a proxy count.
	FromMetrics verbCounts `json:"fromApiserverMetrics"`
	// PerSecond by verb.
	PerSecond verbCounts `json:"perSecond"`
	// SubWindowRates is the total rate in each sub-window (the spread).
	SubWindowRates Spread `json:"subWindowRates"`
	// Subtracted is what was taken out: the apiserver's own writes and the bench's requests.
	Background verbCounts `json:"apiserverOwnWrites"`
	Bench      verbCounts `json:"benchOwnRequests"`
	// Writes seen on the watched Lease in the window (renews, for a leader).
	LeaseWrites float64 `json:"leaseWritesSeen"`
}

// measureWindow scrapes at start and every sub (a multiple of 2 s) until d
// has passed. base is the phase of the leader's renews (every 2 s): scrapes
// fall 1 s after a renew, half-way to the next, so no renew straddles a
// scrape.
func (e *env) measureWindow(ctx context.Context, cw *clusterWatch, own *ownRequests, proxy *countingProxy, ns, lease string, d, sub time.Duration, base time.Time) (*WindowResult, error) {
	// Align the first scrape to base + k*2s + 1s.
	first := base.Add(time.Second)
	for first.Before(time.Now().Add(100 * time.Millisecond)) {
		first = first.Add(2 * time.Second)
	}
	time.Sleep(time.Until(first))
	prev, err := e.scrapeLeases(ctx)
	if err != nil {
		return nil, err
	}
	prevAt := time.Now()
	start, startCounts := prevAt, prev
	var rates []float64
	other := func(ev leaseEvent) bool { return ev.namespace != ns }
	for i := 1; i <= int((d+sub-1)/sub); i++ {
		next := first.Add(time.Duration(i) * sub)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(next)):
		}
		cur, err := e.scrapeLeases(ctx)
		if err != nil {
			return nil, err
		}
		at := time.Now()
		n := cur.sub(prev).sub(cw.writes(prevAt, at, other)).sub(own.between(prevAt, at))
		if proxy != nil {
			n = proxy.between(prevAt, at)
		}
		rates = append(rates, n.total()/at.Sub(prevAt).Seconds())
		prev, prevAt = cur, at
	}
	secs := prevAt.Sub(start).Seconds()
	bg := cw.writes(start, prevAt, other)
	mine := own.between(start, prevAt)
	fromMetrics := prev.sub(startCounts).sub(bg).sub(mine)
	for k, v := range fromMetrics {
		if v == 0 {
			delete(fromMetrics, k)
		}
	}
	n, source := fromMetrics, "apiserver_request_total"
	if proxy != nil {
		n, source = proxy.between(start, prevAt), "counting proxy"
	}
	ps := verbCounts{}
	for k, v := range n {
		ps[k] = v / secs
	}
	lw := cw.writes(start, prevAt, func(ev leaseEvent) bool { return ev.namespace == ns && ev.name == lease })
	return &WindowResult{Seconds: secs, Source: source, Requests: n, FromMetrics: fromMetrics, PerSecond: ps, SubWindowRates: NewSpread(rates),
		Background: bg, Bench: mine, LeaseWrites: lw.total()}, nil
}

// phantom is a stand-in leader run by the bench: it holds the Lease under an
// identity no candidate has and renews it every period, as a real leader
// would, so a follower under test sees live renew events. Renews happen at
// base + k*period.
func (e *env) phantom(ctx context.Context, ns, name string, t framework.Timings, own *ownRequests) (base time.Time, stop func(), err error) {
	leases := e.cp.Client.CoordinationV1().Leases(ns)
	now := metav1.NewMicroTime(time.Now())
	secs := int32(t.LeaseDuration / time.Second)
	holder := "bench-phantom-leader"
	l, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now, LeaseTransitions: new(int32)},
	}, metav1.CreateOptions{})
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("create stand-in lease: %w", err)
	}
	own.add("POST")
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	base = time.Now()
	go func() {
		defer close(done)
		for k := 1; ; k++ {
			select {
			case <-pctx.Done():
				return
			case <-time.After(time.Until(base.Add(time.Duration(k) * t.RetryPeriod))):
			}
			c := l.DeepCopy()
			now := metav1.NewMicroTime(time.Now())
			c.Spec.RenewTime = &now
			got, err := leases.Update(pctx, c, metav1.UpdateOptions{})
			if pctx.Err() != nil {
				return
			}
			own.add("PUT")
			if err != nil {
				if apierrors.IsConflict(err) {
					if g, gerr := leases.Get(pctx, name, metav1.GetOptions{}); gerr == nil {
						own.add("GET")
						l = g
					}
				}
				continue
			}
			l = got
		}
	}()
	return base, func() { cancel(); <-done }, nil
}

// APILoadResult is section 3's data.
type APILoadResult struct {
	WindowSeconds float64                  `json:"windowSeconds"`
	Timings       framework.Timings        `json:"timings"`
	Follower      map[string]*WindowResult `json:"idleFollower"`
	Leader        map[string]*WindowResult `json:"leader"`
}

// runAPILoad measures one idle follower (beside the bench's stand-in leader)
// and one leader (alone), for each kind, one window each.
func (e *env) runAPILoad(ctx context.Context, t framework.Timings, window time.Duration) (*APILoadResult, error) {
	res := &APILoadResult{WindowSeconds: window.Seconds(), Timings: t, Follower: map[string]*WindowResult{}, Leader: map[string]*WindowResult{}}
	cw, err := e.watchAllLeases(ctx)
	if err != nil {
		return res, err
	}
	defer cw.stop()
	sub := 10 * time.Second
	if window < 3*sub {
		sub = window / 3
	}
	sub = sub.Round(2 * time.Second)
	if sub < 2*time.Second {
		sub = 2 * time.Second
	}
	proxy, err := e.startCountingProxy(filepath.Join(e.logDir, "proxy"))
	if err != nil {
		return res, err
	}
	defer proxy.stop()
	// Open Lease watches now: the apiserver's own and the bench's.
	idleWatches := e.baseWatches + 1
	for _, kind := range e.kinds() {
		// Idle follower.
		if err := e.waitWatchesGone(ctx, idleWatches); err != nil {
			return res, err
		}
		p, err := e.newPool(ctx, kind, "bench-load", t)
		if err != nil {
			return res, err
		}
		p.kubeconfig = proxy.kubeconfig
		own := &ownRequests{}
		base, stopPhantom, err := e.phantom(ctx, p.ns, p.lease, t, own)
		if err != nil {
			return res, err
		}
		if _, err := p.start(ctx); err != nil {
			stopPhantom()
			return res, err
		}
		// Let the start-up requests (list, watch, first GET) pass.
		time.Sleep(3 * time.Second)
		e.progress("    %s idle follower: %v window", kind, window)
		w, err := e.measureWindow(ctx, cw, own, proxy, p.ns, p.lease, window, sub, base)
		p.stopAll()
		stopPhantom()
		if err != nil {
			return res, err
		}
		if w.LeaseWrites != w.Bench["PUT"] {
			return res, fmt.Errorf("%s idle follower: %v Lease writes seen, the bench made %v: the follower wrote", kind, w.LeaseWrites, w.Bench["PUT"])
		}
		res.Follower[string(kind)] = w

		// Leader, alone.
		if err := e.waitWatchesGone(ctx, idleWatches); err != nil {
			return res, err
		}
		p, err = e.newPool(ctx, kind, "bench-load", t)
		if err != nil {
			return res, err
		}
		p.kubeconfig = proxy.kubeconfig
		if _, err := p.start(ctx); err != nil {
			return res, err
		}
		if _, err := p.leader(ctx, 30*time.Second); err != nil {
			p.stopAll()
			return res, err
		}
		time.Sleep(3 * time.Second)
		e.progress("    %s leader: %v window", kind, window)
		w, err = e.measureWindow(ctx, cw, nil, proxy, p.ns, p.lease, window, sub, cw.lastWrite(p.ns, p.lease))
		p.stopAll()
		if err != nil {
			return res, err
		}
		res.Leader[string(kind)] = w
	}
	return res, nil
}
