#!/usr/bin/python3
"""A shard worker next to elector-sidecar run with --shards=N, in Python.

The sidecar's member holds a fair share of the set's N shards; its GET /shards
lists the ones this pod owns, each with its own fencing token. The worker
long-polls GET /shards?wait= (If-None-Match: the last ETag; the wait at most
30s and at most half the validity left of its shards, so a fresh expiresInMs
comes in time) and runs one thread per owned shard. Every WORKER_INTERVAL a
shard's thread runs a job if the shard is still owned with a token valid for
longer than the job takes: it
works for WORKER_WORK, then in one transaction calls the fence for the
shard's own resource, SELECT elector_fence('<WORKER_RESOURCE>-<i>', token,
lease_uid, holder), and inserts a row stamped with the token.

A shard's thread stops as soon as the shard is no longer owned: an answer of
/shards without it (or with another token or Lease UID) ends a running job
before it writes, and once the validity of the last answer (the time it was
received plus expiresInMs) has run out with no newer answer, no job starts.
A process pause (a long GC, SIGSTOP, a frozen VM) between a job's start and
its write is what the fence is for: by then another pod owns the shard with a
higher token, elector_fence() raises SQLSTATE EF001, the transaction rolls back
and the worker logs the rejection.

Environment:
  ELECTOR_URL      the sidecar's local API (default http://127.0.0.1:4040)
  DATABASE_URL     PostgreSQL URL (required)
  WORKER_RESOURCE  prefix of the fenced resources: shard i writes <prefix>-<i> (default "partition")
  WORKER_INTERVAL  pause between a shard's jobs, e.g. 1s or 500ms (default 1s)
  WORKER_WORK      how long a job works before it writes (default 200ms)
  POD_NAME         holder written in each row and in the fence's history (default the hostname)

The tables come from pkg/fencing/postgres/migration.sql and examples/schema.sql.
SIGTERM/SIGINT: running jobs are abandoned (nothing written), every owned shard
is given back (POST /release?shard=i, so another pod takes it at once), a
summary line, exit 0.
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
MAX_WAIT = 30.0  # seconds: the long-poll's longest ?wait=; the sidecar answers sooner on every change


LOG_LOCK = threading.Lock()


def log(msg):
    with LOG_LOCK:  # one line at a time from every thread
        sys.stdout.write(time.strftime("%H:%M:%S") + " python-shard-worker: " + msg + "\n")
        sys.stdout.flush()


def duration(name, default):
    """Seconds from a duration such as 1s, 500ms or 1.5 (seconds)."""
    v = os.environ.get(name) or default
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)?", v)
    if not m:
        sys.exit(f"python-shard-worker: {name}={v!r}: want a duration such as 1s or 500ms")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


class Owned:
    """The set as the last /shards answer showed it: shard index -> (entry, deadline)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.shards = {}

    def update(self, body, received):
        shards = {}
        for o in body.get("owned") or []:
            shards[o["index"]] = (o, received + o.get("expiresInMs", 0) / 1000)
        with self.lock:
            self.shards = shards
        return shards

    def get(self, i):
        """Shard i's entry and the monotonic instant its token stops, or (None, 0)."""
        with self.lock:
            return self.shards.get(i, (None, 0))

    def clear(self):
        with self.lock:
            self.shards = {}

    def poll_wait(self):
        """The next long-poll's wait: at most half the validity left of any owned shard, so a
        fresh expiresInMs comes in time even if no change wakes the long-poll."""
        with self.lock:
            deadlines = [d for _, d in self.shards.values()]
        if not deadlines:
            return MAX_WAIT
        return min(MAX_WAIT, max(0.1, (min(deadlines) - time.monotonic()) / 2))


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.committed = self.rejected = self.jobs = 0

    def job(self):
        """The next job's number (one sequence over every shard, so a log line names one job)."""
        with self.lock:
            self.jobs += 1
            return self.jobs

    def add(self, committed=0, rejected=0):
        with self.lock:
            self.committed += committed
            self.rejected += rejected


class ShardWorker(threading.Thread):
    """Works one shard while it is owned with the token it was started with."""

    def __init__(self, index, entry, cfg, owned, counts, stopping):
        super().__init__(name=f"shard-{index}", daemon=True)
        self.index, self.token, self.lease_uid = index, entry["token"], entry["leaseUID"]
        self.cfg, self.owned, self.counts, self.stopping = cfg, owned, counts, stopping
        self.stop = threading.Event()  # set when the shard is no longer owned, or on shutdown
        self.resource = f"{cfg['resource']}-{index}"

    def same(self, entry):
        return entry is not None and entry["token"] == self.token and entry["leaseUID"] == self.lease_uid

    def run(self):
        log(f"shard {self.index}: owned: token={self.token} resource={self.resource}")
        conn = None
        try:
            while not self.stop.wait(self.cfg["interval"]):
                entry, deadline = self.owned.get(self.index)
                if not self.same(entry):
                    log(f"shard {self.index}: stopped: no longer owned with token {self.token}")
                    return
                left = deadline - time.monotonic()
                if left <= 0:  # no answer renewed it in time (the sidecar is unreachable, or this process was paused)
                    log(f"shard {self.index}: stopped: the validity of token {self.token} ran out")
                    return
                if left <= self.cfg["work"]:
                    log(f"shard {self.index}: no job: token {self.token} valid for {max(left, 0) * 1000:.0f}ms, "
                        f"the job takes {self.cfg['work']}s")
                    continue
                if conn is None or conn.closed:
                    try:
                        conn = psycopg.connect(self.cfg["url"], autocommit=True)  # conn.transaction(): BEGIN ... COMMIT
                    except psycopg.Error as e:
                        log(f"shard {self.index}: connect: {e}")
                        continue
                self.job(conn, left)
        finally:
            if conn is not None:
                conn.close()

    def job(self, conn, left):
        n = self.counts.job()
        log(f"shard {self.index} job {n} started: token={self.token} expiresInMs={left * 1000:.0f}")
        if self.stop.wait(self.cfg["work"]):  # the work; a pause here can outlast the token
            why = "stopping" if self.stopping.is_set() else "the shard is no longer owned"
            log(f"shard {self.index} job {n} abandoned: {why}")
            return
        try:
            with conn.transaction():
                conn.execute("SELECT elector_fence(%s, %s, %s, %s)",
                             (self.resource, self.token, self.lease_uid, self.cfg["holder"]))
                conn.execute("INSERT INTO example_writes (resource, token, holder) VALUES (%s, %s, %s)",
                             (self.resource, self.token, self.cfg["holder"]))
        except psycopg.Error as e:  # the transaction was rolled back
            if e.sqlstate == STALE_TOKEN:
                self.counts.add(rejected=1)
                log(f"shard {self.index} job {n} rejected: SQLSTATE {e.sqlstate}: {e.diag.message_primary} "
                    f"({e.diag.message_detail}): rolled back, nothing committed")
                self.stop.set()  # another pod owns this shard now: the next answer of /shards says so
            else:
                log(f"shard {self.index} job {n} failed: token={self.token}: SQLSTATE {e.sqlstate}: {e}")
            return
        self.counts.add(committed=1)
        log(f"shard {self.index} job {n} committed: token={self.token}")


def poll(sidecar, etag, wait):
    """One long-poll of /shards (wait in seconds): (status, body or None, etag)."""
    req = urllib.request.Request(f"{sidecar}/shards?wait={int(wait * 1000)}ms")
    if etag:
        req.add_header("If-None-Match", etag)
    try:
        with urllib.request.urlopen(req, timeout=wait + 10) as resp:
            return resp.status, json.load(resp), resp.headers.get("ETag")
    except urllib.error.HTTPError as e:
        if e.code == 304:
            return 304, None, etag
        raise


def release(sidecar, index):
    req = urllib.request.Request(f"{sidecar}/release?shard={index}", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            log(f"shard {index}: released: {resp.status}")
    except urllib.error.HTTPError as e:  # 409: not held any more
        log(f"shard {index}: release: {e.code} {e.read().decode(errors='replace').strip()}")
    except (urllib.error.URLError, OSError) as e:
        log(f"shard {index}: release: {e}")


def main():
    sidecar = (os.environ.get("ELECTOR_URL") or "http://127.0.0.1:4040").rstrip("/")
    cfg = {
        "url": os.environ.get("DATABASE_URL") or sys.exit("python-shard-worker: set DATABASE_URL"),
        "resource": os.environ.get("WORKER_RESOURCE") or "partition",
        "holder": os.environ.get("POD_NAME") or socket.gethostname(),
        "interval": duration("WORKER_INTERVAL", "1s"),
        "work": duration("WORKER_WORK", "200ms"),
    }
    stopping = threading.Event()
    owned, counts, workers = Owned(), Counts(), {}

    def on_signal(*_):
        stopping.set()
        for w in list(workers.values()):
            w.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # The long-poll runs in its own thread, so a signal is handled at once.
    log(f"started: holder={cfg['holder']} resources={cfg['resource']}-<i> sidecar={sidecar} "
        f"interval={cfg['interval']}s work={cfg['work']}s")
    answers = []  # (status, body, received) from the poller
    cond = threading.Condition()

    def poller():
        etag = None
        while not stopping.is_set():
            try:
                status, body, etag = poll(sidecar, etag, owned.poll_wait())
            except (urllib.error.URLError, OSError, ValueError) as e:
                log(f"/shards: {e}")
                etag = None
                stopping.wait(0.5)
                continue
            with cond:
                answers.append((status, body, time.monotonic()))
                cond.notify()

    threading.Thread(target=poller, name="poller", daemon=True).start()
    last_set = None
    while not stopping.is_set():
        with cond:
            cond.wait_for(lambda: answers or stopping.is_set(), timeout=0.5)
            batch, answers[:] = list(answers), []
        for status, body, received in batch:
            if status != 200 or body is None:
                continue
            shards = owned.update(body, received)
            if body.get("set") != last_set:
                last_set = body.get("set")
                log(f"set {last_set}: {body.get('shards')} shards, identity {body.get('identity')}")
            for i, w in list(workers.items()):
                entry, _ = shards.get(i, (None, 0))
                if not w.same(entry) or not w.is_alive():
                    w.stop.set()  # a running job ends before its write
                    del workers[i]
            for i, (entry, _) in sorted(shards.items()):
                if i not in workers and not stopping.is_set():
                    workers[i] = ShardWorker(i, entry, cfg, owned, counts, stopping)
                    workers[i].start()
    held = sorted(workers)
    owned.clear()
    for w in workers.values():
        w.stop.set()
    for w in workers.values():
        w.join(timeout=10)
    for i in held:
        release(sidecar, i)
    log(f"stopped: {counts.committed} rows committed, {counts.rejected} rejected as stale")


if __name__ == "__main__":
    main()
