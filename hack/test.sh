#!/usr/bin/env bash
# The README's test command (`make test`), and what CI runs (.ci/run).
#
# Tiers, in order; each needs what the one before it built:
#   verify       gofmt, go vet and golangci-lint of every Go module, shellcheck of every script
#   unit         go test of the root module (pkg/, internal/, cmd/, examples/: fake clientset, httptest),
#                of the test module's harness and programs (test/framework, test/cmd) and the tool modules
#   integration  real etcd + kube-apiserver (built once into the cache by hack/build-binaries.sh), all in
#                the test module (test/go.mod): multi-process election tests (test/integration), the fences
#                (test/fences), the examples (test/examples) and chart/config tests (test/chart)
#   e2e          a local single-node cluster with a real kubelet and containerd
#                (hack/local-cluster.sh), the chart installed with helm, test/e2e (build tag e2e)
#
#   hack/test.sh [TIER...]     default: all tiers
#   ELECTOR_TEST_TIERS="unit integration" hack/test.sh   same as naming them
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

command -v go >/dev/null || die "go is not installed (need the version in go.mod)"

tiers=("$@")
if [[ ${#tiers[@]} -eq 0 ]]; then
  read -r -a tiers <<<"${ELECTOR_TEST_TIERS:-verify unit integration e2e}"
fi

# Go's own closing lines ("ok", "FAIL") are what CI reads; -count=1 defeats the test cache so a
# green run means the tests ran.
GOTEST=(go test -count=1)

tier_verify() {
  hack/verify.sh
}

tier_unit() {
  # test/framework/dbserver's own test starts a real PostgreSQL and redis-server.
  hack/install-deps.sh
  "${GOTEST[@]}" -race ./...
  # The test module's own unit tests: the harness, the test programs (bench, demo, chaos, ...), the local
  # cluster's steps (test/localcluster).
  (cd test && "${GOTEST[@]}" -race ./framework/... ./cmd/... ./localcluster/...)
  # A short fuzz run of the local API handler and of the flag/env parsing, from the seed corpora in
  # testdata/fuzz; a crasher found here is written there and becomes a regular test case. A fixed
  # number of executions (seconds here), not -fuzztime=<duration>: Go 1.26's coordinator can fail a
  # duration-bounded run with "context deadline exceeded" as the time runs out (go.dev/issue/75804).
  "${GOTEST[@]}" -run='^$' -fuzz='^FuzzHandler$' -fuzztime=20000x ./pkg/localapi
  "${GOTEST[@]}" -run='^$' -fuzz='^FuzzParse$' -fuzztime=20000x ./internal/sidecar
  (cd hack/tools && "${GOTEST[@]}" ./...)
}

tier_integration() {
  # PostgreSQL and redis-server for the fences (test/fences), installed only when missing.
  hack/install-deps.sh
  hack/build-binaries.sh
  KUBEBUILDER_ASSETS="$(hack/build-binaries.sh --print-dir)"
  export KUBEBUILDER_ASSETS
  # The binaries were just built: a test that cannot find one fails instead of skipping (test/chart).
  export ELECTOR_REQUIRE_APISERVER=1
  # Every tier below runs in the test module (test/go.mod).
  (cd test && "${GOTEST[@]}" -timeout 20m -v ./integration/... 2>&1) | go_test_summary integration
  (cd test && "${GOTEST[@]}" -timeout 10m ./fences/...)
  # The example workers (Go, Python, shell) against a real sidecar and PostgreSQL.
  (cd test && "${GOTEST[@]}" -timeout 10m ./examples/...)
  hack/test-chart.sh
}

tier_e2e() {
  hack/e2e.sh
}

# go_test_summary NAME: passes `go test -v` output through, keeping only the lines that matter
# (test starts/ends, failures, logs of failing tests) and keeping the exit status.
go_test_summary() {
  grep --line-buffered -E '^(=== RUN|--- |\s+--- |PASS|FAIL|ok |panic|\s+\S+_test\.go:[0-9]+:)' || true
}

for tier in "${tiers[@]}"; do
  case "$tier" in
    verify | unit | integration | e2e) ;;
    *) die "unknown tier '$tier' (want verify, unit, integration or e2e)" ;;
  esac
  start=$(date +%s)
  log "tier $tier: start"
  "tier_$tier"
  log "tier $tier: passed in $(($(date +%s) - start))s"
done
log "all tiers passed: ${tiers[*]}"
