package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The push endpoints (GET /watch, GET /leader?wait=) on real sidecars. All
// processes run on this machine, so the times the test receives events and
// the Lease's acquireTime are on one clock.

// pushBound is a generous bound for a SIGTERM handoff to reach an app
// (the benchmark measures the tight number).
const pushBound = 10 * time.Second

// leaderEvent is one /watch event as received by the test.
type leaderEvent struct {
	at time.Time // when the test read it
	id string
	localapi.LeaderResponse
}

// watchClient reads a sidecar's /watch stream in the background.
type watchClient struct {
	name   string
	events chan leaderEvent
	errc   chan error
}

func startWatch(t *testing.T, ctx context.Context, c *framework.Candidate) *watchClient {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.URL+"/watch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s/watch: %v", c.Instance, err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		t.Fatalf("GET %s/watch: %d %s", c.Instance, resp.StatusCode, b)
	}
	w := &watchClient{name: c.Instance, events: make(chan leaderEvent, 1024), errc: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(w.events)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		var id string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				id = v
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				ev := leaderEvent{at: time.Now(), id: id}
				if err := json.Unmarshal([]byte(d), &ev.LeaderResponse); err != nil {
					w.errc <- err
					return
				}
				w.events <- ev
			}
		}
	}()
	t.Cleanup(func() {
		_ = resp.Body.Close()
		<-done
	})
	return w
}

// waitEvent returns the first event (from now on) that matches.
func (w *watchClient) waitEvent(t *testing.T, timeout time.Duration, what string, match func(leaderEvent) bool) leaderEvent {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				select {
				case err := <-w.errc:
					t.Fatalf("%s's stream: %v", w.name, err)
				default:
				}
				t.Fatalf("%s's stream ended before %s", w.name, what)
			}
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("%s's stream: no %s within %v", w.name, what, timeout)
		}
	}
}

func TestFollowerAndLeaderStreamsSeeTheLeaderChangeOnSIGTERM(t *testing.T) {
	g := newGroup(t, testTimings)
	cs := g.start("pod-a", "pod-b", "pod-c")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitAllSee(leader, tok.Token)
	watches := map[*framework.Candidate]*watchClient{}
	for _, c := range cs {
		w := startWatch(t, g.ctx, c)
		ev := w.waitEvent(t, 5*time.Second, "the current state", func(leaderEvent) bool { return true })
		if ev.Holder != leader.Identity() || ev.IsLeader != (c == leader) || !ev.Candidate {
			t.Fatalf("%s's first event: %+v (leader %s)", c.Instance, ev.LeaderResponse, leader.Instance)
		}
		watches[c] = w
	}

	sent := time.Now()
	if err := leader.Terminate(); err != nil {
		t.Fatal(err)
	}
	// The leader's own stream says it stopped leading (before it exits).
	off := watches[leader].waitEvent(t, pushBound, "isLeader:false", func(ev leaderEvent) bool { return !ev.IsLeader })
	newLeader, newTok := g.waitLeader(pushBound, leader)
	if newTok.Token != tok.Token+1 {
		t.Fatalf("new token %d, want %d", newTok.Token, tok.Token+1)
	}
	on := watches[newLeader].waitEvent(t, pushBound, "isLeader:true with the new token", func(ev leaderEvent) bool {
		return ev.IsLeader && ev.Token == newTok.Token
	})
	for _, c := range cs {
		if c == leader || c == newLeader {
			continue
		}
		ev := watches[c].waitEvent(t, pushBound, "the new holder", func(ev leaderEvent) bool { return ev.Holder == newLeader.Identity() })
		if ev.IsLeader || ev.LeaseTransitions < newTok.Token {
			t.Fatalf("the other follower's event: %+v", ev.LeaderResponse)
		}
		t.Logf("SIGTERM -> old leader's stream isLeader:false %v, new leader's stream isLeader:true %v, other follower's stream %v",
			off.at.Sub(sent).Round(time.Millisecond), on.at.Sub(sent).Round(time.Millisecond), ev.at.Sub(sent).Round(time.Millisecond))
	}
	if !off.at.Before(on.at) {
		t.Fatalf("the new leader's stream said leading (%v) before the old leader's said it stopped (%v)", on.at, off.at)
	}
}

func TestLeaderCutOffFromTheAPIServerSaysNotLeaderOnItsStreamBeforeAnyoneAcquires(t *testing.T) {
	g := newGroup(t, testTimings)
	upstream, err := framework.UpstreamOf(env.cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := framework.StartTCPProxy(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	kc := filepath.Join(t.TempDir(), "kubeconfig-proxied")
	if err := framework.WriteProxiedKubeconfig(env.cp.Kubeconfig, kc, proxy.Addr()); err != nil {
		t.Fatal(err)
	}
	spec := g.Template
	spec.Identity, spec.Kubeconfig = "pod-a", kc
	a, err := g.StartSpec(g.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := g.waitLeader(startupTimeout); l != a {
		t.Fatalf("%s leads, want %s (the first candidate)", l.Instance, a.Instance)
	}
	others := g.start("pod-b", "pod-c")
	_, tok := g.waitLeader(startupTimeout)
	g.waitAllSee(a, tok.Token)
	wa := startWatch(t, g.ctx, a)
	wa.waitEvent(t, 5*time.Second, "isLeader:true", func(ev leaderEvent) bool { return ev.IsLeader })
	var wo []*watchClient
	for _, c := range others {
		w := startWatch(t, g.ctx, c)
		w.waitEvent(t, 5*time.Second, "the current state", func(leaderEvent) bool { return true })
		wo = append(wo, w)
	}

	cut := time.Now()
	proxy.Blackhole(false) // a partition: a's connections stall
	off := wa.waitEvent(t, testTimings.LeaseDuration+pushBound, "isLeader:false", func(ev leaderEvent) bool { return !ev.IsLeader })
	newLeader, newTok := g.waitLeader(testTimings.LeaseDuration+pushBound, a)
	var on leaderEvent
	for i, c := range others {
		if c == newLeader {
			on = wo[i].waitEvent(t, pushBound, "isLeader:true", func(ev leaderEvent) bool { return ev.IsLeader && ev.Token == newTok.Token })
		}
	}
	l, err := env.cp.GetLease(g.ctx, g.namespace, g.lease)
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.AcquireTime == nil || framework.HolderOf(l) != newLeader.Identity() {
		t.Fatalf("Lease after the takeover: %+v", l.Spec)
	}
	acquired := l.Spec.AcquireTime.Time
	t.Logf("cut off at 0; a's stream isLeader:false at %v; %s acquired (Lease acquireTime) at %v, its stream said so at %v",
		off.at.Sub(cut).Round(time.Millisecond), newLeader.Instance, acquired.Sub(cut).Round(time.Millisecond), on.at.Sub(cut).Round(time.Millisecond))
	if !off.at.Before(acquired) {
		t.Fatalf("a's stream said isLeader:false at %v, not before %s acquired at %v", off.at, newLeader.Instance, acquired)
	}
	if !off.at.Before(on.at) {
		t.Fatalf("a's stream said isLeader:false at %v, after the new leader's stream said leading at %v", off.at, on.at)
	}
	proxy.Heal()
}

func TestLongPollOnAFollowerReturnsOnALeaderChange(t *testing.T) {
	g := newGroup(t, testTimings)
	cs := g.start("pod-a", "pod-b")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitAllSee(leader, tok.Token)
	follower := cs[0]
	if follower == leader {
		follower = cs[1]
	}
	resp, err := http.Get(follower.URL + "/leader")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	etag := resp.Header.Get("ETag")

	type result struct {
		code int
		etag string
		body localapi.LeaderResponse
		at   time.Time
		err  error
	}
	done := make(chan result, 1)
	go func() {
		req, _ := http.NewRequestWithContext(g.ctx, "GET", follower.URL+"/leader?wait=5m", nil)
		req.Header.Set("If-None-Match", etag)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		r := result{code: resp.StatusCode, etag: resp.Header.Get("ETag"), at: time.Now()}
		r.err = json.NewDecoder(resp.Body).Decode(&r.body)
		done <- r
	}()
	// Nothing changes while the leader leads: the long-poll waits.
	if err := framework.Consistently(g.ctx, framework.PollInterval, 3*testTimings.RetryPeriod, "the long-poll waits", func(context.Context) error {
		select {
		case r := <-done:
			done <- r
			return fmt.Errorf("the long-poll answered %d %+v with nothing changed", r.code, r.body)
		default:
			return nil
		}
	}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	if err := leader.Terminate(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.code != 200 || r.etag == etag || r.body.Holder == leader.Identity() {
			t.Fatalf("long-poll after the SIGTERM: %d %s %+v (%v)", r.code, r.etag, r.body, r.err)
		}
		t.Logf("the follower's long-poll returned %v after the SIGTERM: %+v", r.at.Sub(sent).Round(time.Millisecond), r.body)
	case <-time.After(pushBound):
		t.Fatalf("the long-poll did not return within %v of the SIGTERM", pushBound)
	}
}
