#!/usr/bin/env bash
# Runs the e2e suite (test/e2e) in a kind cluster on a Docker host.
#
#   hack/e2e-kind.sh                       docker build (tests the Dockerfile), kind cluster, e2e suite, cleanup
#   IMAGE_SOURCE=tarball hack/e2e-kind.sh  the image from hack/image.sh (no docker build) via kind load image-archive
#
# Environment: KIND_CLUSTER (default elector-e2e), KIND_NODE_IMAGE (kind's default if empty), VERSION (image
# tag, default e2e-<git describe>), KEEP_CLUSTER=1 to keep the cluster afterwards. Needs docker, kind, go;
# kubectl and helm from PATH or the hack/ binaries cache (hack/build-binaries.sh).
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

for cmd in docker kind go; do
  command -v "$cmd" >/dev/null || die "$cmd is required (this script runs on a Docker host with kind)"
done
CLUSTER="${KIND_CLUSTER:-elector-e2e}"
VERSION="${VERSION:-e2e-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
IMAGE="elector-sidecar:$VERSION"
export PATH="$PATH:$ELECTOR_BIN"
command -v helm >/dev/null || hack/build-binaries.sh helm
command -v kubectl >/dev/null || hack/build-binaries.sh kubectl

case "${IMAGE_SOURCE:-docker}" in
  docker)
    log "docker build $IMAGE"
    docker build --build-arg "VERSION=$VERSION" --build-arg "REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)" -t "$IMAGE" .
    ;;
  tarball)
    VERSION="$VERSION" OUT=_output/elector-sidecar-image.tar hack/image.sh
    ;;
  *) die "IMAGE_SOURCE must be docker or tarball" ;;
esac

if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "creating kind cluster $CLUSTER"
  kind create cluster --name "$CLUSTER" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 120s
fi
if [[ "${KEEP_CLUSTER:-}" != 1 ]]; then
  trap 'log "deleting kind cluster $CLUSTER"; kind delete cluster --name "$CLUSTER"' EXIT
fi

if [[ "${IMAGE_SOURCE:-docker}" == tarball ]]; then
  kind load image-archive _output/elector-sidecar-image.tar --name "$CLUSTER"
else
  kind load docker-image "$IMAGE" --name "$CLUSTER"
fi

kubeconfig="$(mktemp)"
kind get kubeconfig --name "$CLUSTER" >"$kubeconfig"
log "running test/e2e against kind cluster $CLUSTER with $IMAGE"
KUBECONFIG="$kubeconfig" ELECTOR_E2E_IMAGE="$IMAGE" ELECTOR_E2E_PULL_POLICY=Never \
  go -C test test -tags e2e -count=1 -v -timeout 30m ./e2e/...
