// Command testbin is a tiny static multi-tool for smoke-testing the local cluster (hack/local-cluster.sh smoke).
//
//	testbin serve ADDR   HTTP server answering "hello from $HOSTNAME"
//	testbin poll URL     GETs URL every second, printing each answer
//	testbin get URL      one GET, prints the body (exit 1 on error)
//	testbin sleep        waits for a signal
//	testbin kube PATH    GETs PATH from the API server with the pod's in-cluster config (service-account token
//	                     and CA, $KUBERNETES_SERVICE_HOST/PORT), prints the status and body (exit 1 unless 200)
//
// serve, poll and sleep log the signal they get and exit 0 on SIGTERM/SIGINT.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testbin serve ADDR | poll URL | get URL | sleep")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	host, _ := os.Hostname()
	arg := ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	switch os.Args[1] {
	case "serve":
		srv := &http.Server{Addr: arg, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = fmt.Fprintf(w, "hello from %s\n", host)
		})}
		go func() {
			<-ctx.Done()
			fmt.Println("serve: got signal, stopping")
			_ = srv.Close()
		}()
		fmt.Println("serve: listening on", arg)
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
	case "poll":
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			body, err := get(arg)
			fmt.Printf("poll: %q %v\n", body, err)
			select {
			case <-ctx.Done():
				fmt.Println("poll: got signal, stopping")
				return
			case <-t.C:
			}
		}
	case "get":
		body, err := get(arg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "get:", err)
			os.Exit(1)
		}
		fmt.Print(body)
	case "kube":
		status, body, err := kube(arg)
		fmt.Printf("kube: %s %s\n", status, body)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kube:", err)
			os.Exit(1)
		}
	case "sleep":
		<-ctx.Done()
		fmt.Println("sleep: got signal, stopping")
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}

func get(url string) (string, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func kube(path string) (string, string, error) {
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return "", "", err
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return "", "", err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return "", "", fmt.Errorf("no certificates in %s/ca.crt", saDir)
	}
	host := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	req, err := http.NewRequest(http.MethodGet, "https://"+host+path, nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+string(token))
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Do(req)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.Status, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.Status, string(b), fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return resp.Status, string(b), nil
}
