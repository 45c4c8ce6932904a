package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestIsLeaderReadsTheGaugeWithAndWithoutLabels(t *testing.T) {
	for _, tt := range []struct {
		text    string
		want    bool
		wantErr string
	}{
		{"# HELP elector_is_leader x\n# TYPE elector_is_leader gauge\nelector_is_leader 1\n", true, ""},
		{"elector_is_leader 0\n", false, ""},
		{`elector_is_leader{lease="team/billing"} 1` + "\n", true, ""},
		{`elector_is_leader{lease="a b}"} 0` + "\n", false, ""},
		{"elector_is_leader_total 1\nelector_is_leader 0\n", false, ""},
		{"go_goroutines 7\n", false, "no elector_is_leader"},
		{"elector_is_leader x\n", false, "elector_is_leader x"},
	} {
		got, err := isLeader(strings.NewReader(tt.text))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: err %v, want %q", tt.text, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: %v, %v; want %v", tt.text, got, err, tt.want)
		}
	}
}

func TestParseFlagsRejectsBadInputClearly(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--service=s"}, "--namespace and --service are required"},
		{[]string{"--namespace=n", "--service=s", "--replicas=0"}, "--replicas 0"},
		{[]string{"--namespace=n", "--service=s", "--timeout=0s"}, "must be positive"},
		{[]string{"--namespace=n", "--service=s", "extra"}, "unexpected arguments"},
	} {
		if _, err := parseFlags(tt.args, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want %q", tt.args, err, tt.want)
		}
	}
	if c, err := parseFlags([]string{"--namespace=n", "--service=s", "--replicas=3", "--timeout=90s"}, io.Discard); err != nil || c.replicas != 3 || c.timeout != 90*time.Second {
		t.Errorf("valid flags: %+v, %v", c, err)
	}
}

// metricsPods starts one metrics server per value (1: leader) on 127.0.0.1 and an EndpointSlice naming them.
func metricsPods(t *testing.T, leaders ...*atomic.Int32) *fake.Clientset {
	t.Helper()
	name := "metrics"
	var eps []discoveryv1.Endpoint
	for _, l := range leaders {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "elector_is_leader "+strconv.Itoa(int(l.Load()))+"\n")
		}))
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		// Every server has its own port, and an EndpointSlice has one port list: one slice per pod.
		eps = append(eps, discoveryv1.Endpoint{Addresses: []string{ln.Addr().String()}})
	}
	cs := fake.NewClientset()
	for i, ep := range eps {
		host, p, _ := net.SplitHostPort(ep.Addresses[0])
		pn, _ := strconv.Atoi(p)
		pp := int32(pn)
		_, err := cs.DiscoveryV1().EndpointSlices("team").Create(context.Background(), &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "billing-metrics-" + strconv.Itoa(i), Labels: map[string]string{discoveryv1.LabelServiceName: "billing-metrics"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}}},
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &pp}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	return cs
}

func leaderFlags(vals ...int32) []*atomic.Int32 {
	var out []*atomic.Int32
	for _, v := range vals {
		a := new(atomic.Int32)
		a.Store(v)
		out = append(out, a)
	}
	return out
}

func TestWaitOneLeaderPassesOnceExactlyOnePodLeads(t *testing.T) {
	flags := leaderFlags(0, 0, 0)
	cs := metricsPods(t, flags...)
	c := config{namespace: "team", service: "billing-metrics", replicas: 3, interval: 10 * time.Millisecond}
	lines := make(chan string, 100)
	done := make(chan error, 1)
	go func() { done <- waitOneLeader(context.Background(), cs, http.DefaultClient, c, lineWriter(lines)) }()
	// No leader yet: it says why it waits, and keeps waiting until one pod leads.
	if l := <-lines; !strings.Contains(l, "waiting: 0 leaders, want exactly 1") {
		t.Fatalf("first line %q, want it waiting for a leader", l)
	}
	select {
	case err := <-done:
		t.Fatalf("returned with no leader: %v", err)
	default:
	}
	flags[1].Store(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for len(lines) > 0 {
		if l := <-lines; strings.HasPrefix(l, "PASS: 3 endpoints") {
			return
		}
	}
	t.Error("no PASS line naming 3 endpoints")
}

func TestWaitOneLeaderFailsWithTwoLeadersOrMissingPods(t *testing.T) {
	for _, tt := range []struct {
		name     string
		vals     []int32
		replicas int
		want     string
	}{
		{"two leaders", []int32{1, 1, 0}, 3, "2 leaders, want exactly 1"},
		{"no leader", []int32{0, 0, 0}, 3, "0 leaders, want exactly 1"},
		{"a pod missing", []int32{1, 0}, 3, "2 of 3 pods have a metrics endpoint"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := metricsPods(t, leaderFlags(tt.vals...)...)
			c := config{namespace: "team", service: "billing-metrics", replicas: tt.replicas, interval: 10 * time.Millisecond}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err := waitOneLeader(ctx, cs, http.DefaultClient, c, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "team/billing-metrics") {
				t.Fatalf("err %v, want %q naming the Service", err, tt.want)
			}
		})
	}
}

// lineWriter sends every Write (one line each: waitOneLeader writes whole lines) to the channel.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) { w <- string(p); return len(p), nil }
