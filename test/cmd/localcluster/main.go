// Command localcluster runs the local single-node Kubernetes cluster (test/localcluster). Run it
// through hack/local-cluster.sh, which builds it and the cluster's binaries and sets ELECTOR_ROOT,
// ELECTOR_CACHE, ELECTOR_BIN and K8S_VERSION:
//
//	localcluster up       start the cluster on free ports, wait for a Ready node (ELECTOR_IMAGES: tarballs to import)
//	localcluster down     stop everything and undo all host changes (idempotent)
//	localcluster env      print export lines for eval
//	localcluster status   print component PIDs, ports and the node; exit 1 if not running
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/elector-sidecar/elector-sidecar/test/localcluster"
)

const usage = "usage: localcluster up|down|env|status"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	cmd := os.Args[1]
	if cmd == localcluster.CgExecCommand {
		err := localcluster.CgExec(os.Args[2:]) // returns only on failure
		fmt.Fprintf(os.Stderr, "localcluster %s: %v\n", cmd, err)
		os.Exit(1)
	}
	switch cmd {
	case "up", "down", "env", "status":
	default:
		fmt.Fprintf(os.Stderr, "localcluster: unknown command %q; %s\n", cmd, usage)
		os.Exit(2)
	}
	if len(os.Args) > 2 {
		fmt.Fprintf(os.Stderr, "localcluster %s: takes no arguments (got %q)\n", cmd, os.Args[2:])
		os.Exit(2)
	}
	layout, err := localcluster.LayoutFromEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		os.Exit(2)
	}
	c := localcluster.New(layout)
	c.ExtraImages = strings.Fields(os.Getenv("ELECTOR_IMAGES"))
	c.KeepOnFailure = os.Getenv("ELECTOR_KEEP_ON_FAILURE") != ""

	// SIGINT/SIGTERM cancel up (which then tears down what it started); down finishes regardless.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "up":
		err = localcluster.WithLock(c, func() error { return c.Up(ctx) })
		if err == nil {
			c.UsageHint(os.Stderr)
		}
	case "down":
		err = localcluster.WithLock(c, func() error { return c.Down(context.WithoutCancel(ctx)) })
		if err == nil {
			c.Logf("cluster down")
		}
	case "env":
		err = c.WriteEnv(os.Stdout)
	case "status":
		err = c.Status(ctx, os.Stdout)
	}
	if err != nil {
		c.Logf("ERROR: %s: %v", cmd, err)
		stop()
		os.Exit(1)
	}
}
