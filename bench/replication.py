"""Replication benchmark: what a standby costs recon. Prints one JSON line per setup and case (figures, not a
pass/fail test).

Setups, each on PostgreSQL servers of its own (tests/pgcluster.py: Debian's PostgreSQL binaries, free ports of
127.0.0.1, ``fsync = on``, a temporary directory removed at the end; never the server on 5432), reached over
one multi-host URL with ``target_session_attrs=read-write``:

  primary   a primary alone (no WAL sender)
  async     a primary streaming to an asynchronous standby
  sync      a primary with a synchronous standby (``synchronous_commit = on``: every commit waits until the
            standby has flushed its WAL)

Cases:

  enqueue_bulk, drain_1p, drain_2p   bench/engine.py's, no-op jobs (``--jobs``), run as it is with
                                     RECON_BENCH_DATABASE_URL set to the setup's URL
  enqueue_single                     ``--singles`` jobs enqueued one at a time by one producer (one statement,
                                     so one commit, each): commits/s and the p50 / p99 of a commit, the
                                     figure a synchronous standby changes most directly
  charge                             ``--payments`` payments created with their charge jobs, then charged
                                     through the native PSP sandbox (its defaults: no faults, a few declines) by one
                                     `recon worker --burst --queues charges --concurrency C`: payments/s from
                                     the first claim to the last finish (the database's own timestamps, so
                                     the worker's start-up is not counted). A charge commits three times (its
                                     claim, ``processing``, its finish with the payment's status): where a
                                     commit waits for a standby, a charge waits three times.

Usage: python bench/replication.py [--jobs N] [--payments N] [--setups primary,async,sync] [--concurrency C]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402
from exits import failed, usage  # noqa: E402  # bench/exits.py (run as python bench/NAME.py)

from recon import Client, JobStore, Settings  # noqa: E402
from recon.db.database import connect, upgrade  # noqa: E402
from recon.db.payment_store import PaymentStore  # noqa: E402
from recon.rows import NewPayment  # noqa: E402
from tests import pgcluster  # noqa: E402

SETUPS = ("primary", "async", "sync")
TIMEOUT = 600.0


@contextlib.contextmanager
def servers(setup: str) -> Iterator[str]:
    """The setup's servers, and recon's URL for them (the database ``postgres``)."""
    with pgcluster.Cluster(durable=True) as cluster:
        a = cluster.primary("a")
        hosts = [a]
        if setup == "sync":
            a.query("ALTER SYSTEM SET synchronous_standby_names = 'b'")
            a.query("SELECT pg_reload_conf()")
        if setup in ("async", "sync"):
            b = cluster.standby("b", of=a)
            hosts.append(b)
            if setup == "sync":
                deadline = time.monotonic() + 30
                while not a.query("SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'"):
                    if time.monotonic() > deadline:
                        failed("the standby never became synchronous")
                    time.sleep(0.05)
        query = "&".join(f"host=127.0.0.1:{n.port}" for n in hosts)
        yield f"postgresql+psycopg://postgres@/postgres?{query}&target_session_attrs=read-write"


def engine_cases(url: str, jobs: int, concurrency: int) -> list[dict[str, Any]]:
    """bench/engine.py on PostgreSQL, without its latency case: its JSON lines."""
    env = {**os.environ, "RECON_BENCH_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "engine.py"), "--backend", "postgresql",
                           "--no-latency", "--jobs", str(jobs), "--concurrency", str(concurrency)],
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if done.returncode != 0:
        failed(f"bench/engine.py failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def enqueue_single_case(url: str, n: int) -> dict[str, Any]:
    base = sa.engine.make_url(url)
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql('CREATE DATABASE "recon_bench_singles"')
    admin.dispose()
    db = connect(base.set(database="recon_bench_singles").render_as_string(hide_password=False))
    upgrade(db)
    client = Client(JobStore(db), Settings())
    client.enqueue("noop")  # the pool's connection, before the clock starts
    took: list[float] = []
    start = time.perf_counter()
    for _ in range(n):
        began = time.perf_counter()
        client.enqueue("noop")
        took.append(time.perf_counter() - began)
    elapsed = time.perf_counter() - start
    db.dispose()
    took.sort()
    return {"commits_per_s": round(n / elapsed, 1), "p50_ms": round(statistics.median(took) * 1000, 3),
            "p99_ms": round(took[int(len(took) * 0.99)] * 1000, 3), "jobs": n}


def charge_case(url: str, payments: int, concurrency: int) -> dict[str, Any]:
    base = sa.engine.make_url(url)
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql('CREATE DATABASE "recon_bench_charges"')
    admin.dispose()
    db_url = base.set(database="recon_bench_charges").render_as_string(hide_password=False)
    db = connect(db_url)
    upgrade(db)
    store = PaymentStore(db)
    for start in range(0, payments, 1000):
        store.create([NewPayment("bench-shop", f"bench-{i:07d}", 1000 + i % 977, "EUR", "sandbox")
                      for i in range(start, min(payments, start + 1000))])
    with tempfile.TemporaryDirectory(prefix="recon-bench-replication-") as tmp:
        sandbox = subprocess.Popen([sys.executable, "-m", "recon", "psp-sandbox", "--port", "0", "--state-file",
                                    f"{tmp}/psp.db"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                   cwd=ROOT,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            assert sandbox.stdout is not None
            line = sandbox.stdout.readline()
            found = re.search(r"listening on (http://\S+)", line)
            sandbox_url = found.group(1) if found else ""
            if not sandbox_url:
                failed(f"the sandbox did not start: {line!r}")
            env = {**os.environ, "PYTHONPATH": str(ROOT), "RECON_SANDBOX_BASE_URL": sandbox_url}
            env.pop("RECON_CONFIG", None)
            worker = subprocess.run([sys.executable, "-m", "recon", "--database-url", db_url, "--log-level", "ERROR",
                                     "worker", "--burst", "--queues", "charges", "--concurrency", str(concurrency)],
                                    env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
        finally:
            sandbox.terminate()
            sandbox.wait(30)
    if worker.returncode != 0:
        failed(f"the worker failed ({worker.returncode}):\n{worker.stderr[-3000:]}")
    with db.begin() as conn:
        done, first, last = conn.execute(sa.text(
            "SELECT count(*) FILTER (WHERE p.status IN ('succeeded', 'failed')), min(j.attempted_at), "
            "max(j.finished_at) "
            "FROM payments p JOIN jobs j ON j.kind = 'charge' AND (j.payload ->> 'payment_id')::bigint = p.id"
        )).one()
    db.dispose()
    if done != payments:
        failed(f"charges incomplete: {done}/{payments} final")
    seconds = (last - first).total_seconds()
    return {"payments_per_s": round(payments / seconds, 1), "seconds": round(seconds, 3), "payments": payments,
            "concurrency": concurrency}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--payments", type=int, default=3_000)
    parser.add_argument("--singles", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=64, help="the drain's handler threads per process")
    parser.add_argument("--charge-concurrency", type=int, default=32, help="the charging worker's threads")
    parser.add_argument("--setups", default=",".join(SETUPS), type=lambda s: [x for x in s.split(",") if x])
    args = parser.parse_args()
    reason = pgcluster.available()
    if reason:
        failed(reason)
    for setup in args.setups:
        machine = {"cpus": os.cpu_count(), "python": platform.python_version(),
                   "load_average": round(os.getloadavg()[0], 1)}
        if setup not in SETUPS:
            usage(f"--setups: {setup!r} is not one of {', '.join(SETUPS)}")
        with servers(setup) as url:
            for figures in engine_cases(url, args.jobs, args.concurrency):
                print(json.dumps({"setup": setup, **figures}), flush=True)
            singles = enqueue_single_case(url, args.singles)
            print(json.dumps({"setup": setup, "case": "enqueue_single", **machine, **singles}), flush=True)
            charge = charge_case(url, args.payments, args.charge_concurrency)
            print(json.dumps({"setup": setup, "case": "charge", **machine, **charge}), flush=True)


if __name__ == "__main__":
    main()
