# elector-sidecar: every target is a thin index over hack/ scripts; `make help` lists them.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
DURATION ?= 2m
# STORE: the fenced store of `make demo` and `make chaos`: memory (the default) or a throwaway postgres / redis.
STORE ?=
# SHARDS: `make chaos SHARDS=16` runs the candidates with --shards=16 (a shard set; STORE=postgres).
SHARDS ?=
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/elector-sidecar/elector-sidecar/pkg/version.Version=$(VERSION) -X github.com/elector-sidecar/elector-sidecar/pkg/version.Revision=$(REVISION)

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: demo
demo: ## Run the local demo: control plane, three sidecars, a fenced store, a paused leader; STORE=postgres|redis (hack/demo.sh).
	STORE=$(STORE) hack/demo.sh

.PHONY: test
test: ## Run every test tier: verify, unit, integration (real apiserver), e2e (local cluster) (hack/test.sh).
	hack/test.sh

.PHONY: test-unit
test-unit: ## Unit tests only (no apiserver).
	hack/test.sh unit

.PHONY: test-integration
test-integration: ## Multi-process and chart tests against a real etcd + kube-apiserver.
	hack/test.sh integration

.PHONY: test-e2e
test-e2e: ## e2e suite in real pods on the local single-node cluster (root; builds kubelet, containerd, ...).
	hack/test.sh e2e

.PHONY: verify
verify: ## gofmt, golangci-lint (go vet included) of every module, shellcheck of every script (hack/verify.sh).
	hack/verify.sh

.PHONY: lint
lint: ## golangci-lint of every Go module with .golangci.yml (hack/golangci-lint.sh; builds the linter once).
	hack/golangci-lint.sh

.PHONY: build
build: ## Build bin/elector-sidecar, bin/elector-demo (static, as in the Dockerfile) and bin/kubectl-elector.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/elector-sidecar ./cmd/elector-sidecar
	CGO_ENABLED=0 go -C test build -trimpath -ldflags "$(LDFLAGS)" -o $(CURDIR)/bin/elector-demo ./cmd/elector-demo
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/kubectl-elector ./cmd/kubectl-elector

.PHONY: image
image: ## Build the sidecar image as a tarball without Docker: _output/elector-sidecar-image.tar (hack/image.sh).
	VERSION=$(VERSION) REVISION=$(REVISION) hack/image.sh

.PHONY: image-demo
image-demo: ## Build the demo image (demo apps, helm test) without Docker: _output/elector-demo-image.tar.
	IMAGE_KIND=demo VERSION=$(VERSION) REVISION=$(REVISION) hack/image.sh

.PHONY: release
release: ## VERSION=X.Y.Z: reproducible linux/amd64+arm64 binaries, OCI images, chart, SBOMs, SHA256SUMS in _output/release/X.Y.Z (hack/release.sh).
	@[ -n "$(filter command environment,$(origin VERSION))" ] || { echo "make release: set VERSION=X.Y.Z" >&2; exit 2; }
	VERSION=$(VERSION) hack/release.sh

.PHONY: tools
tools: ## Build kube-apiserver, kubectl, etcd and helm into the cache (hack/build-binaries.sh).
	hack/build-binaries.sh

.PHONY: tools-cluster
tools-cluster: ## Also build kubelet, controller-manager, scheduler, containerd, runc, CNI plugins.
	hack/build-binaries.sh --cluster

.PHONY: cluster-up
cluster-up: ## Start the local single-node cluster (hack/local-cluster.sh up).
	hack/local-cluster.sh up

.PHONY: cluster-down
cluster-down: ## Tear the local cluster down completely (hack/local-cluster.sh down).
	hack/local-cluster.sh down

.PHONY: cluster-status
cluster-status: ## Is the local cluster running? (exit 1 if not)
	hack/local-cluster.sh status

.PHONY: cluster-smoke
cluster-smoke: ## Smoke-check the running local cluster (pods, native sidecars, logs, exec, graceful delete).
	hack/local-cluster.sh smoke

.PHONY: test-chart
test-chart: ## Chart and config/ tests only (Helm SDK, kustomize, envtest) (hack/test-chart.sh).
	hack/test-chart.sh

.PHONY: lint-chart
lint-chart: ## helm lint --strict of the chart with every values file, SDK and real helm (hack/test-chart.sh -run TestLint).
	hack/test-chart.sh -run '^TestLint'

.PHONY: e2e-kind
e2e-kind: ## On a Docker host: the e2e suite in a kind cluster (hack/e2e-kind.sh).
	hack/e2e-kind.sh

.PHONY: chaos
chaos: ## Chaos soak (not in CI): 5 candidates, random kills/pauses/restarts; DURATION=2m STORE=memory|postgres|redis; SHARDS=16: a shard set, judged per shard (hack/chaos.sh).
	STORE=$(STORE) SHARDS=$(SHARDS) hack/chaos.sh $(DURATION)

.PHONY: sim
sim: ## The election's deterministic simulator: random seeds until DURATION (default 2m) is up; a failure prints its seed and replay command (docs/simulation.md).
	go test -count=1 -timeout 0 -v -run '^TestSimulation$$' ./pkg/election -sim.duration=$(DURATION)

.PHONY: bench
bench: ## Benchmarks, ours vs client-go leaderelection on one apiserver, and the fences' cost (hack/bench.sh).
	hack/bench.sh

.PHONY: clean
clean: ## Remove build outputs (not the binary cache).
	rm -rf bin _output
