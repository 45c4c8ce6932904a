package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// App health timings of these tests: a failing app is judged unhealthy after
// appHealthFailures × appHealthPeriod.
const (
	appHealthPeriod   = 200 * time.Millisecond
	appHealthFailures = 2
)

// testApp is a real HTTP health endpoint in the test process, on
// 127.0.0.1, whose answer the test switches (200 or 503).
type testApp struct {
	srv     *httptest.Server
	healthy atomic.Bool
	probes  atomic.Int64
}

func newTestApp(t *testing.T, healthy bool) *testApp {
	a := &testApp{}
	a.healthy.Store(healthy)
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.probes.Add(1)
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		if !a.healthy.Load() {
			http.Error(w, "app is failing", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *testApp) url() string { return a.srv.URL + "/healthz" }

// startWithApp starts a sidecar that probes url.
func (g *electionGroup) startWithApp(identity, url string) *framework.Candidate {
	g.t.Helper()
	spec := g.Template
	spec.Identity = identity
	spec.ExtraArgs = append(spec.ExtraArgs, "--app-health-url="+url,
		fmt.Sprintf("--app-health-period=%v", appHealthPeriod), fmt.Sprintf("--app-health-timeout=%v", appHealthPeriod/2),
		fmt.Sprintf("--app-health-failure-threshold=%d", appHealthFailures))
	c, err := g.StartSpec(g.ctx, spec)
	if err != nil {
		g.t.Fatal(err)
	}
	return c
}

// metric returns the value of a metric on c's /metrics whose only label is
// the sidecar's lease="<namespace>/<name>".
func metric(ctx context.Context, c *framework.Candidate, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Spec.HTTPAddress+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	series := fmt.Sprintf("%s{lease=%q}", name, c.Spec.Namespace+"/"+c.Spec.LeaseName)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("%s: no %s in /metrics", c, series)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// leaseEvent waits for an Event on the group's Lease whose message contains
// all parts.
func (g *electionGroup) leaseEvent(timeout time.Duration, parts ...string) {
	g.t.Helper()
	g.waitFor(timeout, fmt.Sprintf("an Event on the Lease with %q", parts), func(ctx context.Context) error {
		evs, err := env.cp.Client.CoreV1().Events(g.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind != "Lease" || e.InvolvedObject.Name != g.lease {
				continue
			}
			seen = append(seen, e.Message)
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(e.Message, p)
			}
			if ok {
				return nil
			}
		}
		return fmt.Errorf("events on the Lease: %q", seen)
	})
}

// TestFailingAppHealthMovesLeadership: the leader whose app starts failing
// steps down once its probe has failed --app-health-failure-threshold times
// (Event "stepped down: app unhealthy", elector_app_healthy 0), the healthy
// follower takes over on the release, an unhealthy pod does not take the
// free Lease, a pod whose app was never healthy never takes it, and the
// first pod leads again once its app recovers.
func TestFailingAppHealthMovesLeadership(t *testing.T) {
	g := newGroup(t, testTimings)
	appA, appB, appC := newTestApp(t, true), newTestApp(t, true), newTestApp(t, false)
	apps := map[string]*testApp{"pod-a": appA, "pod-b": appB}
	a, b := g.startWithApp("pod-a", appA.url()), g.startWithApp("pod-b", appB.url())
	never := g.startWithApp("pod-c", appC.url()) // its app never passes a probe

	leader, tok := g.waitLeader(startupTimeout)
	follower := a
	if leader == a {
		follower = b
	}
	if leader == never {
		t.Fatalf("%s leads with token %d, but its app was never healthy", never, tok.Token)
	}
	g.waitAllSee(leader, tok.Token)
	if v, err := metric(g.ctx, leader, "elector_app_healthy"); err != nil || v != 1 {
		t.Fatalf("leader's elector_app_healthy = %v (%v), want 1", v, err)
	}

	// The leader's app fails: the healthy follower takes over after the
	// leader's release (not at expiry: a leader that stops renewing would
	// keep its token until then).
	failedAt := time.Now()
	apps[leader.Identity()].healthy.Store(false)
	next, ntok := g.waitLeader(time.Duration(appHealthFailures)*appHealthPeriod+testTimings.LeaseDuration+failoverSlack, leader)
	if next != follower {
		t.Fatalf("%s took over with token %d, want %s (the one healthy follower)", next, ntok.Token, follower)
	}
	if ntok.Token <= tok.Token {
		t.Fatalf("new token %d not above the old %d", ntok.Token, tok.Token)
	}
	t.Logf("%s's app failed at %s; %s leads with token %d after %v", leader, failedAt.Format("15:04:05.000"), next, ntok.Token, time.Since(failedAt).Round(time.Millisecond))
	g.leaseEvent(10*time.Second, leader.Identity()+" stepped down: app unhealthy: GET "+apps[leader.Identity()].url()+": status 503")
	// Released, or handed to the healthy follower (the direct handoff).
	g.leaseEvent(10*time.Second, leader.Identity()+" ", "leadership (token ", "stepped down: app unhealthy")
	g.waitFor(5*time.Second, "the old leader's app metrics", func(ctx context.Context) error {
		healthy, err := metric(ctx, leader, "elector_app_healthy")
		if err != nil {
			return err
		}
		failures, err := metric(ctx, leader, "elector_app_health_probe_failures_total")
		if err != nil {
			return err
		}
		releases, err := metric(ctx, leader, "elector_releases_total")
		if err != nil {
			return err
		}
		if healthy != 0 || failures < appHealthFailures || releases != 1 {
			return fmt.Errorf("elector_app_healthy %v, probe failures %v, releases %v; want 0, >= %d, 1", healthy, failures, releases, appHealthFailures)
		}
		return nil
	})
	st, err := leader.Leader(g.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.IsLeader || st.Candidate || st.AppHealthy == nil || *st.AppHealthy || !strings.HasPrefix(st.NotCandidate, "app unhealthy: ") {
		t.Fatalf("the old leader's /leader %+v (appHealthy %v): want isLeader false, candidate false, appHealthy false, notCandidate \"app unhealthy: ...\"", st, st.AppHealthy)
	}
	if st, err := never.Leader(g.ctx); err != nil || st.Candidate || st.AppHealthy == nil || *st.AppHealthy {
		t.Fatalf("the never-healthy pod's /leader %+v (err %v): want candidate false, appHealthy false", st, err)
	}
	if st, err := next.Leader(g.ctx); err != nil || !st.Candidate || st.AppHealthy == nil || !*st.AppHealthy {
		t.Fatalf("the new leader's /leader %+v (err %v): want candidate true, appHealthy true", st, err)
	}

	// The new leader stops (releasing the Lease): neither the unhealthy
	// former leader nor the never-healthy pod takes the free Lease.
	if code := next.Stop(3 * time.Second); code != 0 {
		t.Fatalf("%s exited %d on SIGTERM", next, code)
	}
	if err := framework.Consistently(g.ctx, framework.PollInterval, 2*testTimings.LeaseDuration, "nobody takes the Lease while every running pod's app is unhealthy", func(ctx context.Context) error {
		for _, c := range []*framework.Candidate{leader, never} {
			if r := c.Token(ctx); r.Valid() {
				return fmt.Errorf("%s serves token %d", c, r.Token)
			}
		}
		l, err := env.cp.GetLease(ctx, g.namespace, g.lease)
		if err != nil {
			return err
		}
		if h, _ := framework.LeaseHolder(l); h != "" {
			return fmt.Errorf("the Lease names %q", h)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, g.Describe(g.ctx))
	}

	// The app recovers: that pod campaigns again and leads.
	apps[leader.Identity()].healthy.Store(true)
	back, btok := g.waitLeader(time.Duration(appHealthFailures)*appHealthPeriod + startupTimeout)
	if back != leader || btok.Token <= ntok.Token {
		t.Fatalf("%s leads with token %d after the recovery; want %s with a token above %d", back, btok.Token, leader, ntok.Token)
	}
	g.leaseEvent(10*time.Second, leader.Identity()+" campaigns again: app healthy")
	if st, err := back.Leader(g.ctx); err != nil || !st.Candidate || st.AppHealthy == nil || !*st.AppHealthy {
		t.Fatalf("the recovered leader's /leader %+v (err %v): want candidate true, appHealthy true", st, err)
	}

	// The never-healthy pod was probed all along and never led.
	if appC.probes.Load() == 0 {
		t.Fatalf("%s never probed its app", never)
	}
	g.waitSampledSince(time.Now())
	for _, term := range g.Sampler.Terms() {
		if term.Target == never.Instance {
			t.Fatalf("%s served token %d although its app was never healthy", never, term.Token)
		}
	}
}
