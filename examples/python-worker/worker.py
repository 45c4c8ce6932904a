#!/usr/bin/python3
"""An example main container next to elector-sidecar, in Python.

Every WORKER_INTERVAL it asks the sidecar's GET /token (urllib). While its pod
leads with a token valid for longer than a job takes, it runs a job: it works
for WORKER_WORK, then writes one row to PostgreSQL (psycopg 3) in one
transaction that first calls the fence, SELECT elector_fence(resource, token,
lease_uid, holder), and then inserts the row stamped with the token.

A process pause (a long GC, SIGSTOP, a frozen VM) can outlast the Lease
between the token check and the write. Then another pod leads with a higher
token and elector_fence() raises SQLSTATE EF001: the transaction rolls back, nothing
is committed, and the worker logs the rejection.

Environment:
  ELECTOR_URL      the sidecar's local API (default http://127.0.0.1:4040)
  DATABASE_URL     PostgreSQL URL (required)
  WORKER_RESOURCE  fenced resource name, also written in each row (default "example")
  WORKER_INTERVAL  pause between jobs, e.g. 1s or 500ms (default 1s)
  WORKER_WORK      how long a job works before it writes (default 200ms)
  POD_NAME         holder written in each row and in the fence's history (default the hostname)

The tables come from pkg/fencing/postgres/migration.sql and examples/schema.sql.
SIGTERM/SIGINT: a running job is abandoned (nothing written), exit 0.
"""

import json
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

import psycopg

STALE_TOKEN = "EF001"  # elector_fence()'s SQLSTATE for a stale token (pkg/fencing/postgres/migration.sql)


def log(msg):
    print(time.strftime("%H:%M:%S") + " python-worker: " + msg, flush=True)


def duration(name, default):
    """Seconds from a duration such as 1s, 500ms or 1.5 (seconds)."""
    v = os.environ.get(name) or default
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)?", v)
    if not m:
        sys.exit(f"python-worker: {name}={v!r}: want a duration such as 1s or 500ms")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def token(sidecar):
    """The /token answer (a dict) when this pod leads, else None."""
    try:
        with urllib.request.urlopen(sidecar + "/token", timeout=2) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:  # 409: another pod leads; 503: not safe now
        log(f"no job: /token {e.code} {e.read().decode(errors='replace').strip()}")
    except (urllib.error.URLError, OSError) as e:
        log(f"no job: /token: {e}")
    return None


def main():
    sidecar = (os.environ.get("ELECTOR_URL") or "http://127.0.0.1:4040").rstrip("/")
    url = os.environ.get("DATABASE_URL") or sys.exit("python-worker: set DATABASE_URL")
    resource = os.environ.get("WORKER_RESOURCE") or "example"
    holder = os.environ.get("POD_NAME") or socket.gethostname()
    interval, work = duration("WORKER_INTERVAL", "1s"), duration("WORKER_WORK", "200ms")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    conn = psycopg.connect(url, autocommit=True)  # conn.transaction() runs BEGIN ... COMMIT
    log(f"started: holder={holder} resource={resource} sidecar={sidecar} interval={interval}s work={work}s")
    jobs = committed = rejected = 0
    while not stop.wait(interval):
        t = token(sidecar)
        if t is None:
            continue
        if t["expiresInMs"] <= work * 1000:
            log(f"no job: token {t['token']} expires in {t['expiresInMs']}ms, the job takes {work}s")
            continue
        jobs += 1
        log(f"job {jobs} started: token={t['token']} expiresInMs={t['expiresInMs']}")
        if stop.wait(work):  # the work; a pause here can outlast the token
            log(f"job {jobs} abandoned: stopping")
            break
        try:
            with conn.transaction():
                conn.execute("SELECT elector_fence(%s, %s, %s, %s)", (resource, t["token"], t["leaseUID"], holder))
                conn.execute("INSERT INTO example_writes (resource, token, holder) VALUES (%s, %s, %s)",
                             (resource, t["token"], holder))
        except psycopg.Error as e:  # the transaction was rolled back
            if e.sqlstate == STALE_TOKEN:
                rejected += 1
                log(f"job {jobs} rejected: SQLSTATE {e.sqlstate}: {e.diag.message_primary} "
                    f"({e.diag.message_detail}): rolled back, nothing committed")
            else:
                log(f"job {jobs} failed: token={t['token']}: SQLSTATE {e.sqlstate}: {e}")
                if conn.closed:  # the connection broke: open a new one for the next job
                    try:
                        conn = psycopg.connect(url, autocommit=True)
                    except psycopg.Error as e2:
                        log(f"reconnect: {e2}")
            continue
        committed += 1
        log(f"job {jobs} committed: token={t['token']}")
    log(f"stopped: {committed} rows committed, {rejected} rejected as stale")


if __name__ == "__main__":
    main()
