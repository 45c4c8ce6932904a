// Command elector-chart-test is the chart's `helm test` (templates/tests/leader-test.yaml), shipped in the demo
// image: it lists the EndpointSlices of the release's metrics Service, scrapes /metrics on every endpoint (pod
// IPs, so it needs neither cluster DNS nor kube-proxy) and passes once, in one round, every expected pod answers
// and exactly one reports elector_is_leader 1. It fails with what it last saw when --timeout passes first.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

type config struct {
	namespace string
	service   string
	replicas  int
	timeout   time.Duration
	interval  time.Duration
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("elector-chart-test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.StringVar(&c.namespace, "namespace", "", "namespace of the metrics Service (required)")
	fs.StringVar(&c.service, "service", "", "name of the metrics Service (required)")
	fs.IntVar(&c.replicas, "replicas", 1, "pods that must answer (the workload's replicas); at least 1")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "how long to wait for exactly one leader")
	fs.DurationVar(&c.interval, "interval", time.Second, "pause between rounds")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() != 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.namespace == "" || c.service == "":
		return c, errors.New("--namespace and --service are required")
	case c.replicas < 1:
		return c, fmt.Errorf("--replicas %d: want at least 1", c.replicas)
	case c.timeout <= 0 || c.interval <= 0:
		return c, errors.New("--timeout and --interval must be positive")
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "elector-chart-test:", err)
		os.Exit(2)
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "elector-chart-test:", err)
		os.Exit(1)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "elector-chart-test:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if err := waitOneLeader(ctx, cs, &http.Client{Timeout: 2 * time.Second}, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "elector-chart-test: FAIL:", err)
		os.Exit(1)
	}
}

// waitOneLeader runs rounds until one passes, or ctx ends (then it returns the last round's verdict).
func waitOneLeader(ctx context.Context, cs kubernetes.Interface, hc *http.Client, c config, out io.Writer) error {
	var last error
	for {
		res, err := round(ctx, cs, hc, c)
		if err == nil {
			err = res.verdict(c.replicas)
		}
		if ctx.Err() != nil && last != nil {
			// This round was cut off by the timeout: report what the last whole round saw.
			return fmt.Errorf("no single leader among the endpoints of Service %s/%s within the timeout: %w", c.namespace, c.service, last)
		}
		if err == nil {
			_, _ = fmt.Fprintf(out, "PASS: %s\n", res)
			return nil
		}
		if last == nil || err.Error() != last.Error() {
			_, _ = fmt.Fprintf(out, "waiting: %v\n", err)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("no single leader among the endpoints of Service %s/%s within the timeout: %w", c.namespace, c.service, last)
		case <-time.After(c.interval):
		}
	}
}

// result maps each scraped endpoint to its elector_is_leader value (or the scrape's error).
type result struct {
	leader map[string]bool
	errs   map[string]error
}

func (r result) String() string {
	var parts []string
	for ep, l := range r.leader {
		parts = append(parts, fmt.Sprintf("%s leader=%t", ep, l))
	}
	for ep, err := range r.errs {
		parts = append(parts, fmt.Sprintf("%s: %v", ep, err))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d endpoints: %s", len(r.leader)+len(r.errs), strings.Join(parts, ", "))
}

func (r result) verdict(replicas int) error {
	if len(r.errs) > 0 {
		return fmt.Errorf("some endpoints did not answer (%s)", r)
	}
	if len(r.leader) < replicas {
		return fmt.Errorf("%d of %d pods have a metrics endpoint (%s)", len(r.leader), replicas, r)
	}
	n := 0
	for _, l := range r.leader {
		if l {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%d leaders, want exactly 1 (%s)", n, r)
	}
	return nil
}

func round(ctx context.Context, cs kubernetes.Interface, hc *http.Client, c config) (result, error) {
	slices, err := cs.DiscoveryV1().EndpointSlices(c.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + c.service,
	})
	if err != nil {
		return result{}, fmt.Errorf("listing the EndpointSlices of Service %s/%s: %w", c.namespace, c.service, err)
	}
	res := result{leader: map[string]bool{}, errs: map[string]error{}}
	for _, s := range slices.Items {
		port := int32(0)
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil || *p.Name == "metrics" || port == 0) {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			for _, addr := range ep.Addresses {
				hostPort := net.JoinHostPort(addr, strconv.Itoa(int(port)))
				l, err := scrape(ctx, hc, "http://"+hostPort+"/metrics")
				if err != nil {
					res.errs[hostPort] = err
				} else {
					res.leader[hostPort] = l
				}
				break // one address per endpoint (a pod)
			}
		}
	}
	return res, nil
}

// scrape reports whether the Prometheus text at url has elector_is_leader 1 (any labels).
func scrape(ctx context.Context, hc *http.Client, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return isLeader(resp.Body)
}

func isLeader(r io.Reader) (bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	found, leader := false, false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "elector_is_leader") {
			continue
		}
		rest := strings.TrimPrefix(line, "elector_is_leader")
		if rest != "" && rest[0] != ' ' && rest[0] != '{' {
			continue // another metric with this prefix
		}
		fields := strings.Fields(line[strings.LastIndex(line, "}")+1:])
		if i := strings.IndexByte(line, '{'); i < 0 {
			fields = strings.Fields(rest)
		}
		if len(fields) == 0 {
			return false, fmt.Errorf("malformed line %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return false, fmt.Errorf("line %q: %w", line, err)
		}
		found = true
		leader = leader || v == 1
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	if !found {
		return false, errors.New("no elector_is_leader in /metrics")
	}
	return leader, nil
}
