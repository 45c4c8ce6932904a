// Package examples runs the example workers of examples/ (Go, Python, shell)
// end to end: each next to a real elector-sidecar process on a real etcd +
// kube-apiserver, writing to a real PostgreSQL through the fence, started
// with the commands README.md's "Examples" section shows. Every test freezes
// the leader's sidecar and its worker (SIGSTOP) in the middle of a job, past
// the lease, and checks that the worker's late write with its old token is
// rejected by PostgreSQL and leaves no row behind the new leader's.
//
// The control-plane binaries come from KUBEBUILDER_ASSETS or
// `hack/build-binaries.sh --print-dir`; PostgreSQL, psql, curl and
// python3-psycopg from the Debian packages (hack/install-deps.sh).
package examples

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// env is the package's shared control plane and sidecar binary.
var env struct {
	cp         *framework.ControlPlane
	sidecarBin string
	logDir     string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("examples: skipped in -short mode")
		return 0
	}
	start := time.Now()
	bin, err := framework.BuildBinary(framework.SidecarPackage)
	if err != nil {
		fmt.Fprintln(os.Stderr, "examples: FAIL: building elector-sidecar:", err)
		return 1
	}
	defer framework.CleanupBinaries()
	env.sidecarBin = bin
	cp, err := framework.StartControlPlane(framework.ControlPlaneOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "examples: FAIL:", err)
		return 1
	}
	env.cp = cp
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "examples:", err)
		}
	}()
	logDir, err := os.MkdirTemp("", "elector-examples-logs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "examples: FAIL:", err)
		return 1
	}
	env.logDir = logDir
	fmt.Printf("examples: sidecar built and control plane (%s) up in %v; process logs in %s\n",
		cp.APIServerURL(), time.Since(start).Round(time.Millisecond), logDir)
	code := m.Run()
	if code == 0 {
		_ = os.RemoveAll(logDir)
	} else {
		fmt.Printf("examples: process logs kept in %s\n", logDir)
	}
	return code
}
