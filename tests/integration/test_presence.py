"""Presence (recon.engine.presence) on its own: the worker's row in the workers table, its counters, the
presence loop, and failures that never stop the worker."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from recon import FixedClock, JobStore
from recon.db.database import Database
from recon.db.pool_store import PoolStore
from recon.engine.lease import Heartbeater, Lease
from recon.engine.observe import WorkerStats
from recon.engine.periodic import Periodic
from recon.engine.presence import Presence
from recon.engine.sizing import Sizing
from recon.engine.slots import Running, Slots
from recon.engine.watcher import Watcher
from recon.errors import DatabaseUnavailable, StoreError
from recon.pool_rows import WorkerRecord
from recon.rows import Job, JobState

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Counting:
    def snapshot(self) -> dict[str, Any]:
        return {"finished": {"k": 3}, "claimed": -1}  # the worker's own counters win over the observer's

    def job_finished(self, job: Job, *, outcome: str, error_kind: str | None, seconds: float) -> None:
        pass


def presence(db: Database, *, worker: str = "host:1:abc", observer: Any = None, interval: float = 5.0,
             pool: PoolStore | None = None) -> tuple[Presence, Slots, WorkerStats]:
    store = JobStore(db)
    slots = Slots(capacity=6, low_water=1, finish_backlog=10)
    stats = WorkerStats(claimed=7, released=2, stale_finishes=1)
    heartbeater = Heartbeater(store, worker=worker, ttl=30, leases_func=slots.leases)
    heartbeater.lost = 4
    watcher = Watcher(store)
    watcher.lease_expirations = 5
    p = Presence(pool or PoolStore(db), worker=worker, queues=["charges", "default"],
                 sizing_func=lambda: Sizing(4, 4, 0), slots=slots, stats=stats, heartbeater=heartbeater,
                 watcher=watcher, observer=observer, interval=interval)
    return p, slots, stats


def rows(db: Database) -> dict[str, WorkerRecord]:
    return {w.id: w for w in PoolStore(db).pool_snapshot(workers_within=None)["workers"]}


def test_presence__the_row_shows_slots_busy_slots_and_counters(db: Database) -> None:
    p, slots, stats = presence(db, observer=Counting())
    job = Job(1, "charges", "k", {}, JobState.LEASED, 0, T0, 1, 25, T0)
    slots.take([Running(job, Lease(None, 1, 1, "host:1:abc"))])  # type: ignore[arg-type]  # no store needed
    db.outage.failed(DatabaseUnavailable("database: connection refused"))  # an outage this process saw, over
    db.outage.succeeded()
    p.publish(start=True)
    row = rows(db)["host:1:abc"]
    assert (row.host, row.pid, row.queues, row.slots, row.busy_slots) == (
        socket.gethostname(), os.getpid(), ("charges", "default"), 4, 1)
    assert row.stopped_at is None
    outage_seconds = row.counters.pop("database_outage_seconds")
    waits = row.counters.pop("database_waits")  # tests/integration/test_database_waits.py tests the figures
    assert set(waits) == {"checkout", "write_lock"} and waits["write_lock"]["waits"] >= 0
    assert row.counters == {"finished": {"k": 3}, "claimed": 7, "released": 2, "stale_finishes": 1,
                            "leases_lost": 4, "lease_expirations": 5, "database_outages": 1,
                            "sizing": {"concurrency": 4, "claim_batch": 4, "prefetch": 0, "reason": "start",
                                       "ceiling": None, "seconds": 0.0}}
    assert 0 <= outage_seconds < 5
    stats.claimed = 9
    slots.release([job])
    p.publish(stopped=True)
    row = rows(db)["host:1:abc"]
    assert row.busy_slots == 0 and row.counters["claimed"] == 9 and row.stopped_at is not None
    assert p.snapshot(stopped=True).stopped and not p.snapshot().stopped


def test_presence__starting_forgets_workers_unseen_for_a_day(db: Database) -> None:
    db.clock = FixedClock(T0 - timedelta(days=2))
    presence(db, worker="gone:1:old")[0].publish()
    db.clock = FixedClock(T0 - timedelta(hours=1))
    presence(db, worker="recent:1:abc")[0].publish()
    db.clock = FixedClock(T0)
    p = presence(db, worker="new:1:abc")[0]
    p.publish()
    assert set(rows(db)) == {"gone:1:old", "recent:1:abc", "new:1:abc"}  # only a start prunes
    p.publish(start=True)
    assert set(rows(db)) == {"recent:1:abc", "new:1:abc"}


def test_presence__the_loop_publishes_every_interval_until_halted(db: Database) -> None:
    pool = PoolStore(db)
    calls: list[float] = []
    real_upsert = pool.upsert_worker

    def upsert(p: Any) -> None:
        calls.append(time.monotonic())
        real_upsert(p)

    pool.upsert_worker = upsert  # type: ignore[method-assign]
    p = presence(db, pool=pool, interval=0.02)[0]
    halt = threading.Event()
    t = Periodic("presence", lambda _stop: p.run_once(), interval=p.interval, immediate=False).start(halt)
    deadline = time.monotonic() + 5
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    halt.set()
    t.join(5)
    assert not t.is_alive() and len(calls) >= 3
    assert "host:1:abc" in rows(db)


def test_presence__a_failed_publish_is_logged_never_raised(db: Database, caplog: pytest.LogCaptureFixture) -> None:
    pool = PoolStore(db)

    def down(*args: Any, **kw: Any) -> None:
        raise StoreError("database: connection refused")

    pool.upsert_worker = down  # type: ignore[method-assign]
    pool.prune_workers = down  # type: ignore[method-assign]
    p = presence(db, pool=pool)[0]
    with caplog.at_level(logging.WARNING, logger="recon.engine.worker"):
        p.publish(start=True)
        p.publish(stopped=True)
    assert caplog.text.count("could not update this worker's row in the workers table") == 2
    assert rows(db) == {}
