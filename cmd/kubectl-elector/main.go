// Command kubectl-elector is the kubectl plugin `kubectl elector`: the holder,
// fencing token and expiry of elector-sidecar Leases, their Events, and a
// watch of leadership changes. Put it on PATH and run `kubectl elector
// --help`. The logic is in internal/kubectlelector.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/elector-sidecar/elector-sidecar/internal/kubectlelector"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubectlelector.Run(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, kubectlelector.Deps{})
	stop()
	os.Exit(code)
}
