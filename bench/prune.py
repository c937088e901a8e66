"""Pruning benchmark: claim throughput with 1,000,000 finished jobs in the table, and after pruning them.

Prints one JSON line per phase (figures, not a pass/fail test):
  drain_empty            jobs/s draining N fresh no-op jobs in-process (claim, run, fenced finish, history)
                         on an empty table
  bulk_insert            --finished finished jobs (95% succeeded, 4% dead, 1% canceled, one attempt row each)
                         written by one bench-only statement
  drain_after_finished   the same drain with those finished jobs (and their history) in the tables
  prune                  `recon jobs prune --older-than 0` (recon.engine.pruner, --batch jobs per
                         transaction): jobs/s deleted, with their attempt rows
  drain_after_prune      the same drain once they are gone, before any vacuum
  vacuum                 PostgreSQL only: VACUUM ANALYZE of jobs and job_attempts, what autovacuum does
                         within a minute of a million deletes (autovacuum_naptime)
  drain_after_vacuum     PostgreSQL only: the same drain after it

Every drain also reports the claim's plan and, on PostgreSQL, the pages one claim of 32 jobs reads
(claim_pages): the figure that machine noise does not move.

Usage: python bench/prune.py [--backend postgresql|sqlite] [--finished N] [--jobs N] [--rounds R]
                             [--concurrency C] [--batch B] [--timeout S]
PostgreSQL (default): a database of its own, created next to RECON_BENCH_DATABASE_URL's (default: the test
database's server) and dropped at the end. SQLite: a file in a temporary directory. Bounded: each drain and
the prune stop at --timeout seconds (reported as timed_out), and the whole run dumps its stacks and exits
a minute after its budget.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import platform
import statistics
import threading
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from scratch import scratch_database  # bench/scratch.py (run as python bench/NAME.py)

from recon import Client, Handlers, JobSpec, JobStore, RetryPolicy, Settings, Worker, connect
from recon.engine.pruner import Pruner

# Bench-only statements: finished jobs written in one statement, each with one attempt row. Their
# finished_at lies a day back, spread over a day, so the jobs_finished_at index is realistic.
BULK_PG = """
    WITH j AS (
        INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts,
                          created_at, attempted_at, heartbeat_at, finished_at, last_error_kind, last_error)
        SELECT 'default', 'bulk', '{"i": 0}'::jsonb, s.state, 0, s.t, 1, 10, s.t, s.t, s.t, s.t,
               CASE WHEN s.state = 'dead' THEN 'validation' END,
               CASE WHEN s.state = 'dead' THEN 'amount must be positive' END
        FROM (SELECT CASE WHEN g % 100 < 95 THEN 'succeeded' WHEN g % 100 < 99 THEN 'dead' ELSE 'canceled' END
                     AS state, now() - interval '2 days' + g * (interval '1 day' / :n) AS t
              FROM generate_series(1, :n) AS g) AS s
        RETURNING id, state, finished_at
    )
    INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_kind, error)
    SELECT id, 1, 'bench', finished_at, finished_at, state, NULL, NULL FROM j WHERE state <> 'canceled'
"""
# SQLite: timestamps are integer microseconds; :now is the process clock.
BULK_SQLITE_JOBS = """
    WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < :n)
    INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts, created_at,
                      attempted_at, heartbeat_at, finished_at, last_error_kind, last_error)
    SELECT 'default', 'bulk', '{"i": 0}', s.state, 0, s.t, 1, 10, s.t, s.t, s.t, s.t,
           CASE WHEN s.state = 'dead' THEN 'validation' END,
           CASE WHEN s.state = 'dead' THEN 'amount must be positive' END
    FROM (SELECT CASE WHEN i % 100 < 95 THEN 'succeeded' WHEN i % 100 < 99 THEN 'dead' ELSE 'canceled' END
                 AS state, :now - 172800000000 + i * (86400000000 / :n) AS t FROM g) AS s
"""
BULK_SQLITE_ATTEMPTS = """
    INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome)
    SELECT id, 1, 'bench', finished_at, finished_at, state FROM jobs
    WHERE kind = 'bulk' AND state <> 'canceled'
"""


def table_rows(url: str) -> dict[str, int]:
    db = connect(url)
    try:
        with db.begin() as conn:
            return {t: int(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one())
                    for t in ("jobs", "job_attempts")}
    finally:
        db.dispose()


# The claim's row selection (recon.db.lease_queries.job_claim_available), for EXPLAIN: how many pages one claim of
# 32 due jobs reads is the noise-free figure next to jobs/s (PostgreSQL; rolled back, so nothing is claimed).
CLAIM_PROBE_PG = """
    EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
    SELECT id FROM jobs
    WHERE state IN ('pending', 'runnable', 'retryable') AND queue IN ('default') AND run_after <= now()
      AND NOT cancel_requested
    ORDER BY priority DESC, run_after, id LIMIT 32 FOR UPDATE SKIP LOCKED
"""
CLAIM_PROBE_SQLITE = """
    EXPLAIN QUERY PLAN
    SELECT id FROM jobs
    WHERE state IN ('pending', 'runnable', 'retryable') AND queue IN ('default') AND run_after <= :now
      AND NOT cancel_requested
    ORDER BY priority DESC, run_after, id LIMIT 32
"""


def claim_probe(db: Any) -> dict[str, Any]:
    conn = db.engine.connect()
    try:
        if db.is_postgresql:
            [[plan]] = conn.execute(sa.text(CLAIM_PROBE_PG)).all()
            root = plan[0]["Plan"]
            return {"claim_pages": root["Shared Hit Blocks"] + root["Shared Read Blocks"],
                    "claim_ms": round(plan[0]["Execution Time"], 3), "claim_plan": _indexes(root)}
        rows = conn.execute(sa.text(CLAIM_PROBE_SQLITE), {"now": db.now_param()}).all()
        return {"claim_plan": [r[-1] for r in rows]}
    finally:
        conn.rollback()
        conn.close()


def _indexes(node: dict[str, Any]) -> list[str]:
    found = [f"{node['Node Type']} {node['Index Name']}"] if "Index Name" in node else []
    for child in node.get("Plans", []):
        found += _indexes(child)
    return found or [node["Node Type"]]


def drain(url: str, *, jobs: int, rounds: int, concurrency: int, timeout: float) -> dict[str, Any]:
    """``rounds`` times: enqueue ``jobs`` no-op jobs (untimed), then time a worker draining them."""
    settings = Settings()
    db = connect(url, pool_size=concurrency + 4)
    store = JobStore(db)
    handlers = Handlers()
    handlers.register("noop", lambda job, lease: None)
    config = replace(settings.engine, concurrency=concurrency, claim_batch_size=concurrency,
                     poll_interval_seconds=0.01)
    rates, timed_out, probe = [], False, {}
    try:
        for round_ in range(rounds):
            Client(store, settings).enqueue_many([JobSpec("noop", {"i": i}) for i in range(jobs)])
            if round_ == 0:
                probe = claim_probe(db)
            worker = Worker(store, handlers, config=config, policy=RetryPolicy(settings.retry),
                            run_watcher=False)
            timer = threading.Timer(timeout, worker.request_stop)
            timer.start()
            start = time.perf_counter()
            stats = worker.run(burst=True)
            elapsed = time.perf_counter() - start
            timer.cancel()
            done = stats.outcomes["succeeded"]
            timed_out = timed_out or done < jobs
            rates.append(round(done / elapsed, 1))
    finally:
        db.dispose()
    return {"jobs_per_s": round(statistics.median(rates), 1), "rounds_jobs_per_s": rates,
            "timed_out": timed_out, **probe}


def bulk_insert(url: str, backend: str, n: int) -> dict[str, Any]:
    db = connect(url)
    start = time.perf_counter()
    try:
        with db.begin() as conn:
            if backend == "postgresql":
                conn.execute(sa.text(BULK_PG), {"n": n})
            else:
                conn.execute(sa.text(BULK_SQLITE_JOBS), {"n": n, "now": db.now_param()})
                conn.execute(sa.text(BULK_SQLITE_ATTEMPTS))
        inserted = time.perf_counter() - start
        # what autovacuum (PostgreSQL) would do soon after a million inserts; SQLite: fresh statistics
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE" if backend == "postgresql" else "ANALYZE")
    finally:
        db.dispose()
    return {"rows": n, "seconds": round(inserted, 2), "rows_per_s": round(n / inserted, 1),
            "analyze_seconds": round(time.perf_counter() - start - inserted, 2)}


def vacuum(url: str) -> dict[str, Any]:
    db = connect(url)
    start = time.perf_counter()
    try:
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM (ANALYZE) jobs, job_attempts")
    finally:
        db.dispose()
    return {"seconds": round(time.perf_counter() - start, 2)}


def prune(url: str, *, batch: int, timeout: float) -> dict[str, Any]:
    db = connect(url)
    stop = threading.Event()
    timer = threading.Timer(timeout, stop.set)
    timer.start()
    try:
        result = Pruner(JobStore(db), older_than=timedelta(0), batch=batch).run_once(stop)
    finally:
        timer.cancel()
        db.dispose()
    return {"deleted": result.jobs, "attempts_deleted": result.attempts, "batches": result.batches,
            "batch": batch, "seconds": round(result.seconds, 2),
            "jobs_per_s": round(result.jobs / result.seconds, 1) if result.seconds else None,
            "timed_out": stop.is_set()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--backend", choices=["postgresql", "sqlite"], default="postgresql")
    add("--finished", type=int, default=1_000_000, help="finished jobs to accumulate and prune")
    add("--jobs", type=int, default=20_000, help="no-op jobs per drain round")
    add("--rounds", type=int, default=3, help="drain rounds per phase (the median is reported)")
    add("--concurrency", type=int, default=32, help="handler threads of the draining worker")
    add("--batch", type=int, default=1000, help="jobs per prune transaction")
    add("--timeout", type=float, default=600.0, help="seconds allowed per drain round and prune")
    args = parser.parse_args()
    # the last resort if a phase ignores its bound: dump every stack and exit
    faulthandler.dump_traceback_later(args.timeout * (4 * args.rounds + 2) + 600, exit=True)
    base = {"backend": args.backend, "cpus": os.cpu_count(), "python": platform.python_version()}

    def emit(case: str, url: str, figures: dict[str, Any]) -> None:
        print(json.dumps({"case": case, **base, **figures, "table_rows": table_rows(url)}), flush=True)

    with scratch_database(args.backend, "prune") as url:
        opts = {"jobs": args.jobs, "rounds": args.rounds, "concurrency": args.concurrency,
                "timeout": args.timeout}
        emit("drain_empty", url, {"jobs": args.jobs, **drain(url, **opts)})
        emit("bulk_insert", url, bulk_insert(url, args.backend, args.finished))
        emit("drain_after_finished", url, {"jobs": args.jobs, **drain(url, **opts)})
        emit("prune", url, prune(url, batch=args.batch, timeout=args.timeout))
        emit("drain_after_prune", url, {"jobs": args.jobs, **drain(url, **opts)})
        if args.backend == "postgresql":
            emit("vacuum", url, vacuum(url))
            emit("drain_after_vacuum", url, {"jobs": args.jobs, **drain(url, **opts)})
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
