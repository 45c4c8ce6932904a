# elector-sidecar image: static binaries on distroless/static (the sidecar, and the chart's demo apps
# elector-demo and examples/go-worker), running as the nonroot user.
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) --build-arg REVISION=$(git rev-parse HEAD) -t elector-sidecar:dev .
# The binaries get the ldflags of the Makefile's LDFLAGS (VERSION and REVISION stamped into pkg/version).
# Without Docker, `make image` (hack/image.sh) builds the same image as a tarball; hack/tools/mkimage's
# TestImageTarballMatchesDockerfile evaluates this file (COPY, USER, ENTRYPOINT, LABEL, ARG, the base's
# passwd/group/CA bundle/tmp/workdir) and compares that tarball with it.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
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
    for pair in .:./cmd/elector-sidecar test:./cmd/elector-demo .:./examples/go-worker; do \
      mod="${pair%%:*}"; pkg="${pair#*:}"; \
      CGO_ENABLED=0 GOOS="${TARGETOS:-linux}" GOARCH="${TARGETARCH}" go -C "${mod}" build -trimpath \
        -ldflags "-s -w -X github.com/elector-sidecar/elector-sidecar/pkg/version.Version=${VERSION} -X github.com/elector-sidecar/elector-sidecar/pkg/version.Revision=${REVISION}" \
        -o "/out/${pkg##*/}" "${pkg}"; \
    done

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="elector-sidecar" \
      org.opencontainers.image.description="Kubernetes leader-election sidecar with fencing tokens" \
      org.opencontainers.image.source="https://github.com/elector-sidecar/elector-sidecar" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/elector-sidecar /out/elector-demo /out/go-worker /
USER 65532:65532
ENTRYPOINT ["/elector-sidecar"]
