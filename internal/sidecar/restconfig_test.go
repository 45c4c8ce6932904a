// The fuzz runs of hack/test.sh build with -tags elector_fuzz and leave this
// file out: its typed clientset (client-go's kubernetes package, every API
// group) would more than double the fuzzing build, which instruments every
// package the test binary links.

//go:build !elector_fuzz

package sidecar

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestRestConfigTakesTheRateLimitFlags: --kube-api-qps and --kube-api-burst reach the client's
// config (no hard-coded limit), and the defaults are 50 and 100.
func TestRestConfigTakesTheRateLimitFlags(t *testing.T) {
	kubeconfig := writeTestKubeconfig(t)
	defaults, err := Parse([]string{"--lease-name=l", "--kubeconfig=" + kubeconfig}, testEnv(nil, "", "h"), nil)
	if err != nil {
		t.Fatal(err)
	}
	set, err := Parse([]string{"--lease-name=l", "--kubeconfig=" + kubeconfig, "--kube-api-qps=2.5", "--kube-api-burst=7"}, testEnv(nil, "", "h"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		c     *Config
		qps   float32
		burst int
	}{{defaults, 50, 100}, {set, 2.5, 7}} {
		cfg, err := RestConfig(tt.c.Kubeconfig, tt.c.KubeAPIQPS, tt.c.KubeAPIBurst)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.QPS != tt.qps || cfg.Burst != tt.burst {
			t.Errorf("RestConfig QPS %v burst %d, want %v and %d", cfg.QPS, cfg.Burst, tt.qps, tt.burst)
		}
	}
}

// TestRestConfigAsksForProtobufAndAcceptsJSON: every follower decodes every Lease event, and protobuf
// costs it about a third less CPU than JSON; an API server or proxy that cannot answer in protobuf
// still gets a client that reads JSON.
func TestRestConfigAsksForProtobufAndAcceptsJSON(t *testing.T) {
	kubeconfig := writeTestKubeconfig(t)
	cfg, err := RestConfig(kubeconfig, 50, 100)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ContentType != "application/vnd.kubernetes.protobuf" || cfg.AcceptContentTypes != "application/vnd.kubernetes.protobuf,application/json" {
		t.Errorf("RestConfig content type %q, accepts %q; want protobuf, and protobuf then JSON", cfg.ContentType, cfg.AcceptContentTypes)
	}
}

// TestTheClientAsksTheAPIServerNotToCompress: a client that accepts gzip gets its watch events
// compressed one by one by the API server and inflates each of them; for Lease events that is CPU on
// both sides for nothing (docs/benchmarks.md, Scale). The watch request must not offer gzip.
func TestTheClientAsksTheAPIServerNotToCompress(t *testing.T) {
	cfg, err := RestConfig(writeTestKubeconfig(t), 50, 100)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ watch, encoding string }
	got := make(chan seen, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- seen{r.URL.Query().Get("watch"), r.Header.Get("Accept-Encoding")}:
		default:
		}
		w.WriteHeader(http.StatusOK) // an empty stream: the watch ends at once
	}))
	defer srv.Close()
	// Over TLS, as to any API server (client-go gives a plain-HTTP config
	// with no TLS settings Go's default transport, which always offers gzip).
	cfg.Host = srv.URL
	cfg.CAData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoordinationV1().Leases("ns").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	s := <-got
	if s.watch != "true" || s.encoding != "" {
		t.Errorf("the watch request (watch=%q) offered Accept-Encoding %q; want a watch offering none", s.watch, s.encoding)
	}
}

// writeTestKubeconfig writes a kubeconfig for a server that is never dialled.
func writeTestKubeconfig(t *testing.T) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}
