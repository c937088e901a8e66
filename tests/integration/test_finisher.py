"""The finisher (recon.engine.finisher) on its own: grouped fenced finishes, single finishes with a domain
write, stale finishes, transient errors, slot release, and the release of leases on shutdown."""

from __future__ import annotations

import logging
import random
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from recon import Cancel, Client, Complete, Dead, JobSpec, JobState, JobStore, Retry, RetryPolicy, Settings, Snooze
from recon.db.database import Database
from recon.engine.finisher import FINISH_RETRIES, Finisher
from recon.engine.lease import Lease
from recon.engine.observe import WorkerStats
from recon.engine.outcome import BatchWrite, Outcome
from recon.engine.slots import Done, Running, Slots
from recon.errors import DatabaseTransientError, StoreError
from recon.rows import Job


class Recorder:
    """A WorkerObserver that keeps what it is told."""

    def __init__(self) -> None:
        self.finished: list[tuple[int, str, str | None, float]] = []

    def job_finished(self, job: Job, *, outcome: str, error_kind: str | None, seconds: float) -> None:
        self.finished.append((job.id, outcome, error_kind, seconds))

    def snapshot(self) -> dict[str, Any]:
        return {}


class Setup:
    def __init__(self, db: Database, n: int, *, observer: Recorder | None = None, classify: Any = None,
                 batch_size: int = 100, **spec: Any) -> None:
        self.store = JobStore(db)
        self.ids = Client(self.store, Settings()).enqueue_many([JobSpec("k", **spec) for _ in range(n)])
        self.jobs = self.store.claim(worker="w1", queues=["default"], n=n, ttl=30)
        self.slots = Slots(capacity=n, low_water=1, finish_backlog=n)
        self.running = [Running(j, Lease(self.store, j.id, j.attempts, "w1")) for j in self.jobs]
        self.slots.take(self.running)
        self.stats = WorkerStats()
        kw = {"classify_func": classify} if classify is not None else {}
        self.finisher = Finisher(self.store, self.slots, self.stats, worker="w1", batch_size=batch_size,
                                 policy=RetryPolicy(Settings().retry, rng=random.Random(3)), observer=observer,
                                 **kw)

    def done(self, i: int, outcome: Outcome | None, seconds: float = 0.25) -> Done:
        r = self.running[i]
        return Done(r.job, r.lease, outcome, seconds, {"job_id": r.job.id})

    def state(self, i: int) -> Job:
        job = self.store.get(self.jobs[i].id)
        assert job is not None
        return job


def test_finisher__a_batch_of_outcomes_becomes_their_states_and_history(db: Database) -> None:
    observer = Recorder()
    s = Setup(db, 6, observer=observer)
    outcomes: list[Outcome] = [Complete(), Retry(error_kind="network", error="reset"),
                               Snooze(timedelta(minutes=5), reason="psp paused"),
                               Dead(error_kind="validation", error="amount < 0"), Cancel("told to"),
                               Retry(error_kind="network", error="reset", retry_after=120)]
    s.finisher.finish_batch([s.done(i, o) for i, o in enumerate(outcomes)])
    states = [s.state(i) for i in range(6)]
    assert [j.state for j in states] == [JobState.SUCCEEDED, JobState.RETRYABLE, JobState.PENDING, JobState.DEAD,
                                         JobState.CANCELED, JobState.RETRYABLE]
    assert [s.store.attempts(j.id)[0].outcome for j in states] == [
        "succeeded", "retried", "snoozed", "dead", "canceled", "retried"]
    assert (states[1].last_error_kind, states[1].last_error) == ("network", "reset")
    assert states[2].max_attempts == states[0].max_attempts + 1  # a snooze does not spend the attempt
    wait = (states[5].run_after - states[5].attempted_at).total_seconds()  # type: ignore[operator]
    assert 119 <= wait <= 121  # the outside world's Retry-After, through the policy
    assert s.stats.outcomes == {"succeeded": 1, "retried": 2, "snoozed": 1, "dead": 1, "canceled": 1}
    assert sorted(observer.finished) == sorted(
        [(j.id, o, k, 0.25) for j, o, k in zip(s.jobs, ["succeeded", "retried", "snoozed", "dead", "canceled",
                                                          "retried"],
                                                 [None, "network", None, "validation", None, "network"],
                                                 strict=True)])
    assert s.slots.idle() and s.slots.busy == 0
    assert all(r.lease.finishing for r in s.running)  # set before the commit: the heartbeat skips them


def test_finisher__retry_at_the_end_of_the_budget_is_dead(db: Database) -> None:
    s = Setup(db, 1, max_attempts=1)
    s.finisher.finish_batch([s.done(0, Retry(error_kind="network", error="reset"))])
    assert s.state(0).state is JobState.DEAD and s.stats.outcomes == {"dead": 1}


@pytest.fixture()
def side_effects(db: Database) -> Any:
    with db.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS side_effects (job_id INTEGER)"))
        conn.execute(sa.text("DELETE FROM side_effects"))

    def rows() -> list[int]:
        with db.begin() as conn:
            return list(conn.execute(sa.text("SELECT job_id FROM side_effects ORDER BY job_id")).scalars())

    yield rows
    with db.begin() as conn:
        conn.execute(sa.text("DROP TABLE side_effects"))


def test_finisher__a_domain_write_commits_with_its_finish_and_only_if_the_lease_matched(
        db: Database, side_effects: Any) -> None:
    s = Setup(db, 3)

    def write_for(job_id: int) -> Any:
        return lambda conn: conn.execute(sa.text("INSERT INTO side_effects VALUES (:id)"), {"id": job_id})

    thief_job = s.jobs[2]  # expired and claimed by another worker meanwhile
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET lease_until = created_at WHERE id = :id"), {"id": thief_job.id})
    s.store.rescue_expired(limit=10)
    assert s.store.claim(worker="thief", queues=["default"], n=1, ttl=30)
    s.finisher.finish_batch([s.done(0, Complete(write=write_for(s.jobs[0].id))), s.done(1, Complete()),
                             s.done(2, Complete(write=write_for(thief_job.id)))])
    assert side_effects() == [s.jobs[0].id]
    assert s.state(0).state is JobState.SUCCEEDED and s.state(1).state is JobState.SUCCEEDED
    assert s.state(2).lease_owner == "thief"
    assert s.stats.outcomes == {"succeeded": 2} and s.stats.stale_finishes == 1
    assert s.slots.idle()


def test_finisher__a_failed_write_finishes_the_job_as_classify_func_says_without_it(
        db: Database, side_effects: Any, caplog: pytest.LogCaptureFixture) -> None:
    s = Setup(db, 1, classify=lambda exc: Dead(error_kind="domain", error=str(exc)))

    def write(conn: sa.Connection) -> None:
        conn.execute(sa.text("INSERT INTO side_effects VALUES (1)"))
        raise RuntimeError("payment moved on")

    with caplog.at_level(logging.WARNING, logger="recon.engine.worker"):
        s.finisher.finish_batch([s.done(0, Complete(write=write))])
    assert side_effects() == []  # rolled back with the first finish
    job = s.state(0)
    assert job.state is JobState.DEAD and (job.last_error_kind, job.last_error) == ("domain", "payment moved on")
    assert "write with finish failed: RuntimeError: payment moved on" in caplog.text
    assert s.stats.outcomes == {"dead": 1} and s.slots.idle()


class Inserter:
    """A BatchWrite function that inserts its items into side_effects and counts its calls; a negative item
    makes it fail (the bad item of a batch)."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, conn: sa.Connection, items: list[int]) -> None:
        self.calls.append(list(items))
        for item in items:
            if item < 0:
                raise RuntimeError(f"item {item} is bad")
            conn.execute(sa.text("INSERT INTO side_effects VALUES (:id)"), {"id": item})


def test_finisher__batch_writes_of_one_function_commit_together_only_for_the_leases_that_matched(
        db: Database, side_effects: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Setup(db, 5)
    thief_job = s.jobs[3]  # expired and claimed by another worker meanwhile
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET lease_until = created_at WHERE id = :id"), {"id": thief_job.id})
    s.store.rescue_expired(limit=10)
    assert s.store.claim(worker="thief", queues=["default"], n=1, ttl=30)
    together, other = Inserter(), Inserter()
    transactions: list[int] = []
    real = s.store.finish_together

    def counted(**kw: Any) -> set[int]:
        transactions.append(len(kw["finishes"]))
        return real(**kw)

    monkeypatch.setattr(s.store, "finish_together", counted)
    ids = [j.id for j in s.jobs]
    s.finisher.finish_batch([s.done(0, Complete(write=BatchWrite(together, ids[0]))),
                             s.done(1, Snooze(timedelta(minutes=1), write=BatchWrite(together, ids[1]))),
                             s.done(2, Complete(write=BatchWrite(other, ids[2]))),
                             s.done(3, Complete(write=BatchWrite(together, ids[3]))),
                             s.done(4, Complete())])
    assert transactions == [3]  # the three of `together` in one transaction; `other`, alone, the single way
    assert together.calls == [[ids[0], ids[1]]] and other.calls == [[ids[2]]]  # the thief's job wrote nothing
    assert side_effects() == [ids[0], ids[1], ids[2]]
    assert [s.state(i).state for i in (0, 1, 2, 4)] == [JobState.SUCCEEDED, JobState.PENDING, JobState.SUCCEEDED,
                                                         JobState.SUCCEEDED]
    assert s.state(3).lease_owner == "thief"
    assert s.stats.outcomes == {"succeeded": 3, "snoozed": 1} and s.stats.stale_finishes == 1
    assert s.slots.idle()


def test_finisher__domain_writes_on_sqlite_queue_on_the_worker_s_write_lock(db: Database) -> None:
    """SQLite has one write lock: the claim loop's and the plain finishes' transactions queue for it on
    ``Database.hot_lock`` (DedicatedSqlite), and so do finishes with a domain write, batched or single, instead
    of sleeping in SQLite's busy handler. PostgreSQL's writers do not share one lock: none is taken there."""
    s = Setup(db, 3)
    held: list[tuple[str, bool]] = []

    def batch(conn: sa.Connection, items: list[Any]) -> None:
        held.append(("together", db.hot_lock.locked()))

    def single(conn: sa.Connection) -> None:
        held.append(("single", db.hot_lock.locked()))

    s.finisher.finish_batch([s.done(0, Complete(write=BatchWrite(batch, 0))),
                             s.done(1, Complete(write=BatchWrite(batch, 1))), s.done(2, Complete(write=single))])
    assert sorted(held) == [("single", not db.is_postgresql), ("together", not db.is_postgresql)]
    assert not db.hot_lock.locked()
    assert [s.state(i).state for i in range(3)] == [JobState.SUCCEEDED] * 3


def test_finisher__a_batch_write_that_fails_finishes_each_job_alone_so_only_the_bad_item_pays(
        db: Database, side_effects: Any) -> None:
    s = Setup(db, 3, classify=lambda exc: Dead(error_kind="domain", error=str(exc)))
    write = Inserter()
    ids = [j.id for j in s.jobs]
    s.finisher.finish_batch([s.done(0, Complete(write=BatchWrite(write, ids[0]))),
                             s.done(1, Complete(write=BatchWrite(write, -1))),
                             s.done(2, Complete(write=BatchWrite(write, ids[2])))])
    assert write.calls == [[ids[0], -1, ids[2]], [ids[0]], [-1], [ids[2]]]  # together, then one at a time
    assert side_effects() == [ids[0], ids[2]]
    assert [s.state(i).state for i in range(3)] == [JobState.SUCCEEDED, JobState.DEAD, JobState.SUCCEEDED]
    assert s.state(1).last_error == "item -1 is bad"
    assert s.stats.outcomes == {"succeeded": 2, "dead": 1} and s.slots.idle()


def test_finisher__a_batch_write_on_a_database_that_stays_down_leaves_the_leases_to_expire(
        db: Database, side_effects: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    s = Setup(db, 2)
    tries: list[int] = []

    def down(**kw: Any) -> set[int]:
        tries.append(len(kw["finishes"]))
        raise DatabaseTransientError("database: gone")

    monkeypatch.setattr(s.store, "finish_together", down)
    monkeypatch.setattr("recon.engine.finisher.time.sleep", lambda seconds: None)
    write = Inserter()
    with caplog.at_level(logging.ERROR, logger="recon.engine.worker"):
        s.finisher.finish_batch([s.done(i, Complete(write=BatchWrite(write, s.jobs[i].id))) for i in range(2)])
    assert tries == [2] * FINISH_RETRIES  # retried as a batch, never one by one against a database that is down
    assert "could not finish 2 jobs" in caplog.text
    assert [s.state(i).state for i in range(2)] == [JobState.LEASED, JobState.LEASED] and side_effects() == []
    assert s.slots.idle()


def test_finisher__stale_results_change_nothing_and_are_counted(db: Database,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    s = Setup(db, 2)
    with db.begin() as conn:  # job 1's lease expired and was re-claimed: fencing rejects its finish
        conn.execute(sa.text("UPDATE jobs SET lease_until = created_at WHERE id = :id"), {"id": s.jobs[1].id})
    s.store.rescue_expired(limit=10)
    s.store.claim(worker="thief", queues=["default"], n=1, ttl=30)
    with caplog.at_level(logging.WARNING, logger="recon.engine.worker"):
        s.finisher.finish_batch([s.done(0, None), s.done(1, Complete())])
    assert s.stats.stale_finishes == 2 and not s.stats.outcomes
    assert s.state(0).state is JobState.LEASED and s.state(0).lease_owner == "w1"  # left to expire
    assert s.state(1).lease_owner == "thief"
    assert f"job {s.jobs[0].id} attempt 1: lease lost, result dropped" in caplog.text
    assert f"stale finish rejected by fencing: job {s.jobs[1].id} attempt 1 (succeeded)" in caplog.text
    assert {r.job_id for r in caplog.records} == {s.jobs[0].id, s.jobs[1].id}  # the job's log fields
    assert s.slots.idle()


def test_finisher__transient_errors_are_retried_others_leave_the_leases_to_expire(
        db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    s = Setup(db, 2)
    real_finish = s.store.finish
    failures: list[StoreError] = [DatabaseTransientError("database: server closed the connection")] * 2

    def flaky(**kw: Any) -> set[int]:
        if failures:
            raise failures.pop()
        return real_finish(**kw)

    monkeypatch.setattr(s.store, "finish", flaky)
    monkeypatch.setattr("recon.engine.finisher.time.sleep", lambda seconds: None)
    s.finisher.finish_batch([s.done(0, Complete())])
    assert s.state(0).state is JobState.SUCCEEDED and s.stats.outcomes == {"succeeded": 1}

    failures[:] = [StoreError("database: permission denied")]
    with caplog.at_level(logging.ERROR, logger="recon.engine.worker"):
        s.finisher.finish_batch([s.done(1, Complete())])
    assert s.state(1).state is JobState.LEASED  # the watcher will rescue it once the lease expires
    assert "could not finish 1 jobs" in caplog.text
    assert s.slots.idle()  # the slot is free all the same

    failures[:] = [DatabaseTransientError("database: gone")] * FINISH_RETRIES
    s2 = Setup(db, 1)
    monkeypatch.setattr(s2.store, "finish", flaky)
    s2.finisher.finish_batch([s2.done(0, Complete())])
    assert s2.state(0).state is JobState.LEASED and failures == []  # gave up after FINISH_RETRIES tries



@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_finisher__a_retry_on_the_dedicated_connection_never_repeats_the_plain_successes_it_committed(
        db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The dedicated connection stores a batch's plain successes, then its other finishes, by two statements
    committed one by one: a transient failure of the second is retried without the first, so the successes
    already stored are not counted (nor warned about) as stale finishes."""
    s = Setup(db, 2, max_attempts=5)
    via = s.store.dedicated(finishing=True)
    real_execute, failures = via.execute, [DatabaseTransientError("database: deadlock detected")]

    def second_statement_fails_once(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        if failures and "rows" in params:  # the other finishes' statement (the plain successes' has no rows)
            raise failures.pop()
        return real_execute(sql, params)

    monkeypatch.setattr(via, "execute", second_statement_fails_once)
    monkeypatch.setattr("recon.engine.finisher.time.sleep", lambda seconds: None)
    s.finisher._via = via
    try:
        with caplog.at_level(logging.WARNING, logger="recon.engine.worker"):
            s.finisher.finish_batch([s.done(0, Complete()), s.done(1, Retry(error_kind="network", error="reset"))])
    finally:
        via.close()
    assert failures == []  # the second statement did fail once
    assert s.state(0).state is JobState.SUCCEEDED and s.state(1).state is JobState.RETRYABLE
    assert s.stats.stale_finishes == 0 and "stale finish" not in caplog.text

def test_finisher__the_thread_finishes_in_batches_until_its_sentinel(db: Database,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    s = Setup(db, 10, batch_size=4)
    sizes: list[tuple[int, bool]] = []
    real_finish = s.store.finish_succeeded

    def finish_succeeded(**kw: Any) -> set[int]:  # plain successes take the store's lean path
        sizes.append((len(kw["ids"]), kw.get("via") is not None))
        return real_finish(**kw)

    monkeypatch.setattr(s.store, "finish_succeeded", finish_succeeded)
    for i in range(10):
        s.finisher.submit(s.done(i, Complete()))
    s.finisher.stop()
    t = threading.Thread(target=s.finisher.run)
    t.start()
    t.join(10)
    assert not t.is_alive()
    assert [n for n, _ in sizes] == [4, 4, 2]
    assert all(via for _, via in sizes)  # its own connection (psycopg's or sqlite3's)
    assert all(s.state(i).state is JobState.SUCCEEDED for i in range(10))
    assert s.slots.idle()


def test_finisher__release_gives_leases_back_without_spending_the_attempt(db: Database) -> None:
    s = Setup(db, 3)
    with db.begin() as conn:  # one of them is no longer ours
        conn.execute(sa.text("UPDATE jobs SET lease_until = created_at WHERE id = :id"), {"id": s.jobs[2].id})
    s.store.rescue_expired(limit=10)
    assert s.finisher.release(s.running, reason="released on shutdown") == 2
    for i in range(2):
        job = s.state(i)
        assert job.state is JobState.RUNNABLE and job.lease_owner is None
        assert job.max_attempts == Settings().engine.default_max_attempts + 1
        assert [(a.outcome, a.error) for a in s.store.attempts(job.id)] == [("released", "released on shutdown")]
    assert s.state(2).state is JobState.RETRYABLE  # the watcher's, untouched
    assert s.stats.released == 2 and s.slots.idle()
    assert all(r.lease.lost for r in s.running)  # whatever the handlers still finish will not count


def test_finisher__a_release_the_database_refuses_is_left_to_the_watcher(db: Database,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    s = Setup(db, 1)

    def down(**kw: Any) -> set[int]:
        raise StoreError("database: connection refused")

    monkeypatch.setattr(s.store, "finish", down)
    assert s.finisher.release(s.running, reason="released on shutdown") == 0
    assert s.stats.released == 0 and s.running[0].lease.lost
    assert s.state(0).state is JobState.LEASED


def test_finisher__an_unavailable_database_is_waited_out_until_the_finish_commits(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failover outlasts FINISH_RETRIES tries: the finish is tried until it commits (no attempt spent, no
    lease left to expire); once the worker halts, it gives up."""
    from recon.db.availability import Backoff
    from recon.errors import DatabaseUnavailable

    s = Setup(db, 1)
    real_finish, tries = s.store.finish, [0]
    failures = [DatabaseUnavailable("database: connection refused")] * (FINISH_RETRIES + 5)

    def flaky(**kw: Any) -> set[int]:
        tries[0] += 1
        if failures:
            raise failures.pop()
        return real_finish(**kw)

    monkeypatch.setattr(s.store, "finish", flaky)
    monkeypatch.setattr(Backoff, "next", lambda self: 0.0)  # its waits are recon.db.availability's business
    s.finisher.finish_batch([s.done(0, Complete())])
    assert tries[0] == FINISH_RETRIES + 6 and s.state(0).state is JobState.SUCCEEDED
    assert s.state(0).attempts == 1 and s.stats.outcomes == {"succeeded": 1}

    halt = threading.Event()
    s2 = Setup(db, 1)
    finisher = Finisher(s2.store, s2.slots, s2.stats, worker="w1", batch_size=10, halt=halt,
                        policy=RetryPolicy(Settings().retry))
    monkeypatch.setattr(s2.store, "finish", flaky)
    failures[:] = [DatabaseUnavailable("database: connection refused")] * 3
    halt.set()  # the worker is stopping: the outage is not waited out
    finisher.finish_batch([s2.done(0, Complete())])
    assert s2.state(0).state is JobState.LEASED and len(failures) == 2  # one try, then the lease is left


def test_finisher__a_finish_whose_commit_answer_was_lost_is_tried_again_and_writes_nothing_twice(
        db: Database, side_effects: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The connection dies after the finish committed (its answer lost): the retry is fenced like any finish,
    matches no lease, and the domain write that went with the first is not made again."""
    from recon.db.availability import Backoff
    from recon.errors import DatabaseUnavailable

    s = Setup(db, 1)
    real_finish, lost = s.store.finish, [True]

    def commit_then_lose_the_answer(**kw: Any) -> set[int]:
        matched = real_finish(**kw)
        if lost:
            lost.pop()
            raise DatabaseUnavailable("database: server closed the connection unexpectedly")
        return matched

    def write(conn: sa.Connection) -> None:
        conn.execute(sa.text("INSERT INTO side_effects VALUES (:id)"), {"id": s.jobs[0].id})

    monkeypatch.setattr(s.store, "finish", commit_then_lose_the_answer)
    monkeypatch.setattr(Backoff, "next", lambda self: 0.0)
    with caplog.at_level(logging.WARNING, logger="recon.engine.worker"):
        s.finisher.finish_batch([s.done(0, Complete(write=write))])
    assert s.state(0).state is JobState.SUCCEEDED and side_effects() == [s.jobs[0].id]  # once
    assert [a.outcome for a in s.store.attempts(s.jobs[0].id)] == ["succeeded"]
    assert s.stats.stale_finishes == 1  # the retry matched nothing: counted, never applied


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_finisher__a_lease_waiting_behind_slow_finishes_keeps_its_heartbeat(db: Database) -> None:
    """The finishes with a write go one transaction each; a plain finish of the same batch waits behind them.
    Its lease must keep being extended meanwhile: after a failover a worker finishes hundreds at once, and
    marked ``finishing`` (not heartbeated) all at once they outlived the TTL and were run twice."""
    from recon.engine.lease import Heartbeater
    from recon.engine.periodic import Periodic

    s = Setup(db, 2)
    with db.begin() as conn:  # leases of one second
        conn.execute(sa.text("UPDATE jobs SET lease_until = now() + interval '1 second'"))
    heart = Heartbeater(s.store, worker="w1", ttl=1.0, leases_func=s.slots.leases)
    halt = threading.Event()
    beating = Periodic("heartbeat", lambda _stop: heart.beat_once(), interval=0.2, immediate=False).start(halt)
    rescued: list[Any] = []

    def slow_write(conn: sa.Connection) -> None:  # job 0's write, while job 1 waits its turn
        time.sleep(1.6)
        rescued.extend(s.store.rescue_expired(limit=10))  # any watcher, now: job 0's row is locked, skipped

    try:
        s.finisher.finish_batch([s.done(0, Complete(write=slow_write)), s.done(1, Complete())])
    finally:
        halt.set()
        beating.join(5)
    assert rescued == [] and s.stats.stale_finishes == 0
    assert [s.state(i).state for i in range(2)] == [JobState.SUCCEEDED, JobState.SUCCEEDED]
