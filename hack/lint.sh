#!/usr/bin/env bash
# The linters on every Go module of the repo (`make lint`; hack/verify.sh runs it too): go vet with
# hack/lint as its vet tool, which runs go vet's own analyzers plus staticcheck, unused, errcheck and
# ineffassign (hack/lint/analyzers.go says which checks and why). As a vet tool it reads the compiler's
# export data, so the packages it needs compile once in go's build cache, shared with go build and go
# test, and go caches each package's findings. The tool builds in ~50 s of CPU on a cold cache (golangci-lint,
# which ran the same analyzers before, took ~320 s to build).
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

bin="$ELECTOR_CACHE/tools/elector-lint"
mkdir -p "$(dirname "$bin")"
# go build relinks only when hack/lint or its dependencies changed.
with_lock "$ELECTOR_CACHE/tools/.elector-lint.lock" \
  env GOFLAGS=-buildvcs=false GOWORK=off go -C hack/lint build -ldflags -w -o "$bin" .

# -tags e2e on every module: test/e2e's files carry that tag (no other file has a build tag), and go
# keys each package's analysis on the build tags, so with one set of tags everywhere a dependency the
# modules share is analysed once (a second set cost ~100 s more on a warm cache).
while IFS= read -r mod; do
  dir="$(dirname "$mod")"
  (cd "$dir" && go vet -tags e2e -vettool="$bin" ./...) || die "lint found problems in $dir (above)"
  log "lint: clean in $dir"
done < <(git ls-files -- 'go.mod' '*/go.mod' | grep -v '/testdata/')
