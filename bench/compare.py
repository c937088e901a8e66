"""Peer comparison: recon, procrastinate, pgqueuer and a raw-SQL floor on one PostgreSQL.

The same workload for every system, each case on a fresh database of its own (``recon_compare_<pid>_<k>``,
created and dropped here; nothing else on the server is touched):

  enqueue_bulk      N no-op jobs in one library call, jobs/s (the enqueue that sets up drain_1p)
  enqueue_single    --single-jobs no-op jobs, one library call (one job) after another from one producer,
                    jobs/s: the latency-bound path of a web request or a webhook. The raw floor's is one
                    autocommit INSERT ... RETURNING per job (one round trip, one durable commit) of recon's row
                    width into a table with one primary key
  drain_1p/drain_2p N queued no-op jobs drained by 1 and 2 worker processes, jobs/s, from the moment the
                    workers (connected, warmed up) are told to go until the last one's run call returns
  latency           enqueue-to-start p50/p99 in ms: single enqueues, 20 ms apart, to an idle worker
  worker CPU        CPU time of the drain's worker processes (all threads) per job, in µs: the figure that a
                    busy shared machine disturbs least

How each system is used (the library's documented way; see docs/benchmarks.md for the sources):

  recon          its library API, as bench/engine.py: Client.enqueue_many; Worker(...).run(burst=True) with
                 --concurrency handler threads, claim batch = concurrency; fencing, heartbeats, attempt
                 history and the stuck watcher on; LISTEN/NOTIFY wake-up for latency
  procrastinate  App(PsycopgConnector), schema by its SchemaManager (what `procrastinate schema --apply`
                 runs), an async no-op task, Task.batch_defer_async for bulk, defer_async for single,
                 App.run_worker_async(concurrency=C, wait=False) to drain (wait=True with LISTEN for latency)
  pgqueuer       `pgq install` and `pgq autovac` (its CLI), Queries.enqueue with lists for bulk, an async
                 entrypoint, PgQueuer.from_asyncpg_connection(...).run(batch_size=B, mode=drain) on uvloop
                 (what `pgq run` uses); continuous mode with LISTEN for latency. B = --concurrency, and a
                 second row with B = 200 ("pgqueuer:200"): its performance guide says to raise it for short
                 jobs
  raw            the floor: one psycopg connection per process, a loop of
                 UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING, run the no-ops,
                 UPDATE ... SET state = 'done' WHERE id = ANY(...); batch sizes 1/10/50; COPY for enqueue;
                 one autocommit INSERT per job for single enqueue

Drains that commit once or twice per job (procrastinate, raw batch 1: ~250 durable commits/s per connection
on this machine) run with --slow-jobs jobs (default 2,000) so that three repeats fit in ~15 minutes; their
rate does not depend on the queue length. The table marks them.

Prints the machine, one JSON line per (system, case, run), then a table of medians and the target checks:
recon's drain >= 1.5x the best peer's and >= 80 % of the best raw floor, per process count; single enqueue
>= the best peer's and >= 80 % of the raw floor's; bulk enqueue >= the best peer's.

Usage: python bench/compare.py [--jobs N] [--slow-jobs N] [--single-jobs N] [--repeats R] [--concurrency C]
                               [--cases enqueue_bulk,enqueue_single,drain,latency]
                               [--systems recon,procrastinate,pgqueuer,pgqueuer:200,raw]
                               [--latency-samples S] [--timeout S] [--budget S] [--markdown FILE]
Needs the bench extra: pip install -e '.[test,bench]'. Server: RECON_COMPARE_ADMIN_URL (default
postgresql://postgres@127.0.0.1:5432/postgres); only a loopback host is accepted. Every wait has a timeout;
a system that fails or times out is reported as such.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import importlib.metadata
import json
import os
import platform
import queue
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from exits import failed, usage  # bench/exits.py (run as python bench/NAME.py)

ADMIN_URL = os.environ.get("RECON_COMPARE_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SYSTEMS = ("recon", "procrastinate", "pgqueuer", "raw")
PEERS = ("procrastinate", "pgqueuer")
#: what runs by default; "pgqueuer:200" is pgqueuer with batch_size 200 (plain "pgqueuer": --concurrency)
DEFAULT_SYSTEMS = "recon,recon:128,procrastinate,pgqueuer,pgqueuer:200,raw"
RAW_BATCHES = (1, 10, 50)
READY_TIMEOUT = 60.0
LATENCY_INTERVAL = 0.02


class CaseFailed(Exception):
    pass


class CaseTimeout(Exception):
    pass


# --- helpers shared by the parent and the workers -----------------------------------------------------------

def _wait_go(timeout: float) -> bool:
    """Block until the parent writes a line to our stdin (the start signal), at most ``timeout`` seconds."""
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return bool(ready) and sys.stdin.readline().strip() == "go"


def _say(tag: str, payload: Any = None) -> None:
    print(tag if payload is None else f"{tag} {json.dumps(payload)}", flush=True)


def _base(system: str) -> str:
    return system.split(":")[0]


def _variant_opts(system: str) -> dict[str, Any]:
    """pgqueuer:B sets its batch_size; recon:B its claim batch (and prefetch) to B."""
    if ":" in system:
        key = "recon_batch" if _base(system) == "recon" else "pgqueuer_batch"
        return {key: int(system.split(":")[1])} | ({"recon_prefetch": None} if key == "recon_batch" else {})
    return {}


def _recon_url(dsn: str) -> str:
    return dsn.replace("postgresql://", "postgresql+psycopg://", 1)


def _expect_rows(dsn: str, sql: str, n: int) -> None:
    """An enqueue case's check: the table holds exactly the ``n`` jobs it enqueued."""
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        found = conn.execute(sql).fetchone()[0]
    if found != n:
        raise CaseFailed(f"{found}/{n} jobs stored")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


# --- recon --------------------------------------------------------------------------------------------------

class Recon:
    name = "recon"

    @staticmethod
    def install(dsn: str) -> None:
        from recon import connect, upgrade

        db = connect(_recon_url(dsn))
        upgrade(db)
        db.dispose()

    @staticmethod
    def enqueue_bulk(dsn: str, n: int) -> float:
        from recon import Client, JobSpec, JobStore, Settings, connect

        db = connect(_recon_url(dsn))
        client = Client(JobStore(db), Settings())
        specs = [JobSpec("noop", {"i": i}) for i in range(n)]
        start = time.perf_counter()
        client.enqueue_many(specs)
        elapsed = time.perf_counter() - start
        db.dispose()
        return elapsed

    @staticmethod
    def enqueue_single(dsn: str, n: int) -> float:
        import sqlalchemy as sa

        from recon import Client, JobStore, Settings, connect

        db = connect(_recon_url(dsn))
        client = Client(JobStore(db), Settings())
        with db.begin() as conn:  # connected before the clock starts, as the peers'
            conn.execute(sa.text("SELECT 1"))
        start = time.perf_counter()
        for i in range(n):
            client.enqueue("noop", {"i": i})
        elapsed = time.perf_counter() - start
        db.dispose()
        _expect_rows(dsn, "SELECT count(*) FROM jobs", n)
        return elapsed

    @staticmethod
    def verify(dsn: str, n: int) -> str | None:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            done = conn.execute("SELECT count(*) FROM jobs WHERE state = 'succeeded'").fetchone()[0]
            history = conn.execute(
                "SELECT count(*) FROM job_attempts WHERE outcome = 'succeeded'").fetchone()[0]
        if done != n or history != n:
            return f"{done}/{n} jobs succeeded, {history} attempt rows"
        return None

    @staticmethod
    def produce_latency(dsn: str, samples: int) -> None:
        from recon import Client, JobStore, Settings, connect

        db = connect(_recon_url(dsn))
        client = Client(JobStore(db), Settings())
        try:
            for _ in range(samples):
                client.enqueue("lat", {"t": time.time()})
                time.sleep(LATENCY_INTERVAL)
        finally:
            db.dispose()

    @staticmethod
    def worker(role: str, dsn: str, opts: dict[str, Any]) -> None:
        from dataclasses import replace

        import sqlalchemy as sa

        from recon import Handlers, JobStore, RetryPolicy, Settings, Worker, connect
        from recon.db.listener import make_listener

        concurrency, timeout = opts["concurrency"], opts["timeout"]
        db = connect(_recon_url(dsn), pool_size=concurrency + 4)
        settings = Settings()
        handlers = Handlers()
        seen: deque[float] = deque()  # append is atomic: handlers run on many threads
        with db.begin() as conn:
            conn.execute(sa.text("SELECT 1"))
        if role == "drain":
            handlers.register("noop", lambda job, lease: seen.append(0.0))
            # the settings the README recommends for short jobs: prefetch (the next claim overlaps the
            # current batch) and claims of up to `recon_batch` jobs; 10 ms idle poll
            batch = opts.get("recon_batch") or concurrency
            prefetch = opts["recon_prefetch"] if opts.get("recon_prefetch") is not None else batch
            config = replace(settings.engine, concurrency=concurrency, claim_batch_size=batch,
                             prefetch=prefetch, poll_interval_seconds=0.01)
            worker = Worker(JobStore(db), handlers, config=config, policy=RetryPolicy(settings.retry))
            _say("ready")
            if not _wait_go(timeout):
                failed("no go")
            cpu0 = time.process_time()
            stopper = threading.Timer(timeout, worker.request_stop)
            stopper.daemon = True
            stopper.start()
            stats = worker.run(burst=True)
            t_end = time.monotonic()
            stopper.cancel()
            _say("result", {"handled": len(seen), "t_end": t_end, "cpu_s": time.process_time() - cpu0,
                            "stats": stats.to_dict()})
        else:
            samples = opts["samples"]

            def record(job, lease):  # type: ignore[no-untyped-def]
                seen.append(time.time() - job.payload["t"])
                if len(seen) >= samples:
                    worker.request_stop()

            handlers.register("lat", record)
            worker = Worker(JobStore(db), handlers, config=replace(settings.engine, concurrency=concurrency),
                            policy=RetryPolicy(settings.retry), wakeup_func=make_listener(db))
            stopper = threading.Timer(timeout, worker.request_stop)
            stopper.daemon = True
            stopper.start()
            threading.Timer(0.3, lambda: _say("ready")).start()
            worker.run()
            stopper.cancel()
            _say("result", {"latencies": list(seen)})
        db.dispose()


# --- procrastinate ------------------------------------------------------------------------------------------

class Procrastinate:
    name = "procrastinate"

    @staticmethod
    def app(dsn: str, pool_max: int | None = None) -> Any:
        import logging

        import procrastinate

        # the App is built here, not in an importable module: its "instantiated in the main module" warning
        # is about the CLI finding tasks, which this script does not use (tasks are registered by name)
        logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
        pool: dict[str, Any] = {}
        if pool_max:
            pool = {"min_size": min(4, pool_max), "max_size": pool_max}
        return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn, **pool))

    @classmethod
    def install(cls, dsn: str) -> None:
        async def run() -> None:
            app = cls.app(dsn)
            async with app.open_async():
                await app.schema_manager.apply_schema_async()  # what `procrastinate schema --apply` does

        asyncio.run(run())

    @classmethod
    def enqueue_bulk(cls, dsn: str, n: int) -> float:
        async def run() -> float:
            app = cls.app(dsn)

            @app.task(name="noop")
            async def noop(i: int) -> None:
                return None

            async with app.open_async():
                kwargs = [{"i": i} for i in range(n)]
                start = time.perf_counter()
                await noop.batch_defer_async(*kwargs)
                return time.perf_counter() - start

        return asyncio.run(run())

    @classmethod
    def enqueue_single(cls, dsn: str, n: int) -> float:
        async def run() -> float:
            app = cls.app(dsn)

            @app.task(name="noop")
            async def noop(i: int) -> None:
                return None

            async with app.open_async():
                start = time.perf_counter()
                for i in range(n):
                    await noop.defer_async(i=i)
                return time.perf_counter() - start

        elapsed = asyncio.run(run())
        _expect_rows(dsn, "SELECT count(*) FROM procrastinate_jobs", n)
        return elapsed

    @staticmethod
    def verify(dsn: str, n: int) -> str | None:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            done = conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'").fetchone()[0]
        return None if done == n else f"{done}/{n} jobs succeeded"

    @classmethod
    def produce_latency(cls, dsn: str, samples: int) -> None:
        async def run() -> None:
            app = cls.app(dsn)

            @app.task(name="lat")
            async def lat(t: float) -> None:
                return None

            async with app.open_async():
                for _ in range(samples):
                    await lat.defer_async(t=time.time())
                    await asyncio.sleep(LATENCY_INTERVAL)

        asyncio.run(run())

    @classmethod
    def worker(cls, role: str, dsn: str, opts: dict[str, Any]) -> None:
        concurrency, timeout = opts["concurrency"], opts["timeout"]
        seen: list[float] = []

        async def run() -> None:
            app = cls.app(dsn, opts.get("procrastinate_pool"))
            done = asyncio.Event()

            @app.task(name="noop")
            async def noop(i: int) -> None:
                seen.append(0.0)

            @app.task(name="lat")
            async def lat(t: float) -> None:
                seen.append(time.time() - t)
                if len(seen) >= opts.get("samples", 0):
                    done.set()

            async with app.open_async():
                if role == "drain":
                    _say("ready")
                    if not await asyncio.to_thread(_wait_go, timeout):
                        failed("no go")
                    cpu0 = time.process_time()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(app.run_worker_async(
                            concurrency=concurrency, wait=False, install_signal_handlers=False), timeout)
                    _say("result", {"handled": len(seen), "t_end": time.monotonic(),
                                    "cpu_s": time.process_time() - cpu0})
                else:
                    task = asyncio.create_task(app.run_worker_async(
                        concurrency=concurrency, install_signal_handlers=False))
                    await asyncio.sleep(0.3)
                    _say("ready")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(done.wait(), timeout)
                    task.cancel()  # the documented graceful stop of a worker run as a task
                    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                        await asyncio.wait_for(task, 10)
                    _say("result", {"latencies": seen})

        asyncio.run(run())  # procrastinate's CLI runs on the standard asyncio loop


# --- pgqueuer -----------------------------------------------------------------------------------------------

class PgQueuer:
    name = "pgqueuer"

    @staticmethod
    def _pgq(dsn: str, *args: str) -> None:
        exe = os.path.join(os.path.dirname(sys.executable), "pgq")
        proc = subprocess.run([exe, "--pg-dsn", dsn, *args], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise CaseFailed(f"pgq {' '.join(args)}: {(proc.stderr or proc.stdout).strip()[-300:]}")

    @classmethod
    def install(cls, dsn: str) -> None:
        cls._pgq(dsn, "install")  # durable (the default)
        cls._pgq(dsn, "autovac")  # the performance guide's checklist

    @staticmethod
    def _run(coro: Any) -> Any:
        import uvloop

        return uvloop.run(coro)  # what `pgq run` uses when uvloop is installed

    @classmethod
    def enqueue_bulk(cls, dsn: str, n: int) -> float:
        async def run() -> float:
            import asyncpg
            from pgqueuer.db import AsyncpgDriver
            from pgqueuer.queries import Queries

            conn = await asyncpg.connect(dsn)
            try:
                queries = Queries(AsyncpgDriver(conn))
                entrypoints = ["noop"] * n
                payloads: list[bytes | None] = [json.dumps({"i": i}).encode() for i in range(n)]
                priorities = [0] * n
                start = time.perf_counter()
                await queries.enqueue(entrypoints, payloads, priorities)
                return time.perf_counter() - start
            finally:
                await conn.close()

        return cls._run(run())

    @classmethod
    def enqueue_single(cls, dsn: str, n: int) -> float:
        async def run() -> float:
            import asyncpg
            from pgqueuer.db import AsyncpgDriver
            from pgqueuer.queries import Queries

            conn = await asyncpg.connect(dsn)
            try:
                queries = Queries(AsyncpgDriver(conn))
                payloads = [json.dumps({"i": i}).encode() for i in range(n)]
                start = time.perf_counter()
                for p in payloads:
                    await queries.enqueue("noop", p)
                return time.perf_counter() - start
            finally:
                await conn.close()

        elapsed: float = cls._run(run())
        _expect_rows(dsn, "SELECT count(*) FROM pgqueuer", n)
        return elapsed

    @staticmethod
    def verify(dsn: str, n: int) -> str | None:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            left = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()[0]
        return None if left == 0 else f"{left} jobs left in the queue"

    @classmethod
    def produce_latency(cls, dsn: str, samples: int) -> None:
        async def run() -> None:
            import asyncpg
            from pgqueuer.db import AsyncpgDriver
            from pgqueuer.queries import Queries

            conn = await asyncpg.connect(dsn)
            try:
                queries = Queries(AsyncpgDriver(conn))
                for _ in range(samples):
                    await queries.enqueue("lat", json.dumps({"t": time.time()}).encode())
                    await asyncio.sleep(LATENCY_INTERVAL)
            finally:
                await conn.close()

        cls._run(run())

    @classmethod
    def worker(cls, role: str, dsn: str, opts: dict[str, Any]) -> None:
        timeout = opts["timeout"]
        batch_size = opts.get("pgqueuer_batch") or opts["concurrency"]
        seen: list[float] = []

        async def run() -> None:
            import asyncpg
            from pgqueuer import PgQueuer as App
            from pgqueuer.types import QueueExecutionMode

            conn = await asyncpg.connect(dsn)  # the docs: a dedicated connection for the QueueManager
            pgq = App.from_asyncpg_connection(conn)

            @pgq.entrypoint("noop")
            async def noop(job: Any) -> None:
                seen.append(0.0)

            @pgq.entrypoint("lat")
            async def lat(job: Any) -> None:
                seen.append(time.time() - json.loads(job.payload)["t"])
                if len(seen) >= opts.get("samples", 0):
                    pgq.shutdown.set()

            if role == "drain":
                _say("ready")
                if not await asyncio.to_thread(_wait_go, timeout):
                    failed("no go")
                cpu0 = time.process_time()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        pgq.run(batch_size=batch_size, mode=QueueExecutionMode.drain), timeout)
                _say("result", {"handled": len(seen), "t_end": time.monotonic(),
                                "cpu_s": time.process_time() - cpu0, "batch_size": batch_size})
            else:
                task = asyncio.create_task(pgq.run(batch_size=batch_size))
                await asyncio.sleep(0.5)
                _say("ready")
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(task, timeout)
                _say("result", {"latencies": seen})
            with contextlib.suppress(Exception):
                await conn.close()

        cls._run(run())


# --- the raw-SQL floor --------------------------------------------------------------------------------------

RAW_SCHEMA = """
    CREATE TABLE raw_jobs (
        id bigserial PRIMARY KEY,
        payload jsonb NOT NULL,
        state text NOT NULL DEFAULT 'queued',
        attempts int NOT NULL DEFAULT 0,
        finished_at timestamptz
    );
    CREATE INDEX raw_jobs_queued ON raw_jobs (id) WHERE state = 'queued';
    -- the single enqueue's floor: recon's row (its 22 columns, the 11 an enqueue sets) in a table with one
    -- primary key and nothing else: no partial index, no unique key, no NOTIFY (issue 29)
    CREATE TABLE raw_wide_jobs (
        id bigserial PRIMARY KEY, queue text NOT NULL, kind text NOT NULL, payload jsonb NOT NULL,
        state text NOT NULL, priority int NOT NULL DEFAULT 0, run_after timestamptz NOT NULL,
        attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL, lease_owner text, lease_until timestamptz,
        heartbeat_at timestamptz, attempted_at timestamptz, unique_key text, last_error_kind text, last_error text,
        tenant text, progress jsonb, created_at timestamptz NOT NULL, finished_at timestamptz,
        cancel_requested boolean NOT NULL DEFAULT false, free_attempts int NOT NULL DEFAULT 0
    );
"""
RAW_CLAIM = """
    UPDATE raw_jobs SET state = 'running', attempts = attempts + 1
    WHERE id IN (SELECT id FROM raw_jobs WHERE state = 'queued' ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
    RETURNING id, payload
"""
RAW_DONE = "UPDATE raw_jobs SET state = 'done', finished_at = now() WHERE id = ANY(%s)"
RAW_INSERT = ("INSERT INTO raw_wide_jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts, "
              "unique_key, tenant, created_at) VALUES ('default', 'noop', CAST(%s AS jsonb), 'runnable', 0, now(), 0, "
              "10, NULL, NULL, now()) RETURNING id")


def _noop(payload: Any) -> None:
    return None


class Raw:
    name = "raw"

    @staticmethod
    def install(dsn: str) -> None:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            conn.execute(RAW_SCHEMA)

    @staticmethod
    def enqueue_bulk(dsn: str, n: int) -> float:
        payloads = [json.dumps({"i": i}) for i in range(n)]
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            start = time.perf_counter()
            with conn.cursor() as cur, cur.copy("COPY raw_jobs (payload) FROM STDIN") as copy:
                for p in payloads:
                    copy.write_row((p,))
            conn.commit()
            return time.perf_counter() - start

    @staticmethod
    def enqueue_single(dsn: str, n: int) -> float:
        payloads = [json.dumps({"i": i}) for i in range(n)]
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            start = time.perf_counter()
            for p in payloads:  # one round trip and one durable commit per job: the floor
                conn.execute(RAW_INSERT, (p,)).fetchone()
            elapsed = time.perf_counter() - start
        _expect_rows(dsn, "SELECT count(*) FROM raw_wide_jobs", n)
        return elapsed

    @staticmethod
    def verify(dsn: str, n: int) -> str | None:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            done = conn.execute("SELECT count(*) FROM raw_jobs WHERE state = 'done'").fetchone()[0]
        return None if done == n else f"{done}/{n} jobs done"

    @staticmethod
    def produce_latency(dsn: str, samples: int) -> None:
        from psycopg.types.json import Jsonb

        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            for _ in range(samples):
                with conn.transaction():
                    conn.execute("INSERT INTO raw_jobs (payload) VALUES (%s)", [Jsonb({"t": time.time()})])
                    conn.execute("NOTIFY raw_jobs")
                time.sleep(LATENCY_INTERVAL)

    @staticmethod
    def worker(role: str, dsn: str, opts: dict[str, Any]) -> None:
        timeout, batch = opts["timeout"], opts.get("raw_batch", 10)
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        conn.execute("SELECT 1")
        if role == "drain":
            _say("ready")
            if not _wait_go(timeout):
                failed("no go")
            cpu0 = time.process_time()
            deadline = time.monotonic() + timeout
            handled = 0
            while time.monotonic() < deadline:
                rows = conn.execute(RAW_CLAIM, (batch,)).fetchall()
                if not rows:
                    break
                for _, payload in rows:
                    _noop(payload)
                conn.execute(RAW_DONE, ([r[0] for r in rows],))
                handled += len(rows)
            _say("result", {"handled": handled, "t_end": time.monotonic(),
                            "cpu_s": time.process_time() - cpu0, "batch": batch})
        else:
            samples = opts["samples"]
            listen = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
            listen.execute("LISTEN raw_jobs")
            seen: list[float] = []
            _say("ready")
            deadline = time.monotonic() + timeout
            while len(seen) < samples and time.monotonic() < deadline:
                rows = conn.execute(RAW_CLAIM, (batch,)).fetchall()
                if rows:
                    now = time.time()
                    seen.extend(now - payload["t"] for _, payload in rows)
                    conn.execute(RAW_DONE, ([r[0] for r in rows],))
                    continue
                for _ in listen.notifies(timeout=0.5, stop_after=1):
                    pass
            listen.close()
            _say("result", {"latencies": seen})
        conn.close()


IMPLS: dict[str, Any] = {"recon": Recon, "procrastinate": Procrastinate, "pgqueuer": PgQueuer, "raw": Raw}


# --- the parent: databases, worker processes, cases ---------------------------------------------------------

class Databases:
    """Creates and drops this run's own databases (never any other)."""

    def __init__(self, admin_url: str) -> None:
        parts = urlsplit(admin_url)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            usage(f"refusing a non-loopback database host: {parts.hostname!r}")
        self.admin_url = admin_url
        self.prefix = f"recon_compare_{os.getpid()}"
        self.count = 0
        self.live: set[str] = set()
        atexit.register(self.drop_all)

    def dsn(self, name: str) -> str:
        parts = urlsplit(self.admin_url)
        return urlunsplit(parts._replace(path=f"/{name}"))

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10)

    @contextlib.contextmanager
    def fresh(self) -> Iterator[str]:
        self.count += 1
        name = f"{self.prefix}_{self.count}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.live.add(name)
        try:
            yield self.dsn(name)
        finally:
            self.drop(name)

    def wait_for_server(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.admin_url, connect_timeout=3) as conn:
                    conn.execute("SELECT 1")
                return True
            except psycopg.Error:
                if time.monotonic() > deadline:
                    return False
                time.sleep(1)

    def server_started(self) -> Any:
        try:
            with psycopg.connect(self.admin_url, connect_timeout=3) as conn:
                return conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        except psycopg.Error:
            return None

    def drop(self, name: str) -> None:
        with contextlib.suppress(psycopg.Error), self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            self.live.discard(name)

    def drop_all(self) -> None:
        for name in list(self.live):
            self.drop(name)


class WorkerProc:
    """A worker subprocess: stdin carries the start signal, stdout the 'ready' and 'result' lines."""

    def __init__(self, system: str, role: str, dsn: str, opts: dict[str, Any]) -> None:
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "_worker", system, role, dsn, json.dumps(opts)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, tag: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise CaseTimeout(f"no {tag!r} from the worker within {timeout:.0f} s") from None
            if line is None:
                self.proc.wait(timeout=5)
                raise CaseFailed(
                    f"worker exited ({self.proc.returncode}) before {tag!r}: {self.stderr_tail()}")
            if line == tag:
                return None
            if line.startswith(tag + " "):
                return json.loads(line[len(tag) + 1:])

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def stderr_tail(self) -> str:
        self.err.seek(0)
        lines = [ln for ln in self.err.read().splitlines() if ln.strip()]
        return " | ".join(lines[-3:])[-400:]

    def close(self, timeout: float = 10.0) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        finally:
            self.err.close()


def drain_case(system: str, dsn: str, n: int, processes: int, opts: dict[str, Any],
               timeout: float) -> dict[str, Any]:
    procs = [WorkerProc(_base(system), "drain", dsn, opts | {"timeout": timeout}) for _ in range(processes)]
    try:
        for p in procs:
            p.expect("ready", READY_TIMEOUT)
        t0 = time.monotonic()
        for p in procs:
            p.go()
        results = [p.expect("result", timeout + 15) for p in procs]
    finally:
        for p in procs:
            p.close()
    t_exit = time.monotonic() - t0  # includes each library's teardown and the process exit
    handled = sum(r["handled"] for r in results)
    elapsed = max(r["t_end"] for r in results) - t0
    problem = IMPLS[_base(system)].verify(dsn, n)
    if handled < n and elapsed >= timeout:
        raise CaseTimeout(f"{handled}/{n} handled within {timeout:.0f} s")
    if handled != n or problem:
        raise CaseFailed(f"{handled}/{n} handled; {problem or 'database state ok'}")
    figures = {"jobs_per_s": round(n / elapsed, 1), "seconds": round(elapsed, 3),
               "seconds_until_exit": round(t_exit, 3),
               "per_process": [r["handled"] for r in results],
               # CPU of the worker processes (all their threads) per job: less sensitive to a busy machine
               "worker_cpu_us_per_job": round(sum(r["cpu_s"] for r in results) / n * 1e6, 1)}
    if _base(system) == "recon":
        figures["stale_finishes"] = sum(r["stats"]["stale_finishes"] for r in results)
    return figures


def latency_case(system: str, dsn: str, samples: int, opts: dict[str, Any], timeout: float) -> dict[str, Any]:
    proc = WorkerProc(_base(system), "latency", dsn, opts | {"timeout": timeout, "samples": samples})
    try:
        proc.expect("ready", READY_TIMEOUT)
        time.sleep(0.5)  # idle
        producer = threading.Thread(target=IMPLS[_base(system)].produce_latency, args=(dsn, samples),
                                    daemon=True)
        producer.start()
        result = proc.expect("result", timeout + 15)
        producer.join(timeout=30)
    finally:
        proc.close()
    values = [v * 1000 for v in result["latencies"]]
    if len(values) < samples:
        raise CaseFailed(f"{len(values)}/{samples} latency samples arrived")
    return {"p50_ms": round(statistics.median(values), 2), "p99_ms": round(_percentile(values, 0.99), 2),
            "samples": len(values)}


def cases_for(system: str) -> list[tuple[str, int, int | None]]:
    """(case, processes, raw batch) in the order they run."""
    drains = ([(f"drain_{p}p_b{b}", p, b) for p in (1, 2) for b in RAW_BATCHES] if system == "raw"
              else [("drain_1p", 1, None), ("drain_2p", 2, None)])
    return [("enqueue_bulk", 0, None), ("enqueue_single", 0, None), *drains, ("latency", 0, None)]


def wanted(case: str, cases: list[str]) -> bool:
    """``--cases`` names enqueue_bulk, enqueue_single, drain (every drain case) and latency."""
    return (case.split("_")[0] if case.startswith("drain") else case) in cases


def is_slow(system: str, case: str) -> bool:
    """Cases that commit once or twice per job (~4 ms a durable commit here): drained with --slow-jobs."""
    system = _base(system)
    if system == "procrastinate":
        return case.startswith("drain")
    return system == "raw" and case.endswith("_b1")


def machine(dbs: Databases) -> dict[str, Any]:
    with dbs.admin() as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
        buffers = conn.execute("SHOW shared_buffers").fetchone()[0]
    versions = {}
    for dist in ("recon", "procrastinate", "pgqueuer", "psycopg", "asyncpg", "SQLAlchemy"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "postgresql": version, "synchronous_commit": sync, "shared_buffers": buffers,
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "versions": versions}


def run_case(dbs: Databases, impl: Any, system: str, case: str, processes: int, batch: int | None, n: int,
             case_opts: dict[str, Any], args: argparse.Namespace, base: dict[str, Any]) -> dict[str, Any]:
    """One case on a fresh database; a PostgreSQL restart meanwhile (other people's chaos tests share the
    server) makes it "interrupted", not a failure of the system under test."""
    if not dbs.wait_for_server(120):
        return base | {"status": "failed", "error": "PostgreSQL unreachable for 120 s before the case"}
    server_started = dbs.server_started()
    try:
        with dbs.fresh() as dsn:
            impl.install(dsn)
            if case == "latency":
                figures = latency_case(system, dsn, args.latency_samples, case_opts, args.timeout)
            elif case in ("enqueue_bulk", "enqueue_single"):
                seconds = getattr(impl, case)(dsn, n)
                figures = {"jobs_per_s": round(n / seconds, 1), "seconds": round(seconds, 3)}
            else:
                impl.enqueue_bulk(dsn, n)
                figures = drain_case(system, dsn, n, processes, case_opts, args.timeout)
                figures |= {"processes": processes, "concurrency": args.concurrency}
                if batch:
                    figures["batch"] = batch
        rec = base | {"status": "ok"} | figures
    except CaseTimeout as exc:
        rec = base | {"status": "timeout", "error": str(exc)}
    except Exception as exc:  # a failing system is a result, not a crash
        rec = base | {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:500]}
    dbs.wait_for_server(120)
    if dbs.server_started() != server_started:
        rec = base | {"status": "interrupted", "error": "PostgreSQL restarted during the case",
                      "was": {k: v for k, v in rec.items() if k not in base}}
    return rec


def run_all(args: argparse.Namespace, emit: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    dbs = Databases(args.admin_url)
    info = machine(dbs)
    emit({"machine": info})
    opts = {"concurrency": args.concurrency, "procrastinate_pool": args.procrastinate_pool,
            "recon_batch": args.recon_batch, "recon_prefetch": args.recon_prefetch}
    records: list[dict[str, Any]] = []
    started = time.monotonic()
    systems = list(args.systems)
    for run in range(1, args.repeats + 1):
        shift = (run - 1) % len(systems)
        order = systems[shift:] + systems[:shift]  # rotate the order from run to run: spread the noise
        for system in order:
            impl = IMPLS[_base(system)]
            for case, processes, batch in cases_for(system):
                if not wanted(case, args.cases):
                    continue
                n = args.slow_jobs if args.slow_jobs and is_slow(system, case) else args.jobs
                if case == "enqueue_single":
                    n = args.single_jobs
                base = {"system": system, "case": case, "run": run, "jobs": n}
                if time.monotonic() - started > args.budget:
                    rec = base | {"status": "skipped", "error": f"time budget of {args.budget:.0f} s spent"}
                    records.append(rec)
                    emit(rec)
                    continue
                case_opts = opts | _variant_opts(system) | ({"raw_batch": batch} if batch else {})
                for attempt in (1, 2):
                    rec = run_case(dbs, impl, system, case, processes, batch, n, case_opts, args, base)
                    over_budget = time.monotonic() - started > args.budget
                    if rec["status"] != "interrupted" or attempt == 2 or over_budget:
                        break
                    emit(rec | {"retried": True})  # the server restarted under us (not the system's doing)
                records.append(rec)
                emit(rec)
    return records


# --- summary ------------------------------------------------------------------------------------------------

def _median(records: list[dict[str, Any]], system: str, case: str, key: str) -> tuple[float | None, str]:
    rows = [r for r in records if r["system"] == system and r["case"] == case]
    ok = [r[key] for r in rows if r.get("status") == "ok"]
    if not rows:
        return None, "-"
    if not ok:
        return None, rows[-1].get("status", "failed")
    note = "" if len(ok) == len(rows) else f" ({len(ok)}/{len(rows)} ok)"
    return statistics.median(ok), note


def _fmt(value: float | None, note: str, unit: str = "") -> str:
    if value is None:
        return note
    return f"{value:,.0f}{unit}{note}"


def summarize(records: list[dict[str, Any]], args: argparse.Namespace) -> tuple[str, list[str]]:
    header = ("| system | bulk enqueue (jobs/s) | single enqueue (jobs/s) | drain, 1 process (jobs/s) "
              "| drain, 2 processes (jobs/s) | enqueue-to-start p50 / p99 (ms) | worker CPU per job, 1 process (µs) |")
    lines = [header, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def cpu(system: str, case: str) -> str:
        value, note = _median(records, system, case, "worker_cpu_us_per_job")
        return note if value is None else f"{value:,.0f}{note}"

    def latency(system: str) -> str:
        p50, note = _median(records, system, "latency", "p50_ms")
        p99, _ = _median(records, system, "latency", "p99_ms")
        return note if p50 is None else f"{p50:.1f} / {p99:.1f}{note}"

    def drain(system: str, case: str) -> str:
        text = _fmt(*_median(records, system, case, "jobs_per_s"))
        return text + " †" if args.slow_jobs and is_slow(system, case) else text

    def label(system: str) -> str:
        if _base(system) == "pgqueuer":
            return f"pgqueuer (batch_size {_variant_opts(system).get('pgqueuer_batch', args.concurrency)})"
        if _base(system) == "recon":
            batch = _variant_opts(system).get("recon_batch") or args.recon_batch or args.concurrency
            prefetch = batch if args.recon_prefetch is None or ":" in system else args.recon_prefetch
            return f"recon (concurrency {args.concurrency}, claim batch {batch}, prefetch {prefetch})"
        return f"{system} (concurrency {args.concurrency})"

    for system in [s for s in args.systems if s != "raw"]:
        cells = [label(system), _fmt(*_median(records, system, "enqueue_bulk", "jobs_per_s")),
                 _fmt(*_median(records, system, "enqueue_single", "jobs_per_s")), drain(system, "drain_1p"),
                 drain(system, "drain_2p"), latency(system),
                 cpu(system, "drain_1p")]
        lines.append("| " + " | ".join(cells) + " |")
    if "raw" in args.systems:
        for i, b in enumerate(RAW_BATCHES):
            enqueue = _fmt(*_median(records, "raw", "enqueue_bulk", "jobs_per_s")) + " (COPY)"
            single = _fmt(*_median(records, "raw", "enqueue_single", "jobs_per_s")) + " (INSERT)"
            cells = [f"raw SQL floor, batch {b}", enqueue if i == 0 else "", single if i == 0 else "",
                     drain("raw", f"drain_1p_b{b}"), drain("raw", f"drain_2p_b{b}"),
                     (latency("raw") + " (LISTEN, batch 10)") if i == 0 else "", cpu("raw", f"drain_1p_b{b}")]
            lines.append("| " + " | ".join(cells) + " |")

    if args.slow_jobs and args.slow_jobs != args.jobs:
        lines.append("")
        lines.append(f"† drained {args.slow_jobs:,} jobs, not {args.jobs:,}: these loops commit once or "
                     "twice per job, so their rate does not depend on the queue length, and the full count "
                     "would not fit the time budget")
    verdicts: list[str] = []
    if "recon" in args.systems:
        verdicts.extend(_enqueue_verdicts(records, args, label))
        for p in (1, 2):
            recon, _ = _median(records, "recon", f"drain_{p}p", "jobs_per_s")
            peers = {label(s): _median(records, s, f"drain_{p}p", "jobs_per_s")[0]
                     for s in args.systems if _base(s) in PEERS}
            peers = {s: v for s, v in peers.items() if v is not None}
            raws = {b: _median(records, "raw", f"drain_{p}p_b{b}", "jobs_per_s")[0] for b in RAW_BATCHES}
            raws = {b: v for b, v in raws.items() if v is not None}
            if recon is None:
                if wanted("drain", args.cases):
                    verdicts.append(f"drain {p}p: recon has no successful run")
                continue
            parts = [f"drain {p}p: recon {recon:,.0f} jobs/s"]
            if peers:
                best = max(peers, key=lambda s: peers[s])
                ratio = recon / peers[best]
                parts.append(f"best peer {best} {peers[best]:,.0f} ({ratio:.2f}x) "
                             f"-> {'holds' if ratio >= 1.5 else 'MISSED'} (>= 1.5x)")
            if raws:
                b = max(raws, key=lambda k: raws[k])
                ratio = recon / raws[b]
                parts.append(f"best raw floor (batch {b}) {raws[b]:,.0f} -> {ratio:.0%} of it, "
                             f"{'holds' if ratio >= 0.8 else 'MISSED'} (>= 80 %)")
            verdicts.append("; ".join(parts))
            for variant in [s for s in args.systems if _base(s) == "recon" and s != "recon"]:
                rate = _median(records, variant, f"drain_{p}p", "jobs_per_s")[0]
                if rate is not None and raws:
                    b = max(raws, key=lambda k: raws[k])
                    verdicts.append(f"drain {p}p, for information: {label(variant)} {rate:,.0f} jobs/s, "
                                    f"{rate / raws[b]:.0%} of the floor")
    return "\n".join(lines), verdicts


def _enqueue_verdicts(records: list[dict[str, Any]], args: argparse.Namespace,
                      label: Callable[[str], str]) -> list[str]:
    """Single enqueue >= the best peer's and >= 80 % of the raw floor's; bulk enqueue >= the best peer's."""
    out: list[str] = []
    for case, floor_share in (("enqueue_single", 0.8), ("enqueue_bulk", None)):
        recon, _ = _median(records, "recon", case, "jobs_per_s")
        if recon is None:
            continue
        peers = {label(s): _median(records, s, case, "jobs_per_s")[0] for s in args.systems if _base(s) in PEERS}
        peers = {s: v for s, v in peers.items() if v is not None}
        parts = [f"{case}: recon {recon:,.0f} jobs/s"]
        if peers:
            best = max(peers, key=lambda s: peers[s])
            parts.append(f"best peer {best} {peers[best]:,.0f} ({recon / peers[best]:.2f}x) "
                         f"-> {'holds' if recon >= peers[best] else 'MISSED'}")
        raw, _ = _median(records, "raw", case, "jobs_per_s")
        if floor_share is not None and raw:
            parts.append(f"raw floor {raw:,.0f} -> {recon / raw:.0%} of it, "
                         f"{'holds' if recon >= floor_share * raw else 'MISSED'} (>= {floor_share:.0%})")
        out.append("; ".join(parts))
    return out


# --- entry points -------------------------------------------------------------------------------------------

def worker_main(argv: list[str]) -> None:
    system, role, dsn, opts = argv[0], argv[1], argv[2], json.loads(argv[3])
    IMPLS[system].worker(role, dsn, opts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slow-jobs", type=int, default=2_000,
                        help="jobs for the drains that commit per job (procrastinate, raw batch 1); 0: all")
    parser.add_argument("--single-jobs", type=int, default=2_000,
                        help="jobs of the single-enqueue case (one library call each)")
    parser.add_argument("--cases", default="enqueue_bulk,enqueue_single,drain,latency",
                        type=lambda s: [x for x in s.split(",") if x],
                        help="which cases to run: enqueue_bulk, enqueue_single, drain, latency")
    parser.add_argument("--concurrency", type=int, default=64,
                        help="recon handler threads / procrastinate sub-workers per worker process")
    parser.add_argument("--recon-batch", type=int, default=0,
                        help="recon's claim_batch_size (default: --concurrency)")
    parser.add_argument("--recon-prefetch", type=int, default=None,
                        help="recon's prefetch (default: the claim batch)")
    parser.add_argument("--procrastinate-pool", type=int, default=0,
                        help="procrastinate pool max_size (default: psycopg_pool's, 4)")
    parser.add_argument("--systems", default=DEFAULT_SYSTEMS, type=lambda s: [x for x in s.split(",") if x],
                        help=f"comma-separated, from {', '.join(SYSTEMS)}; pgqueuer:B sets its batch_size, "
                        f"recon:B its claim batch and prefetch (default: {DEFAULT_SYSTEMS})")
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per drain or latency case")
    parser.add_argument("--budget", type=float, default=14 * 60.0,
                        help="seconds for the whole run; cases past it are reported as skipped")
    parser.add_argument("--admin-url", default=ADMIN_URL)
    parser.add_argument("--markdown", help="also write the machine, the command and the table to this file")
    args = parser.parse_args()
    unknown = [s for s in args.systems if _base(s) not in SYSTEMS
               or (":" in s and not (_base(s) in ("pgqueuer", "recon") and s.split(":")[1].isdigit()))]
    if unknown:
        parser.error(f"unknown systems: {', '.join(unknown)}")

    def emit(rec: dict[str, Any]) -> None:
        print(json.dumps(rec), flush=True)

    records = run_all(args, emit)
    table, verdicts = summarize(records, args)
    print()
    print(f"medians of {args.repeats} runs, {args.jobs:,} no-op jobs")
    print(table)
    print()
    for v in verdicts:
        print(v)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table + "\n\n" + "\n".join(f"- {v}" for v in verdicts) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        worker_main(sys.argv[2:])
    else:
        main()
