#!/usr/bin/env bash
# Builds the elector-sidecar container image as a tarball WITHOUT a container engine:
# the same static binaries, user, entrypoint and labels as the Dockerfile, on an empty base,
# written by hack/tools/mkimage (go-containerregistry) in the `docker save` format.
#
# Load it with:  docker load -i OUT  |  ctr images import OUT  |  kind load image-archive OUT
#
# Environment:
#   VERSION   image tag and pkg/version.Version (default: git describe --tags --always --dirty, else "dev")
#   REVISION  org.opencontainers.image.revision label and pkg/version.Revision (elector_build_info's revision)
#             (default: git rev-parse HEAD, else "unknown")
#   IMAGE     image name (default: elector-sidecar); the tarball is tagged $IMAGE:$VERSION
#   OUT       output tarball (default: _output/elector-sidecar-image.tar)
#   GOARCH    target architecture (default: go env GOARCH)
#   IMAGE_BINARIES  space-separated "package:/path" pairs to build into the image
#             (default: "./cmd/elector-sidecar:/elector-sidecar ./cmd/elector-demo:/elector-demo
#             ./examples/go-worker:/go-worker"; the chart's demo.app runs /elector-demo or /go-worker)
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

if [[ -z "${VERSION:-}" ]]; then
  VERSION="$(git describe --tags --always --dirty 2>/dev/null || true)"
  VERSION="${VERSION:-dev}"
fi
if [[ -z "${REVISION:-}" ]]; then
  REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
fi
IMAGE="${IMAGE:-elector-sidecar}"
OUT="${OUT:-_output/elector-sidecar-image.tar}"
GOARCH="${GOARCH:-$(go env GOARCH)}"
IMAGE_BINARIES="${IMAGE_BINARIES:-./cmd/elector-sidecar:/elector-sidecar ./cmd/elector-demo:/elector-demo ./examples/go-worker:/go-worker}"

bindir="_output/image/linux_${GOARCH}"
mkdir -p "$bindir"

# The tool lives in its own module (hack/tools) so go-containerregistry stays out of the root go.mod.
log "building mkimage"
(cd hack/tools && go build -o "$ELECTOR_ROOT/_output/tools/mkimage" ./mkimage)

file_args=()
for pair in $IMAGE_BINARIES; do
  pkg="${pair%%:*}"
  dst="${pair#*:}"
  out="$bindir/$(basename "$dst")"
  log "building $pkg (VERSION=$VERSION, linux/$GOARCH)"
  CGO_ENABLED=0 GOOS=linux GOARCH="$GOARCH" go build -trimpath \
    -ldflags "-s -w -X github.com/elector-sidecar/elector-sidecar/pkg/version.Version=$VERSION -X github.com/elector-sidecar/elector-sidecar/pkg/version.Revision=$REVISION" \
    -o "$out" "$pkg"
  file_args+=(--file "$out:$dst:0755")
done

# Keep these labels in sync with the Dockerfile.
"$ELECTOR_ROOT/_output/tools/mkimage" \
  "${file_args[@]}" \
  --dir /tmp:1777 \
  --entrypoint /elector-sidecar \
  --user 65532:65532 \
  --arch "$GOARCH" \
  --label "org.opencontainers.image.title=elector-sidecar" \
  --label "org.opencontainers.image.description=Kubernetes leader-election sidecar with fencing tokens" \
  --label "org.opencontainers.image.source=https://github.com/elector-sidecar/elector-sidecar" \
  --label "org.opencontainers.image.version=$VERSION" \
  --label "org.opencontainers.image.revision=$REVISION" \
  --tag "$IMAGE:$VERSION" \
  --out "$OUT"
log "wrote $OUT ($IMAGE:$VERSION, $(du -h "$OUT" | cut -f1))"
