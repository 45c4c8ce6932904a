#!/usr/bin/env bash
# The elector-sidecar demo, the README's first command: starts a local etcd + kube-apiserver (built
# from source on first use, ~6 minutes, then cached), three "pods" (elector-sidecar + elector-demo
# writer each) and a fenced store, prints a live timeline, pauses the leader (SIGSTOP), shows the
# takeover and the paused pod's stale write rejected, kills another pod, prints
# `kubectl get lease -o wide`, and cleans up (also on Ctrl-C). After the first election and after the
# takeover it runs `kubectl get lease -o custom-columns=...` and `kubectl elector status` (the plugin,
# found by kubectl on PATH) against its kube-apiserver and prints them. Takes about a minute.
#
# STORE=postgres or STORE=redis (`make demo STORE=postgres`): the fence lives in a throwaway PostgreSQL
# or redis-server (installed first if missing, hack/install-deps.sh), and the demo ends with the
# database's own history of accepted writes. Without STORE: an in-memory fence (`elector-demo store`).
#
#   hack/demo.sh [--lease-duration=4s] [--keep-logs]
#   STORE=postgres hack/demo.sh
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

command -v go >/dev/null || die "go is not installed (see go.mod for the version)"

store_args=()
case "${STORE:-}" in
  "" | embedded | memory) ;;
  postgres | redis)
    log "database server for the fence ($STORE)"
    hack/install-deps.sh
    store_args=(--store="$STORE")
    ;;
  *) echo "hack/demo.sh: STORE=$STORE: want postgres or redis (or nothing: the in-memory store)" >&2; exit 2 ;;
esac

if [[ -z "${KUBEBUILDER_ASSETS:-}" ]]; then
  log "control plane binaries (built once into $ELECTOR_BIN)"
  hack/build-binaries.sh kube-apiserver kubectl etcd
  KUBEBUILDER_ASSETS="$(hack/build-binaries.sh --print-dir)"
  export KUBEBUILDER_ASSETS
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/elector-demo-run.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
go -C test build -o "$tmp/demo" ./cmd/demo
# Not exec: the EXIT trap removes the driver binary. Ctrl-C reaches the driver, which cleans up.
"$tmp/demo" "${store_args[@]}" "$@"
