package integration

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	release "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// exported is what real sidecars' /metrics serve: each sample name (histograms as _bucket, _sum, _count, as
// Prometheus stores them) with the label names it carries.
type exported map[string]map[string]bool

var (
	sampleLine = regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$`)
	labelName  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
)

func (e exported) add(text string) {
	for _, m := range sampleLine.FindAllStringSubmatch(text, -1) {
		if e[m[1]] == nil {
			e[m[1]] = map[string]bool{}
		}
		for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
			e[m[1]][l[1]] = true
		}
	}
}

// monitoringQuery is one PromQL expression the chart ships, and where.
type monitoringQuery struct{ where, expr string }

// renderMonitoring renders the chart with the PrometheusRule and the Grafana dashboard and returns every
// PromQL expression in them (the dashboard's Grafana variables replaced by what Grafana sends) and the
// dashboard's label_values() variable queries as metric/label pairs.
func renderMonitoring(t *testing.T) (queries []monitoringQuery, labelValues [][2]string) {
	t.Helper()
	opts := values.Options{Values: []string{"metrics.prometheusRule.enabled=true", "metrics.grafanaDashboard.enabled=true"}}
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.Load(filepath.Join("..", "..", "charts", "elector-sidecar"))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(io.Discard, nil))))
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName, install.Namespace, install.Replace = "mon", "team", true
	if install.KubeVersion, err = common.ParseKubeVersion("v1.37.0"); err != nil {
		t.Fatal(err)
	}
	rel, err := install.Run(c, vals)
	if err != nil {
		t.Fatalf("render the chart's monitoring: %v", err)
	}
	r, ok := rel.(*release.Release)
	if !ok {
		t.Fatalf("unexpected release type %T", rel)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(r.Manifest), 4096)
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$lease", ".*")
	var rules, dashboards int
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		switch {
		case u.GetKind() == "PrometheusRule":
			groups, _, _ := unstructured.NestedSlice(m, "spec", "groups")
			for _, g := range groups {
				rs, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
				for _, rl := range rs {
					rl := rl.(map[string]any)
					queries = append(queries, monitoringQuery{"alert " + rl["alert"].(string), rl["expr"].(string)})
					rules++
				}
			}
		case u.GetKind() == "ConfigMap" && u.GetLabels()["grafana_dashboard"] == "1":
			data, _, _ := unstructured.NestedStringMap(m, "data")
			var d struct {
				Panels []struct {
					Title   string `json:"title"`
					Targets []struct {
						Expr string `json:"expr"`
					} `json:"targets"`
				} `json:"panels"`
				Templating struct {
					List []struct {
						Name       string `json:"name"`
						Definition string `json:"definition"`
					} `json:"list"`
				} `json:"templating"`
			}
			if err := json.Unmarshal([]byte(data["elector-sidecar.json"]), &d); err != nil {
				t.Fatalf("the dashboard is not JSON: %v", err)
			}
			for _, p := range d.Panels {
				for _, tg := range p.Targets {
					queries = append(queries, monitoringQuery{"dashboard panel " + p.Title, grafanaVars.Replace(tg.Expr)})
				}
			}
			for _, v := range d.Templating.List {
				if v.Definition == "" {
					continue
				}
				m := regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`).FindStringSubmatch(v.Definition)
				if m == nil {
					t.Errorf("dashboard variable %s: query %q is not label_values(metric, label)", v.Name, v.Definition)
					continue
				}
				labelValues = append(labelValues, [2]string{m[1], m[2]})
			}
			dashboards++
		}
	}
	if rules < 3 || dashboards != 1 || len(queries) < rules+8 {
		t.Fatalf("rendered %d alerting rules and %d dashboards (%d queries), want the chart's 3 or more alerts and its dashboard", rules, dashboards, len(queries))
	}
	return queries, labelValues
}

// checkQuery parses expr with Prometheus' parser and returns what in it the sidecars do not export: a
// selector's metric, a matcher's label, or an aggregation's grouping label that none of its metrics carries.
func checkQuery(expr string, have exported) []string {
	parsed, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return []string{"does not parse: " + err.Error()}
	}
	var problems []string
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			name := n.Name
			if name == "" {
				problems = append(problems, "a selector without a metric name: "+n.String())
				return nil
			}
			lbls, ok := have[name]
			if !ok {
				problems = append(problems, "metric "+name+" is not exported")
				return nil
			}
			for _, m := range n.LabelMatchers {
				if m.Name != model.MetricNameLabel && !lbls[m.Name] {
					problems = append(problems, "metric "+name+" has no label "+m.Name)
				}
			}
		case *parser.AggregateExpr:
			if n.Without {
				return nil
			}
			var under []string
			parser.Inspect(n.Expr, func(inner parser.Node, _ []parser.Node) error {
				if vs, ok := inner.(*parser.VectorSelector); ok {
					under = append(under, vs.Name)
				}
				return nil
			})
			for _, g := range n.Grouping {
				if !slices.ContainsFunc(under, func(metric string) bool { return have[metric][g] }) {
					problems = append(problems, "grouping label "+g+" is on none of "+strings.Join(under, ", "))
				}
			}
		}
		return nil
	})
	return problems
}

// TestChartAlertsAndDashboardQueryOnlyExportedMetrics: every PromQL expression of the chart's PrometheusRule
// and Grafana dashboard parses with Prometheus' parser, and every metric, matcher label and grouping label in
// it is one that real sidecars serve on /metrics (a leader, a follower, and one whose Lease namespace does
// not exist, so that elector_api_errors_total{verb} appears); the dashboard's label_values() variables too.
func TestChartAlertsAndDashboardQueryOnlyExportedMetrics(t *testing.T) {
	queries, labelValues := renderMonitoring(t)

	g := newGroup(t, testTimings)
	cs := g.start("a", "b")
	g.waitLeader(startupTimeout)
	spec := g.Template
	spec.Identity, spec.Namespace = "lost", g.namespace+"-missing"
	lost, err := g.StartSpec(g.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	have := exported{}
	g.waitFor(startupTimeout, "the sidecar without a namespace to count a failed API request", func(ctx context.Context) error {
		text := scrape(t, ctx, lost)
		if !strings.Contains(text, "elector_api_errors_total{") {
			return errors.New("no elector_api_errors_total series yet")
		}
		have.add(text)
		return nil
	})
	for _, c := range cs {
		have.add(scrape(t, g.ctx, c))
	}
	for _, want := range []string{"elector_is_leader", "elector_renew_duration_seconds_bucket", "elector_api_errors_total"} {
		if _, ok := have[want]; !ok {
			t.Fatalf("the sidecars' /metrics have no %s (have %v)", want, sortedKeys(have))
		}
	}

	for _, q := range queries {
		if problems := checkQuery(q.expr, have); len(problems) > 0 {
			t.Errorf("%s: %q:\n  %s", q.where, q.expr, strings.Join(problems, "\n  "))
		}
	}
	for _, lv := range labelValues {
		if !have[lv[0]][lv[1]] {
			t.Errorf("dashboard variable label_values(%s, %s): no such metric and label on /metrics", lv[0], lv[1])
		}
	}
	// The check itself: a metric the sidecar does not export, and a label it does not carry, are caught.
	for _, bad := range []string{`sum by (lease) (elector_is_leeder)`, `sum by (pod_name) (elector_is_leader)`, `elector_token{verb="x"}`} {
		if len(checkQuery(bad, have)) == 0 {
			t.Errorf("checkQuery(%q) found nothing wrong", bad)
		}
	}
	t.Logf("%d queries checked against %d exported sample names", len(queries), len(have))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
