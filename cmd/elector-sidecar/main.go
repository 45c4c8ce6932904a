// Command elector-sidecar runs a leader election on a Kubernetes Lease and
// serves the answer, with a fencing token, on a localhost HTTP port.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/elector-sidecar/elector-sidecar/internal/sidecar"
	"github.com/elector-sidecar/elector-sidecar/pkg/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(sidecar.Probe(os.Args[2:], sidecar.OSEnv, os.Stdout, os.Stderr))
	}
	cfg, err := sidecar.Parse(os.Args[1:], sidecar.OSEnv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintf(os.Stderr, "elector-sidecar: %v\n", err)
		os.Exit(2)
	}
	if cfg.ShowVersion {
		fmt.Println("elector-sidecar", version.Version)
		return
	}
	log := sidecar.NewLogger(cfg, os.Stderr)
	// Works, but probably a mistake: a misspelt ELECTOR_* variable, -flag.
	for _, w := range sidecar.Warnings(os.Args[1:], sidecar.OSEnv) {
		log.Warn(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := sidecar.Run(ctx, cfg, log); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}
