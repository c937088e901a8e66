"""The heartbeat never waits for the pool: a worker's handler threads (up to ``max_concurrency`` of them when it
sizes itself) and its other loops share the pool, and a beat that queued behind them for a connection (for up
to the pool's 30 s timeout) let leases expire under load, so another worker ran the job again and this one's
finish was a stale finish. The heartbeat has a connection of its own, taken when the worker starts."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from recon import Client, Job, JobStore, Lease, RetryPolicy, Settings, Worker
from recon.db.database import Database, connect
from tests.integration.test_worker import FAST, handlers_with


def heartbeat_at(db: Database, job_id: int) -> Any:
    with db.begin() as conn:
        return conn.execute(sa.text("SELECT heartbeat_at FROM jobs WHERE id = :id"), {"id": job_id}).scalar_one()


def test_heartbeat__extends_leases_while_handlers_hold_every_pooled_connection(db: Database) -> None:
    worker_db = connect(db.url.render_as_string(hide_password=False), pool_size=2)  # 2 + 2 overflow
    store = JobStore(worker_db)
    job_id = Client(JobStore(db), Settings()).enqueue("hold")
    started, release = threading.Event(), threading.Event()

    def hold(job: Job, lease: Lease) -> None:
        started.set()
        release.wait(30)

    config = replace(FAST, heartbeat_interval_seconds=0.1, concurrency=1, autosize=False)
    worker = Worker(
        store,
        handlers_with("hold", hold),
        config=config,
        policy=RetryPolicy(Settings().retry),
        run_watcher=False,
        presence_interval=3600,
    )
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    held: list[Any] = []
    try:
        assert started.wait(10)
        pool = worker_db.engine.pool
        while pool.checkedout() < pool.size() + pool._max_overflow:  # type: ignore[attr-defined]
            held.append(worker_db.engine.raw_connection())  # what busy handler threads would hold
        before = heartbeat_at(db, job_id)
        deadline = time.monotonic() + 10  # a liveness bound: the beats come every 0.1 s
        while heartbeat_at(db, job_id) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert heartbeat_at(db, job_id) != before, "no heartbeat while the pool was exhausted"
    finally:
        for conn in held:
            conn.close()
        release.set()
        worker.request_stop()
        t.join(15)
    assert not t.is_alive()
    assert worker.stats.outcomes["succeeded"] == 1 and worker.stats.leases_lost == 0
    worker_db.dispose()
