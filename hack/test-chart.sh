#!/usr/bin/env bash
# The chart and config/ tests (test/chart: Helm SDK, kustomize, server-side dry-run against a real
# apiserver): `make test-chart`, `make lint-chart`, and the chart part of the integration tier.
#
#   hack/test-chart.sh [GO TEST FLAGS...]     e.g. hack/test-chart.sh -run '^TestLint'
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

hack/build-binaries.sh
KUBEBUILDER_ASSETS="$(hack/build-binaries.sh --print-dir)"
export KUBEBUILDER_ASSETS
# The binaries were just built: a test that cannot find one fails instead of skipping.
export ELECTOR_REQUIRE_APISERVER=1
cd test # the test module (test/go.mod)
go test -count=1 -timeout 15m "$@" ./chart/...
