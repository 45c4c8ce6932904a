#!/usr/bin/env bash
# Installs what the tests need from Debian packages, only what is missing. Groups:
#   db    the servers the fence tests and examples start (test/framework/dbserver, test/examples):
#           postgresql       initdb + postgres (Debian keeps them in /usr/lib/postgresql/<ver>/bin, not on PATH)
#           redis-server     redis-server
#           python3-psycopg  /usr/bin/python3 -c 'import psycopg' (PostgreSQL from Python, for apps' examples)
#           curl             curl (the shell example worker, examples/shell)
#   lint  shellcheck (hack/verify.sh; golangci-lint comes from the Go module proxy, hack/golangci-lint.sh)
#   image ca-certificates: /etc/ssl/certs/ca-certificates.crt, the CA bundle hack/image.sh puts in the image
#   cluster  the local cluster (hack/local-cluster.sh, the e2e tier; hack/e2e.sh runs this group):
#           nftables                 nft (the kubernetes Service DNAT, CNI portmap cleanup)
#           iproute2                 ip, ss (deleting the CNI bridge; hack/local-cluster-smoke.sh)
#           curl                     curl (hack/local-cluster-smoke.sh)
#           gcc libc6-dev            gcc -static (the pause image from k8s.io/kubernetes' pause.c)
#           libseccomp-dev pkg-config  runc with seccomp (hack/build-binaries.sh --cluster)
# One `apt-get update` and one `apt-get install` of the missing packages; nothing when all are present.
# Needs root (or sudo) only when something is missing.
#
#   hack/install-deps.sh [GROUP...]           install what is missing (default: every group)
#   hack/install-deps.sh --check [GROUP...]   only report; exit 1 if something is missing
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  echo "usage: hack/install-deps.sh [--check] [db|lint|image|cluster ...]" >&2
  exit 2
}
check_only=false
want_db=false
want_lint=false
want_image=false
want_cluster=false
for arg in "$@"; do
  case "$arg" in
    --check) check_only=true ;;
    db) want_db=true ;;
    lint) want_lint=true ;;
    image) want_image=true ;;
    cluster) want_cluster=true ;;
    *) usage ;;
  esac
done
if ! $want_db && ! $want_lint && ! $want_image && ! $want_cluster; then
  want_db=true
  want_lint=true
  want_image=true
  want_cluster=true
fi

# pkg_installed PKG: dpkg says PKG is installed.
pkg_installed() {
  command -v dpkg-query >/dev/null && [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" == installed ]]
}

# have_postgres: initdb and postgres exist in one directory (as dbserver looks for them).
have_postgres() {
  local d
  if [[ -n "${ELECTOR_POSTGRES_BIN_DIR:-}" ]]; then
    [[ -x "$ELECTOR_POSTGRES_BIN_DIR/initdb" && -x "$ELECTOR_POSTGRES_BIN_DIR/postgres" ]]
    return
  fi
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x "$d/initdb" && -x "$d/postgres" ]] && return 0
  done
  local p
  p="$(command -v postgres 2>/dev/null)" || return 1
  [[ -x "$(dirname "$p")/initdb" ]]
}

have_redis() { command -v redis-server >/dev/null; }
have_curl() { command -v curl >/dev/null; }
have_shellcheck() { command -v shellcheck >/dev/null; }
have_ca_certs() { [[ -s /etc/ssl/certs/ca-certificates.crt ]]; }
have_libc_static() { [[ "$(gcc -print-file-name=libc.a 2>/dev/null)" == /* ]]; }
have_seccomp() { command -v pkg-config >/dev/null && pkg-config --exists libseccomp; }

# check_all ARRAY: appends to the named array every package of the wanted groups that is missing.
check_all() {
  local -n out="$1"
  if $want_db; then
    have_postgres || out+=(postgresql)
    have_redis || out+=(redis-server)
    have_psycopg || out+=(python3-psycopg)
    have_curl || out+=(curl)
  fi
  if $want_lint; then
    have_shellcheck || out+=(shellcheck)
  fi
  if $want_image; then
    have_ca_certs || out+=(ca-certificates)
  fi
  if $want_cluster; then
    command -v nft >/dev/null || out+=(nftables)
    { command -v ip && command -v ss; } >/dev/null || out+=(iproute2)
    have_curl || [[ " ${out[*]} " == *" curl "* ]] || out+=(curl)
    command -v gcc >/dev/null || out+=(gcc)
    have_libc_static || out+=(libc6-dev)
    have_seccomp || out+=(libseccomp-dev pkg-config)
  fi
  return 0
}
# The Debian package serves the system Python, /usr/bin/python3 (a pyenv or venv python3 on PATH does not see it).
have_psycopg() {
  local py
  for py in /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do
    [[ -x "$py" ]] && "$py" -c 'import psycopg' 2>/dev/null && return 0
  done
  return 1
}

# A package counts as present when its binaries are there, whatever installed them; a Debian package
# that dpkg lists but whose binaries are gone is reinstalled.
missing=()
check_all missing

if [[ ${#missing[@]} -eq 0 ]]; then
  log "present:$($want_db && echo " postgresql redis-server python3-psycopg curl")$($want_lint && echo " shellcheck")$($want_image && echo " ca-certificates")$($want_cluster && echo " nftables iproute2 curl gcc libc6-dev libseccomp-dev")"
  exit 0
fi
if $check_only; then
  log "missing: ${missing[*]} (run hack/install-deps.sh)"
  exit 1
fi

command -v apt-get >/dev/null || die "missing: ${missing[*]}; this is not a Debian/Ubuntu machine (no apt-get): install them yourself (ELECTOR_POSTGRES_BIN_DIR names PostgreSQL's bin directory)"

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    die "missing: ${missing[*]}; installing them needs root: run 'sudo hack/install-deps.sh' (or apt-get install ${missing[*]})"
  fi
fi

reinstall=()
for p in "${missing[@]}"; do
  pkg_installed "$p" && reinstall+=(--reinstall) && break
done

log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${reinstall[@]}" "${missing[@]}"

still=()
check_all still
[[ ${#still[@]} -eq 0 ]] || die "installed ${missing[*]}, but still missing: ${still[*]}"
log "installed: ${missing[*]}"
