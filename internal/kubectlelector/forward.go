package kubectlelector

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
)

// forwardTimeout bounds opening the port-forward (the API server's and the kubelet's upgrade).
const forwardTimeout = 30 * time.Second

// portForward opens a port-forward from a free 127.0.0.1 port to port of pod ns/name through the API
// server (pods/portforward), as kubectl port-forward does: WebSockets first, SPDY when the server does not
// upgrade. It returns the local base URL and a stop function.
func portForward(ctx context.Context, flags *genericclioptions.ConfigFlags, ns, pod string, port int) (string, func(), error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return "", nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", nil, err
	}
	url := kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, err
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	tunneling, err := portforward.NewSPDYOverWebsocketDialerForStreaming(url, cfg)
	if err != nil {
		return "", nil, err
	}
	dialer = portforward.NewFallbackDialerForStreaming(tunneling, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stopCh, readyCh, io.Discard, io.Discard)
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	wait := func() error { return <-done }
	stop := func() {
		close(stopCh)
		_ = wait() // the forwarder's end: nothing to report once the request is done
	}
	timer := time.NewTimer(forwardTimeout)
	defer timer.Stop()
	select {
	case <-readyCh:
	case err := <-done:
		return "", nil, err
	case <-timer.C:
		stop()
		return "", nil, fmt.Errorf("not ready after %v", forwardTimeout)
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
