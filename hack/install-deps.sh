#!/usr/bin/env bash
# Installs the database servers the fence tests start (test/framework/dbserver), only what is missing:
#   postgresql       initdb + postgres (Debian keeps them in /usr/lib/postgresql/<ver>/bin, not on PATH)
#   redis-server     redis-server
#   python3-psycopg  /usr/bin/python3 -c 'import psycopg' (PostgreSQL from Python, for apps' examples)
#   curl             curl (the shell example worker, examples/shell)
# One `apt-get update` and one `apt-get install` of the missing packages; nothing when all are present.
# Needs root (or sudo) only when something is missing.
#
#   hack/install-deps.sh           install what is missing
#   hack/install-deps.sh --check   only report; exit 1 if something is missing
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

check_only=false
case "${1:-}" in
  "") ;;
  --check) check_only=true ;;
  *)
    echo "usage: hack/install-deps.sh [--check]" >&2
    exit 2
    ;;
esac

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
have_postgres || missing+=(postgresql)
have_redis || missing+=(redis-server)
have_psycopg || missing+=(python3-psycopg)
have_curl || missing+=(curl)

if [[ ${#missing[@]} -eq 0 ]]; then
  log "present: postgresql, redis-server, python3-psycopg, curl"
  exit 0
fi
if $check_only; then
  log "missing: ${missing[*]} (run hack/install-deps.sh)"
  exit 1
fi

command -v apt-get >/dev/null || die "missing: ${missing[*]}; this is not a Debian/Ubuntu machine (no apt-get): install PostgreSQL (initdb, postgres), redis-server and Python's psycopg 3 yourself (ELECTOR_POSTGRES_BIN_DIR names PostgreSQL's bin directory)"

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
have_postgres || still+=(postgresql)
have_redis || still+=(redis-server)
have_psycopg || still+=(python3-psycopg)
have_curl || still+=(curl)
[[ ${#still[@]} -eq 0 ]] || die "installed ${missing[*]}, but still missing: ${still[*]}"
log "installed: ${missing[*]}"
