#!/usr/bin/env bash
# Static checks: gofmt and go vet of every Go module in the repo, shellcheck of every shell script
# (installed from Debian if missing, hack/install-deps.sh lint), golangci-lint of every Go module
# (built from the Go module proxy once, hack/golangci-lint.sh).
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

while IFS= read -r mod; do
  dir="$(dirname "$mod")"
  (cd "$dir" && go vet ./...) || die "go vet failed in $dir"
  log "go vet: clean in $dir"
done < <(git ls-files -- 'go.mod' '*/go.mod')
go -C test vet -tags e2e ./e2e/... || die "go vet -tags e2e failed in test/e2e"
log "go vet: clean in test/e2e (tag e2e)"

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
