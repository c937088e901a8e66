"""Engine benchmark: prints one JSON line per case (figures, not a pass/fail test).

Cases, on PostgreSQL and SQLite, with no-op jobs (N = 60,000 by default; 20,000 until the SQLite drain's fourth
pass in docs/benchmarks.md: a 20,000-job SQLite drain lasted ~0.7 s, a quarter of it the worker's start and stop):
  enqueue_bulk      jobs/s for Client.enqueue_many in one call
  drain_1p/drain_2p jobs/s for 1 and 2 worker processes (fencing, heartbeats and attempt history on), from the
                    start signal until the last worker's run returned (the processes' exit after it is
                    exit_seconds); cpu_us_per_job, the workers' CPU per job
  wakeup_latency    enqueue-to-start p50/p99 (ms) for single enqueues to an idle worker
  sqlite_floor_bN   SQLite only: a raw fenced loop in one thread (claim N in BEGIN IMMEDIATE, run the no-ops,
                    finish them fenced by owner and attempt in a second transaction), jobs/s and CPU per job:
                    what the embedded database allows this machine without recon's rows, indexes and threads

  drain_1p_fenced_write
                    one worker process, each job's handler returning a domain write that commits with its
                    fenced finish (``Complete(write=BatchWrite(...))``: an integer-minor-units ledger row per
                    job, credited only while the lease still matched), the payment-shaped drain no queue
                    publishes; checked after: every row credited exactly once
  open_loop_p99     with --open-loop: arrival-to-start p50/p99 (ms) while a producer enqueues at a fixed share
                    (--open-loop-share, 0.5) of drain_1p's measured rate on an open-loop schedule (job i arrives
                    at t0 + i/rate; each enqueue call takes every job arrived by then, stamped with its arrival
                    time, so a producer slowed by the machine neither thins the load nor hides its delay), one
                    worker process with drain_1p's settings and wake-ups: the latency under load
  drain_1p_shipped  with --shipped: one worker process at the shipped [engine] defaults (a worker that sizes
                    itself, recon.engine.sizing), beside drain_1p's tuned fixed settings (autosize off)

Usage: python bench/engine.py [--jobs N] [--backend postgresql|sqlite|both] [--concurrency C] [--no-latency]
                              [--shipped] [--drain-only] [--fenced-write] [--open-loop] [--open-loop-seconds S]
PostgreSQL: RECON_BENCH_DATABASE_URL (default: the test database). Bounded: every wait has a timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import sqlalchemy as sa
from exits import failed  # bench/exits.py (run as python bench/NAME.py)
from sqlalchemy.engine import make_url

from recon import Client, Complete, Handlers, JobSpec, JobStore, RetryPolicy, Settings, Worker, connect, upgrade
from recon.db.listener import make_listener
from recon.engine.outcome import BatchWrite

PG_URL = os.environ.get("RECON_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TIMEOUT = 300.0
_CREATED: set[str] = set()


def drop_created() -> None:
    for url in _CREATED:
        parsed = make_url(url)
        admin = sa.create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
        admin.dispose()


def fresh_db(backend: str, tmp: Path) -> str:
    """An empty, migrated database: a new SQLite file, or a PostgreSQL database of the bench's own
    (``<db>_bench_<pid>``, dropped and recreated) on the server of RECON_BENCH_DATABASE_URL."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp}/bench-{time.monotonic_ns()}.db"
    else:
        base = make_url(PG_URL).set(drivername="postgresql+psycopg")
        name = f"{base.database}_bench_{os.getpid()}"
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        admin.dispose()
        url = base.set(database=name).render_as_string(hide_password=False)
        _CREATED.add(url)
    db = connect(url)
    upgrade(db)
    db.dispose()
    return url


def enqueue(url: str, n: int, kind: str = "noop") -> float:
    db = connect(url)
    client = Client(JobStore(db), Settings())
    if kind == "write":  # the ledger the fenced writes credit: one row per job, amounts in minor units
        with db.begin() as conn:
            conn.execute(sa.text("CREATE TABLE bench_ledger (id BIGINT PRIMARY KEY, amount BIGINT NOT NULL, "
                                 "credited BIGINT NOT NULL DEFAULT 0)"))
            for first in range(0, n, 5000):
                conn.execute(sa.text("INSERT INTO bench_ledger (id, amount) VALUES (:id, 1000)"),
                             [{"id": i} for i in range(first, min(n, first + 5000))])
    specs = [JobSpec(kind, {"i": i}) for i in range(n)]
    start = time.perf_counter()
    client.enqueue_many(specs)
    elapsed = time.perf_counter() - start
    db.dispose()
    return n / elapsed


def drain(url: str, n: int, processes: int, concurrency: int | str, kind: str = "noop") -> dict[str, float]:
    """Drain ``n`` jobs with ``processes`` worker processes: jobs/s from the start signal until the last worker's
    ``Worker.run`` returned (every job finished and committed, the workers' rows marked stopped); the processes'
    exit after it (the interpreter's teardown, the last connection's WAL checkpoint on SQLite) is ``exit_seconds``,
    apart. ``cpu_us_per_job``: the worker processes' CPU over their runs, per job (the figure that does not depend
    on how much of the machine other processes take)."""
    enqueue(url, n, kind)
    go = Path(tempfile.mktemp(prefix="recon-bench-go-"))
    procs = [subprocess.Popen([sys.executable, __file__, "_drain_worker", url, str(go), str(concurrency)],
                              stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    for p in procs:  # each prints "ready" once connected and warmed up
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    start = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine (Linux)
    go.touch()
    ends, cpu = [], 0.0
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()  # printed when its run returned
        p.wait(timeout=TIMEOUT)
        if not line.strip():
            failed(f"a drain worker ended without its figures (exit code {p.returncode})")
        figures = json.loads(line)
        ends.append(figures["run_end"])
        cpu += figures["cpu_s"]
    exited = time.monotonic()
    go.unlink()
    db = connect(url)
    with db.begin() as conn:
        done = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE state = 'succeeded'")).scalar_one()
        history = conn.execute(sa.text("SELECT count(*) FROM job_attempts")).scalar_one()
        credited = conn.execute(sa.text("SELECT sum(credited), max(credited) FROM bench_ledger")).one() \
            if kind == "write" else (n, 1)
    db.dispose()
    if done != n or history != n:
        failed(f"drain incomplete: {done}/{n} succeeded, {history} attempt rows")
    if tuple(int(v or 0) for v in credited) != (n, 1):
        failed(f"fenced writes: {credited[0]} credits, at most {credited[1]} on one row (want {n}, 1)")
    elapsed = max(ends) - start
    return {"jobs_per_s": round(n / elapsed, 1), "seconds": round(elapsed, 3),
            "exit_seconds": round(exited - max(ends), 3), "cpu_us_per_job": round(cpu / n * 1e6, 2)}


def _credit(conn: sa.Connection, items: list[int]) -> None:
    """The fenced domain write of ``write`` jobs: their ledger rows credited, in the finish's transaction."""
    conn.execute(sa.text("UPDATE bench_ledger SET credited = credited + 1 WHERE id IN :ids")
                 .bindparams(sa.bindparam("ids", expanding=True)), {"ids": items})


def _drain_worker(url: str, go: str, spec: str) -> None:
    """``spec``: C (C threads, claims of C, prefetch C, fixed), 0 (the shipped defaults) or C:CLAIM:PREFETCH (fixed)."""
    parts = [int(p) for p in spec.split(":")]
    concurrency = parts[0]
    db = connect(url, pool_size=max(concurrency, 8) + 4)
    settings = Settings()
    handlers = Handlers()
    handlers.register("noop", lambda job, lease: None)
    handlers.register("write", lambda job, lease: Complete(write=BatchWrite(_credit, job.payload["i"])))
    # the settings the README recommends for short jobs (as bench/compare.py): claims of up to
    # `concurrency` jobs and as many prefetched, fixed (autosize off); 0: the shipped defaults as they are
    claim, prefetch = (parts[1], parts[2]) if len(parts) == 3 else (concurrency, concurrency)
    config = settings.engine if concurrency == 0 else replace(
        settings.engine, concurrency=concurrency, claim_batch_size=claim, prefetch=prefetch,
        poll_interval_seconds=0.01, autosize=False)
    worker = Worker(JobStore(db), handlers, config=config, policy=RetryPolicy(settings.retry), run_watcher=False)
    with db.begin() as conn:
        conn.execute(sa.text("SELECT 1"))
    print("ready", flush=True)
    deadline = time.monotonic() + TIMEOUT
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.001)
    cpu = time.process_time()
    worker.run(burst=True)
    print(json.dumps({"run_end": time.monotonic(), "cpu_s": time.process_time() - cpu}), flush=True)


SQLITE_FLOOR_SCHEMA = """
    CREATE TABLE raw_jobs (id INTEGER PRIMARY KEY, payload TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'queued',
                           attempts INTEGER NOT NULL DEFAULT 0, owner TEXT);
    CREATE INDEX raw_jobs_queued ON raw_jobs (id) WHERE state = 'queued';
"""
SQLITE_FLOOR_CLAIM = """
    UPDATE raw_jobs SET state = 'running', owner = :owner, attempts = attempts + 1
    WHERE id IN (SELECT id FROM raw_jobs WHERE state = 'queued' ORDER BY id LIMIT :n)
    RETURNING id, payload, attempts
"""
SQLITE_FLOOR_DONE = """
    UPDATE raw_jobs SET state = 'done', owner = NULL
    WHERE owner = :owner AND state = 'running'
      AND (id, attempts) IN (SELECT value ->> '$[0]', value ->> '$[1]' FROM json_each(:pairs))
"""


def sqlite_floor(tmp: Path, n: int, batch: int) -> dict[str, float]:
    """The raw fenced SQLite loop (see the module docstring), on a file of its own, WAL as recon sets it."""
    import sqlite3

    conn = sqlite3.connect(tmp / f"floor-{time.monotonic_ns()}.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SQLITE_FLOOR_SCHEMA)
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO raw_jobs (payload) VALUES (?)", [(json.dumps({"i": i}),) for i in range(n)])
    conn.execute("COMMIT")
    done = 0
    start, cpu = time.perf_counter(), time.process_time()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(SQLITE_FLOOR_CLAIM, {"owner": "w", "n": batch}).fetchall()
        conn.execute("COMMIT")
        if not rows:
            break
        for _, payload, _ in rows:
            json.loads(payload)  # the no-op reads its payload
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(SQLITE_FLOOR_DONE, {"owner": "w", "pairs": json.dumps([[r[0], r[2]] for r in rows])})
        conn.execute("COMMIT")
        done += len(rows)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    left = conn.execute("SELECT count(*) FROM raw_jobs WHERE state <> 'done'").fetchone()[0]
    conn.close()
    if done != n or left:
        failed(f"sqlite floor incomplete: {done}/{n} done, {left} left")
    return {"jobs_per_s": round(n / elapsed, 1), "seconds": round(elapsed, 3), "batch": batch,
            "cpu_us_per_job": round(cpu / n * 1e6, 2)}


def wakeup_latency(url: str, samples: int) -> dict[str, float]:
    out = Path(tempfile.mktemp(prefix="recon-bench-lat-"))
    proc = subprocess.Popen([sys.executable, __file__, "_latency_worker", url, str(out)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    db = connect(url)
    client = Client(JobStore(db), Settings())
    try:
        time.sleep(0.5)
        for _ in range(samples):
            client.enqueue("latency", {"t": time.time()})
            time.sleep(0.02)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().split()) < samples):
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        db.dispose()
    values = sorted(float(v) * 1000 for v in out.read_text().split())
    out.unlink()
    return {"p50_ms": round(statistics.median(values), 2),
            "p99_ms": round(values[min(len(values) - 1, int(len(values) * 0.99))], 2), "samples": len(values)}


def open_loop(url: str, rate: float, seconds: float, concurrency: int) -> dict[str, float]:
    """Arrival-to-start under an open-loop load of ``rate`` jobs/s for ``seconds`` (module docstring), one worker
    with drain_1p's settings (``concurrency`` threads, claims and prefetch; 0: the shipped defaults)."""
    out = Path(tempfile.mktemp(prefix="recon-bench-open-"))
    proc = subprocess.Popen([sys.executable, __file__, "_latency_worker", url, str(out), str(concurrency)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    db = connect(url)
    client = Client(JobStore(db), Settings())
    sent, batches = 0, 0
    try:
        time.sleep(0.5)
        start, wall = time.perf_counter(), time.time()
        total = int(rate * seconds)
        while sent < total:
            due = min(total, int((time.perf_counter() - start) * rate) + 1)  # jobs whose arrival time has come
            if due <= sent:
                time.sleep(max(0.0, start + sent / rate - time.perf_counter()))
                continue
            # every job due by now, in one enqueue, each stamped with its own arrival time: a producer slowed by the
            # machine sends larger batches rather than thinning the load, and its delay counts in the latency
            client.enqueue_many([JobSpec("open", {"t": wall + i / rate}) for i in range(sent, due)])
            sent, batches = due, batches + 1
        produced = time.perf_counter() - start
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            with db.begin() as conn:
                if not conn.execute(sa.text("SELECT count(*) FROM jobs WHERE state <> 'succeeded'")).scalar_one():
                    break
            time.sleep(0.05)
    finally:
        proc.send_signal(__import__("signal").SIGTERM)
        proc.wait(timeout=60)
        db.dispose()
    values = sorted(float(v) * 1000 for v in out.read_text().split())
    out.unlink()
    return {"offered_per_s": round(rate, 1), "produced_per_s": round(sent / produced, 1), "jobs": len(values),
            "p50_ms": round(statistics.median(values), 2),
            "p99_ms": round(values[min(len(values) - 1, int(len(values) * 0.99))], 2),
            "max_ms": round(values[-1], 2), "enqueue_calls": batches}


def _latency_worker(url: str, out: str, spec: str = "") -> None:
    """The idle-latency worker (shipped defaults, 4 threads at the least), or with ``spec`` drain_1p's settings."""
    db = connect(url)
    settings = Settings()
    handlers = Handlers()
    seen: list[float] = []

    def record(job, lease):  # type: ignore[no-untyped-def]
        with open(out, "a") as fh:
            fh.write(f"{time.time() - job.payload['t']}\n")

    handlers.register("latency", record)
    handlers.register("open", lambda job, lease: seen.append(time.time() - job.payload["t"]))
    config = replace(settings.engine, concurrency=4)
    if spec and int(spec):
        n = int(spec)
        config = replace(settings.engine, concurrency=n, claim_batch_size=n, prefetch=n, autosize=False)
    elif spec:
        config = settings.engine
    worker = Worker(JobStore(db), handlers, config=config, policy=RetryPolicy(settings.retry),
                    wakeup_func=make_listener(db))
    import signal
    import threading

    signal.signal(signal.SIGTERM, lambda *_: worker.request_stop())
    threading.Timer(0.2, lambda: print("ready", flush=True)).start()
    worker.run()
    if seen:
        with open(out, "a") as fh:
            fh.write("\n".join(f"{v}" for v in seen) + "\n")


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--concurrency", type=int, default=64, help="handler threads per worker process")
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--no-latency", action="store_true", help="skip the wake-up latency case")
    parser.add_argument("--shipped", action="store_true",
                        help="also drain with one process at the shipped [engine] defaults (drain_1p_shipped)")
    parser.add_argument("--fenced-write", action="store_true",
                        help="also drain_1p_fenced_write: a domain write committed with each job's fenced finish")
    parser.add_argument("--open-loop", action="store_true",
                        help="also open_loop_p99: enqueue-to-start under an open-loop load (a share of drain_1p)")
    parser.add_argument("--open-loop-share", type=float, default=0.5)
    parser.add_argument("--open-loop-rate", type=float, default=0.0,
                        help="a fixed open-loop rate (jobs/s) instead of a share of drain_1p's")
    parser.add_argument("--open-loop-seconds", type=float, default=10.0)
    parser.add_argument("--drain-only", action="store_true",
                        help="only drain_1p (and drain_1p_shipped): no enqueue, 2-process, floor or latency case")
    args = parser.parse_args()
    machine = {"cpus": os.cpu_count(), "python": platform.python_version()}
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            base = {"backend": backend, "jobs": args.jobs, **machine}
            if not args.drain_only:
                rate = enqueue(fresh_db(backend, Path(tmp)), args.jobs)
                print(json.dumps({"case": "enqueue_bulk", **base, "jobs_per_s": round(rate, 1)}), flush=True)
            drain_rate = 0.0
            for processes in (1,) if args.drain_only else (1, 2):
                figures = drain(fresh_db(backend, Path(tmp)), args.jobs, processes, args.concurrency)
                print(json.dumps({"case": f"drain_{processes}p", **base, "concurrency": args.concurrency,
                                  **figures, "load_average": _load()}), flush=True)
                if processes == 1:
                    drain_rate = figures["jobs_per_s"]
                    if args.fenced_write:
                        figures = drain(fresh_db(backend, Path(tmp)), args.jobs, 1, args.concurrency, "write")
                        print(json.dumps({"case": "drain_1p_fenced_write", **base, "concurrency": args.concurrency,
                                          **figures, "of_drain_1p": round(figures["jobs_per_s"] / drain_rate, 2),
                                          "load_average": _load()}), flush=True)
                    if args.open_loop:
                        offered = args.open_loop_rate or drain_rate * args.open_loop_share
                        figures = open_loop(fresh_db(backend, Path(tmp)), offered, args.open_loop_seconds,
                                            args.concurrency)
                        print(json.dumps({"case": "open_loop_p99", **base, "share_of_drain_1p": args.open_loop_share,
                                          "settings": "drain_1p's, with wake-ups", "concurrency": args.concurrency,
                                          **figures, "load_average": _load()}), flush=True)
                if processes == 1 and args.shipped:
                    figures = drain(fresh_db(backend, Path(tmp)), args.jobs, 1, 0)
                    print(json.dumps({"case": "drain_1p_shipped", **base, "settings": "shipped [engine] defaults",
                                      **figures}), flush=True)
            if args.drain_only:
                continue
            if backend == "sqlite":
                for batch in (10, 50):
                    figures = sqlite_floor(Path(tmp), args.jobs, batch)
                    print(json.dumps({"case": f"sqlite_floor_b{batch}", **base, **figures, "load_average": _load()}),
                          flush=True)
            if args.no_latency:
                continue
            lat = wakeup_latency(fresh_db(backend, Path(tmp)), args.latency_samples)
            poll = Settings().engine.poll_interval_seconds
            print(json.dumps({"case": "wakeup_latency", **base, "poll_interval_s": poll,
                              "wakeup": "LISTEN/NOTIFY" if backend == "postgresql" else "polling", **lat}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_drain_worker":
        _drain_worker(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "_latency_worker":
        _latency_worker(*sys.argv[2:5])
    else:
        try:
            main()
        finally:
            drop_created()
