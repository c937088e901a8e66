from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from recon import (
    Cancel,
    Client,
    Complete,
    Dead,
    Handlers,
    Job,
    JobSpec,
    JobState,
    JobStore,
    Lease,
    Retry,
    RetryPolicy,
    Settings,
    Snooze,
    Worker,
)
from recon.config import EngineConfig, QueueConfig
from recon.db.database import Database
from recon.db.listener import make_listener

FAST = EngineConfig(lease_ttl_seconds=30, heartbeat_interval_seconds=5, watcher_interval_seconds=5,
                    poll_interval_seconds=0.02, concurrency=4, drain_timeout_seconds=5)


def run_burst(db: Database, handlers: Handlers, config: EngineConfig = FAST, **kw: Any) -> Worker:
    settings = Settings()
    worker = Worker(JobStore(db), handlers, config=config, policy=kw.pop("policy", RetryPolicy(settings.retry)), **kw)
    worker.run(burst=True)
    return worker


def handlers_with(kind: str, func: Callable[[Job, Lease], Any]) -> Handlers:
    h = Handlers()
    h.register(kind, func)
    return h


def test_worker__runs_every_job_once_with_history(db: Database) -> None:
    store = JobStore(db)
    ids = Client(store, Settings()).enqueue_many([JobSpec("k", {"i": i}) for i in range(300)])
    seen: list[int] = []
    lock = threading.Lock()

    def handle(job: Job, lease: Lease) -> None:
        with lock:
            seen.append(job.payload["i"])

    worker = run_burst(db, handlers_with("k", handle))
    assert sorted(seen) == list(range(300))
    assert worker.stats.outcomes["succeeded"] == 300 and worker.stats.stale_finishes == 0
    assert all(store.get(i).state is JobState.SUCCEEDED for i in ids[:20])  # type: ignore[union-attr]
    [attempt] = store.attempts(ids[0])
    assert attempt.outcome == "succeeded" and attempt.worker == worker.worker_id and attempt.started_at


def test_worker__retry_uses_policy_backoff_then_dead_at_max_attempts(db: Database) -> None:
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("flaky", max_attempts=3)
    policy = RetryPolicy(Settings().retry, rng=random.Random(7))
    handlers = handlers_with("flaky", lambda job, lease: Retry(error_kind="network", error="connect refused"))
    before = datetime.now(UTC)
    run_burst(db, handlers, policy=policy)
    job = store.get(job_id)
    assert job is not None and job.state is JobState.RETRYABLE and job.attempts == 1
    # full jitter: 0 <= delay <= base * 2^0 = 1s for the network kind
    assert before - timedelta(seconds=1) <= job.run_after <= datetime.now(UTC) + timedelta(seconds=1)
    assert (job.last_error_kind, job.last_error) == ("network", "connect refused")
    for _ in range(2):
        with db.begin() as conn:  # skip the wait
            conn.execute(sa.text("UPDATE jobs SET run_after = created_at WHERE id = :id"), {"id": job_id})
        run_burst(db, handlers, policy=policy)
    job = store.get(job_id)
    assert job is not None and job.state is JobState.DEAD and job.attempts == 3 and job.finished_at
    assert [a.outcome for a in store.attempts(job_id)] == ["retried", "retried", "dead"]


def test_worker__retry_after_wins_over_backoff(db: Database) -> None:
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("limited")
    run_burst(db, handlers_with("limited", lambda _job, _lease: Retry(error_kind="rate_limited", error="429",
                                                              retry_after=120)))
    job = store.get(job_id)
    assert job is not None and job.state is JobState.RETRYABLE
    wait = (job.run_after - job.attempted_at).total_seconds()  # type: ignore[operator]
    assert 119 <= wait <= 121


def test_worker__snooze_does_not_spend_an_attempt(db: Database) -> None:
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("later", max_attempts=1)
    run_burst(db, handlers_with("later", lambda _job, _lease: Snooze(timedelta(minutes=5), reason="psp pending")))
    job = store.get(job_id)
    assert job is not None and job.state is JobState.PENDING and job.attempts == 1 and job.max_attempts == 2
    assert [a.outcome for a in store.attempts(job_id)] == ["snoozed"]


def test_worker__dead_outcome_and_unknown_kind_go_to_dead(db: Database) -> None:
    store = JobStore(db)
    client = Client(store, Settings())
    bad = client.enqueue("invalid")
    unknown = client.enqueue("nobody-handles-this")
    run_burst(db, handlers_with("invalid", lambda _job, _lease: Dead(error_kind="validation", error="amount < 0")))
    assert store.get(bad).state is JobState.DEAD  # type: ignore[union-attr]
    job = store.get(unknown)
    assert job is not None and job.state is JobState.DEAD and job.last_error_kind == "unknown_kind"
    assert "'nobody-handles-this'" in (job.last_error or "")


def test_worker__unclassified_exception_is_a_retryable_bug(db: Database) -> None:
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("boom")

    def boom(job: Job, lease: Lease) -> None:
        raise ZeroDivisionError("division by zero")

    # a fixed jitter (0.32 s): a delay near zero would let the burst claim the retry again before it exits
    policy = RetryPolicy(Settings().retry, rng=random.Random(7))
    worker = run_burst(db, handlers_with("boom", boom), policy=policy)
    job = store.get(job_id)
    assert job is not None and job.state is JobState.RETRYABLE and job.last_error_kind == "bug"
    assert "ZeroDivisionError" in (job.last_error or "")
    assert worker.stats.outcomes["retried"] == 1


def test_worker__cancel_requested_reaches_a_running_handler(db: Database) -> None:
    store = JobStore(db)
    client = Client(store, Settings())
    job_id = client.enqueue("long")
    started = threading.Event()

    def long(job: Job, lease: Lease) -> Cancel | Complete:
        started.set()
        if lease.wait(10):
            return Cancel("told to stop")
        return Complete()

    config = replace(FAST, heartbeat_interval_seconds=0.05)
    t = threading.Thread(target=run_burst, args=(db, handlers_with("long", long), config))
    t.start()
    assert started.wait(5)
    assert client.cancel(job_id) == "requested"
    t.join(10)
    assert store.get(job_id).state is JobState.CANCELED  # type: ignore[union-attr]


def test_worker__write_commits_with_finish(db: Database) -> None:
    store = JobStore(db)
    with db.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS side_effects (job_id INTEGER)"))
        conn.execute(sa.text("DELETE FROM side_effects"))
    job_id = Client(store, Settings()).enqueue("w")

    def write(conn: sa.Connection) -> None:
        conn.execute(sa.text("INSERT INTO side_effects VALUES (:id)"), {"id": job_id})

    run_burst(db, handlers_with("w", lambda _job, _lease: Complete(write=write)))
    with db.begin() as conn:
        assert conn.execute(sa.text("SELECT job_id FROM side_effects")).scalars().all() == [job_id]
        conn.execute(sa.text("DROP TABLE side_effects"))
    assert store.get(job_id).state is JobState.SUCCEEDED  # type: ignore[union-attr]


def test_worker__lost_lease_result_is_dropped(db: Database) -> None:
    """A handler whose lease expired and was re-claimed finishes into nothing (a stale finish)."""
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("slow")
    stolen = threading.Event()

    def slow(job: Job, lease: Lease) -> Complete:
        with db.begin() as conn:  # simulate a pause past the TTL: the lease is expired and re-claimed
            conn.execute(sa.text("UPDATE jobs SET lease_until = created_at WHERE id = :id"), {"id": job.id})
        store.rescue_expired(limit=10)
        assert store.claim(worker="thief", queues=["default"], n=1, ttl=30)
        stolen.set()
        return Complete()

    # one slot: the worker itself cannot re-claim the job in the moment between the rescue and the thief
    worker = run_burst(db, handlers_with("slow", slow), replace(FAST, concurrency=1))
    assert stolen.is_set()
    assert worker.stats.stale_finishes == 1 and worker.stats.outcomes["succeeded"] == 0
    job = store.get(job_id)
    assert job is not None and job.state is JobState.LEASED and job.lease_owner == "thief"


def test_worker__per_queue_concurrency_cap(db: Database) -> None:
    store = JobStore(db)
    Client(store, Settings()).enqueue_many([JobSpec("k", queue="psp") for _ in range(12)])
    running = 0
    peak = 0
    lock = threading.Lock()

    def handle(job: Job, lease: Lease) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1

    config = replace(FAST, concurrency=8)
    run_burst(db, handlers_with("k", handle), config, queues=["psp"], queue_caps={"psp": 2})
    assert peak == 2


def test_worker__graceful_stop_releases_jobs_past_the_drain_window(db: Database) -> None:
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("stuck")
    started = threading.Event()

    def stuck(job: Job, lease: Lease) -> None:
        started.set()
        time.sleep(3)

    worker = Worker(store, handlers_with("stuck", stuck), config=replace(FAST, drain_timeout_seconds=0.2),
                    policy=RetryPolicy(Settings().retry))
    t = threading.Thread(target=worker.run)
    t.start()
    assert started.wait(5)
    worker.request_stop()
    t.join(5)
    assert not t.is_alive()
    job = store.get(job_id)
    assert job is not None and job.state is JobState.RUNNABLE and job.lease_owner is None
    assert job.max_attempts == Settings().engine.default_max_attempts + 1  # the attempt is not spent
    assert [a.outcome for a in store.attempts(job_id)] == ["released"]
    assert worker.stats.released == 1


def test_worker__wakes_on_enqueue(db: Database) -> None:
    """PostgreSQL wakes idle workers with NOTIFY; SQLite polls. Either way a new job starts promptly."""
    store = JobStore(db)
    started = threading.Event()
    config = replace(FAST, poll_interval_seconds=0.05 if not db.is_postgresql else 30)
    worker = Worker(store, handlers_with("ping", lambda _job, _lease: started.set()), config=config,
                    policy=RetryPolicy(Settings().retry), wakeup_func=make_listener(db))
    t = threading.Thread(target=worker.run)
    t.start()
    time.sleep(0.3)  # idle, listening
    deadline = time.monotonic() + 10
    while db.is_postgresql and not worker.waiting and time.monotonic() < deadline:
        time.sleep(0.01)  # producers NOTIFY it from now on
    Client(store, Settings()).enqueue("ping")
    assert started.wait(5)
    worker.request_stop()
    t.join(5)


def test_worker__queue_config_cap_is_read_from_settings(db: Database) -> None:
    settings = replace(Settings(), queues={"default": QueueConfig(concurrency=1)})
    assert settings.queue("default").concurrency == 1
    assert settings.queue("unknown").max_depth == 0


@pytest.mark.parametrize("outcome", [None, Complete()])
def test_worker__none_means_complete(db: Database, outcome: Complete | None) -> None:
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("k")
    run_burst(db, handlers_with("k", lambda _job, _lease: outcome))
    assert store.get(job_id).state is JobState.SUCCEEDED  # type: ignore[union-attr]


def test_worker__snoozes_do_not_spend_the_error_kind_budget(db: Database) -> None:
    """A job snoozed many times (a paused PSP) still gets its full retry budget for real errors."""
    from recon.config import BackoffConfig

    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("waits", max_attempts=50)
    calls = {"n": 0}

    def waits(job: Job, lease: Lease) -> Snooze | Retry:
        calls["n"] += 1
        if calls["n"] <= 6:
            return Snooze(timedelta(0), reason="psp paused")
        return Retry(error_kind="network", error="connect refused")

    policy = RetryPolicy({"default": BackoffConfig(0.01, 0.01, 10), "network": BackoffConfig(0.01, 0.01, 3)})
    for _ in range(20):
        run_burst(db, handlers_with("waits", waits), policy=policy)
        with db.begin() as conn:
            conn.execute(sa.text("UPDATE jobs SET run_after = created_at WHERE id = :id"), {"id": job_id})
        if store.get(job_id).state is JobState.DEAD:  # type: ignore[union-attr]
            break
    job = store.get(job_id)
    assert job is not None and job.state is JobState.DEAD and job.free_attempts == 6
    outcomes = [a.outcome for a in store.attempts(job_id)]
    assert outcomes == ["snoozed"] * 6 + ["retried", "retried", "dead"]  # three network attempts, as budgeted
