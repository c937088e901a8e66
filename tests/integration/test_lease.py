from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from recon import Client, FixedClock, JobSpec, JobState, JobStore, Settings
from recon.db.database import Database
from recon.engine.lease import Heartbeater, Lease
from recon.rows import Finish

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_claim__sets_lease_and_increments_attempts(db: Database) -> None:
    db.clock = FixedClock(T0)
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("k")
    [job] = store.claim(worker="host:1:abc", queues=["default"], n=5, ttl=30)
    assert job.id == job_id and job.state is JobState.LEASED and job.attempts == 1
    assert job.lease_owner == "host:1:abc" and job.lease_until == T0 + timedelta(seconds=30)
    assert store.claim(worker="other", queues=["default"], n=5, ttl=30) == []  # leased: not claimable


def test_claim__respects_priority_run_after_queue_and_batch_size(db: Database) -> None:
    db.clock = FixedClock(T0)
    store = JobStore(db)
    client = Client(store, Settings())
    low = client.enqueue("k", priority=0)
    high = client.enqueue("k", priority=10)
    later = client.enqueue("k", priority=99, delay=timedelta(minutes=1))
    other = client.enqueue("k", queue="other")
    first = store.claim(worker="w", queues=["default"], n=1, ttl=30)
    assert [j.id for j in first] == [high]
    assert [j.id for j in store.claim(worker="w", queues=["default"], n=10, ttl=30)] == [low]
    db.clock.advance(61)  # type: ignore[attr-defined]
    assert [j.id for j in store.claim(worker="w", queues=["default", "other"], n=10, ttl=30)] == [later, other]


def test_claim__the_claim_loops_connection_returns_jobs_in_claim_order(db: Database) -> None:
    """The claim loop's own connection (psycopg's or sqlite3's, rows ordered before they become Jobs): priority,
    then run_after, then id, as the pooled claim."""
    db.clock = FixedClock(T0)
    store = JobStore(db)
    client = Client(store, Settings())
    late = client.enqueue("k", priority=5, run_at=T0 - timedelta(seconds=1))
    early = client.enqueue("k", priority=5, run_at=T0 - timedelta(seconds=2))
    low = client.enqueue("k", priority=-1, run_at=T0 - timedelta(seconds=9))
    same = [client.enqueue("k", priority=0, run_at=T0 - timedelta(seconds=3)) for _ in range(3)]
    high = client.enqueue("k", priority=7)
    via = store.dedicated()
    try:
        jobs = store.claim(worker="w", queues=["default"], n=10, ttl=30, via=via)
    finally:
        via.close()
    assert [j.id for j in jobs] == [high, early, late, *same, low]
    assert all(j.state is JobState.LEASED and j.lease_owner == "w" and j.attempts == 1 for j in jobs)


def test_claim__concurrent_claimers_never_share_a_job(db: Database) -> None:
    store = JobStore(db)
    Client(store, Settings()).enqueue_many([__import__("recon").JobSpec("k") for _ in range(600)])
    got: dict[str, list[int]] = {}
    barrier = threading.Barrier(6)

    def claimer(name: str) -> None:
        barrier.wait()
        mine: list[int] = []
        while batch := store.claim(worker=name, queues=["default"], n=7, ttl=30):
            mine.extend(j.id for j in batch)
        got[name] = mine

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = [i for ids in got.values() for i in ids]
    assert len(all_ids) == 600 and len(set(all_ids)) == 600


def test_heartbeat__extends_lease_and_reports_lost_ones(db: Database) -> None:
    db.clock = FixedClock(T0)
    store = JobStore(db)
    client = Client(store, Settings())
    a, b = client.enqueue("k"), client.enqueue("k")
    jobs = store.claim(worker="me", queues=["default"], n=2, ttl=10)
    leases = [Lease(store=store, job_id=j.id, attempt=j.attempts, worker="me") for j in jobs]
    beater = Heartbeater(store, worker="me", ttl=10, leases_func=lambda: leases)
    for _ in range(5):  # five TTLs later the leases are still alive
        db.clock.advance(8)  # type: ignore[attr-defined]
        beater.beat_once()
    assert store.get(a).lease_until == T0 + timedelta(seconds=50)  # type: ignore[union-attr]
    assert not any(lease.lost for lease in leases)
    # job b is rescued and re-claimed by someone else: our next heartbeat finds the lease lost
    db.clock.advance(11)  # type: ignore[attr-defined]
    store.extend_leases(worker="me", leases=[(a, 1)], ttl=10)
    assert store.rescue_expired(limit=10) == [(b, JobState.RETRYABLE)]
    [again] = store.claim(worker="thief", queues=["default"], n=1, ttl=10)
    assert again.id == b and again.attempts == 2
    beater.beat_once()
    lost = {lease.job_id: lease.lost for lease in leases}
    assert lost == {a: False, b: True}
    assert beater.lost == 1


def test_fencing__a_stale_worker_cannot_finish_or_overwrite(db: Database) -> None:
    db.clock = FixedClock(T0)
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("k")
    [_old] = store.claim(worker="slow", queues=["default"], n=1, ttl=5)
    db.clock.advance(6)  # type: ignore[attr-defined]  # the slow worker is paused past its TTL
    store.rescue_expired(limit=10)
    [new] = store.claim(worker="fast", queues=["default"], n=1, ttl=5)
    assert new.attempts == 2
    assert store.finish(worker="fast", finishes=[Finish(id=job_id, attempt=2, state="succeeded",
                                                        outcome="succeeded")]) == {job_id}
    # the slow worker wakes up and tries to record a failure, and to save progress: nothing changes
    stale = store.finish(worker="slow", finishes=[Finish(id=job_id, attempt=1, state="dead", outcome="dead",
                                                         error_kind="bug", error="late")])
    assert stale == set()
    assert not store.save_progress(worker="slow", job_id=job_id, attempt=1, progress={"x": 1})
    job = store.get(job_id)
    assert job is not None and job.state is JobState.SUCCEEDED and job.progress is None
    outcomes = [(a.attempt, a.worker, a.outcome) for a in store.attempts(job_id)]
    assert outcomes == [(1, "slow", "lease_expired"), (2, "fast", "succeeded")]


def test_fencing__same_owner_old_attempt_is_rejected(db: Database) -> None:
    """The attempt number fences even when the same worker id claims again."""
    db.clock = FixedClock(T0)
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("k")
    store.claim(worker="w", queues=["default"], n=1, ttl=5)
    db.clock.advance(6)  # type: ignore[attr-defined]
    store.rescue_expired(limit=10)
    store.claim(worker="w", queues=["default"], n=1, ttl=5)
    assert store.finish(worker="w", finishes=[Finish(id=job_id, attempt=1, state="succeeded",
                                                     outcome="succeeded")]) == set()
    assert store.get(job_id).state is JobState.LEASED  # type: ignore[union-attr]


@pytest.mark.parametrize("dedicated", [False, True], ids=["pooled", "dedicated"])
def test_fencing__finish_succeeded_ends_only_the_leases_still_held(db: Database, dedicated: bool) -> None:
    """The finisher's lean path for plain successes (``finish_succeeded``), on the pool and on the worker's own
    connection: a job whose lease expired and was claimed again (by another worker, or by the same one as a new
    attempt) is left to its new owner; the others end succeeded with one history row each."""
    db.clock = FixedClock(T0)
    store = JobStore(db)
    ids = Client(store, Settings()).enqueue_many([JobSpec("k", {"i": i}) for i in range(4)])
    store.claim(worker="w", queues=["default"], n=4, ttl=5)
    db.clock.advance(6)  # type: ignore[attr-defined]  # every lease expires; the watcher rescues them
    store.rescue_expired(limit=10)
    held = store.claim(worker="w", queues=["default"], n=2, ttl=5)  # the same worker, attempt 2
    taken = store.claim(worker="other", queues=["default"], n=2, ttl=5)
    assert {j.attempts for j in held + taken} == {2}
    via = store.dedicated(finishing=True) if dedicated else None
    try:
        stale = store.finish_succeeded(worker="w", ids=ids, attempts=[1] * 4, via=via)  # the first attempts
        fresh = store.finish_succeeded(worker="w", ids=[j.id for j in held] + [taken[0].id], attempts=[2, 2, 2],
                                       via=via)
    finally:
        if via is not None:
            via.close()
    assert stale == set() and fresh == {j.id for j in held}
    states = {j.id: (j.state, j.lease_owner) for j in store.get_many(ids)}
    assert states == {**{j.id: (JobState.SUCCEEDED, None) for j in held},
                      **{j.id: (JobState.LEASED, "other") for j in taken}}
    for job in held:
        assert [(a.attempt, a.worker, a.outcome) for a in store.attempts(job.id)] == [
            (1, "w", "lease_expired"), (2, "w", "succeeded")]
    for job in taken:
        assert [a.outcome for a in store.attempts(job.id)] == ["lease_expired"]


def test_finish__write_shares_the_transaction_and_is_fenced(db: Database) -> None:
    store = JobStore(db)
    client = Client(store, Settings())
    job_id = client.enqueue("k")
    [_job] = store.claim(worker="w", queues=["default"], n=1, ttl=30)
    calls: list[int] = []

    def failing_write(conn: object) -> None:
        calls.append(1)
        raise RuntimeError("domain write failed")

    try:
        store.finish(worker="w", finishes=[Finish(id=job_id, attempt=1, state="succeeded", outcome="succeeded")],
                     write=failing_write)
    except RuntimeError:
        pass
    assert calls == [1]
    assert store.get(job_id).state is JobState.LEASED  # type: ignore[union-attr]  # rolled back together
    assert store.attempts(job_id) == []
    # a stale finish never runs its write
    assert store.finish(worker="other", finishes=[Finish(id=job_id, attempt=1, state="succeeded",
                                                         outcome="succeeded")], write=failing_write) == set()
    assert calls == [1]


def test_progress__checkpoint_reaches_the_next_attempt(db: Database) -> None:
    db.clock = FixedClock(T0)
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("k")
    [job] = store.claim(worker="w", queues=["default"], n=1, ttl=5)
    Lease(store=store, job_id=job_id, attempt=job.attempts, worker="w").save_progress({"page": 7})
    db.clock.advance(6)  # type: ignore[attr-defined]  # crash: the lease expires
    store.rescue_expired(limit=10)
    [again] = store.claim(worker="w2", queues=["default"], n=1, ttl=5)
    assert again.progress == {"page": 7}
