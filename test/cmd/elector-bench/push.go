package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// ---- 8. push ----
//
// How fast an app learns of a leadership change through the local API:
// GET /watch (server-sent events) and GET /leader?wait= (a long-poll on
// the ETag) against polling GET /leader, at the new leader and at a
// follower, on real sidecars. The clock starts at the acquiring write: the
// Lease's spec.acquireTime, which the new leader stamps (same machine, same
// clock) right before it sends the write, read from the bench's own watch
// on the Lease. Then 1,000 /watch streams on one sidecar.

// The ways an app learns who leads.
const (
	methWatch    = "/watch"
	methLongPoll = "long-poll"
	methPoll100  = "poll 100ms"
	methPoll1s   = "poll 1s"
)

var pushMethods = []string{methWatch, methLongPoll, methPoll100, methPoll1s}

// pushLongPollWait is the ?wait= of the long-poll client.
const pushLongPollWait = 30 * time.Second

// pushObs is one state of /leader as an app saw it.
type pushObs struct {
	at       time.Time
	holder   string
	isLeader bool
}

// appClient is one app's view of one sidecar through one method: the
// states it saw, each stamped when it first saw it.
type appClient struct {
	method string
	mu     sync.Mutex
	obs    []pushObs
}

// record notes body (a /leader body) seen at at, if its holder or isLeader
// differs from the last state seen.
func (c *appClient) record(at time.Time, body []byte) error {
	var r localapi.LeaderResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%s: decode %q: %w", c.method, body, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.obs); n > 0 && c.obs[n-1].holder == r.Holder && c.obs[n-1].isLeader == r.IsLeader {
		return nil
	}
	c.obs = append(c.obs, pushObs{at: at, holder: r.Holder, isLeader: r.IsLeader})
	return nil
}

// firstAfter returns the first state seen at or after t that matches.
func (c *appClient) firstAfter(t time.Time, match func(pushObs) bool) (pushObs, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.obs {
		if !o.at.Before(t) && match(o) {
			return o, true
		}
	}
	return pushObs{}, false
}

// last returns the last state seen.
func (c *appClient) last() (pushObs, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.obs) == 0 {
		return pushObs{}, false
	}
	return c.obs[len(c.obs)-1], true
}

// appClients are the four apps of one sidecar.
type appClients struct {
	c       *framework.Candidate
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clients map[string]*appClient
}

func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		DisableCompression:  true,
	}
}

// startAppClients starts one client per method on c.
func startAppClients(ctx context.Context, c *framework.Candidate) *appClients {
	ctx, cancel := context.WithCancel(ctx)
	a := &appClients{c: c, cancel: cancel, clients: map[string]*appClient{}}
	for _, m := range pushMethods {
		ac := &appClient{method: m}
		a.clients[m] = ac
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			switch m {
			case methWatch:
				runWatchClient(ctx, c.URL, ac)
			case methLongPoll:
				runLongPollClient(ctx, c.URL, ac)
			case methPoll100:
				runPollClient(ctx, c.URL, 100*time.Millisecond, ac)
			case methPoll1s:
				runPollClient(ctx, c.URL, time.Second, ac)
			}
		}()
	}
	return a
}

func (a *appClients) stop() {
	a.cancel()
	a.wg.Wait()
}

// current reports whether every client's last state matches.
func (a *appClients) current(match func(pushObs) bool) bool {
	for _, ac := range a.clients {
		o, ok := ac.last()
		if !ok || !match(o) {
			return false
		}
	}
	return true
}

// pause waits d or until ctx ends; false when ctx ended.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// runWatchClient reads GET /watch, reconnecting after an error (the
// sidecar's process may be stopping), until ctx ends.
func runWatchClient(ctx context.Context, base string, ac *appClient) {
	hc := &http.Client{Transport: newTransport()}
	defer hc.CloseIdleConnections()
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/watch", nil)
		resp, err := hc.Do(req)
		if err != nil {
			pause(ctx, 50*time.Millisecond)
			continue
		}
		if resp.StatusCode == http.StatusOK {
			_ = readSSE(resp.Body, func(at time.Time, data []byte) { _ = ac.record(at, data) })
		}
		_ = resp.Body.Close()
		pause(ctx, 50*time.Millisecond)
	}
}

// readSSE calls onData with each "data:" line of a server-sent event
// stream, stamped when it was read, until the stream ends.
func readSSE(r io.Reader, onData func(at time.Time, data []byte)) error {
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			onData(time.Now(), bytes.TrimRight(d, "\r\n"))
		}
	}
}

// runLongPollClient GETs /leader, then /leader?wait=30s with If-None-Match:
// <the last ETag>, again and again, until ctx ends.
func runLongPollClient(ctx context.Context, base string, ac *appClient) {
	hc := &http.Client{Transport: newTransport(), Timeout: pushLongPollWait + 10*time.Second}
	defer hc.CloseIdleConnections()
	etag := ""
	for ctx.Err() == nil {
		url := base + "/leader"
		if etag != "" {
			url += "?wait=" + pushLongPollWait.String()
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := hc.Do(req)
		if err != nil {
			etag = ""
			pause(ctx, 50*time.Millisecond)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		at := time.Now()
		_ = resp.Body.Close()
		switch {
		case err != nil:
			etag = ""
		case resp.StatusCode == http.StatusOK:
			_ = ac.record(at, body)
			etag = resp.Header.Get("ETag")
		case resp.StatusCode == http.StatusNotModified:
		default:
			etag = ""
			pause(ctx, 50*time.Millisecond)
		}
	}
}

// runPollClient GETs /leader every period until ctx ends.
func runPollClient(ctx context.Context, base string, period time.Duration, ac *appClient) {
	hc := &http.Client{Transport: newTransport(), Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/leader", nil)
		if resp, err := hc.Do(req); err == nil {
			body, err := io.ReadAll(resp.Body)
			at := time.Now()
			_ = resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				_ = ac.record(at, body)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leaseChange is a change of the Lease's holder seen on the bench's watch.
type leaseChange struct {
	seen        time.Time // when the watch delivered it
	holder      string
	acquireTime time.Time // spec.acquireTime (microseconds)
	renewTime   time.Time // spec.renewTime: of a release, when it was written
}

// watchHolder streams the changes of the Lease's holder until ctx ends.
func (e *env) watchHolder(ctx context.Context, ns, name string) (<-chan leaseChange, error) {
	timeout := int64(3600)
	w, err := e.cp.Client.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, TimeoutSeconds: &timeout})
	if err != nil {
		return nil, fmt.Errorf("watch lease %s/%s: %w", ns, name, err)
	}
	out := make(chan leaseChange, 1024)
	go func() {
		defer w.Stop()
		defer close(out)
		prev := "\x00"
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			h := framework.HolderOf(l)
			if h == prev {
				continue
			}
			prev = h
			lc := leaseChange{seen: time.Now(), holder: h}
			if l.Spec.AcquireTime != nil {
				lc.acquireTime = l.Spec.AcquireTime.Time
			}
			if l.Spec.RenewTime != nil {
				lc.renewTime = l.Spec.RenewTime.Time
			}
			select {
			case out <- lc:
			default:
			}
		}
	}()
	return out, nil
}

// nextHolder waits for the Lease to be taken by anyone but not.
func nextHolder(ctx context.Context, ch <-chan leaseChange, not string, timeout time.Duration) (leaseChange, error) {
	lc, _, err := nextHolderAfterRelease(ctx, ch, not, timeout)
	return lc, err
}

// nextHolderAfterRelease is nextHolder, and also returns the release (the
// Lease written free) seen before it, if any.
func nextHolderAfterRelease(ctx context.Context, ch <-chan leaseChange, not string, timeout time.Duration) (leaseChange, *leaseChange, error) {
	lc, rel, err := func() (leaseChange, *leaseChange, error) {
		t := time.NewTimer(timeout)
		defer t.Stop()
		var rel *leaseChange
		for {
			select {
			case lc, ok := <-ch:
				if !ok {
					return leaseChange{}, rel, errors.New("the bench's Lease watch ended")
				}
				if lc.holder == "" {
					rel = &lc
					continue
				}
				if lc.holder != not {
					return lc, rel, nil
				}
			case <-t.C:
				return leaseChange{}, rel, fmt.Errorf("no new holder within %v", timeout)
			case <-ctx.Done():
				return leaseChange{}, rel, ctx.Err()
			}
		}
	}()
	if err == nil && lc.acquireTime.IsZero() {
		err = fmt.Errorf("the Lease taken by %s has no acquireTime", lc.holder)
	}
	return lc, rel, err
}

func drainChanges(ch <-chan leaseChange) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// PushResult is section 8's data.
type PushResult struct {
	Rounds     int `json:"rounds"`
	Candidates int `json:"candidates"`
	// Latency by "role method" (role: "leader" = the new leader, "follower"
	// = a candidate that neither left nor won): from the Lease's
	// acquireTime to the app's client reading the new state.
	Latency map[string]Dist `json:"latencyFromAcquireTime"`
	// Missed by "role method": rounds where the client had not seen the
	// change 10 s after the Lease write.
	Missed map[string]int `json:"missed,omitempty"`
	// WatchLag: from acquireTime to the bench's own Lease watch delivering
	// the write (the apiserver's and etcd's share, and the bench's).
	WatchLag Dist          `json:"benchLeaseWatchLag"`
	Fanout   *FanoutResult `json:"fanout,omitempty"`
}

func pushKey(role, method string) string { return role + " " + method }

// runPush runs both parts of section 8.
func (e *env) runPush(ctx context.Context, o *options, t framework.Timings) (*PushResult, error) {
	res := &PushResult{Rounds: o.pushRounds, Candidates: o.candidates, Latency: map[string]Dist{}, Missed: map[string]int{}}
	if err := e.runPushLatency(ctx, o, t, res); err != nil {
		return res, err
	}
	f, err := e.runFanout(ctx, o, t)
	res.Fanout = f
	return res, err
}

// runPushLatency: candidates on one Lease, the four apps on each; the
// leader is SIGTERMed rounds times and replaced by a new process.
func (e *env) runPushLatency(ctx context.Context, o *options, t framework.Timings, res *PushResult) error {
	ctx, cancel := context.WithCancel(ctx) // ends the Lease watch
	defer cancel()
	p, leader, err := e.startPool(ctx, sc, "bench-push", t, o.candidates)
	if p != nil {
		defer p.stopAll()
	}
	if err != nil {
		return err
	}
	changes, err := e.watchHolder(ctx, p.ns, p.lease)
	if err != nil {
		return err
	}
	apps := map[*framework.Candidate]*appClients{}
	defer func() {
		for _, a := range apps {
			a.stop()
		}
	}()
	for _, c := range p.members {
		apps[c] = startAppClients(ctx, c)
	}
	lats := map[string][]time.Duration{}
	var lags []time.Duration
	finish := func(err error) error {
		for k, v := range lats {
			res.Latency[k] = NewDist(v, true)
		}
		res.WatchLag = NewDist(lags, true)
		return err
	}
	// allCurrent waits until every app sees holder lead (and the leader's
	// own apps see isLeader).
	allCurrent := func(lead string, timeout time.Duration) error {
		deadline := time.Now().Add(timeout)
		for {
			ok := true
			for c, a := range apps {
				isLead := c.Identity() == lead
				ok = ok && a.current(func(ob pushObs) bool { return ob.holder == lead && ob.isLeader == isLead })
			}
			if ok {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the apps do not all see %s as the leader within %v", lead, timeout)
			}
			if !pause(ctx, 10*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	if err := allCurrent(leader.Identity(), 15*time.Second); err != nil {
		return finish(err)
	}
	const roundTimeout = 10 * time.Second
	for i := 0; i < o.pushRounds; i++ {
		if err := settle(ctx, 300*time.Millisecond, 700*time.Millisecond); err != nil {
			return finish(err)
		}
		if leader.Exited() {
			return finish(fmt.Errorf("round %d: leader %s exited on its own; log:\n%s", i, leader.Instance, leader.LogTail(20)))
		}
		drainChanges(changes)
		t0 := time.Now()
		if err := leader.Terminate(); err != nil {
			return finish(fmt.Errorf("round %d: %w", i, err))
		}
		lc, err := nextHolder(ctx, changes, leader.Identity(), 2*t.LeaseDuration+15*time.Second)
		if err != nil {
			return finish(fmt.Errorf("round %d (SIGTERM %s): %w", i, leader.Instance, err))
		}
		ref := lc.acquireTime
		lags = append(lags, lc.seen.Sub(ref))
		newLeader := p.byIdentity(lc.holder)
		if newLeader == nil {
			return finish(fmt.Errorf("round %d: new holder %s is not a member", i, lc.holder))
		}
		// Wait for every app of the new leader and of the other followers.
		type want struct {
			key string
			ac  *appClient
			ok  func(pushObs) bool
		}
		var wants []want
		for c, a := range apps {
			if c == leader {
				continue
			}
			role, match := "follower", func(ob pushObs) bool { return ob.holder == lc.holder }
			if c == newLeader {
				role, match = "leader", func(ob pushObs) bool { return ob.holder == lc.holder && ob.isLeader }
			}
			for _, m := range pushMethods {
				wants = append(wants, want{pushKey(role, m), a.clients[m], match})
			}
		}
		deadline := ref.Add(roundTimeout)
		got := make([]bool, len(wants))
		for left := len(wants); left > 0; {
			for j, w := range wants {
				if got[j] {
					continue
				}
				if ob, ok := w.ac.firstAfter(t0, w.ok); ok {
					got[j] = true
					left--
					lats[w.key] = append(lats[w.key], ob.at.Sub(ref))
				}
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				for j, w := range wants {
					if !got[j] {
						res.Missed[w.key]++
					}
				}
				break
			}
			if !pause(ctx, 20*time.Millisecond) {
				return finish(ctx.Err())
			}
		}
		e.progress("    push round %d/%d: %s leads; /watch at the leader %s, at a follower %s after the Lease write",
			i+1, o.pushRounds, lc.holder, fmtLast(lats[pushKey("leader", methWatch)]), fmtLast(lats[pushKey("follower", methWatch)]))
		// Replace the old leader by a new process with its own apps.
		old := leader
		apps[old].stop()
		delete(apps, old)
		p.remove(old)
		old.Stop(3 * time.Second)
		c, err := p.start(ctx)
		if err != nil {
			return finish(fmt.Errorf("round %d: restart: %w", i, err))
		}
		apps[c] = startAppClients(ctx, c)
		leader = newLeader
		if err := allCurrent(leader.Identity(), 15*time.Second); err != nil {
			return finish(fmt.Errorf("round %d: %w", i, err))
		}
	}
	return finish(nil)
}

func fmtLast(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a"
	}
	return fmtMs(float64(ds[len(ds)-1]) / 1e6)
}

// ---- 1,000 watchers ----

// FanoutResult is the second part of section 8: many /watch streams on
// one sidecar.
type FanoutResult struct {
	Watchers int `json:"watchers"`
	Rounds   int `json:"rounds"`
	// FromWrite: acquireTime -> each stream read the new holder, every
	// stream of every round. FromFirst: the first stream of the round to
	// read it -> each stream.
	FromWrite Dist `json:"fromWrite"`
	FromFirst Dist `json:"fromFirstWatcher"`
	// Late: streams (of Watchers × Rounds) that read the change more than
	// 50 ms after the write; Missed: never within 10 s.
	Late   int `json:"lateOver50ms"`
	Missed int `json:"missed"`
	// RoundMaxMs: the slowest stream of each round, from the write.
	RoundMaxMs []float64 `json:"roundMaxMs"`
	// The same for the first change of each handoff: the old leader's
	// release (the Lease written free), from its renewTime to each stream
	// reading holder "". Its Missed are streams that never read holder ""
	// (their stream coalesced the two changes: the first event they read
	// named the new holder; the acquisition has its own count).
	Release FanoutEvent `json:"release"`
	// The sidecar serving the streams, idle and with every stream open.
	Idle SidecarMem `json:"idle"`
	Busy SidecarMem `json:"withWatchers"`
}

// FanoutEvent is one kind of change pushed to every stream.
type FanoutEvent struct {
	FromWrite  Dist      `json:"fromWrite"`
	FromFirst  Dist      `json:"fromFirstWatcher"`
	Late       int       `json:"lateOver50ms"`
	Missed     int       `json:"missed"`
	RoundMaxMs []float64 `json:"roundMaxMs"`
}

// SidecarMem is a sidecar's memory and goroutines at one moment.
type SidecarMem struct {
	RSSBytes   int64   `json:"vmRSSBytes"`
	AnonBytes  int64   `json:"rssAnonBytes"`
	Goroutines float64 `json:"goGoroutines"`
	HeapInuse  float64 `json:"goHeapInuseBytes"`
}

// fanoutStats summarises one round: at[i] is when stream i read the
// change (zero: not within the timeout).
type fanoutStats struct {
	fromWrite, fromFirst []time.Duration
	late, missed         int
	max                  time.Duration
}

func summariseFanout(ref time.Time, at []time.Time, bound time.Duration) fanoutStats {
	var s fanoutStats
	var first time.Time
	for _, t := range at {
		if !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	for _, t := range at {
		if t.IsZero() {
			s.missed++
			continue
		}
		d := t.Sub(ref)
		s.fromWrite = append(s.fromWrite, d)
		s.fromFirst = append(s.fromFirst, t.Sub(first))
		s.max = max(s.max, d)
		if d > bound {
			s.late++
		}
	}
	return s
}

// fanWatcher is one /watch stream of the fan-out: it keeps every event's
// raw data (parsed later, to keep the readers cheap).
type fanWatcher struct {
	mu     sync.Mutex
	events []fanEvent
	err    error
}

type fanEvent struct {
	at   time.Time
	data []byte
}

// holderIs reports whether data (a /leader body) names holder.
func holderIs(data []byte, holder string) bool {
	var r struct {
		Holder string `json:"holder"`
	}
	return json.Unmarshal(data, &r) == nil && r.Holder == holder
}

// seen returns when w first read holder at or after t (zero: not yet).
func (w *fanWatcher) seen(t time.Time, holder string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range w.events {
		if !ev.at.Before(t) && holderIs(ev.data, holder) {
			return ev.at
		}
	}
	return time.Time{}
}

func (w *fanWatcher) count() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events), w.err
}

// raiseNoFile lifts the soft open-file limit to at least need (up to the
// hard limit).
func raiseNoFile(need uint64) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur >= need {
		return nil
	}
	if l.Max < need {
		return fmt.Errorf("open-file limit %d (hard) is below the %d the watchers need: raise it (ulimit -Hn)", l.Max, need)
	}
	l.Cur = need
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}

// metricValue returns the value of an unlabelled sample in Prometheus text.
func metricValue(text []byte, name string) (float64, bool) {
	for _, line := range strings.Split(string(text), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || !strings.HasPrefix(rest, " ") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

func readSidecarMem(ctx context.Context, c *framework.Candidate) (SidecarMem, error) {
	var m SidecarMem
	st, err := procStatus(c.Pid())
	if err != nil {
		return m, err
	}
	m.RSSBytes, m.AnonBytes = st["VmRSS"], st["RssAnon"]
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, c.URL+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, fmt.Errorf("%s /metrics: %w", c.Instance, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return m, err
	}
	var ok1, ok2 bool
	m.Goroutines, ok1 = metricValue(b, "go_goroutines")
	m.HeapInuse, ok2 = metricValue(b, "go_memstats_heap_inuse_bytes")
	if !ok1 || !ok2 {
		return m, fmt.Errorf("%s /metrics: no go_goroutines or go_memstats_heap_inuse_bytes", c.Instance)
	}
	return m, nil
}

// releaseFor takes c out of the election for d (POST /release?for=).
func releaseFor(ctx context.Context, c *framework.Candidate, d time.Duration) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/release?for="+d.String(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("POST /release?for=%s: %w", d, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST /release?for=%s: %d %s", d, resp.StatusCode, b)
	}
	return nil
}

// runFanout: candidates on one Lease plus one sidecar out of the election
// (POST /release?for=24h: a follower that never leads, so its streams
// survive every round) serving o.pushWatchers /watch streams; the leader is
// SIGTERMed o.pushFanRounds times.
func (e *env) runFanout(ctx context.Context, o *options, t framework.Timings) (*FanoutResult, error) {
	n := o.pushWatchers
	res := &FanoutResult{Watchers: n, Rounds: o.pushFanRounds}
	if err := raiseNoFile(uint64(n) + 1024); err != nil {
		return res, err
	}
	ctx, cancelWatch := context.WithCancel(ctx) // ends the Lease watch
	defer cancelWatch()
	// Released free (no direct handoff), so that each step-down pushes the
	// two changes this part measures: the release, then the acquisition. A
	// direct handoff pushes one, the handoff write (the holder changes once),
	// which the latency part above measures.
	p, leader, err := e.startPool(ctx, sc, "bench-fanout", t, o.candidates+1, "--direct-handoff=false")
	if p != nil {
		defer p.stopAll()
	}
	if err != nil {
		return res, err
	}
	var host *framework.Candidate
	for _, c := range p.members {
		if c != leader {
			host = c
			break
		}
	}
	if err := releaseFor(ctx, host, 24*time.Hour); err != nil {
		return res, err
	}
	changes, err := e.watchHolder(ctx, p.ns, p.lease)
	if err != nil {
		return res, err
	}
	if !pause(ctx, 2*time.Second) {
		return res, ctx.Err()
	}
	if res.Idle, err = readSidecarMem(ctx, host); err != nil {
		return res, err
	}
	e.progress("    fan-out: %s idle: RSS %s, %0.f goroutines; opening %d /watch streams", host.Instance, fmtMiB(float64(res.Idle.RSSBytes)), res.Idle.Goroutines, n)

	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	tr := &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, MaxIdleConnsPerHost: -1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	watchers := make([]*fanWatcher, n)
	sem := make(chan struct{}, 32) // dials at a time
	for i := range watchers {
		w := &fanWatcher{}
		watchers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			req, _ := http.NewRequestWithContext(wctx, http.MethodGet, host.URL+"/watch", nil)
			resp, err := hc.Do(req)
			<-sem
			if err == nil && resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				err = fmt.Errorf("GET /watch: %d %s", resp.StatusCode, bytes.TrimSpace(b))
			}
			if err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
			defer func() { _ = resp.Body.Close() }()
			err = readSSE(resp.Body, func(at time.Time, data []byte) {
				d := append([]byte(nil), data...)
				w.mu.Lock()
				w.events = append(w.events, fanEvent{at: at, data: d})
				w.mu.Unlock()
			})
			if err != nil && wctx.Err() == nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
			}
		}()
	}
	// Every stream has its first event (the current state).
	deadline := time.Now().Add(60 * time.Second)
	for {
		open := 0
		for _, w := range watchers {
			c, err := w.count()
			if err != nil {
				return res, fmt.Errorf("watcher: %w", err)
			}
			if c > 0 {
				open++
			}
		}
		if open == n {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("only %d of %d /watch streams got their first event within 60s", open, n)
		}
		if !pause(ctx, 50*time.Millisecond) {
			return res, ctx.Err()
		}
	}
	if !pause(ctx, 2*time.Second) {
		return res, ctx.Err()
	}
	if res.Busy, err = readSidecarMem(ctx, host); err != nil {
		return res, err
	}
	e.progress("    fan-out: %d streams open: RSS %s, %0.f goroutines", n, fmtMiB(float64(res.Busy.RSSBytes)), res.Busy.Goroutines)

	const bound = 50 * time.Millisecond
	var fromWrite, fromFirst, relWrite, relFirst []time.Duration
	for i := 0; i < o.pushFanRounds; i++ {
		if err := settle(ctx, 300*time.Millisecond, 700*time.Millisecond); err != nil {
			return res, err
		}
		drainChanges(changes)
		t0 := time.Now()
		if err := leader.Terminate(); err != nil {
			return res, err
		}
		lc, rel, err := nextHolderAfterRelease(ctx, changes, leader.Identity(), 2*t.LeaseDuration+15*time.Second)
		if err != nil {
			return res, fmt.Errorf("fan-out round %d: %w", i, err)
		}
		if rel == nil || rel.renewTime.IsZero() {
			return res, fmt.Errorf("fan-out round %d: no release write with a renewTime seen before %s took the Lease", i, lc.holder)
		}
		at := make([]time.Time, n)
		relAt := make([]time.Time, n)
		deadline := lc.acquireTime.Add(10 * time.Second)
		// Give the streams time before scanning them (the scan competes for
		// the same 2 cores).
		if !pause(ctx, 200*time.Millisecond) {
			return res, ctx.Err()
		}
		for {
			left := 0
			for j, w := range watchers {
				if relAt[j].IsZero() {
					relAt[j] = w.seen(t0, "")
				}
				if at[j].IsZero() {
					at[j] = w.seen(t0, lc.holder)
				}
				if at[j].IsZero() || relAt[j].IsZero() {
					left++
				}
			}
			if left == 0 || time.Now().After(deadline) {
				break
			}
			if !pause(ctx, 50*time.Millisecond) {
				return res, ctx.Err()
			}
		}
		s := summariseFanout(lc.acquireTime, at, bound)
		fromWrite = append(fromWrite, s.fromWrite...)
		fromFirst = append(fromFirst, s.fromFirst...)
		res.Late += s.late
		res.Missed += s.missed
		res.RoundMaxMs = append(res.RoundMaxMs, float64(s.max)/1e6)
		rs := summariseFanout(rel.renewTime, relAt, bound)
		relWrite = append(relWrite, rs.fromWrite...)
		relFirst = append(relFirst, rs.fromFirst...)
		res.Release.Late += rs.late
		res.Release.Missed += rs.missed
		res.Release.RoundMaxMs = append(res.Release.RoundMaxMs, float64(rs.max)/1e6)
		e.progress("    fan-out round %d/%d: slowest of %d streams %s after the release write (%d later than %v, %d missed), %s after %s's acquiring write %s later (%d later than %v, %d missed)",
			i+1, o.pushFanRounds, n, fmtMs(float64(rs.max)/1e6), rs.late, bound, rs.missed,
			fmtMs(float64(s.max)/1e6), lc.holder, fmtMs(float64(lc.acquireTime.Sub(rel.renewTime))/1e6), s.late, bound, s.missed)
		newLeader := p.byIdentity(lc.holder)
		if newLeader == nil {
			return res, fmt.Errorf("fan-out round %d: new holder %s is not a member", i, lc.holder)
		}
		old := leader
		p.remove(old)
		old.Stop(3 * time.Second)
		if _, err := p.start(ctx); err != nil {
			return res, fmt.Errorf("fan-out round %d: restart: %w", i, err)
		}
		leader = newLeader
		if err := waitToken(ctx, leader, 10*time.Second); err != nil {
			return res, err
		}
		// Free the events read so far (the next round looks after t0 only).
		for _, w := range watchers {
			w.mu.Lock()
			w.events = w.events[len(w.events):]
			w.mu.Unlock()
		}
	}
	res.FromWrite = NewDist(fromWrite, false)
	res.FromFirst = NewDist(fromFirst, false)
	res.Release.FromWrite = NewDist(relWrite, false)
	res.Release.FromFirst = NewDist(relFirst, false)
	return res, nil
}

// ---- rows ----

func (r *PushResult) rows() []Row {
	var rows []Row
	dist := func(role, m string) *Dist {
		d, ok := r.Latency[pushKey(role, m)]
		if !ok || d.N == 0 {
			return nil
		}
		return &d
	}
	cell := func(d *Dist, v float64) string {
		if d == nil {
			return "n/a"
		}
		return fmtMs(v)
	}
	for _, role := range []string{"leader", "follower"} {
		who := "the new leader"
		if role == "follower" {
			who = "a follower"
		}
		base := dist(role, methPoll1s)
		for _, m := range []string{methWatch, methLongPoll, methPoll100} {
			d := dist(role, m)
			name := map[string]string{methWatch: "GET /watch (SSE)", methLongPoll: "GET /leader?wait=30s long-poll", methPoll100: "GET /leader every 100 ms"}[m]
			p50, p99 := Row{Metric: fmt.Sprintf("%s, app at %s: Lease write -> app, p50", name, who)}, Row{}
			n := 0
			if d != nil {
				n = d.N
			}
			p99.Metric = fmt.Sprintf("%s, app at %s: p99 (n=%d: the maximum below n=100)", name, who, n)
			p50.Ours, p99.Ours = "n/a", "n/a"
			p50.Baseline, p99.Baseline = "n/a", "n/a"
			p50.Ratio, p99.Ratio = "n/a", "n/a"
			if d != nil {
				p50.Ours, p99.Ours = cell(d, d.P50), cell(d, d.P99)
			}
			if base != nil {
				p50.Baseline, p99.Baseline = cell(base, base.P50), cell(base, base.P99)
			}
			if d != nil && base != nil {
				p50.Ratio, p99.Ratio = ratio(d.P50, base.P50), ratio(d.P99, base.P99)
			}
			if d != nil && m != methPoll100 {
				goalPushP99.judge(&p99, missedIf(r.Missed[pushKey(role, m)] > 0, d.P99), math.NaN())
			}
			rows = append(rows, p50, p99)
		}
	}
	if r.WatchLag.N > 0 {
		rows = append(rows, Row{Metric: "the bench's own Lease watch: Lease write -> event, p50 / p99 (the apiserver's share)",
			Ours: fmt.Sprintf("%s / %s", fmtMs(r.WatchLag.P50), fmtMs(r.WatchLag.P99)), Baseline: "n/a", Ratio: "n/a"})
	}
	if f := r.Fanout; f != nil && f.FromWrite.N > 0 {
		total := f.Watchers * f.Rounds
		na := func(row Row) Row { row.Baseline, row.Ratio = "n/a", "n/a"; return row }
		fanout := func(row Row, late float64) Row { goalPushFanout.judge(&row, late, math.NaN()); return row }
		perStreamRSS := func(row Row, bytes float64) Row { goalPushRSS.judge(&row, bytes/1024, math.NaN()); return row }
		kib := func(v float64) string { return fmt.Sprintf("%.1f KiB", v/1024) }
		ppm := func(d Dist) string { return fmt.Sprintf("%s / %s / %s", fmtMs(d.P50), fmtMs(d.P99), fmtMs(d.Max)) }
		if rl := f.Release; rl.FromWrite.N > 0 {
			rows = append(rows,
				fanout(na(Row{Metric: fmt.Sprintf("%d /watch streams on one follower, 1st change of a handoff (the old leader's release write): Lease write -> each stream, p50 / p99 / max (n=%d)", f.Watchers, rl.FromWrite.N),
					Ours: ppm(rl.FromWrite)}), float64(rl.Late)),
				na(Row{Metric: "release: first stream -> each stream, p50 / p99 / max", Ours: ppm(rl.FromFirst)}),
				na(Row{Metric: "release: reads later than 50 ms after the write (coalesced: the stream's first event already named the new holder)",
					Ours: fmt.Sprintf("%d of %d (coalesced %d)", rl.Late, total, rl.Missed)}),
			)
		}
		rows = append(rows,
			fanout(na(Row{Metric: fmt.Sprintf("%d /watch streams, 2nd change (the new leader's acquiring write, while the 1st is still being pushed): Lease write -> each stream, p50 / p99 / max (n=%d)", f.Watchers, f.FromWrite.N),
				Ours: ppm(f.FromWrite)}), float64(f.Late+f.Missed)),
			na(Row{Metric: "acquisition: first stream -> each stream, p50 / p99 / max", Ours: ppm(f.FromFirst)}),
			na(Row{Metric: "acquisition: reads later than 50 ms after the write (missed: none within 10 s)", Ours: fmt.Sprintf("%d of %d (missed %d)", f.Late, total, f.Missed)}),
			perStreamRSS(na(Row{Metric: fmt.Sprintf("memory per stream: (VmRSS with %d streams − idle) / %d", f.Watchers, f.Watchers),
				Ours: fmt.Sprintf("%s (%s -> %s)", kib(f.rssPerStream()), fmtMiB(float64(f.Idle.RSSBytes)), fmtMiB(float64(f.Busy.RSSBytes)))}), f.rssPerStream()),
			na(Row{Metric: "Go heap in use per stream (go_memstats_heap_inuse_bytes)",
				Ours: fmt.Sprintf("%s (%s -> %s)", kib((f.Busy.HeapInuse-f.Idle.HeapInuse)/float64(f.Watchers)), fmtMiB(f.Idle.HeapInuse), fmtMiB(f.Busy.HeapInuse))}),
			na(Row{Metric: "goroutines per stream (go_goroutines)",
				Ours: fmt.Sprintf("%.2f (%.0f -> %.0f)", (f.Busy.Goroutines-f.Idle.Goroutines)/float64(f.Watchers), f.Idle.Goroutines, f.Busy.Goroutines)}),
		)
	}
	return rows
}

// rssPerStream is the VmRSS the streams added, in bytes per stream.
func (f *FanoutResult) rssPerStream() float64 {
	return float64(f.Busy.RSSBytes-f.Idle.RSSBytes) / float64(f.Watchers)
}

// notes lists what the table leaves out.
func (r *PushResult) notes() []string {
	var out []string
	if len(r.Missed) > 0 {
		keys := make([]string, 0, len(r.Missed))
		for k := range r.Missed {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.Missed[k]))
		}
		out = append(out, "rounds where an app had not seen the change 10 s after the Lease write (left out of its percentiles): "+strings.Join(parts, ", "))
	}
	var all []string
	for _, role := range []string{"leader", "follower"} {
		if d, ok := r.Latency[pushKey(role, methPoll1s)]; ok && d.N > 0 {
			all = append(all, fmt.Sprintf("%s p50 %s, p99 %s, max %s", role, fmtMs(d.P50), fmtMs(d.P99), fmtMs(d.Max)))
		}
	}
	if len(all) > 0 {
		out = append(out, "baseline, GET /leader every 1 s: "+strings.Join(all, "; "))
	}
	if r.Fanout != nil && len(r.Fanout.RoundMaxMs) > 0 {
		join := func(vs []float64) string {
			var ms []string
			for _, v := range vs {
				ms = append(ms, fmtMs(v))
			}
			return strings.Join(ms, ", ")
		}
		out = append(out, "fan-out, slowest stream of each handoff from the release write: "+join(r.Fanout.Release.RoundMaxMs)+"; from the acquiring write: "+join(r.Fanout.RoundMaxMs))
	}
	return out
}
