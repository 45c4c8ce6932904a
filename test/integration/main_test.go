// Package integration runs several real elector-sidecar processes (and a
// client-go baseline candidate) against a real etcd + kube-apiserver and
// checks the election's guarantees from the outside: through /leader,
// /token, the Lease object, kubectl and a fenced store. Every test samples
// /token of every process it starts on one monotonic clock and fails if two
// processes ever held a valid token at overlapping instants, or if a later
// token was not greater.
//
// The control-plane binaries come from KUBEBUILDER_ASSETS or
// `hack/build-binaries.sh --print-dir`; if they are missing the package fails
// with the command that builds them.
package integration

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// env is the package's shared control plane and binaries.
var env struct {
	cp           *framework.ControlPlane
	sidecarBin   string
	candidateBin string
	logDir       string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("integration: skipped in -short mode")
		return 0
	}
	start := time.Now()
	bins, err := framework.BuildBinaries(framework.SidecarPackage, framework.CandidatePackage)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: FAIL: building binaries:", err)
		return 1
	}
	defer framework.CleanupBinaries()
	env.sidecarBin = bins[framework.SidecarPackage]
	env.candidateBin = bins[framework.CandidatePackage]
	built := time.Since(start)

	cp, err := framework.StartControlPlane(framework.ControlPlaneOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: FAIL:", err)
		return 1
	}
	env.cp = cp
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "integration:", err)
		}
	}()
	logDir, err := os.MkdirTemp("", "elector-integration-logs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: FAIL:", err)
		return 1
	}
	env.logDir = logDir
	fmt.Printf("integration: binaries built in %v, control plane (%s) up in %v; process logs in %s\n",
		built.Round(time.Millisecond), cp.APIServerURL(), (time.Since(start) - built).Round(time.Millisecond), logDir)
	code := m.Run()
	if code == 0 {
		_ = os.RemoveAll(logDir)
	} else {
		fmt.Printf("integration: process logs kept in %s\n", logDir)
	}
	return code
}
