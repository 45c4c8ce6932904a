#!/usr/bin/env bash
# A throwaway database server for trying the fences by hand (test/framework/dbserver):
#
#   hack/testdb.sh postgres                 print the URL and serve until Ctrl-C
#   hack/testdb.sh redis -- CMD ARGS...     run CMD with ELECTOR_REDIS_URL set, then tear down
#   hack/testdb.sh --dir DIR postgres ...   keep the data and log in DIR
#
# Installs the servers first if they are missing (hack/install-deps.sh). PostgreSQL's URL is
# postgres://elector@127.0.0.1:PORT/postgres?sslmode=disable (trust auth, loopback only); Redis's
# redis://127.0.0.1:PORT/0. With CMD, the exit code is CMD's; the server is torn down on exit and on
# Ctrl-C / SIGTERM.
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ELECTOR_ROOT/hack/install-deps.sh" >&2
bin="$ELECTOR_CACHE/testdb/testdb"
go -C "$ELECTOR_ROOT/test" build -o "$bin" ./cmd/testdb
# exec: signals reach testdb itself, which stops the server.
exec "$bin" "$@"
