//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// podForwards reaches each pod's local API (127.0.0.1:<sidecar.httpPort> in the pod) through one port-forward
// per pod (pods/portforward through the API server and the kubelet, as kubectl port-forward: WebSockets
// first, then SPDY), kept open between reads: a read costs an HTTP request, not a process started in the
// container as kubectl exec's. A forward whose read fails is closed and opened again on the next read.
type podForwards struct {
	r    *release
	port int
	mu   sync.Mutex
	open map[string]*podForward
}

type podForward struct {
	base string
	stop func()
}

func newPodForwards(r *release, port int) *podForwards {
	return &podForwards{r: r, port: port, open: map[string]*podForward{}}
}

// get GETs path from pod's local API: an answer like release.api's (status 0 and err if no answer).
func (f *podForwards) get(ctx context.Context, pod, path string) answer {
	a := answer{pod: pod, path: path, sent: time.Now()}
	fw, err := f.forward(ctx, pod)
	if err != nil {
		a.recv, a.err = time.Now(), fmt.Errorf("port-forward to %s: %w", pod, err)
		return a
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, fw.base+path, nil)
	if err != nil {
		a.recv, a.err = time.Now(), err
		return a
	}
	a.sent = time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.recv, a.err = time.Now(), err
		f.drop(pod, fw)
		return a
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	a.recv = time.Now()
	if err != nil {
		a.err = err
		f.drop(pod, fw)
		return a
	}
	a.status, a.body = resp.StatusCode, string(body)
	return a
}

func (f *podForwards) forward(ctx context.Context, pod string) (*podForward, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fw, ok := f.open[pod]; ok {
		return fw, nil
	}
	base, stop, err := f.dial(ctx, pod)
	if err != nil {
		return nil, err
	}
	fw := &podForward{base: base, stop: stop}
	f.open[pod] = fw
	return fw, nil
}

func (f *podForwards) drop(pod string, fw *podForward) {
	f.mu.Lock()
	if f.open[pod] == fw {
		delete(f.open, pod)
	}
	f.mu.Unlock()
	fw.stop()
}

// close stops every forward.
func (f *podForwards) close() {
	f.mu.Lock()
	open := f.open
	f.open = map[string]*podForward{}
	f.mu.Unlock()
	for _, fw := range open {
		fw.stop()
	}
}

// dial opens a port-forward from a free 127.0.0.1 port to the pod's port; it returns the base URL.
func (f *podForwards) dial(ctx context.Context, pod string) (string, func(), error) {
	cfg := suite.restConfig
	url := suite.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(f.r.ns).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, err
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	tunneling, err := portforward.NewSPDYOverWebsocketDialerForStreaming(url, cfg)
	if err != nil {
		return "", nil, err
	}
	// Any failure of the WebSocket upgrade falls back to SPDY (kubectl falls back on upgrade failures only).
	dialer = portforward.NewFallbackDialerForStreaming(tunneling, dialer, func(error) bool { return true })
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(f.port)}, stopCh, readyCh, io.Discard, io.Discard)
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	wait := func() error { return <-done }
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(stopCh)
			_ = wait() // the forwarder's end: nothing to report once the reads are done
		})
	}
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case <-readyCh:
	case err := <-done:
		return "", nil, err
	case <-timer.C:
		stop()
		return "", nil, fmt.Errorf("not ready after 30s")
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		stop()
		return "", nil, fmt.Errorf("the forwarded port: %v (%d ports)", err, len(ports))
	}
	return fmt.Sprintf("http://127.0.0.1:%d", ports[0].Local), stop, nil
}
