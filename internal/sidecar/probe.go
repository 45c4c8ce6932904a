package sidecar

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// ProbeUsage documents the probe subcommand.
const ProbeUsage = `usage: elector-sidecar probe [PATH]

GETs PATH (default /healthz) from this container's local API and prints the
body. Exits 0 on a 2xx answer, 1 otherwise. For exec probes and kubectl exec in
the distroless image, which has no shell or curl. The address comes from
--http-address / ELECTOR_HTTP_ADDRESS (default 127.0.0.1:4040).

  kubectl exec POD -c elector -- /elector-sidecar probe /leader
`

// Probe runs `elector-sidecar probe [--http-address=ADDR] [PATH]` and
// returns the exit code: 0 for a 2xx answer, 1 for any other answer or
// error, 2 for bad arguments.
func Probe(args []string, env Env, stdout, stderr io.Writer) int {
	addr := env.Getenv("ELECTOR_HTTP_ADDRESS")
	if addr == "" {
		addr = "127.0.0.1:4040"
	}
	path := "/healthz"
	var rest []string
	for _, a := range args {
		switch {
		case a == "-h" || a == "--help":
			fmt.Fprint(stdout, ProbeUsage)
			return 0
		case strings.HasPrefix(a, "--http-address="):
			addr = strings.TrimPrefix(a, "--http-address=")
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(stderr, "elector-sidecar probe: unknown flag %q\n", a)
			return 2
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) > 1 {
		fmt.Fprintf(stderr, "elector-sidecar probe: want at most one PATH, got %q\n", rest)
		return 2
	}
	if len(rest) == 1 {
		path = rest[0]
	}
	if !strings.HasPrefix(path, "/") {
		fmt.Fprintf(stderr, "elector-sidecar probe: PATH %q must start with /\n", path)
		return 2
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		fmt.Fprintf(stderr, "elector-sidecar probe: --http-address %q: want host:port\n", addr)
		return 2
	}
	// A listener on all interfaces is reachable on loopback.
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(host, port) + path)
	if err != nil {
		fmt.Fprintf(stderr, "elector-sidecar probe: %v\n", err)
		return 1
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(stdout, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "elector-sidecar probe: %s answered %s\n", path, resp.Status)
		return 1
	}
	return 0
}
