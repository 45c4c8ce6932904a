# shellcheck shell=bash disable=SC2034
# Shared helpers for hack/*.sh. Source it; it defines functions and variables only.

# Repository root (the parent of this file's directory).
ELECTOR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Cache for binaries, wrapper modules and the local cluster: never in the repo.
ELECTOR_CACHE="${ELECTOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/elector-sidecar}"
ELECTOR_BIN="$ELECTOR_CACHE/bin"

# Pinned versions of everything hack/ builds from the Go module proxy (go-containerregistry: hack/tools/go.mod).
K8S_VERSION="v1.37.2"          # k8s.io/kubernetes
K8S_STAGING_VERSION="v0.37.2"  # k8s.io/* staging modules
ETCD_VERSION="v3.7.3"          # go.etcd.io/etcd/server/v3
HELM_VERSION="v4.3.2"          # helm.sh/helm/v4
CONTAINERD_VERSION="v2.3.4"    # github.com/containerd/containerd/v2
RUNC_VERSION="v1.4.3"          # github.com/opencontainers/runc
CNI_PLUGINS_VERSION="v1.9.1"   # github.com/containernetworking/plugins

_elector_t0="${_elector_t0:-$(date +%s)}"

# log MSG...: a progress line on stderr, prefixed with the seconds since the script started.
log() {
  printf '[%s +%ss] %s\n' "$(basename "$0")" "$(($(date +%s) - _elector_t0))" "$*" >&2
}

die() {
  log "ERROR: $*"
  exit 1
}

# run_logged NAME LOGFILE CMD...: runs CMD with stdout+stderr to LOGFILE, printing a heartbeat line
# every 30 s and the elapsed time at the end. On failure, prints the tail of the log and returns the
# command's exit code.
run_logged() {
  local name="$1" logfile="$2"
  shift 2
  mkdir -p "$(dirname "$logfile")"
  local start rc=0 hb=""
  start=$(date +%s)
  log "$name: started (log: $logfile)"
  local parent=$$
  (
    while sleep 30; do
      kill -0 "$parent" 2>/dev/null || exit 0 # the script was killed: stop too
      log "$name: still running, $(($(date +%s) - start))s"
    done
  ) &
  hb=$!
  "$@" >"$logfile" 2>&1 || rc=$?
  kill "$hb" 2>/dev/null || true
  wait "$hb" 2>/dev/null || true
  if [[ $rc -ne 0 ]]; then
    log "$name: FAILED after $(($(date +%s) - start))s (exit $rc); last lines of $logfile:"
    tail -n 40 "$logfile" >&2 || true
    return "$rc"
  fi
  log "$name: done in $(($(date +%s) - start))s"
}

# with_lock FILE CMD...: runs CMD while holding an exclusive flock on FILE (serialises concurrent builds).
with_lock() {
  local lockfile="$1"
  shift
  mkdir -p "$(dirname "$lockfile")"
  (
    exec 9>"$lockfile"
    if ! flock -n 9; then
      log "waiting for lock $lockfile (held by another run of this script)"
      flock 9
    fi
    "$@"
  )
}

# mkimage ARGS...: runs hack/tools/mkimage (image tarballs without Docker, as `make image` builds them),
# rebuilt into the bin dir when its source changes.
mkimage() {
  local bin="$ELECTOR_BIN/mkimage" src="$ELECTOR_ROOT/hack/tools"
  if [[ ! -x "$bin" || -n "$(find "$src/mkimage" "$src/go.sum" -newer "$bin" -print -quit)" ]]; then
    mkdir -p "$ELECTOR_BIN"
    (cd "$src" && GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$bin.tmp.$$" ./mkimage) &&
      mv -f "$bin.tmp.$$" "$bin"
  fi
  "$bin" "$@"
}
