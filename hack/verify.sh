#!/usr/bin/env bash
# Static checks: gofmt of every Go file, shellcheck of every shell script (installed from Debian if
# missing, hack/install-deps.sh lint), golangci-lint of every Go module (built from the Go module proxy
# once, hack/golangci-lint.sh; its govet linter is go vet, with go vet's default analyzers).
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

bad="$(git ls-files -z -- '*.go' | xargs -0 -r gofmt -l)"
if [[ -n "$bad" ]]; then
  die "gofmt would change these files (run: gofmt -w <file>):
$bad"
fi
log "gofmt: clean"

# go vet: golangci-lint (the last step) runs it as its govet linter, with go vet's own default
# analyzers, on every module (with test/e2e's build tag, hack/golangci-lint.sh). A separate `go vet ./...` ran the same
# analyzers over every dependency a second time (several minutes of a cold run).

# The test module builds the root module's packages (replace => ../): when the two select different
# versions of a module both build with (golang.org/x/sys, say), every package above it (client-go and
# the rest) is compiled twice in each configuration (vet, -race, CGO_ENABLED=0) and linted twice: several
# minutes of a cold run. The same holds for hack/tools (grpc, otel, golang.org/x/...) and for the
# Kubernetes, etcd, containerd and CNI builds, which take the test module's versions
# (hack/build-binaries.sh). A warning, not a failure: the fix is a `go get` in the other module.
mods() { go -C "$1" list -deps -f '{{with .Module}}{{.Path}} {{.Version}}{{if not .Version}}(main){{end}}{{end}}' ./... | LC_ALL=C sort -u; }
test_mods="$(mods test)"
for m in . hack/tools; do
  drift="$(LC_ALL=C join <(mods "$m") <(echo "$test_mods") | awk -v m="$m" '$2 != $3 && $2 != "(main)" { printf "  %s: %s in %s, %s in test/go.mod\n", $1, $2, m, $3 }')"
  if [[ -n "$drift" ]]; then
    log "WARNING: $m and the test module select different versions of modules both build with (each makes a cold run compile everything above it twice; fix: go get MODULE@VERSION in $m):
$drift"
  else
    log "module versions: $m and the test module agree"
  fi
done

# Every tracked shell script: *.sh and extensionless files with a sh/bash shebang (.ci/run).
hack/install-deps.sh lint
scripts=()
while IFS= read -r -d '' f; do
  if [[ "$f" == *.sh ]] || head -n1 "$f" | grep -qE '^#!.*\b(ba)?sh\b'; then
    scripts+=("$f")
  fi
done < <(git ls-files -z)
shellcheck -x "${scripts[@]}" || die "shellcheck found problems in the scripts above"
log "shellcheck: clean in ${#scripts[@]} scripts"

hack/golangci-lint.sh
