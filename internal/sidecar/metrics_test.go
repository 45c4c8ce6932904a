// The fuzz runs of hack/test.sh build with -tags elector_fuzz and leave this
// file out: its typed clientset (client-go's kubernetes package, every API
// group) would more than double the fuzzing build, which instruments every
// package the test binary links.

//go:build !elector_fuzz

package sidecar

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/elector-sidecar/elector-sidecar/internal/testsupport"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
	"github.com/elector-sidecar/elector-sidecar/pkg/leaderlabel"
	"github.com/elector-sidecar/elector-sidecar/pkg/version"
)

// namesOf records the metric names of the collectors registered through it
// (Gather leaves out a vector without series, e.g. no API error yet).
type namesOf struct {
	prometheus.Registerer
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *namesOf) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return r.Registerer.Register(c)
}

// registerAll registers every elector_* metric the sidecar can have (the
// election's, the app health prober's, the leader label's) on the
// registerer newRegistry returns, as Run does. It returns the registry
// and the names of the metrics registered.
func registerAll(t *testing.T, lease string) (*prometheus.Registry, map[string]bool) {
	t.Helper()
	ns, name, _ := strings.Cut(lease, "/")
	reg, wrapped := newRegistry(lease)
	electorReg := &namesOf{Registerer: wrapped, names: map[string]bool{"elector_build_info": true}}
	client := fake.NewClientset()
	el, err := election.New(election.Config{Client: clientset.Wrap(client), Namespace: ns, Name: name, Identity: "pod-a",
		LeaseDuration: election.DefaultLeaseDuration, RenewDeadline: election.DefaultRenewDeadline,
		RetryPeriod: election.DefaultRetryPeriod, Registerer: electorReg})
	if err != nil {
		t.Fatal(err)
	}
	c := &Config{AppHealthURL: "http://127.0.0.1:1/healthz", AppHealthPeriod: 2 * time.Second, AppHealthTimeout: time.Second,
		AppHealthFailureThreshold: 1, AppHealthSuccessThreshold: 1, RenewDeadline: election.DefaultRenewDeadline}
	if _, err := c.newProber(el, electorReg, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := leaderlabel.New(leaderlabel.Config{Client: clientset.Wrap(client), Namespace: ns, PodName: "pod-a", Key: leaderlabel.DefaultKey, Registerer: electorReg}); err != nil {
		t.Fatal(err)
	}
	return reg, electorReg.names
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// TestEveryElectorMetricCarriesTheLease: each elector_* series has
// lease="<namespace>/<name>", the Go and process metrics have no lease
// label, and elector_build_info says which build runs.
func TestEveryElectorMetricCarriesTheLease(t *testing.T) {
	reg, _ := registerAll(t, "team/billing")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var elector, other int
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			lease, ok := labelsOf(m)[LeaseLabel]
			switch {
			case strings.HasPrefix(mf.GetName(), "elector_"):
				elector++
				if lease != "team/billing" {
					t.Errorf("%s %v: lease label %q (present %v), want team/billing", mf.GetName(), labelsOf(m), lease, ok)
				}
			default:
				other++
				if ok {
					t.Errorf("%s carries the lease label", mf.GetName())
				}
			}
		}
	}
	if elector < 12 || other == 0 {
		t.Fatalf("gathered %d elector_* and %d other series: the collectors were not registered?", elector, other)
	}
	if got := testutil.ToFloat64(buildInfo()); got != 1 {
		t.Errorf("elector_build_info = %v, want 1", got)
	}
	var info map[string]string
	for _, mf := range mfs {
		if mf.GetName() == "elector_build_info" {
			info = labelsOf(mf.GetMetric()[0])
		}
	}
	want := map[string]string{"lease": "team/billing", "version": version.Version, "goversion": runtime.Version(), "revision": version.GetRevision()}
	for k, v := range want {
		if info[k] != v || v == "" {
			t.Errorf("elector_build_info %s=%q, want %q (not empty)", k, info[k], v)
		}
	}
	if len(info) != len(want) {
		t.Errorf("elector_build_info labels %v, want exactly %v", info, want)
	}
}

// TestReadmeMetricsSection: the "Metrics" section lists every elector_*
// metric the sidecar registers (and no other), its example line is what
// /metrics serves, and its alert groups by the label the metrics carry.
func TestReadmeMetricsSection(t *testing.T) {
	section := readmeSection(t, "Metrics")
	reg, registered := registerAll(t, "team/billing")
	if len(registered) < 12 {
		t.Fatalf("only %d metrics registered: %v", len(registered), registered)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(elector_[a-z_]+)[{`]").FindAllStringSubmatch(section, -1) {
		listed[m[1]] = true
		if !registered[m[1]] {
			t.Errorf("README Metrics lists %s, which the sidecar does not register", m[1])
		}
	}
	for name := range registered {
		if !listed[name] {
			t.Errorf("README Metrics does not list %s", name)
		}
	}

	var promql []string
	var console string
	for _, b := range testsupport.MarkdownCodeBlocks(section) {
		switch b.Lang {
		case "promql":
			promql = append(promql, strings.TrimSpace(b.Code))
		case "console":
			console = b.Code
		}
	}
	if len(promql) != 1 || promql[0] != "sum by ("+LeaseLabel+") (elector_is_leader) != 1" {
		t.Errorf("README Metrics alert %q, want the one-leader alert grouped by %q", promql, LeaseLabel)
	}
	text, err := testutil.CollectAndFormat(reg, expfmt.TypeTextPlain, "elector_is_leader")
	if err != nil {
		t.Fatal(err)
	}
	// The example shows a leader (1); a sidecar that has not run shows 0.
	example := regexp.MustCompile(`(?m)^elector_is_leader\{.*\} `).FindString(console)
	if example == "" || !strings.Contains(string(text), "\n"+example+"0\n") {
		t.Errorf("README Metrics example %q does not match /metrics:\n%s", example, text)
	}
}
