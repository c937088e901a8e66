from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from recon import Client, FixedClock, JobSpec, JobState, JobStore, QueueFull, Settings, UnknownJobKind, UsageError
from recon.config import QueueConfig
from recon.db.database import Database
from recon.rows import Finish

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def make_client(db: Database, **queues: QueueConfig) -> Client:
    settings = Settings()
    if queues:
        settings = replace(settings, queues={**settings.queues, **queues})
    return Client(JobStore(db), settings)


def test_enqueue_many__one_id_per_spec_in_order(db: Database) -> None:
    client = make_client(db)
    ids = client.enqueue_many([JobSpec(kind="k", payload={"i": i}) for i in range(7000)])
    assert len(ids) == 7000
    assert ids == sorted(ids) and len(set(ids)) == 7000
    assert client.get(ids[1234]).payload == {"i": 1234}


def test_enqueue__fields_are_stored(db: Database) -> None:
    db.clock = FixedClock(T0)
    client = make_client(db)
    job_id = client.enqueue("charge", {"amount": 1000, "currency": "EUR"}, queue="payments", priority=5,
                            max_attempts=3, tenant="merchant-1", delay=timedelta(minutes=5))
    job = client.get(job_id)
    assert (job.queue, job.kind, job.priority, job.max_attempts, job.tenant) == ("payments", "charge", 5, 3,
                                                                                 "merchant-1")
    assert job.payload == {"amount": 1000, "currency": "EUR"}
    assert job.state is JobState.PENDING  # scheduled for later
    assert job.run_after == T0 + timedelta(minutes=5)
    assert job.attempts == 0 and job.lease_owner is None
    now_id = client.enqueue("charge", {})
    assert client.get(now_id).state is JobState.RUNNABLE


def test_enqueue__unique_key_returns_the_unfinished_job(db: Database) -> None:
    client = make_client(db)
    first = client.enqueue("reconcile", {"payment": 1}, unique_key="payment:1")
    again = client.enqueue("reconcile", {"payment": 1}, unique_key="payment:1")
    batch = client.enqueue_many([JobSpec("reconcile", unique_key="payment:1"),
                                 JobSpec("reconcile", unique_key="payment:2"),
                                 JobSpec("reconcile", unique_key="payment:2")])
    assert again == first
    assert batch[0] == first and batch[1] == batch[2] and batch[1] != first
    # once the job is finished, the key is free again
    store = JobStore(db)
    [job] = [j for j in store.claim(worker="w", queues=["default"], n=10, ttl=30) if j.id == first]
    store.finish(worker="w", finishes=[Finish(id=first, attempt=job.attempts, state="succeeded", outcome="succeeded")])
    assert client.enqueue("reconcile", {}, unique_key="payment:1") != first


def test_enqueue__queue_full_rejects_the_whole_batch(db: Database) -> None:
    client = make_client(db, small=QueueConfig(max_depth=3))
    client.enqueue_many([JobSpec("k", queue="small"), JobSpec("k", queue="small")])
    with pytest.raises(QueueFull, match="'small' is full"):
        client.enqueue_many([JobSpec("k", queue="small"), JobSpec("k", queue="small")])
    assert len(JobStore(db).list_jobs(queue="small")) == 2  # nothing half-written
    client.enqueue("k", queue="small")
    with pytest.raises(QueueFull):
        client.enqueue("k", queue="small")
    client.enqueue("k", queue="other")  # other queues are not limited


def test_enqueue__payload_not_json_serialisable_is_a_usage_error(db: Database) -> None:
    client = make_client(db)
    with pytest.raises(UsageError, match=r"job #2 \(kind 'k'\): payload is not JSON-serialisable"):
        client.enqueue_many([JobSpec("k", {"ok": 1}), JobSpec("k", {"when": datetime.now(UTC)})])
    with pytest.raises(UsageError, match="payload must be a JSON object"):
        client.enqueue("k", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="not JSON-serialisable"):
        client.enqueue("k", {"x": float("nan")})
    assert JobStore(db).list_jobs() == []


def test_enqueue__unknown_kind_is_rejected_when_kinds_are_known(db: Database) -> None:
    client = Client(JobStore(db), Settings(), known_kinds=["charge"])
    with pytest.raises(UnknownJobKind, match="'refund'"):
        client.enqueue("refund", {})
    client.enqueue("charge", {})


def test_cancel__runnable_at_once_leased_through_heartbeat(db: Database) -> None:
    client = make_client(db)
    store = JobStore(db)
    a = client.enqueue("k")
    assert client.cancel(a) == "canceled"
    assert client.get(a).state is JobState.CANCELED
    b = client.enqueue("k")
    [job] = store.claim(worker="w", queues=["default"], n=1, ttl=30)
    assert job.id == b
    assert client.cancel(b) == "requested"
    assert store.extend_leases(worker="w", leases=[(b, job.attempts)], ttl=30) == {b: True}
    with pytest.raises(Exception, match="only unfinished jobs"):
        client.cancel(a)


def test_retry__dead_job_becomes_runnable_with_one_more_attempt(db: Database) -> None:
    client = make_client(db)
    store = JobStore(db)
    job_id = client.enqueue("k", max_attempts=1)
    [job] = store.claim(worker="w", queues=["default"], n=1, ttl=30)
    store.finish(worker="w", finishes=[Finish(id=job_id, attempt=1, state="dead", outcome="dead",
                                              error_kind="validation", error="bad")])
    client.retry(job_id)
    job = client.get(job_id)
    assert job.state is JobState.RUNNABLE and job.max_attempts == 2 and job.attempts == 1
    [again] = store.claim(worker="w", queues=["default"], n=1, ttl=30)
    assert again.attempts == 2  # the fencing token keeps growing
