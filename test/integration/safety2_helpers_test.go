package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Helpers of the tests of issue 23 ("Safety, round 2"): the token's promise
// read from the app's side (every answer's expiresInMs is a claim that no
// other process may break), the diagnostics a sidecar gives when it cannot
// lead or shares its identity, and the Lease's election record.

// leaderDiagnostics is the part of GET /leader these tests read, decoded on
// its own: identityCollision and cannotLead say what keeps a sidecar from
// leading safely.
type leaderDiagnostics struct {
	IsLeader          bool   `json:"isLeader"`
	Holder            string `json:"holder"`
	LeaseTransitions  int64  `json:"leaseTransitions"`
	IdentityCollision string `json:"identityCollision"`
	CannotLead        string `json:"cannotLead"`
}

func diagnostics(ctx context.Context, c *framework.Candidate) (leaderDiagnostics, error) {
	var d leaderDiagnostics
	body, err := getBody(ctx, c, "/leader")
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return d, fmt.Errorf("%s: GET /leader: decode %q: %w", c.Instance, body, err)
	}
	return d, nil
}

func getBody(ctx context.Context, c *framework.Candidate, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.API.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: GET %s: %w", c.Instance, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: GET %s: %w", c.Instance, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: GET %s: status %d: %s", c.Instance, path, resp.StatusCode, b)
	}
	return b, nil
}

// metricValue returns the value of the first series of name on c's
// /metrics, whatever its labels.
func metricValue(ctx context.Context, c *framework.Candidate, name string) (float64, error) {
	b, err := getBody(ctx, c, "/metrics")
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(?:\{[^}]*\})? (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("%s: no %s in /metrics", c.Instance, name)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// answerSince waits until the sampler holds a valid /token answer of c sent
// at or after since (the app holds a fresh token) and returns it.
func (g *electionGroup) answerSince(c *framework.Candidate, since time.Time) framework.Sample {
	g.t.Helper()
	var got framework.Sample
	g.waitFor(5*time.Second, "a valid /token answer of "+c.Instance+" sampled after "+g.Sampler.Rel(since), func(context.Context) error {
		for _, s := range g.Sampler.SamplesOf(c.Instance) {
			if s.Valid() && !s.Sent.Before(since) {
				got = s
				return nil
			}
		}
		return errors.New("none yet")
	})
	return got
}

// lastClaim returns the valid answer of target whose claim (ClaimEnd) ends
// last, and that end; ok false if target never served a token.
func (g *electionGroup) lastClaim(target string, releases []framework.ReleaseCall) (framework.Sample, time.Time, bool) {
	var best framework.Sample
	var end time.Time
	found := false
	for _, s := range g.Sampler.SamplesOf(target) {
		if !s.Valid() {
			continue
		}
		if e := framework.ClaimEnd(s, releases); !found || e.After(end) {
			best, end, found = s, e, true
		}
	}
	return best, end, found
}

// checkClaims fails the test if a process served a higher token while
// another process's answer still claimed validity (framework.CheckClaims),
// over every sample so far; releases are the POST /release calls the test
// sent. It returns how many valid answers it checked.
func (g *electionGroup) checkClaims(releases []framework.ReleaseCall) int {
	g.t.Helper()
	samples := g.Sampler.Samples()
	valid := 0
	for _, s := range samples {
		if s.Valid() {
			valid++
		}
	}
	vs := framework.CheckClaims(samples, releases, g.Sampler.Start)
	if len(vs) == 0 {
		return valid
	}
	var b strings.Builder
	for i, v := range vs {
		if i == 20 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(vs)-20)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	g.t.Errorf("%d broken claim(s) over %d valid /token answers: a process served a higher token while another's answer still claimed validity:\n%sterms:\n%s",
		len(vs), valid, b.String(), framework.FormatTerms(g.Sampler.Terms(), g.Sampler.Start))
	return valid
}

// releaseRecord decodes the Lease's release record (the annotation a
// holder's own release writes); ok false if it has none.
func releaseRecord(l *coordinationv1.Lease) (election.ReleaseRecord, bool) {
	var r election.ReleaseRecord
	v, ok := l.Annotations[election.ReleasedAnnotation]
	if !ok || json.Unmarshal([]byte(v), &r) != nil {
		return r, false
	}
	return r, true
}

// stepDownRecord decodes what a leader's step-down wrote: a release
// record (the Lease written free) or, with the direct handoff, a handoff
// record (the Lease written held by a successor that has not accepted
// yet). Both name the token given up and the validity its app still held.
func stepDownRecord(l *coordinationv1.Lease) (token, waitMs int64, handoff, ok bool) {
	if r, ok := releaseRecord(l); ok && framework.HolderOf(l) == "" {
		return r.Token, r.WaitMs, false, true
	}
	var h election.HandoffRecord
	v, found := l.Annotations[election.HandoffAnnotation]
	if !found || json.Unmarshal([]byte(v), &h) != nil {
		return 0, 0, false, false
	}
	return h.Token, h.WaitMs, true, true
}

// steppedDown: l is a leader's step-down (a release or a handoff).
func steppedDown(l *coordinationv1.Lease) bool {
	_, _, _, ok := stepDownRecord(l)
	return ok
}

// acquiredAfter: l is the next term after the step-down sd: a higher count,
// or the successor's acceptance of the handoff sd (the same count, the
// handoff record gone).
func acquiredAfter(sd, l *coordinationv1.Lease) bool {
	if framework.HolderOf(l) == "" || steppedDown(l) {
		return false
	}
	_, _, handoff, _ := stepDownRecord(sd)
	return framework.TransitionsOf(l) > framework.TransitionsOf(sd) ||
		(handoff && framework.TransitionsOf(l) == framework.TransitionsOf(sd) && framework.HolderOf(l) == framework.HolderOf(sd))
}

// watchLease opens a watch on the group's Lease from its current version.
func (g *electionGroup) watchLease() (watch.Interface, *coordinationv1.Lease) {
	g.t.Helper()
	leases := env.cp.Client.CoordinationV1().Leases(g.namespace)
	cur, err := leases.Get(g.ctx, g.lease, metav1.GetOptions{})
	if err != nil {
		g.t.Fatal(err)
	}
	w, err := leases.Watch(g.ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", g.lease).String(),
		ResourceVersion: cur.ResourceVersion,
	})
	if err != nil {
		g.t.Fatalf("watch the Lease: %v", err)
	}
	return w, cur
}

// leaseHistory records every version of the group's Lease from the moment
// it starts (a watch, reopened from the last version seen if it ends).
type leaseHistory struct {
	mu       sync.Mutex
	versions []*coordinationv1.Lease
	err      error
	stop     context.CancelFunc
	done     chan struct{}
}

func (g *electionGroup) recordLease() *leaseHistory {
	g.t.Helper()
	leases := env.cp.Client.CoordinationV1().Leases(g.namespace)
	cur, err := leases.Get(g.ctx, g.lease, metav1.GetOptions{})
	if err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(g.ctx)
	selector := fields.OneTermEqualSelector("metadata.name", g.lease).String()
	w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: cur.ResourceVersion})
	if err != nil {
		cancel()
		g.t.Fatalf("watch the Lease: %v", err)
	}
	h := &leaseHistory{versions: []*coordinationv1.Lease{cur}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		rv := cur.ResourceVersion
		for {
			for ev := range w.ResultChan() {
				if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type != watch.Error {
					h.mu.Lock()
					if ev.Type != watch.Deleted {
						h.versions = append(h.versions, l)
					}
					h.mu.Unlock()
					rv = l.ResourceVersion
				}
			}
			w.Stop()
			if ctx.Err() != nil {
				return
			}
			var err error
			w, err = leases.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: rv})
			if err != nil {
				h.mu.Lock()
				h.err = err
				h.mu.Unlock()
				return
			}
		}
	}()
	g.t.Cleanup(h.close)
	return h
}

func (h *leaseHistory) close() {
	h.stop()
	<-h.done
}

// Versions returns the versions recorded so far, oldest first, and the
// watch's error if it could not be reopened.
func (h *leaseHistory) Versions() ([]*coordinationv1.Lease, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*coordinationv1.Lease(nil), h.versions...), h.err
}

// warningEvents returns the Warning Events on the group's Lease.
func (g *electionGroup) warningEvents(ctx context.Context) ([]corev1.Event, error) {
	evs, err := env.cp.Client.CoreV1().Events(g.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning && e.InvolvedObject.Kind == "Lease" && e.InvolvedObject.Name == g.lease {
			out = append(out, e)
		}
	}
	return out, nil
}

// waitWarning waits for a Warning Event on the Lease whose message contains
// every part, and returns its message.
func (g *electionGroup) waitWarning(timeout time.Duration, parts ...string) string {
	g.t.Helper()
	var msg string
	g.waitFor(timeout, fmt.Sprintf("a Warning Event on the Lease with %q", parts), func(ctx context.Context) error {
		evs, err := g.warningEvents(ctx)
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range evs {
			seen = append(seen, e.Message)
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(e.Message, p)
			}
			if ok {
				msg = e.Message
				return nil
			}
		}
		return fmt.Errorf("Warning Events on the Lease: %q", seen)
	})
	return msg
}

// pause SIGSTOPs c and makes sure it is resumed when the test ends.
func (g *electionGroup) pause(c *framework.Candidate) (resume func()) {
	g.t.Helper()
	if err := c.Pause(); err != nil {
		g.t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := c.Resume(); err != nil && !c.Exited() {
				g.t.Errorf("SIGCONT %s: %v", c.Instance, err)
			}
		})
	}
	g.t.Cleanup(resume)
	return resume
}

// resumedFollows resumes a paused former leader and waits until its
// /leader names next as holder; it fails the test if the resumed process
// serves a token meanwhile.
func (g *electionGroup) resumedFollows(old, next *framework.Candidate, resume func()) {
	g.t.Helper()
	resume()
	resumedAt := time.Now()
	var served []string
	g.waitFor(10*time.Second, "the resumed "+old.Instance+" to follow "+next.Instance, func(ctx context.Context) error {
		if r := old.Token(ctx); r.Valid() {
			served = append(served, fmt.Sprintf("%s at +%v", r, r.Sent.Sub(resumedAt).Round(time.Millisecond)))
		}
		st, err := old.Leader(ctx)
		if err != nil {
			return err
		}
		if st.IsLeader || st.Holder != next.Identity() {
			return fmt.Errorf("/leader isLeader=%v holder=%q", st.IsLeader, st.Holder)
		}
		return nil
	})
	if len(served) > 0 {
		g.t.Fatalf("the resumed %s served tokens: %v", old.Instance, served)
	}
}

// claimsSummary says, for one handoff, until when the old process's answers
// claimed validity and when the next process first served, relative to
// the trigger.
func (g *electionGroup) claimsSummary(old *framework.Candidate, trigger time.Time, releases []framework.ReleaseCall) (string, time.Time) {
	g.t.Helper()
	last, end, ok := g.lastClaim(old.Instance, releases)
	if !ok {
		g.t.Fatalf("%s never served a token", old.Instance)
	}
	first := g.firstTakeover(trigger, old)
	gap := fmt.Sprintf("%v after that claim ran out", first.Sent.Sub(end).Round(time.Millisecond))
	if first.Sent.Before(end) {
		gap = fmt.Sprintf("%v before that claim ran out", end.Sub(first.Sent).Round(time.Millisecond))
	}
	return fmt.Sprintf("%s's last answer (sent %v before, expiresInMs %d) claimed validity until %v after it; %s first served token %d to a request sent %v after it (%s)",
		old.Instance, trigger.Sub(last.Sent).Round(time.Millisecond), last.ExpiresInMs, end.Sub(trigger).Round(time.Millisecond),
		first.Target, first.Token, first.Sent.Sub(trigger).Round(time.Millisecond), gap), end
}
