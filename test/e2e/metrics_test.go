//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// metricsServiceName is the chart's metrics Service (metrics.service, on by default) of a Deployment.
const metricsServiceName = fullname + "-metrics"

// metricsEndpoint is one endpoint of the metrics Service: its pod and pod IP:port.
type metricsEndpoint struct {
	pod  string
	addr string
}

// metricsEndpoints lists the metrics Service's EndpointSlice endpoints (port "metrics"), by pod name.
func (r *release) metricsEndpoints(ctx context.Context) ([]metricsEndpoint, error) {
	list, err := suite.cs.DiscoveryV1().EndpointSlices(r.ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + metricsServiceName,
	})
	if err != nil {
		return nil, err
	}
	var out []metricsEndpoint
	for _, s := range list.Items {
		port := int32(0)
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == "metrics" && p.Port != nil {
				port = *p.Port
			}
		}
		if port == 0 {
			return nil, fmt.Errorf("EndpointSlice %s has no port named metrics: %+v", s.Name, s.Ports)
		}
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || len(ep.Addresses) == 0 {
				continue
			}
			out = append(out, metricsEndpoint{pod: ep.TargetRef.Name, addr: net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port)))})
		}
	}
	slices.SortFunc(out, func(a, b metricsEndpoint) int { return strings.Compare(a.pod, b.pod) })
	return out, nil
}

var isLeaderSample = regexp.MustCompile(`(?m)^elector_is_leader\{([^}]*)\} ([0-9.eE+-]+)$`)

// scrape GETs http://addr/metrics (the pod IP: the host reaches the pod network directly; there is no
// kube-proxy) and returns elector_is_leader's labels and value, and whether elector_build_info is there.
func scrape(ctx context.Context, addr string) (labels string, value float64, buildInfo bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return "", 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, false, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", 0, false, err
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, false, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	m := isLeaderSample.FindAllStringSubmatch(string(body), -1)
	if len(m) != 1 {
		return "", 0, false, fmt.Errorf("GET %s/metrics: %d elector_is_leader samples, want 1", addr, len(m))
	}
	value, err = strconv.ParseFloat(m[0][2], 64)
	return m[0][1], value, strings.Contains(string(body), "\nelector_build_info{"), err
}

// TestMetricsServiceEndpointsServeLeaseMetrics: the chart's metrics Service (on by default) lists every
// pod in its EndpointSlices, and each endpoint (pod IP and the Service's metrics port) answers GET
// /metrics with elector_is_leader{lease="<namespace>/<lease>"} and elector_build_info; across the
// endpoints exactly the Lease's holder reports 1, so the README's `sum by (lease) (elector_is_leader)` is 1.
func TestMetricsServiceEndpointsServeLeaseMetrics(t *testing.T) {
	t.Parallel()
	r := newRelease(t, "metrics")
	r.install()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader, _ := r.mustLeader(t)
	wantLabels := fmt.Sprintf(`lease="%s/%s"`, r.ns, r.lease)

	start := time.Now()
	var seen map[string]float64
	err := framework.Eventually(ctx, 500*time.Millisecond, time.Minute, "every metrics endpoint to answer, the leader alone with elector_is_leader 1",
		func(ctx context.Context) error {
			eps, err := r.metricsEndpoints(ctx)
			if err != nil {
				return err
			}
			if len(eps) != replicas {
				return fmt.Errorf("metrics Service endpoints %v, want %d", eps, replicas)
			}
			seen = map[string]float64{}
			sum := 0.0
			for _, ep := range eps {
				labels, v, info, err := scrape(ctx, ep.addr)
				if err != nil {
					return fmt.Errorf("pod %s: %w", ep.pod, err)
				}
				if !strings.Contains(labels, wantLabels) {
					return fmt.Errorf("pod %s: elector_is_leader{%s}, want the label %s", ep.pod, labels, wantLabels)
				}
				if !info {
					return fmt.Errorf("pod %s (%s): no elector_build_info", ep.pod, ep.addr)
				}
				seen[ep.pod] = v
				sum += v
			}
			if sum != 1 || seen[leader] != 1 {
				return fmt.Errorf("elector_is_leader by pod %v, want 1 for %s alone", seen, leader)
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	timing(t, "leader agreed -> every metrics endpoint scraped, the leader alone at 1", time.Since(start))
	t.Logf("elector_is_leader{%s} through the metrics Service's endpoints: %v", wantLabels, seen)
}
