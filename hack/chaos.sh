#!/usr/bin/env bash
# The chaos soak (not part of CI): 5 elector-sidecar candidates on one Lease against a local etcd +
# kube-apiserver, each through its own local TCP proxy, a fenced writer per candidate writing as fast
# as it can, and random SIGKILL, SIGSTOP+SIGCONT, SIGTERM, restarts, apiserver restarts, Lease
# deletions, the Lease deleted during a handoff (leader SIGTERMed, Lease deleted as the followers
# race), and the leader cut off from the apiserver (its proxy blackholed) while the Lease is deleted
# and a brand-new candidate starts, the holder cleared by hand (kubectl edit) and the Lease deleted and
# recreated free by another client while the leader is frozen. Prints writes attempted/accepted/rejected
# as stale, leader changes, the max token and the invariant results (among them: no two processes ever
# served the same token value, and no process served a higher token while another's answer still
# claimed validity by its expiresInMs); exits non-zero if an invariant broke.
#
# STORE=postgres or STORE=redis (`make chaos STORE=redis`): the writers' fenced HTTP store fronts the
# project's fence in a throwaway PostgreSQL or redis-server (test/cmd/chaos --store), which the soak also
# restarts mid-run; invariant 1 is then checked from the database's own history. The servers are
# installed first if missing (hack/install-deps.sh). STORE=memory (the default): an in-memory fence.
#
# SHARDS=N (`make chaos SHARDS=16`): the candidates run with --shards=N; a fenced writer per candidate
# writes to every shard its process owns, each shard its own resource in PostgreSQL (STORE defaults to
# postgres, the only store allowed), and the invariants are checked per shard, the first from the
# database's history (test/cmd/chaos/shards.go). Without SHARDS: the single-Lease soak above.
#
#   hack/chaos.sh [DURATION] [test/cmd/chaos flags...]     DURATION default 2m, e.g. hack/chaos.sh 10m --seed 42
#   STORE=postgres hack/chaos.sh 5m
#   SHARDS=16 hack/chaos.sh 3m
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

duration="2m"
if [[ $# -gt 0 && "$1" != -* ]]; then
  duration="$1"
  shift
fi

shards="${SHARDS:-0}"
if [[ ! "$shards" =~ ^[0-9]+$ ]]; then
  echo "hack/chaos.sh: SHARDS=$shards: want a number of shards, e.g. SHARDS=16 (hint: empty or 0 runs the single-Lease soak)" >&2
  exit 2
fi
if ((shards > 0)); then
  store="${STORE:-postgres}"
  set -- --shards="$shards" "$@"
else
  store="${STORE:-memory}"
fi
case "$store" in
  memory) ;;
  postgres | redis) hack/install-deps.sh ;;
  *) echo "hack/chaos.sh: STORE=$store: want memory, postgres or redis" >&2; exit 2 ;;
esac

if [[ -z "${KUBEBUILDER_ASSETS:-}" ]]; then
  hack/build-binaries.sh kube-apiserver kubectl etcd
  KUBEBUILDER_ASSETS="$(hack/build-binaries.sh --print-dir)"
  export KUBEBUILDER_ASSETS
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/elector-chaos-run.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
go -C test build -o "$tmp/chaos" ./cmd/chaos
"$tmp/chaos" --duration="$duration" --store="$store" "$@"
