from __future__ import annotations

import threading
from datetime import UTC, datetime

from recon import Client, FixedClock, JobSpec, JobState, JobStore, Settings, Watcher
from recon.db.database import Database

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_watcher__expired_lease_returns_to_queue_with_history(db: Database) -> None:
    db.clock = FixedClock(T0)
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("k")
    store.claim(worker="crashed", queues=["default"], n=1, ttl=30)
    watcher = Watcher(store)
    assert watcher.run_once().total == 0  # not expired yet
    db.clock.advance(31)  # type: ignore[attr-defined]
    result = watcher.run_once()
    assert result.retryable == [job_id] and watcher.lease_expirations == 1
    job = store.get(job_id)
    assert job is not None and job.state is JobState.RETRYABLE and job.lease_owner is None
    assert job.last_error_kind == "lease_expired" and "crashed" in (job.last_error or "")
    [attempt] = store.attempts(job_id)
    assert (attempt.attempt, attempt.worker, attempt.outcome) == (1, "crashed", "lease_expired")


def test_watcher__dead_at_max_attempts(db: Database) -> None:
    db.clock = FixedClock(T0)
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("poison", max_attempts=2)
    for _ in range(2):
        store.claim(worker="w", queues=["default"], n=1, ttl=5)
        db.clock.advance(6)  # type: ignore[attr-defined]
        Watcher(store).run_once()
    job = store.get(job_id)
    assert job is not None and job.state is JobState.DEAD and job.finished_at == T0.replace(second=12)
    assert [a.outcome for a in store.attempts(job_id)] == ["lease_expired", "lease_expired"]


def test_watcher__many_watchers_rescue_each_lease_once(db: Database) -> None:
    db.clock = FixedClock(T0)
    store = JobStore(db)
    Client(store, Settings()).enqueue_many([JobSpec("k") for _ in range(400)])
    while store.claim(worker="w", queues=["default"], n=100, ttl=5):
        pass
    db.clock.advance(6)  # type: ignore[attr-defined]
    results: list[int] = []
    lock = threading.Lock()

    def watch() -> None:
        r = Watcher(store, batch=50).run_once()
        with lock:
            results.extend(r.retryable)

    threads = [threading.Thread(target=watch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 400 and len(set(results)) == 400
    with db.begin() as conn:
        import sqlalchemy as sa

        assert conn.execute(sa.text("SELECT count(*) FROM job_attempts")).scalar_one() == 400


def test_watcher__canceled_job_with_expired_lease_ends_canceled(db: Database) -> None:
    db.clock = FixedClock(T0)
    store = JobStore(db)
    client = Client(store, Settings())
    job_id = client.enqueue("k")
    store.claim(worker="w", queues=["default"], n=1, ttl=5)
    assert client.cancel(job_id) == "requested"
    db.clock.advance(6)  # type: ignore[attr-defined]
    assert Watcher(store).run_once().canceled == [job_id]
    assert store.get(job_id).state is JobState.CANCELED  # type: ignore[union-attr]
