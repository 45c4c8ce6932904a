#!/usr/bin/env bash
# `make bench`: elector-sidecar vs client-go's leaderelection on one local etcd + kube-apiserver, in
# one run (test/cmd/elector-bench). Prints a table (ours, client-go or a bare net/http handler, ratio,
# goal) and writes results/bench-<time>.{md,json} and a PNG CDF of the handoff latency. About 27
# minutes on 2 cores; the control-plane binaries are built once into the cache on first use (~6 min).
#
#   hack/bench.sh                              everything (the numbers in docs/benchmarks.md)
#   hack/bench.sh --quick                      a short development run (fewer trials, short windows)
#   hack/bench.sh --only handoff,api           some sections: handoff failover api localapi footprint scale fence push
#                                              leases idleconns
#   hack/bench.sh --only leases                1,000 Leases x 3 candidates per kind on one apiserver (simulated in one
#                                              process per kind; --leases, --leases-candidates; --quick: 100 Leases)
#   hack/bench.sh --only idleconns             /token at a fixed rate with 1,000 idle connections open vs none
#   hack/bench.sh --only fence                 the PostgreSQL and Redis fences vs the same writes unfenced (no
#                                              control plane; throwaway servers, installed if missing)
#   hack/bench.sh --only push                  Lease write -> app: /watch and the long-poll vs polling /leader;
#                                              1,000 /watch streams on one sidecar (--push-rounds, --push-watchers)
#   hack/bench.sh --trials 50 --png docs/benchmarks.png
#   hack/bench.sh --help                       every flag
#
# ELECTOR_SIDECAR_BINARY=/path/to/elector-sidecar benchmarks a prebuilt (e.g. patched) binary.
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

command -v go >/dev/null || die "go is not installed (see go.mod for the version)"

# The fence section (in every run unless --only leaves it out) needs PostgreSQL and redis-server.
needs_db=1
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --only=* | -only=*) [[ ",${args[i]#*=}," == *,fence,* ]] || needs_db=0 ;;
    --only | -only) [[ ",${args[i + 1]:-}," == *,fence,* ]] || needs_db=0 ;;
  esac
done
if [[ $needs_db == 1 ]]; then
  hack/install-deps.sh
fi

if [[ -z "${KUBEBUILDER_ASSETS:-}" ]]; then
  hack/build-binaries.sh kube-apiserver kubectl etcd
  KUBEBUILDER_ASSETS="$(hack/build-binaries.sh --print-dir)"
  export KUBEBUILDER_ASSETS
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/elector-bench-run.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
go -C test build -o "$tmp/elector-bench" ./cmd/elector-bench
# The command line recorded in the results.
export ELECTOR_BENCH_COMMAND="hack/bench.sh${*:+ $*}"
# Not exec: the EXIT trap removes the binary. Ctrl-C reaches the bench, which stops what it started.
"$tmp/elector-bench" "$@"
