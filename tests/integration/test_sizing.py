"""A worker that sizes itself (recon.engine.sizing), on both databases: a slow handler never lets a prefetched
job wait past its lease, busy threads grow up to the setting and no further, and every job runs once. No timing
goal: the assertions are about leases, counts and bounds (the rule's figures are tests/unit/test_sizing.py's)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import UTC, datetime

import sqlalchemy as sa

from recon import Client, Handlers, Job, JobSpec, JobState, JobStore, Lease, RetryPolicy, Settings, Worker
from recon.config import EngineConfig
from recon.db.database import Database

BASE = EngineConfig(lease_ttl_seconds=3, heartbeat_interval_seconds=1, watcher_interval_seconds=1,
                    poll_interval_seconds=0.02, drain_timeout_seconds=5, autosize=True)


def _run(db: Database, config: EngineConfig, n: int, handler: object) -> tuple[Worker, list[int]]:
    store = JobStore(db)
    ids = Client(store, Settings()).enqueue_many([JobSpec("slow", {"i": i}) for i in range(n)])
    handlers = Handlers()
    handlers.register("slow", handler)  # type: ignore[arg-type]
    worker = Worker(store, handlers, config=config, policy=RetryPolicy(Settings().retry))
    t = threading.Thread(target=worker.run, kwargs={"burst": True})
    t.start()
    t.join(60)
    assert not t.is_alive(), "the burst did not end within 60 s"
    return worker, ids


def _all_succeeded_once(db: Database, worker: Worker, ids: list[int]) -> None:
    store = JobStore(db)
    for i in ids:
        job = store.get(i)
        assert job is not None and job.state is JobState.SUCCEEDED and job.attempts == 1, job
    stats = worker.stats
    assert stats.outcomes["succeeded"] == len(ids)
    assert (stats.stale_finishes, stats.leases_lost, stats.lease_expirations, stats.released) == (0, 0, 0, 0)


def test_sizing__a_slow_handler_never_lets_a_prefetched_job_wait_past_its_lease(db: Database) -> None:
    """One thread, claims of up to 50, 16 jobs of 0.2 s: claimed all at once they would wait up to 3 s, the whole
    TTL. The sizer starts without prefetch and then allows floor(1 x 0.75 s / 0.2 s) = 3 waiting jobs, so every
    job starts with most of the lease it was claimed with left, heartbeat or not."""
    config = replace(BASE, concurrency=1, max_concurrency=1, claim_batch_size=50, max_prefetch=50)
    left: list[float] = []

    def slow(job: Job, lease: Lease) -> None:
        assert job.lease_until is not None
        left.append((job.lease_until - datetime.now(UTC)).total_seconds())  # the lease as claimed, no beat
        time.sleep(0.2)

    worker, ids = _run(db, config, 16, slow)
    _all_succeeded_once(db, worker, ids)
    assert len(left) == 16
    assert min(left) > 1.0, sorted(left)[:3]  # at most 3 x 0.2 s of waiting (plus claim and thread hand-offs)
    sizing = worker.sizing
    assert sizing.concurrency == 1 and 1 <= sizing.prefetch <= 3, sizing


def test_sizing__busy_threads_grow_up_to_max_concurrency_and_no_further(db: Database) -> None:
    config = replace(BASE, concurrency=2, max_concurrency=8, claim_batch_size=16, max_prefetch=16)
    lock = threading.Lock()
    inside = [0]
    most = [0]

    def slow(job: Job, lease: Lease) -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        with lock:
            inside[0] -= 1

    worker, ids = _run(db, config, 300, slow)
    _all_succeeded_once(db, worker, ids)
    assert 2 < most[0] <= 8, most[0]  # grew past the first 2 threads, never past the most
    assert worker.sizer is not None and worker.sizer.changes >= 1


def test_sizing__off_keeps_the_settings(db: Database) -> None:
    config = replace(BASE, autosize=False, concurrency=3, claim_batch_size=7, prefetch=2)
    worker, ids = _run(db, config, 20, lambda job, lease: None)
    _all_succeeded_once(db, worker, ids)
    assert worker.sizer is None
    assert (worker.sizing.concurrency, worker.sizing.claim_batch, worker.sizing.prefetch) == (3, 7, 2)


def test_reading__a_read_takes_no_write_lock_on_sqlite_and_sees_committed_rows(db: Database) -> None:
    """The charge handler reads its payment through ``Database.reading``: on SQLite a reader must not wait for
    (nor hold up) a writer's transaction; on both databases it sees what was committed."""
    job_id = Client(JobStore(db), Settings()).enqueue("read-check", {})
    query = sa.text("SELECT priority FROM jobs WHERE id = :id")
    if db.is_postgresql:
        with db.reading() as conn:
            assert conn.execute(query, {"id": job_id}).scalar() == 0
        return
    with db.begin() as writer:  # holds SQLite's write lock (BEGIN IMMEDIATE) until the block ends
        writer.execute(sa.text("UPDATE jobs SET priority = 7 WHERE id = :id"), {"id": job_id})
        started = time.monotonic()
        with db.reading() as conn:  # would wait for the writer (busy_timeout 60 s) if it took the write lock
            seen = conn.execute(query, {"id": job_id}).scalar()
        assert seen == 0  # the writer's update is not committed yet: the reader sees the committed row
        assert time.monotonic() - started < 5
    with db.reading() as conn:
        assert conn.execute(query, {"id": job_id}).scalar() == 7
