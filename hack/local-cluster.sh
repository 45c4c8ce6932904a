#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine (root, cgroup v1, no Docker, no registry), built from
# the Go module proxy by hack/build-binaries.sh --cluster: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, containerd (+ seccomp runc) and a kubelet, with bridge CNI networking (pods 10.88.0.0/16).
#
#   hack/local-cluster.sh up       build what is missing, start the cluster on free ports, wait for a Ready node
#   hack/local-cluster.sh down     stop everything and undo all host changes (idempotent)
#   hack/local-cluster.sh env      print `export KUBECONFIG=...` and PATH lines (eval "$(hack/local-cluster.sh env)")
#   hack/local-cluster.sh status   print component PIDs/ports and node status; exit 1 if not running
#   hack/local-cluster.sh smoke    run the smoke test (Deployment, 2-container pod, logs, exec, graceful delete)
#
# Environment:
#   ELECTOR_CACHE_DIR  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/elector-sidecar); state in $CACHE/cluster
#   ELECTOR_IMAGES     space-separated image tarballs (docker/OCI archive) that `up` imports into containerd,
#                      so pods can use them with imagePullPolicy: Never/IfNotPresent
#   ELECTOR_KEEP_ON_FAILURE=1  leave a cluster whose second `up` attempt failed as it is (debugging)
#
# The work is done by test/cmd/localcluster (package test/localcluster: ordered, named up and down steps),
# which this script builds into $ELECTOR_CACHE/tools. Host packages (nftables, iproute2, gcc, libseccomp-dev,
# curl) come from `hack/install-deps.sh cluster` (hack/e2e.sh runs it).
#
# Pods reach the API server through the usual in-cluster config: `up` adds an nftables DNAT from the
# "kubernetes" Service (10.96.0.1:443) to the API server (there is no kube-proxy and no cluster DNS).
# The pause image (registry.k8s.io/pause:<tag>) is compiled from the k8s.io/kubernetes module source.
# Only one such cluster can run per machine (it owns the kubepods cgroups and the elector0 bridge): up and
# down hold /run/lock/elector-sidecar-cluster.lock, and /run/elector-sidecar-cluster.owner names the owner.
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2
  exit 2
}

cmd="${1:-}"
case "$cmd" in
  up | down | env | status) ;;
  smoke) exec "$ELECTOR_ROOT/hack/local-cluster-smoke.sh" ;;
  *) usage ;;
esac
[[ $# -eq 1 ]] || usage

# The program, rebuilt only when its sources changed (go build skips an up-to-date output).
LOCALCLUSTER="$ELECTOR_CACHE/tools/localcluster"
mkdir -p "$(dirname "$LOCALCLUSTER")"
GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0 go -C "$ELECTOR_ROOT/test" build -trimpath -o "$LOCALCLUSTER" ./cmd/localcluster ||
  die "building test/cmd/localcluster failed"

if [[ "$cmd" == up ]]; then
  [[ $(id -u) -eq 0 ]] || die "local-cluster.sh up needs root (kubelet, containerd, CNI)"
  deps="$("$ELECTOR_ROOT/hack/install-deps.sh" --check cluster 2>&1)" || die "$deps"
  "$ELECTOR_ROOT/hack/build-binaries.sh" --cluster
  mkimage --help >/dev/null 2>&1 || true # builds hack/tools/mkimage into $ELECTOR_BIN if stale (for the pause image)
  [[ -x "$ELECTOR_BIN/mkimage" ]] || die "hack/tools/mkimage did not build"
fi

export ELECTOR_ROOT ELECTOR_CACHE ELECTOR_BIN K8S_VERSION
export PATH="$ELECTOR_BIN:$PATH" # containerd finds containerd-shim-runc-v2 on PATH
exec "$LOCALCLUSTER" "$cmd"
