#!/usr/bin/env bash
# An example main container next to elector-sidecar, in shell: curl and psql.
#
# Every WORKER_INTERVAL it asks the sidecar's GET /token. While its pod leads with a token valid for
# longer than a job takes, it runs a job: it works for WORKER_WORK, then runs ONE psql transaction:
#   BEGIN; SELECT elector_fence(resource, token, lease_uid, holder); INSERT INTO example_writes ...; COMMIT;
# with ON_ERROR_STOP, so a stale token (elector_fence() raises SQLSTATE EF001) stops psql before COMMIT and
# nothing is committed. A process pause (SIGSTOP, a frozen VM) between the token check and the write is
# what the fence is there for.
#
# Environment:
#   ELECTOR_URL      the sidecar's local API (default http://127.0.0.1:4040)
#   DATABASE_URL     PostgreSQL URL (required)
#   WORKER_RESOURCE  fenced resource name, also written in each row (default example)
#   WORKER_INTERVAL  pause between jobs: 1s, 500ms or seconds (default 1s)
#   WORKER_WORK      how long a job works before it writes (default 200ms)
#   POD_NAME         holder written in each row and in the fence's history (default the hostname)
#   PSQL             the psql binary (default psql; on Debian also /usr/lib/postgresql/*/bin/psql)
#
# The tables come from pkg/fencing/postgres/migration.sql and examples/schema.sql.
# SIGTERM/SIGINT: exit 0 after the running step (nothing half-written: psql commits or not).
set -o nounset

sidecar="${ELECTOR_URL:-http://127.0.0.1:4040}"
sidecar="${sidecar%/}"
db="${DATABASE_URL:?set DATABASE_URL}"
resource="${WORKER_RESOURCE:-example}"
holder="${POD_NAME:-$(hostname)}"
psql="${PSQL:-psql}"

log() { echo "$(date +%H:%M:%S) shell-worker: $*"; }

# millis DURATION: 500ms -> 500, 1s -> 1000, 1.5 -> 1500.
millis() {
  case "$1" in
    *ms) echo "${1%ms}" ;;
    *s) awk -v s="${1%s}" 'BEGIN { printf "%d", s * 1000 }' ;;
    *) awk -v s="$1" 'BEGIN { printf "%d", s * 1000 }' ;;
  esac
}
# seconds MILLIS, for sleep.
seconds() { awk -v ms="$1" 'BEGIN { printf "%.3f", ms / 1000 }'; }

interval_ms="$(millis "${WORKER_INTERVAL:-1s}")"
work_ms="$(millis "${WORKER_WORK:-200ms}")"
for v in "$interval_ms" "$work_ms"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "shell-worker: WORKER_INTERVAL/WORKER_WORK: want a duration such as 1s or 500ms" >&2; exit 2; }
done

stop=""
trap 'stop=1' TERM INT
# pause MILLIS: sleeps, but returns early on SIGTERM/SIGINT (wait is interrupted by a trapped signal).
pause() {
  sleep "$(seconds "$1")" &
  wait $! || kill $! 2>/dev/null
}

# json FIELD: a field of the JSON object on stdin (numbers and strings without escapes, as /token has).
json() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^\",}]*\).*/\1/p"; }

log "started: holder=$holder resource=$resource sidecar=$sidecar interval=${interval_ms}ms work=${work_ms}ms"
jobs=0 committed=0 rejected=0
while [[ -z "$stop" ]]; do
  pause "$interval_ms"
  [[ -z "$stop" ]] || break
  # 200 {"token","lease","leaseUID","expiresInMs"} when this pod leads; 409 or 503 otherwise.
  if ! answer="$(curl -sS --max-time 2 --fail-with-body "$sidecar/token" 2>&1)"; then
    log "no job: /token: $answer"
    continue
  fi
  token="$(json token <<<"$answer")" uid="$(json leaseUID <<<"$answer")" expires="$(json expiresInMs <<<"$answer")"
  if ((expires <= work_ms)); then
    log "no job: token $token expires in ${expires}ms, the job takes ${work_ms}ms"
    continue
  fi
  jobs=$((jobs + 1))
  log "job $jobs started: token=$token expiresInMs=$expires"
  pause "$work_ms" # the work; a pause here can outlast the token
  if [[ -n "$stop" ]]; then
    log "job $jobs abandoned: stopping"
    break
  fi
  # One transaction; ON_ERROR_STOP: an error in elector_fence() or the INSERT ends psql (exit 3) before COMMIT.
  if out="$("$psql" "$db" -X -q -v ON_ERROR_STOP=1 -v VERBOSITY=verbose \
    -v resource="$resource" -v token="$token" -v uid="$uid" -v holder="$holder" 2>&1 <<'SQL'
BEGIN;
SELECT elector_fence(:'resource', :'token', :'uid', :'holder') \g /dev/null
INSERT INTO example_writes (resource, token, holder) VALUES (:'resource', :'token', :'holder');
COMMIT;
SQL
  )"; then
    committed=$((committed + 1))
    log "job $jobs committed: token=$token"
  elif [[ "$out" == *"ERROR:  EF001:"* ]]; then
    rejected=$((rejected + 1))
    log "job $jobs rejected: $(grep -E '^(ERROR|DETAIL):' <<<"$out" | tr '\n' ' ')- nothing committed"
  else
    log "job $jobs failed: token=$token: $out"
  fi
done
log "stopped: $committed rows committed, $rejected rejected as stale"
