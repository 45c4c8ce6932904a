// Package framework is the harness for elector-sidecar's multi-process tests
// (test/integration), the chaos soak (test/cmd/chaos), the demo
// (test/cmd/demo) and the benchmark (test/cmd/elector-bench), all in the
// test module (test/go.mod). Everything returns errors
// instead of taking a *testing.T, so programs can use it as well as tests.
//
// Pieces:
//
//   - AssetsDir, StartControlPlane: a real etcd + kube-apiserver (envtest)
//     from $KUBEBUILDER_ASSETS or `hack/build-binaries.sh --print-dir`
//     (missing binaries are an error naming the fix). The apiserver can be
//     stopped (StopAPIServer: SIGTERM then SIGKILL), crashed (KillAPIServer)
//     and started again (StartAPIServer) on the same port and certificates;
//     ControlPlane.Kubeconfig is an admin kubeconfig for child processes and
//     ControlPlane.Kubectl runs kubectl. Children die with the parent
//     (parent-death signal), even if a test binary crashes.
//   - BuildBinaries: builds cmd/elector-sidecar, test/cmd/elector-demo and the
//     client-go baseline (CandidatePackage) once per process;
//     ELECTOR_SIDECAR_BINARY (etc., see BinaryOverrideEnv) substitutes a prebuilt binary.
//   - StartProcess / Process: a child with its log file, Signal, Kill,
//     Terminate, Pause (SIGSTOP), Resume (SIGCONT), Wait, exit code.
//   - StartCandidate / Candidate: an elector-sidecar (KindSidecar) or the
//     client-go LeaderElector baseline (KindClientGo, test/cmd/clientgo-candidate)
//     with its local API client (Token, Leader); Timings and TestTimings.
//   - Group: candidates on one Lease with restarts by identity, WaitForLeader,
//     Leaders, Describe and Logs for failure messages, and a Sampler.
//   - Sampler: polls GET /token of every process concurrently on one
//     monotonic clock; Terms groups the valid answers per process and token,
//     CheckNoOverlap fails if two processes provably served at one instant
//     (whatever the calls' delays; windows that merely intersect are
//     "possible", logged), CheckTokenOrder if a later term's token is not greater,
//     CheckDistinctTokens if two processes ever served the same token value;
//     Check runs all three.
//   - TCPProxy, WriteProxiedKubeconfig: a per-candidate proxy in front of the
//     apiserver that can be cut (stall or reset connections) and healed, to
//     partition one candidate from the apiserver.
//   - Poll, Eventually, Consistently: every wait of the tests (and of the
//     framework), on k8s.io/apimachinery's wait.PollUntilContextTimeout;
//     tests wait on conditions, never on sleeps. They and MarkdownCodeBlocks
//     live in the root module's internal/testsupport (so the root module's
//     unit tests share them without depending on this module) and are
//     re-exported here.
//   - CacheDir, CacheBinDir: hack/lib.sh's cache rule (ELECTOR_CACHE_DIR, else
//     $XDG_CACHE_HOME or ~/.cache, /elector-sidecar) for Go code.
//   - LeaseHolder, HolderOf, TransitionsOf, SyncBuffer: small shared helpers.
//   - pkg/fencing/httpstore (not here): the fenced HTTP store the tests write to.
//
// Typical use:
//
//	cp, err := framework.StartControlPlane(framework.ControlPlaneOptions{})
//	defer cp.Stop()
//	bin, err := framework.BuildBinary(framework.SidecarPackage)
//	ns, err := cp.CreateNamespace(ctx, "bench")
//	g := framework.NewGroup(framework.CandidateSpec{Binary: bin, LeaseName: "l", Namespace: ns,
//		Kubeconfig: cp.Kubeconfig, Timings: framework.TestTimings})
//	defer g.StopAll(3 * time.Second)
//	g.StartAll(ctx, "a", "b", "c")
//	leader, tok, err := g.WaitForLeader(ctx, 20*time.Second)
//	leader.Terminate()
//	next, tok2, err := g.WaitForLeader(ctx, 10*time.Second, leader)
//	g.Sampler.Stop()
//	err = g.Sampler.Check() // overlap, token order, one process per token value
package framework
