# elector-sidecar image: the static sidecar binary on distroless/static, running as the nonroot user; and, as
# the target `demo`, the elector-demo image with the chart's demo apps (elector-demo, examples/go-worker) and its
# `helm test` program (elector-chart-test).
#   docker build --build-arg VERSION=0.2.0 --build-arg REVISION=$(git rev-parse HEAD) -t elector-sidecar:0.2.0 .
#   docker build --target demo --build-arg VERSION=0.2.0 --build-arg REVISION=$(git rev-parse HEAD) -t elector-demo:0.2.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 ...   (what `make release` runs where Docker exists)
# Base images are pinned by digest (the tag is kept for the reader); refresh with `crane digest IMAGE:TAG`.
# The binaries get the ldflags of the Makefile's LDFLAGS (VERSION and REVISION stamped into pkg/version).
# Without Docker, `make image` (hack/image.sh) builds the same image as a tarball; hack/tools/mkimage's
# TestImageTarballMatchesDockerfile evaluates this file (COPY, USER, ENTRYPOINT, LABEL, ARG, the base's
# passwd/group/CA bundle/tmp/workdir) and compares that tarball with it.

FROM --platform=$BUILDPLATFORM golang:1.26@sha256:3aff6657219a4d9c14e27fb1d8976c49c29fddb70ba835014f477e1c70636647 AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
WORKDIR /src
# Dependencies first, so source edits keep the module download layer cached.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The demo app lives in the test module (test/go.mod): `go -C test` builds it from there.
RUN set -eux; \
    for pair in .:./cmd/elector-sidecar test:./cmd/elector-demo .:./examples/go-worker test:./cmd/elector-chart-test; do \
      mod="${pair%%:*}"; pkg="${pair#*:}"; \
      CGO_ENABLED=0 GOOS="${TARGETOS:-linux}" GOARCH="${TARGETARCH}" go -C "${mod}" build -trimpath \
        -ldflags "-s -w -X github.com/elector-sidecar/elector-sidecar/pkg/version.Version=${VERSION} -X github.com/elector-sidecar/elector-sidecar/pkg/version.Revision=${REVISION}" \
        -o "/out/${pkg##*/}" "${pkg}"; \
    done

# The demo image (docker build --target demo): not the default target.
FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab AS demo
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="elector-demo" \
      org.opencontainers.image.description="Demo apps and the helm test of elector-sidecar" \
      org.opencontainers.image.source="https://github.com/elector-sidecar/elector-sidecar" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/elector-demo /out/go-worker /out/elector-chart-test /
USER 65532:65532
ENTRYPOINT ["/elector-demo"]

# The sidecar image: the last stage, so the default target.
FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="elector-sidecar" \
      org.opencontainers.image.description="Kubernetes leader-election sidecar with fencing tokens" \
      org.opencontainers.image.source="https://github.com/elector-sidecar/elector-sidecar" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/elector-sidecar /
USER 65532:65532
ENTRYPOINT ["/elector-sidecar"]
