#!/usr/bin/env bash
# The e2e tier (hack/test.sh e2e, make test-e2e): builds the image without Docker (hack/image.sh) and the
# kubectl plugin (as `make build` does), brings up the local single-node cluster with the image
# (hack/local-cluster.sh), runs test/e2e (build tag e2e) against it,
# and ALWAYS tears the cluster down again (also on failure, Ctrl-C or SIGTERM), exiting with the tests' status.
#
#   hack/e2e.sh [GO TEST FLAGS...]      e.g. hack/e2e.sh -run 'TestFrozenLeader|TestInstall'
#
# Needs root on a Linux host with cgroup v1 (see hack/local-cluster.sh). The first run builds kubelet,
# containerd, ... from the Go module proxy (cached in $ELECTOR_CACHE_DIR); later runs reuse them.
#
# Environment:
#   VERSION                      image tag (default: git describe --tags --always --dirty, else "dev")
#   ELECTOR_E2E_RELEASE_DIR      test a release instead (`make release` output, e.g. _output/release/0.2.0): its
#                                images for this machine's architecture and its packaged chart; VERSION is the
#                                directory's name
#   ELECTOR_E2E_RELEASE_BUILD=0  without ELECTOR_E2E_RELEASE_DIR, this script runs `make release` of the committed
#                                tree (HEAD) for this machine's architecture only (hack/release.sh with
#                                ARCHES=$(go env GOARCH), the chart's version, into _output/e2e/release/): on a
#                                clean tree the whole suite tests that release (as with ELECTOR_E2E_RELEASE_DIR);
#                                on a tree with changes the images are built from it too and only the README's
#                                values-file test installs the release. 0 skips the release (that test then
#                                installs the checkout's chart, and says so)
#   ELECTOR_E2E_TIMEOUT          go test -timeout (default 30m)
#   ELECTOR_E2E_PARALLEL         go test -parallel: tests at a time (default 2)
#   ELECTOR_E2E_REUSE_CLUSTER=1  run against a local cluster that is already up (import the image into it)
#                                and leave it running; without it, a running cluster is an error
#   ELECTOR_E2E_KEEP_CLUSTER=1   leave the cluster this script started running (debugging;
#                                `eval "$(hack/local-cluster.sh env)"`, then `hack/local-cluster.sh down`)
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

[[ $(id -u) -eq 0 ]] || die "the e2e tier needs root (it runs a kubelet and containerd on this machine)"
command -v setsid >/dev/null || die "setsid (util-linux) is required"

if [[ -z "${VERSION:-}" ]]; then
  VERSION="$(git describe --tags --always --dirty 2>/dev/null || true)"
  VERSION="${VERSION:-dev}"
fi
export VERSION
IMAGE_REPO="elector-sidecar"
DEMO_REPO="elector-demo"
IMAGE_TAR="$ELECTOR_ROOT/_output/e2e/elector-sidecar-image.tar" # not `make image`'s tarball: others may rebuild that meanwhile
DEMO_TAR="$ELECTOR_ROOT/_output/e2e/elector-demo-image.tar"
# use_release_dir DIR: test the release in DIR (`make release` output): its images for this machine's
# architecture and its packaged chart.
use_release_dir() {
  RELEASE_DIR="$(cd "$1" && pwd)" || die "$1: no such directory"
  VERSION="$(basename "$RELEASE_DIR")"
  local arch
  arch="$(go env GOARCH)"
  IMAGE_REPO="ghcr.io/elector-sidecar/elector-sidecar" DEMO_REPO="ghcr.io/elector-sidecar/elector-demo"
  IMAGE_TAR="$RELEASE_DIR/elector-sidecar-image-$VERSION-linux-$arch.oci.tar"
  DEMO_TAR="$RELEASE_DIR/elector-demo-image-$VERSION-linux-$arch.oci.tar"
  export ELECTOR_E2E_CHART="$RELEASE_DIR/elector-sidecar-$VERSION.tgz"
  for f in "$IMAGE_TAR" "$DEMO_TAR" "$ELECTOR_E2E_CHART"; do
    [[ -s $f ]] || die "$f is missing: run make release VERSION=$VERSION first"
  done
  (cd "$RELEASE_DIR" && sha256sum --check --quiet SHA256SUMS) || die "$RELEASE_DIR: SHA256SUMS does not match"
}
RELEASE_DIR=""
if [[ -n "${ELECTOR_E2E_RELEASE_DIR:-}" ]]; then
  use_release_dir "$ELECTOR_E2E_RELEASE_DIR"
fi
PLUGIN_BIN="$ELECTOR_ROOT/_output/e2e/bin/kubectl-elector"      # nor bin/kubectl-elector of `make build`

started=""  # set once this script brings the cluster up: it then owns the teardown
test_pid="" # the go test process group
child=""    # the step running now (see step)
phase_start=$(date +%s)
phase() {
  log "$1 done in $(($(date +%s) - phase_start))s"
  phase_start=$(date +%s)
}

# shellcheck disable=SC2317 # called from the traps
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$child" ]] && kill -0 "$child" 2>/dev/null; then
    log "stopping the running step (pid $child)"
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  if [[ -n "$test_pid" ]] && kill -0 "$test_pid" 2>/dev/null; then
    log "stopping the test run (process group $test_pid)"
    kill -TERM -- "-$test_pid" 2>/dev/null || true
    wait "$test_pid" 2>/dev/null || true
  fi
  if [[ -n "$started" ]]; then
    if [[ -n "${ELECTOR_E2E_KEEP_CLUSTER:-}" ]]; then
      log "ELECTOR_E2E_KEEP_CLUSTER is set: the cluster stays up (stop it with: hack/local-cluster.sh down)"
    else
      log "tearing the local cluster down"
      local t0
      t0=$(date +%s)
      if hack/local-cluster.sh down; then
        log "cluster down in $(($(date +%s) - t0))s"
      else
        log "ERROR: hack/local-cluster.sh down failed: the next run may find leftovers"
        [[ $rc -ne 0 ]] || rc=1
      fi
    fi
  fi
  if [[ $rc -eq 0 ]]; then
    log "e2e: PASS in $(($(date +%s) - _elector_t0))s"
  else
    log "e2e: FAIL (exit $rc) after $(($(date +%s) - _elector_t0))s"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

# step CMD...: runs a long step in the background and waits for it, so that a signal reaches the traps at
# once (bash runs a trap only after the foreground command ends).
step() {
  "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=""
  return "$rc"
}

# 0. Host packages the local cluster needs (nftables, iproute2, gcc, libseccomp-dev, ...), only when missing.
hack/install-deps.sh cluster

# 1. The images under test. With ELECTOR_E2E_RELEASE_DIR, that release's. Else `make release` of HEAD for this
# machine's architecture only (unless ELECTOR_E2E_RELEASE_BUILD=0): on a clean tree (CI: HEAD is what is
# tested) the whole suite runs that release's images and packaged chart, and nothing is built twice; on a tree
# with changes, the images are built from the working tree as well and only the release test
# (TestReadmeValuesFileElectsOneLeaderAndPassesHelmTest) installs the release.
REL_TARS="" REL_IMAGE="" REL_DEMO_IMAGE="" REL_CHART=""
if [[ -z $RELEASE_DIR && "${ELECTOR_E2E_RELEASE_BUILD:-1}" != 0 ]]; then
  rel="$(git show HEAD:charts/elector-sidecar/Chart.yaml | sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p')"
  [[ -n $rel ]] || die "no version in charts/elector-sidecar/Chart.yaml at HEAD"
  rel_arch="$(go env GOARCH)"
  rel_dir="$ELECTOR_ROOT/_output/e2e/release/$rel"
  log "make release VERSION=$rel of HEAD for linux/$rel_arch only, into $rel_dir"
  ARCHES="$rel_arch" VERSION="$rel" OUT_DIR="$rel_dir" step hack/release.sh >/dev/null
  phase "release $rel (linux/$rel_arch)"
  if [[ -z "$(git status --porcelain)" ]]; then
    log "the tree is clean: the whole suite tests release $rel"
    use_release_dir "$rel_dir"
  else
    log "the tree has changes (git status): the images are built from it; only the release test installs release $rel"
    REL_IMAGE="ghcr.io/elector-sidecar/elector-sidecar:$rel" REL_DEMO_IMAGE="ghcr.io/elector-sidecar/elector-demo:$rel"
    REL_CHART="$rel_dir/elector-sidecar-$rel.tgz"
    REL_TARS="$rel_dir/elector-sidecar-image-$rel-linux-$rel_arch.oci.tar $rel_dir/elector-demo-image-$rel-linux-$rel_arch.oci.tar"
  fi
fi
if [[ -n $RELEASE_DIR ]]; then
  log "testing release $VERSION: $IMAGE_TAR, $DEMO_TAR, $ELECTOR_E2E_CHART"
  REL_IMAGE="$IMAGE_REPO:$VERSION" REL_DEMO_IMAGE="$DEMO_REPO:$VERSION" REL_CHART="$ELECTOR_E2E_CHART"
else
  log "building the images $IMAGE_REPO:$VERSION and $DEMO_REPO:$VERSION"
  IMAGE="$IMAGE_REPO" OUT="$IMAGE_TAR" step hack/image.sh
  IMAGE_KIND=demo IMAGE="$DEMO_REPO" OUT="$DEMO_TAR" step hack/image.sh
  phase "images"
fi

# 1b. The kubectl plugin under test, built as `make build` builds it; test/e2e runs it through kubectl.
log "building $PLUGIN_BIN"
CGO_ENABLED=0 step go build -trimpath -ldflags "-s -w -X github.com/elector-sidecar/elector-sidecar/pkg/version.Version=$VERSION" \
  -o "$PLUGIN_BIN" ./cmd/kubectl-elector
phase "kubectl-elector"

# 2. The cluster, with the image imported.
if hack/local-cluster.sh status >/dev/null 2>&1; then
  [[ "${ELECTOR_E2E_REUSE_CLUSTER:-}" == 1 ]] ||
    die "a local cluster is already running (hack/local-cluster.sh status): stop it (hack/local-cluster.sh down) or set ELECTOR_E2E_REUSE_CLUSTER=1 to test against it"
  log "reusing the running local cluster (ELECTOR_E2E_REUSE_CLUSTER=1); it stays up afterwards"
  eval "$(hack/local-cluster.sh env)"
  # shellcheck disable=SC2086 # REL_TARS is a list of paths without spaces
  for tar in "$IMAGE_TAR" "$DEMO_TAR" $REL_TARS; do
    "$ELECTOR_BIN/ctr" --address "$ELECTOR_CLUSTER_CONTAINERD_SOCK" --namespace k8s.io images import "$tar" >/dev/null
    log "imported $tar"
  done
else
  started=1
  ELECTOR_IMAGES="$IMAGE_TAR $DEMO_TAR${REL_TARS:+ $REL_TARS}${ELECTOR_IMAGES:+ $ELECTOR_IMAGES}" step hack/local-cluster.sh up
  eval "$(hack/local-cluster.sh env)"
fi
phase "cluster up"

# 3. The suite. go test runs in its own session so a signal to this script can stop it (and its test
# binary) as a group before the cluster goes away.
export KUBECONFIG
export ELECTOR_E2E_IMAGE="$IMAGE_REPO:$VERSION" ELECTOR_E2E_DEMO_IMAGE="$DEMO_REPO:$VERSION"
export ELECTOR_E2E_PULL_POLICY="${ELECTOR_E2E_PULL_POLICY:-Never}"
export KUBECTL="$ELECTOR_BIN/kubectl" HELM="$ELECTOR_BIN/helm"
export ELECTOR_E2E_KUBECTL_ELECTOR="$PLUGIN_BIN"
export ELECTOR_E2E_RELEASE_CHART="$REL_CHART" ELECTOR_E2E_RELEASE_IMAGE="$REL_IMAGE" ELECTOR_E2E_RELEASE_DEMO_IMAGE="$REL_DEMO_IMAGE"
log "running test/e2e against $KUBECONFIG with $ELECTOR_E2E_IMAGE"
rc=0
# Two tests at a time (each in its own namespace with its own release): one alone left a core idle.
# -vet=off: the verify tier's golangci-lint vets test/e2e (with its build tag), see hack/test.sh.
# The output goes to a file as well (streamed from it), so that a failure can be repeated at the end.
TEST_LOG="$ELECTOR_ROOT/_output/e2e/go-test.log"
setsid go -C test test -tags e2e -count=1 -vet=off -v -parallel "${ELECTOR_E2E_PARALLEL:-2}" -timeout "${ELECTOR_E2E_TIMEOUT:-30m}" "$@" ./e2e/... >"$TEST_LOG" 2>&1 &
test_pid=$!
tail -n +1 -f --pid="$test_pid" "$TEST_LOG" &
tail_pid=$!
wait "$test_pid" || rc=$?
test_pid=""
wait "$tail_pid" || true
if [[ $rc -ne 0 ]]; then
  # A failed test's message sits among the other tests' lines and ahead of its own dump (pods, events,
  # logs): repeat, for each failed test, what it printed last before that dump, where a log's tail shows it.
  awk -v keep=15 -f hack/e2e-failures.awk "$TEST_LOG"
  log "the whole output: $TEST_LOG"
fi
phase "tests (exit $rc)"
exit "$rc"
