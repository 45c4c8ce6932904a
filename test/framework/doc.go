// Package framework is the harness for elector-sidecar's multi-process tests,
// the chaos soak, the demo and the benchmark: it starts a real etcd and
// kube-apiserver (controller-runtime's envtest, restartable), builds the
// binaries once, starts, signals and stops elector-sidecar processes (and the
// client-go baseline candidate), reads their local API, samples /token from
// every process against one monotonic clock to prove that no two processes
// ever hold a valid token at overlapping instants, and serves a fenced HTTP
// store (package fencedhttp).
//
// Everything returns errors instead of taking a *testing.T, so programs
// (test/chaos, the demo driver, a benchmark) can use it as well as tests.
//
// Typical use in a test package:
//
//	func TestMain(m *testing.M) {
//		// build once, start one control plane per package
//		bins, err := framework.BuildBinaries(framework.SidecarPackage)
//		cp, err := framework.StartControlPlane(framework.ControlPlaneOptions{})
//		code := m.Run()
//		cp.Stop()
//		os.Exit(code)
//	}
package framework
