package chart

import (
	"context"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"sigs.k8s.io/yaml"
)

// The chart's alerts evaluated the way Prometheus' rule manager does (promtool test rules does the same): the
// rendered PrometheusRule's expressions run by Prometheus' own PromQL engine every evalInterval over scraped
// series, an alert pending while its expression returns the label set and firing once that has lasted its
// `for:`. A scrape that fails (a pod down, frozen or gone) writes a staleness marker, as Prometheus does.

const (
	scrapeInterval = 30 * time.Second
	evalInterval   = 30 * time.Second
)

// promRule is one alerting rule of the rendered PrometheusRule.
type promRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// renderedRules renders the chart with the PrometheusRule on (and set) and returns its rules.
func renderedRules(t *testing.T, set ...string) []promRule {
	t.Helper()
	r := mustRender(t, renderOpts{Set: append([]string{"metrics.prometheusRule.enabled=true"}, set...)})
	u := r.get(t, "PrometheusRule", releaseName+"-elector-sidecar")
	b, err := yaml.Marshal(u.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Groups []struct {
			Name  string     `json:"name"`
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		t.Fatalf("PrometheusRule spec: %v\n%s", err, b)
	}
	var out []promRule
	for _, g := range spec.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// scrapedSeries is what Prometheus stored for one series: a sample per successful scrape, a staleness
// marker after the last one when the target stopped answering.
type scrapedSeries struct {
	lset    labels.Labels
	samples []chunks.Sample
}

type fSample struct {
	t int64
	f float64
}

func (s fSample) T() int64                      { return s.t }
func (s fSample) ST() int64                     { return 0 }
func (s fSample) F() float64                    { return s.f }
func (s fSample) H() *histogram.Histogram       { return nil }
func (s fSample) FH() *histogram.FloatHistogram { return nil }
func (s fSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s fSample) Copy() chunks.Sample           { return s }

// tsdb is an in-memory series store that Prometheus' engine queries.
type tsdb struct{ series []*scrapedSeries }

func (db *tsdb) Querier(mint, maxt int64) (storage.Querier, error) {
	return &tsdbQuerier{db: db, mint: mint, maxt: maxt}, nil
}

type tsdbQuerier struct {
	db         *tsdb
	mint, maxt int64
}

func (q *tsdbQuerier) Select(_ context.Context, _ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	var out []storage.Series
	for _, s := range q.db.series {
		if !slices.ContainsFunc(ms, func(m *labels.Matcher) bool { return !m.Matches(s.lset.Get(m.Name)) }) {
			var in []chunks.Sample
			for _, smp := range s.samples {
				if smp.T() >= q.mint && smp.T() <= q.maxt {
					in = append(in, smp)
				}
			}
			out = append(out, storage.NewListSeries(s.lset, in))
		}
	}
	sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels(), out[j].Labels()) < 0 })
	return &seriesSet{series: out, i: -1}
}

func (q *tsdbQuerier) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (q *tsdbQuerier) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (q *tsdbQuerier) Close() error { return nil }

type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.i] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// scrapes builds the stored series of one pod: at(step) is what the pod's /metrics said at scrape step
// (ok false: the scrape failed), for steps scrapes from t0.
func (db *tsdb) scrapes(t0 time.Time, steps int, lset labels.Labels, at func(step int) (float64, bool)) {
	s := &scrapedSeries{lset: lset}
	up := false
	for i := range steps {
		ts := t0.Add(time.Duration(i) * scrapeInterval).UnixMilli()
		v, ok := at(i)
		switch {
		case ok:
			s.samples = append(s.samples, fSample{t: ts, f: v})
		case up:
			s.samples = append(s.samples, fSample{t: ts, f: math.Float64frombits(value.StaleNaN)})
		}
		up = ok
	}
	db.series = append(db.series, s)
}

// firing evaluates rule every evalInterval from t0 over steps evaluations and returns, per evaluation, the
// label sets (lease=...) of its firing alerts.
func firing(t *testing.T, db *tsdb, rule promRule, t0 time.Time, steps int) [][]string {
	t.Helper()
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	hold := time.Duration(0)
	if rule.For != "" {
		d, err := time.ParseDuration(rule.For)
		if err != nil {
			t.Fatalf("%s for: %v", rule.Alert, err)
		}
		hold = d
	}
	activeSince := map[string]time.Time{}
	var out [][]string
	for i := range steps {
		ts := t0.Add(time.Duration(i) * evalInterval)
		q, err := engine.NewInstantQuery(context.Background(), db, nil, rule.Expr, ts)
		if err != nil {
			t.Fatalf("%s: %v", rule.Alert, err)
		}
		res := q.Exec(context.Background())
		if res.Err != nil {
			t.Fatalf("%s at %s: %v", rule.Alert, ts, res.Err)
		}
		vec, err := res.Vector()
		if err != nil {
			t.Fatalf("%s: %v", rule.Alert, err)
		}
		q.Close()
		seen := map[string]bool{}
		var now []string
		for _, s := range vec {
			key := s.Metric.String()
			seen[key] = true
			if _, ok := activeSince[key]; !ok {
				activeSince[key] = ts
			}
			if ts.Sub(activeSince[key]) >= hold {
				now = append(now, key)
			}
		}
		for key := range activeSince {
			if !seen[key] {
				delete(activeSince, key) // resolved: a later return starts pending again
			}
		}
		sort.Strings(now)
		out = append(out, now)
	}
	return out
}

// firstFiring is the first evaluation at which rule fires for want (-1: never).
func firstFiring(evals [][]string, want string) int {
	return slices.IndexFunc(evals, func(e []string) bool { return slices.Contains(e, want) })
}

func ruleNamed(t *testing.T, rules []promRule, name string) promRule {
	t.Helper()
	for _, r := range rules {
		if r.Alert == name {
			return r
		}
	}
	t.Fatalf("the chart's PrometheusRule has no alert %s (alerts: %v)", name, slices.Collect(func(yield func(string) bool) {
		for _, r := range rules {
			if !yield(r.Alert) {
				return
			}
		}
	}))
	return promRule{}
}

// TestSilentLeaseAlertFiresWhenNoPodReports: ElectorLeaseSilent fires for the release's Lease once no pod has
// reported elector_is_leader for its `for:` — every pod down after a healthy start (their scrapes fail), or
// never scraped at all (pods pending) — while ElectorLeaseNotOneLeader, which sums the series there are, sees
// nothing. It stays quiet while one pod answers, and for another release's Lease.
func TestSilentLeaseAlertFiresWhenNoPodReports(t *testing.T) {
	const leaseKey = releaseNamespace + "/billing"
	rules := renderedRules(t, "election.leaseName=billing")
	silent := ruleNamed(t, rules, "ElectorLeaseSilent")
	notOne := ruleNamed(t, rules, "ElectorLeaseNotOneLeader")
	if silent.For != "5m" || !strings.Contains(silent.Annotations["runbook_url"], "#electorleasesilent") {
		t.Errorf("ElectorLeaseSilent for %q runbook_url %q, want 5m and the README's #electorleasesilent", silent.For, silent.Annotations["runbook_url"])
	}
	want := labels.FromStrings("lease", leaseKey).String()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const steps = 40 // 20 minutes

	isLeader := func(pod, lease string) labels.Labels {
		return labels.FromStrings("__name__", "elector_is_leader", "lease", lease, "pod", pod, "job", "elector")
	}
	t.Run("every pod down after 5 minutes", func(t *testing.T) {
		db := &tsdb{}
		for _, pod := range []string{"a", "b", "c"} {
			db.scrapes(t0, steps, isLeader(pod, leaseKey), func(i int) (float64, bool) {
				return map[bool]float64{true: 1}[pod == "a"], i < 10
			})
		}
		evals := firing(t, db, silent, t0, steps)
		// Down from step 10 (staleness marker then); firing once the 5 m for: has passed.
		if got := firstFiring(evals, want); got != 10+10 {
			t.Errorf("ElectorLeaseSilent first fired at evaluation %d, want 20 (all pods down at 10, for: 5m):\n%v", got, evals)
		}
		if got := firing(t, db, notOne, t0, steps); slices.ContainsFunc(got, func(e []string) bool { return len(e) > 0 }) {
			t.Errorf("ElectorLeaseNotOneLeader fired %v: the silence was its blind spot, not a leader count", got)
		}
	})
	t.Run("never scraped", func(t *testing.T) {
		db := &tsdb{}
		// Another release's Lease reports; this release's pods are pending (no target, no series).
		db.scrapes(t0, steps, isLeader("x", releaseNamespace+"/other"), func(int) (float64, bool) { return 1, true })
		evals := firing(t, db, silent, t0, steps)
		if got := firstFiring(evals, want); got != 10 {
			t.Errorf("ElectorLeaseSilent first fired at evaluation %d, want 10 (no series from the start, for: 5m):\n%v", got, evals)
		}
		if slices.ContainsFunc(evals, func(e []string) bool {
			return slices.ContainsFunc(e, func(k string) bool { return strings.Contains(k, "/other") })
		}) {
			t.Errorf("ElectorLeaseSilent fired for another release's Lease: %v", evals)
		}
	})
	t.Run("one pod of three answers", func(t *testing.T) {
		db := &tsdb{}
		for _, pod := range []string{"a", "b", "c"} {
			db.scrapes(t0, steps, isLeader(pod, leaseKey), func(i int) (float64, bool) {
				return map[bool]float64{true: 1}[pod == "c"], pod == "c" || i < 5
			})
		}
		if got := firing(t, db, silent, t0, steps); slices.ContainsFunc(got, func(e []string) bool { return len(e) > 0 }) {
			t.Errorf("ElectorLeaseSilent fired %v while pod c reports", got)
		}
	})
}

// TestLeaderCountAndRenewAlertsFire: ElectorLeaseNotOneLeader fires for a Lease whose reporting pods show two
// leaders or none for its `for:`, not for a handoff's one-scrape gap; ElectorLeaseRenewDeadlineExceeded fires
// as soon as a leader loses its term to the renew deadline, and every alert names its README runbook.
func TestLeaderCountAndRenewAlertsFire(t *testing.T) {
	const leaseKey = releaseNamespace + "/billing"
	rules := renderedRules(t, "election.leaseName=billing")
	for _, r := range rules {
		if want := "https://github.com/elector-sidecar/elector-sidecar/blob/main/README.md#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
	}
	notOne := ruleNamed(t, rules, "ElectorLeaseNotOneLeader")
	renew := ruleNamed(t, rules, "ElectorLeaseRenewDeadlineExceeded")
	want := labels.FromStrings("lease", leaseKey).String()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const steps = 40
	isLeader := func(pod string) labels.Labels {
		return labels.FromStrings("__name__", "elector_is_leader", "lease", leaseKey, "pod", pod)
	}
	for _, tc := range []struct {
		name      string
		leaderOf  func(pod string, step int) bool
		wantFirst int
	}{
		{"handoff every 3 minutes with a one-scrape gap", func(pod string, i int) bool {
			if i%6 == 0 {
				return false // released, not yet taken
			}
			return (pod == "a") == ((i/6)%2 == 0)
		}, -1},
		{"two leaders from minute 5", func(pod string, i int) bool { return pod == "a" || i >= 10 }, 20},
		{"no leader from minute 5", func(pod string, i int) bool { return pod == "a" && i < 10 }, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &tsdb{}
			for _, pod := range []string{"a", "b"} {
				db.scrapes(t0, steps, isLeader(pod), func(i int) (float64, bool) { return map[bool]float64{true: 1}[tc.leaderOf(pod, i)], true })
			}
			evals := firing(t, db, notOne, t0, steps)
			if got := firstFiring(evals, want); got != tc.wantFirst {
				t.Errorf("ElectorLeaseNotOneLeader first fired at evaluation %d, want %d:\n%v", got, tc.wantFirst, evals)
			}
		})
	}
	t.Run("a renew_deadline loss", func(t *testing.T) {
		db := &tsdb{}
		for _, reason := range []string{"renew_deadline", "taken"} {
			lset := labels.FromStrings("__name__", "elector_losses_total", "lease", leaseKey, "pod", "a", "reason", reason)
			db.scrapes(t0, steps, lset, func(i int) (float64, bool) {
				if reason == "renew_deadline" && i >= 12 {
					return 1, true
				}
				return 0, true
			})
		}
		evals := firing(t, db, renew, t0, steps)
		if got := firstFiring(evals, want); got != 12 {
			t.Errorf("ElectorLeaseRenewDeadlineExceeded first fired at evaluation %d, want 12 (the loss's scrape):\n%v", got, evals)
		}
	})
	if t.Failed() {
		t.Logf("rules: %+v", rules)
	}
}

// TestRunbookURLsFollowRunbookBaseURL: every alert's runbook_url is metrics.prometheusRule.runbookBaseURL plus
// "#" and its name in lower case; a base that is not an http(s) URL, or has a fragment, is refused.
func TestRunbookURLsFollowRunbookBaseURL(t *testing.T) {
	const base = "https://wiki.example.com/runbooks/elector"
	for _, r := range renderedRules(t, "metrics.prometheusRule.runbookBaseURL="+base) {
		if want := base + "#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
	}
	for _, bad := range []string{"wiki.example.com/runbooks", "https://wiki.example.com/r#x", "ftp://example.com/r"} {
		_, err := render(t, renderOpts{Set: []string{"metrics.prometheusRule.enabled=true", "metrics.prometheusRule.runbookBaseURL=" + bad}})
		if err == nil || !strings.Contains(err.Error(), "runbookBaseURL") {
			t.Errorf("runbookBaseURL=%s: %v, want the schema to refuse it", bad, err)
		}
	}
}
