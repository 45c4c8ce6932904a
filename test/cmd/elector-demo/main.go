// Command elector-demo is the demo application next to elector-sidecar: it
// polls the sidecar's /token and writes to a shared resource through a
// fence, logging one line per attempt, so the effect of leader election and
// fencing is visible:
//
//	elector-demo [flags]                            the writer loop
//	elector-demo store [--listen 127.0.0.1:7070]    a fenced HTTP store to write to
//	elector-demo health fail|pass [--addr ADDR]     switch a running writer's health endpoint
//
// Writer flags (each with an environment variable; the flag wins):
//
//	--sidecar   ELECTOR_DEMO_SIDECAR   sidecar local API (default http://127.0.0.1:4040)
//	--store     ELECTOR_DEMO_STORE     where to write (required):
//	                                   configmap:<namespace>/<name>  a ConfigMap (pkg/fencing/configmapstore),
//	                                                                 in-cluster config or $KUBECONFIG
//	                                   kubeobject:<namespace>/<name> a ConfigMap written with server-side
//	                                                                 apply through pkg/fencing/kubeobject: the
//	                                                                 API server's fence (the chart's fence.*)
//	                                                                 judges the token; a rejection's log line
//	                                                                 carries its message (apiserver="...")
//	                                   http://host:port              a fenced HTTP store (elector-demo store)
//	--interval  ELECTOR_DEMO_INTERVAL  pause between attempts (default 500ms)
//	--writer    ELECTOR_DEMO_WRITER    name written with each value (default $POD_NAME, then the hostname)
//	--health-listen ELECTOR_DEMO_HEALTH_LISTEN  serve GET /healthz (200, or 503 after `health fail`)
//	                                   and POST /health?fail=true|false here, e.g. 127.0.0.1:8080
//	                                   (default off); for the sidecar's --app-health-url
//
// Each attempt logs one line, e.g.
//
//	time=15:04:05.000 writer=pod-a attempt=7 result=accepted token=3 highest=3 value="pod-a #7 token 3"
//	time=15:04:05.500 writer=pod-b attempt=7 result=not-leader status=409 holder=pod-a
//	time=15:04:06.000 writer=pod-a attempt=8 result=rejected-stale token=3 highest=4
//
// SIGUSR1 makes the writer send one "late write" at once with the last token
// it was given, without asking the sidecar, as if that write had been held up
// by a long GC pause: after a takeover the fence rejects it (rejected-stale).
//
// SIGTERM/SIGINT: exit 0. Bad flags: exit 2. Runtime failure: exit 1.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	late := make(chan os.Signal, 1)
	signal.Notify(late, syscall.SIGUSR1)
	os.Exit(run(ctx, os.Args[1:], osEnv(), late, os.Stdout, os.Stderr))
}
