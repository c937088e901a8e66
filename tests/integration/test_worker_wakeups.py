"""The wake-up rule (docs/design.md): an enqueue NOTIFYs only when a worker of its queue waits for work. A
listening worker whose claims drain its queues is marked waiting and is woken at once; one whose claims come
back full is busy, and enqueues send it nothing (it claims again as its slots free)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import sqlalchemy as sa

from recon import Client, Job, JobStore, Lease, RetryPolicy, Settings, Worker
from recon.db.database import Database
from recon.db.listener import make_listener
from tests.integration.test_enqueue_path import Listener
from tests.integration.test_worker import FAST, handlers_with

#: one thread, claims of one, no prefetch, a poll far longer than the test: only a NOTIFY wakes it
ONE = replace(FAST, concurrency=1, claim_batch_size=1, prefetch=0, autosize=False, poll_interval_seconds=30)


def waiting_flag(db: Database, worker: Worker) -> bool:
    with db.begin() as conn:
        return bool(
            conn.execute(sa.text("SELECT waiting FROM workers WHERE id = :id"), {"id": worker.worker_id}).scalar_one()
        )


def wait_until(check: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout  # a liveness bound, not a speed
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_wakeups__an_idle_worker_is_notified_at_once_a_busy_one_gets_no_notify(db: Database) -> None:
    store = JobStore(db)
    client = Client(store, Settings())
    started: list[int] = []
    release = threading.Event()

    def block(job: Job, lease: Lease) -> None:
        started.append(job.id)
        if job.payload.get("block"):
            release.wait(30)

    worker = Worker(
        store,
        handlers_with("k", block),
        config=ONE,
        policy=RetryPolicy(Settings().retry),
        wakeup_func=make_listener(db),
        presence_interval=3600,
    )
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    listener = Listener(db) if db.is_postgresql else None
    try:
        if not db.is_postgresql:  # SQLite polls: nobody is notified, and no worker is ever marked waiting
            time.sleep(0.5)
            assert not worker.waiting and not waiting_flag(db, worker)
            return
        assert listener is not None
        wait_until(lambda: worker.waiting and waiting_flag(db, worker), "the idle worker to be marked waiting")
        first = client.enqueue("k", {"block": True})
        assert listener.drain() == ["default"]  # idle: notified
        wait_until(lambda: started == [first], "the idle worker to start the job (its poll is 30 s)")
        wait_until(lambda: not worker.waiting, "the full claim to mark it busy")
        assert not waiting_flag(db, worker)
        second = client.enqueue("k")
        assert listener.drain() == []  # busy: no NOTIFY
        release.set()  # the busy worker claims the second job as its slot frees, without a notification
        wait_until(lambda: started == [first, second], "the second job to start")
        wait_until(lambda: worker.waiting and waiting_flag(db, worker), "the drained worker to wait again")
        listener.drain(0.1)
        third = client.enqueue("k")
        assert listener.drain() == ["default"]
        wait_until(lambda: started == [first, second, third], "the third job to start")
    finally:
        release.set()
        if listener is not None:
            listener.close()
        worker.request_stop()
        t.join(15)
    assert not t.is_alive()
    assert not waiting_flag(db, worker)  # a stopped worker waits for nothing
