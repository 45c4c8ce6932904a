// Package e2e is elector-sidecar's end-to-end suite: the Helm chart installed
// into a real cluster (real kubelet, containerd, runc), with the image under
// test, and the election observed from outside the pods.
//
// The tests carry the build tag e2e and run against whatever cluster
// KUBECONFIG points to:
//
//	hack/e2e.sh                        the local single-node cluster: builds the image, brings the
//	                                   cluster up, runs this suite, tears the cluster down
//	hack/e2e-kind.sh                   the same suite in kind on a Docker host
//	KUBECONFIG=... ELECTOR_E2E_IMAGE=elector-sidecar:TAG \
//	  go -C test test -tags e2e -count=1 -v -timeout 30m ./e2e/...
//
// Environment:
//
//	KUBECONFIG                the cluster (required)
//	ELECTOR_E2E_IMAGE         the image under test, REPOSITORY:TAG, already present on the nodes (required)
//	ELECTOR_E2E_PULL_POLICY   image pull policy of the pods (default Never)
//	ELECTOR_E2E_CHART         chart directory or packaged chart .tgz (default charts/elector-sidecar of this repository)
//	ELECTOR_E2E_RELEASE_CHART, ELECTOR_E2E_RELEASE_IMAGE, ELECTOR_E2E_RELEASE_DEMO_IMAGE
//	                          a release's packaged chart and images (REPOSITORY:TAG, on the nodes), all three or
//	                          none: the README values-file test installs them (hack/e2e.sh sets them to the
//	                          release it builds or is given); unset, it installs ELECTOR_E2E_CHART and says so
//	ELECTOR_E2E_LOG_LEVEL     the sidecars' log level (default info)
//	KUBECTL, HELM             the CLIs (default: kubectl and helm on PATH, then the hack/ binaries cache)
//	ELECTOR_E2E_KUBECTL_ELECTOR  the kubectl-elector plugin binary, run through kubectl (default: built
//	                          from this checkout; hack/e2e.sh builds it as `make build` does)
//
// The sidecar's local API listens on 127.0.0.1 inside the pods, so the tests
// read it with `kubectl exec POD -c elector -- /elector-sidecar probe PATH`
// (the image is distroless). The frozen-leader test sends SIGSTOP to the
// sidecar's process, which it finds by scanning /proc for the container ID:
// it needs to run as root on the node (true for the local cluster; for kind
// on a Linux Docker host, as root on the host) and skips itself otherwise; so
// does the fence test, which freezes the leader's app container the same way.
//
// Every test calls t.Parallel(): each has its own namespace and release
// (newRelease), and cluster-scoped objects are named after the namespace;
// hack/e2e.sh runs two at a time (ELECTOR_E2E_PARALLEL).
package e2e
