#!/usr/bin/env bash
# golangci-lint on every Go module of the repo (`make lint`; hack/verify.sh runs it too), with the
# repo's .golangci.yml. The linter is built once from the Go module proxy into the cache
# ($ELECTOR_CACHE/tools/golangci-lint-<version>; cold, ~300 s of CPU: ~3 min on 2 cores) and reused after that.
#
#   hack/golangci-lint.sh              lint every module
#   hack/golangci-lint.sh --install    only build the linter and print its path
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

GOLANGCI_LINT_VERSION=v2.15.0
bin="$ELECTOR_CACHE/tools/golangci-lint-$GOLANGCI_LINT_VERSION"

install_linter() {
  [[ -x "$bin" ]] && return 0
  log "golangci-lint: building $GOLANGCI_LINT_VERSION from the Go module proxy into $bin (a few minutes, once)"
  local tmp
  tmp="$(mktemp -d)"
  # GOFLAGS=-mod=mod: install outside this module; GOTOOLCHAIN=local: build with the go on PATH; -w: no
  # DWARF, a shorter link (as hack/build-binaries.sh). No -trimpath: with go's default settings the standard
  # library it compiles (~90 s of CPU) is the one go test and the linting of each module use.
  GOBIN="$tmp" GOFLAGS=-mod=mod GOTOOLCHAIN=local \
    go install -ldflags -w "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
  mkdir -p "$(dirname "$bin")"
  mv "$tmp/golangci-lint" "$bin"
  rmdir "$tmp"
}

with_lock "$ELECTOR_CACHE/tools/.golangci-lint.lock" install_linter
if [[ "${1:-}" == --install ]]; then
  echo "$bin"
  exit 0
fi

config="$ELECTOR_ROOT/.golangci.yml"
# Every module with the build tag e2e, which only test/e2e's files have (the e2e tier's `go test -tags
# e2e`): test/e2e is linted with the rest of the test module in one pass. A second pass over test/e2e
# alone type-checked and analysed its dependencies again (37 s of a cold run). A file elsewhere that the
# tag leaves out (//go:build !e2e) would go unlinted: refused.
if others="$(git grep -l -E '^//go:build .*\be2e\b' -- '*.go' ':!test/e2e/')"; then
  die "the build tag e2e is for test/e2e only (golangci-lint lints every module with it), found in: $others"
fi
while IFS= read -r mod; do
  dir="$(dirname "$mod")"
  (cd "$dir" && "$bin" run --config "$config" --build-tags e2e ./...) || die "golangci-lint found problems in $dir"
  log "golangci-lint: clean in $dir"
done < <(git ls-files -- 'go.mod' '*/go.mod')
