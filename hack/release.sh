#!/usr/bin/env bash
# `make release VERSION=X.Y.Z`: every artefact of a release, reproducibly, for linux/amd64 and linux/arm64,
# from the committed tree at REF (git archive: nothing uncommitted gets in), into _output/release/X.Y.Z/:
#
#   elector-sidecar-X.Y.Z-linux-ARCH, kubectl-elector-X.Y.Z-linux-ARCH     static binaries (-trimpath)
#   elector-sidecar-image-X.Y.Z-linux-ARCH.oci.tar                       the sidecar image (OCI layout tarball,
#                                                                        ghcr.io/elector-sidecar/elector-sidecar:X.Y.Z)
#   elector-demo-image-X.Y.Z-linux-ARCH.oci.tar                          the demo image (demo apps + helm test)
#   elector-sidecar-X.Y.Z.tgz                                            the packaged chart
#   <each artefact>.spdx.json                                            an SPDX 2.3 SBOM per artefact
#   SHA256SUMS                                                           sha256sum of all of the above
#
# Images are built without Docker, as `make image` builds them (hack/image.sh, FORMAT=oci). Where Docker with
# buildx exists, the Dockerfile's images are built too, multi-arch, into docker/ (with their own
# SHA256SUMS.docker; BuildKit's output is not part of the reproducibility promise). Two runs of the same VERSION
# and REF give the same SHA256SUMS: the time stamp of everything is REF's commit time (SOURCE_DATE_EPOCH), the
# Go toolchain is this machine's.
#
# One version names everything: the git tag vX.Y.Z, the image tags X.Y.Z, the chart's version and appVersion,
# `elector-sidecar --version` and `kubectl elector version`. Before a release, set version and appVersion in
# charts/elector-sidecar/Chart.yaml and add a "## [X.Y.Z]" section to CHANGELOG.md, commit, then run this; it
# refuses a VERSION that the tree at REF does not carry.
#
# Environment:
#   VERSION    X.Y.Z (required; no leading v)
#   REF        the commit to release (default: HEAD)
#   ARCHES     default "amd64 arm64"
#   REGISTRY   image name prefix (default: ghcr.io/elector-sidecar)
#   OUT_DIR    default _output/release/$VERSION
#   CA_CERTS   as hack/image.sh
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

VERSION="${VERSION:-}"
[[ -n $VERSION ]] || die "VERSION is required: make release VERSION=X.Y.Z"
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION=$VERSION: want a semantic version X.Y.Z (the git tag is vX.Y.Z; no leading v here)"
REF="${REF:-HEAD}"
ARCHES="${ARCHES:-amd64 arm64}"
REGISTRY="${REGISTRY:-ghcr.io/elector-sidecar}"
OUT_DIR="${OUT_DIR:-_output/release/$VERSION}"

REVISION="$(git rev-parse --verify "$REF^{commit}" 2>/dev/null)" || die "REF=$REF is not a commit"
SOURCE_DATE_EPOCH="$(git log -1 --format=%ct "$REVISION")"
export SOURCE_DATE_EPOCH

# The tree at REF must already carry VERSION.
chart_yaml="$(git show "$REVISION:charts/elector-sidecar/Chart.yaml")"
chart_version="$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' <<<"$chart_yaml")"
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' <<<"$chart_yaml")"
[[ $chart_version == "$VERSION" && $app_version == "$VERSION" ]] ||
  die "charts/elector-sidecar/Chart.yaml at $REF has version $chart_version, appVersion $app_version: set both to $VERSION and commit first"
git show "$REVISION:CHANGELOG.md" | grep -q "^## \[$VERSION\]" ||
  die "CHANGELOG.md at $REF has no \"## [$VERSION]\" section: add one and commit first"

work="_output/release-work/$VERSION"
rm -rf "$work" "$OUT_DIR"
mkdir -p "$work/src" "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
work="$(cd "$work" && pwd)"
log "release $VERSION from $REVISION (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH) into $OUT_DIR"
git archive "$REVISION" | tar -x -C "$work/src"
src="$work/src"

export GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOOS=linux
ldflags="-s -w -X github.com/elector-sidecar/elector-sidecar/pkg/version.Version=$VERSION -X github.com/elector-sidecar/elector-sidecar/pkg/version.Revision=$REVISION"

(cd "$src/hack/tools" && go build -o "$work/sbom" ./sbom && go build -o "$work/chartpkg" ./chartpkg)
sbom() { # ARTEFACT NAME [BINARY[=/path]...]
  local artefact=$1 name=$2
  shift 2
  local args=()
  for b in "$@"; do args+=(--binary "$b"); done
  "$work/sbom" --artefact "$artefact" --name "$name" --version "$VERSION" "${args[@]}" --out "$artefact.spdx.json"
}

for arch in $ARCHES; do
  log "linux/$arch: binaries"
  for cmd in elector-sidecar kubectl-elector; do
    out="$OUT_DIR/$cmd-$VERSION-linux-$arch"
    GOARCH="$arch" go -C "$src" build -trimpath -ldflags "$ldflags" -o "$out" "./cmd/$cmd"
    sbom "$out" "$cmd" "$out=$cmd"
  done
  for kind in sidecar demo; do
    log "linux/$arch: the elector-$kind image"
    out="$OUT_DIR/elector-$kind-image-$VERSION-linux-$arch.oci.tar"
    bindir="$work/bin/$kind-$arch"
    IMAGE_KIND="$kind" FORMAT=oci GOARCH="$arch" VERSION="$VERSION" REVISION="$REVISION" \
      IMAGE="$REGISTRY/elector-$kind" OUT="$out" BIN_DIR="$bindir" "$src/hack/image.sh"
    bins=()
    for b in "$bindir"/*; do bins+=("$b=/$(basename "$b")"); done
    sbom "$out" "elector-$kind-image-linux-$arch" "${bins[@]}"
  done
done

log "the chart"
"$work/chartpkg" --chart "$src/charts/elector-sidecar" --version "$VERSION" --out-dir "$OUT_DIR" >/dev/null
sbom "$OUT_DIR/elector-sidecar-$VERSION.tgz" elector-sidecar-chart
(cd "$src/hack/tools" && go run ./krew --version "$VERSION" --dir "$OUT_DIR" --license "$src/LICENSE" --arches "$ARCHES") # krew: elector.yaml + archives

(cd "$OUT_DIR" && find . -maxdepth 1 -type f -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >"$work/SHA256SUMS")
mv "$work/SHA256SUMS" "$OUT_DIR/SHA256SUMS"

if command -v docker >/dev/null && docker buildx version >/dev/null 2>&1; then
  log "docker buildx: the Dockerfile's images for $ARCHES"
  platforms="$(for a in $ARCHES; do printf 'linux/%s,' "$a"; done)"
  mkdir -p "$OUT_DIR/docker"
  for target in demo ""; do
    name=elector-sidecar
    [[ -z $target ]] || name=elector-demo
    docker buildx build --platform "${platforms%,}" ${target:+--target "$target"} \
      --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" \
      --tag "$REGISTRY/$name:$VERSION" --output "type=oci,dest=$OUT_DIR/docker/$name-image-$VERSION.oci.tar" "$src"
  done
  (cd "$OUT_DIR/docker" && sha256sum -- *.oci.tar >SHA256SUMS.docker)
else
  log "no docker buildx here: the Dockerfile's images are not built (the OCI tarballs above are)"
fi

rm -rf "$work"
log "release $VERSION: $OUT_DIR"
cat "$OUT_DIR/SHA256SUMS"
