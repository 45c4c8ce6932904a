# elector-sidecar image: static binaries on distroless/static (the sidecar, and the chart's demo apps
# elector-demo and examples/go-worker), running as the nonroot user.
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) --build-arg REVISION=$(git rev-parse HEAD) -t elector-sidecar:dev .
# Without Docker, `make image` (hack/image.sh) builds the same image as a tarball; keep the labels,
# user and entrypoint of both in sync (hack/tools/mkimage's TestProjectImage checks).

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
# Dependencies first, so source edits keep the module download layer cached.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN set -eux; \
    for cmd in elector-sidecar elector-demo; do \
      CGO_ENABLED=0 GOOS="${TARGETOS:-linux}" GOARCH="${TARGETARCH}" go build -trimpath \
        -ldflags "-s -w -X github.com/elector-sidecar/elector-sidecar/pkg/version.Version=${VERSION}" \
        -o "/out/${cmd}" "./cmd/${cmd}"; \
    done; \
    CGO_ENABLED=0 GOOS="${TARGETOS:-linux}" GOARCH="${TARGETARCH}" go build -trimpath -ldflags "-s -w" \
      -o /out/go-worker ./examples/go-worker

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
