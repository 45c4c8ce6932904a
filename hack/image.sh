#!/usr/bin/env bash
# Builds the elector-sidecar container image (or, with IMAGE_KIND=demo, the elector-demo image: the
# Dockerfile's `demo` target) as a tarball WITHOUT a container engine:
# the same static binaries, user, workdir, environment, entrypoint and labels as the Dockerfile, on an
# empty base plus what the Dockerfile's base (distroless/static-debian12:nonroot) gives the sidecar:
# /etc/passwd and /etc/group with nonroot 65532, /etc/nsswitch.conf, /tmp (1777), /home/nonroot (0700,
# 65532) and the CA bundle /etc/ssl/certs/ca-certificates.crt, copied from this machine's Debian
# ca-certificates package (hack/install-deps.sh image installs it if missing). Written by
# hack/tools/mkimage (go-containerregistry) in the `docker save` format. hack/tools/mkimage's
# TestImageTarballMatchesDockerfile builds it and compares it with what the Dockerfile promises.
#
# Load it with:  docker load -i OUT  |  ctr images import OUT  |  kind load image-archive OUT
#
# Environment:
#   IMAGE_KIND  sidecar (default: /elector-sidecar alone) or demo (/elector-demo, /go-worker and the chart's
#             helm test /elector-chart-test; entrypoint /elector-demo)
#   FORMAT    docker (default: the `docker save` format) or oci (an OCI image layout in one tar; `make release`)
#   VERSION   image tag and pkg/version.Version (default: git describe --tags --always --dirty, else "dev")
#   REVISION  org.opencontainers.image.revision label and pkg/version.Revision (elector_build_info's revision)
#             (default: git rev-parse HEAD, else "unknown")
#   IMAGE     image name (default: elector-sidecar, or elector-demo); the tarball is tagged $IMAGE:$VERSION
#   OUT       output tarball (default: _output/elector-sidecar-image.tar, or _output/elector-demo-image.tar)
#   GOARCH    target architecture (default: go env GOARCH)
#   CA_CERTS  the CA bundle copied to /etc/ssl/certs/ca-certificates.crt
#             (default: /etc/ssl/certs/ca-certificates.crt of the Debian ca-certificates package)
#   IMAGE_BINARIES  space-separated "package:/path" pairs to build into the image (default: by IMAGE_KIND,
#             as the Dockerfile's stages copy them)
#   BIN_DIR   where the binaries are built (default: _output/image/linux_$GOARCH)
#   SOURCE_DATE_EPOCH  the image's creation time (default: the Unix epoch)
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
IMAGE_KIND="${IMAGE_KIND:-sidecar}"
case "$IMAGE_KIND" in
  sidecar)
    title=elector-sidecar
    description="Kubernetes leader-election sidecar with fencing tokens"
    entrypoint=/elector-sidecar
    default_binaries="./cmd/elector-sidecar:/elector-sidecar"
    ;;
  demo)
    title=elector-demo
    description="Demo apps and the helm test of elector-sidecar"
    entrypoint=/elector-demo
    default_binaries="./test/cmd/elector-demo:/elector-demo ./examples/go-worker:/go-worker ./test/cmd/elector-chart-test:/elector-chart-test"
    ;;
  *) die "IMAGE_KIND=$IMAGE_KIND: want sidecar or demo" ;;
esac
FORMAT="${FORMAT:-docker}"
[[ $FORMAT == docker || $FORMAT == oci ]] || die "FORMAT=$FORMAT: want docker or oci"
IMAGE="${IMAGE:-$title}"
OUT="${OUT:-_output/$title-image.tar}"
GOARCH="${GOARCH:-$(go env GOARCH)}"
IMAGE_BINARIES="${IMAGE_BINARIES:-$default_binaries}"

bindir="${BIN_DIR:-_output/image/linux_${GOARCH}}"
[[ $bindir == /* ]] || bindir="$ELECTOR_ROOT/$bindir"
etcdir="_output/image/etc"
mkdir -p "$bindir" "$etcdir"

if [[ -z "${CA_CERTS:-}" ]]; then
  CA_CERTS=/etc/ssl/certs/ca-certificates.crt
  [[ -s "$CA_CERTS" ]] || hack/install-deps.sh image
fi
[[ -s "$CA_CERTS" ]] || die "CA bundle $CA_CERTS is missing or empty (set CA_CERTS to a PEM bundle)"

# What distroless/static-debian12:nonroot has in /etc (hack/tools/dockerfile's Bases lists it too).
printf '%s\n' \
  'root:x:0:0:root:/root:/sbin/nologin' \
  'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$etcdir/passwd"
printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'tty:x:5:' 'staff:x:50:' 'nonroot:x:65532:' >"$etcdir/group"
printf '%s\n' \
  'passwd:         compat' \
  'group:          compat' \
  'shadow:         compat' \
  'gshadow:        files' \
  '' \
  'hosts:          files dns' \
  'networks:       files' \
  '' \
  'protocols:      db files' \
  'services:       db files' \
  'ethers:         db files' \
  'rpc:            db files' \
  '' \
  'netgroup:       nis' >"$etcdir/nsswitch.conf"

# The tool lives in its own module (hack/tools) so go-containerregistry stays out of the root go.mod.
log "building mkimage"
# It runs here: built for this machine, whatever GOARCH the image is for.
(cd hack/tools && GOOS="$(go env GOHOSTOS)" GOARCH="$(go env GOHOSTARCH)" go build -o "$ELECTOR_ROOT/_output/tools/mkimage" ./mkimage)

file_args=()
for pair in $IMAGE_BINARIES; do
  pkg="${pair%%:*}"
  dst="${pair#*:}"
  out="$bindir/$(basename "$dst")"
  log "building $pkg (VERSION=$VERSION, linux/$GOARCH)"
  # Packages under ./test/ (the demo app) belong to the test module: build them from there.
  moddir=.
  if [[ $pkg == ./test/* ]]; then
    moddir="test"
    pkg="./${pkg#./test/}"
  fi
  CGO_ENABLED=0 GOOS=linux GOARCH="$GOARCH" go -C "$moddir" build -trimpath \
    -ldflags "-s -w -X github.com/elector-sidecar/elector-sidecar/pkg/version.Version=$VERSION -X github.com/elector-sidecar/elector-sidecar/pkg/version.Revision=$REVISION" \
    -o "$out" "$pkg"
  file_args+=(--file "$out:$dst:0755")
done

# Keep these in sync with the Dockerfile (TestImageTarballMatchesDockerfile compares them).
"$ELECTOR_ROOT/_output/tools/mkimage" \
  "${file_args[@]}" \
  --file "$etcdir/passwd:/etc/passwd:0644" \
  --file "$etcdir/group:/etc/group:0644" \
  --file "$etcdir/nsswitch.conf:/etc/nsswitch.conf:0644" \
  --file "$CA_CERTS:/etc/ssl/certs/ca-certificates.crt:0644" \
  --dir /tmp:1777 \
  --dir /root:0700 \
  --dir /home:0755 \
  --dir /home/nonroot:0700:65532:65532 \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --workdir /home/nonroot \
  --entrypoint "$entrypoint" \
  --user 65532:65532 \
  --arch "$GOARCH" \
  --label "org.opencontainers.image.title=$title" \
  --label "org.opencontainers.image.description=$description" \
  --label "org.opencontainers.image.source=https://github.com/elector-sidecar/elector-sidecar" \
  --label "org.opencontainers.image.version=$VERSION" \
  --label "org.opencontainers.image.revision=$REVISION" \
  --label "org.opencontainers.image.licenses=Apache-2.0" \
  --tag "$IMAGE:$VERSION" \
  --format "$FORMAT" \
  --out "$OUT"
log "wrote $OUT ($IMAGE:$VERSION, $(du -h "$OUT" | cut -f1))"
