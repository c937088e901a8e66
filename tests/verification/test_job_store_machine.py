"""A hypothesis ``RuleBasedStateMachine`` over the real ``JobStore`` (and its ``DeadLetterStore``), on SQLite and on
PostgreSQL: the property-based counterpart of verification/recon.pml's lease protocol.

Rules, in random interleavings: enqueue, claim (three workers), heartbeat, clock advance (``FixedClock``: the
store passes its time to every statement), a stuck-watcher pass, a fenced finish by the owner, the same finish
by a stale worker (its lease expired and was rescued, or re-claimed since), release (as the worker's drain
does), dead-letter replay and prune. After every step the invariants below are checked against the tables.

The machine remembers every lease it was ever given (worker, job, attempt): a lease whose row no longer
matches is what a paused worker holds when it resumes, and every write it tries must match nothing.
Profiles: ``ci`` (the default, bounded) and ``long`` (``RECON_HYPOTHESIS_PROFILE=long``), see conftest.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from recon.clock import FixedClock
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.engine.watcher import Watcher
from recon.rows import EnqueueRow, Finish, JobFilter, JobState

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TTL = 30.0
QUEUE = "q"
WORKERS = ("w1", "w2", "w3")
#: children first; job_replays cascades on PostgreSQL but not under SQLite's DELETE
TABLES = ("job_replays", "job_attempts", "jobs")
CLAIMABLE = {JobState.PENDING, JobState.RUNNABLE, JobState.RETRYABLE}

#: (next state, attempt outcome, delay, bump) of the finishes a handler's outcome becomes (Worker._to_finish)
FINISHES = {
    "complete": ("succeeded", "succeeded", None, 0),
    "retry": ("retryable", "retried", 0.0, 0),
    "snooze": ("pending", "snoozed", 5.0, 1),
    "dead": ("dead", "dead", None, 0),
    "cancel": ("canceled", "canceled", None, 0),
}


@dataclass(frozen=True)
class Held:
    """A lease the machine was given: what a worker believes it holds."""

    worker: str
    job_id: int
    attempt: int


def clear(db: Database) -> None:
    with db.begin() as conn:
        for table in TABLES:
            conn.execute(sa.text(f"DELETE FROM {table}"))  # constant table names


class JobStoreMachine(RuleBasedStateMachine):
    db: Database  # set by the test before the machine runs

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock(T0)
        self.db.clock = self.clock
        clear(self.db)
        self.store = JobStore(self.db)
        self.held: list[Held] = []  #: every lease ever handed out, current or stale
        self.ended: set[tuple[int, int]] = set()  #: (job, attempt) whose end took effect (finish or rescue)
        self.attempts_seen: dict[int, int] = {}  #: the highest attempts seen per job (monotonic)
        self.pruned: set[int] = set()

    # --- rules ---------------------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self.enqueue(2, 2, 0.0)

    @rule(n=st.integers(1, 3), max_attempts=st.integers(1, 3), delay=st.sampled_from([0.0, 0.0, 10.0]))
    def enqueue(self, n: int, max_attempts: int, delay: float) -> None:
        rows = [EnqueueRow(queue=QUEUE, kind="k", payload_json="{}", priority=0, run_at=None, delay=delay,
                           max_attempts=max_attempts, unique_key=None, tenant=None) for _ in range(n)]
        ids = self.store.enqueue(rows, max_depth={})
        assert len(set(ids)) == n
        for job_id in ids:
            job = self.store.get(job_id)
            assert job is not None and job.attempts == 0
            assert job.state is (JobState.PENDING if delay else JobState.RUNNABLE)

    @rule(worker=st.sampled_from(WORKERS), n=st.integers(1, 3))
    def claim(self, worker: str, n: int) -> None:
        before = {j.id: j for j in self.store.list_jobs(limit=1000)}
        now = self.clock.now()
        claimed = self.store.claim(worker=worker, queues=[QUEUE], n=n, ttl=TTL)
        assert len(claimed) <= n
        for job in claimed:
            old = before[job.id]
            assert old.state in CLAIMABLE and old.run_after <= now and not old.cancel_requested
            assert job.attempts == old.attempts + 1, "a claim is attempts + 1: the fencing token"
            row = self.store.get(job.id)
            assert row is not None and row.state is JobState.LEASED and row.lease_owner == worker
            assert row.lease_until == now + timedelta(seconds=TTL)
            self.held.append(Held(worker, job.id, job.attempts))
        due = [j for j in before.values() if j.state in CLAIMABLE and j.run_after <= now and not j.cancel_requested]
        assert len(claimed) == min(n, len(due)), "a claim takes every due job it may, up to n"

    @rule(worker=st.sampled_from(WORKERS))
    def heartbeat(self, worker: str) -> None:
        mine = [h for h in self.held if h.worker == worker]
        before = {h: self._matches(h) for h in mine}
        extended = self.store.extend_leases(worker=worker, leases=[(h.job_id, h.attempt) for h in mine], ttl=TTL)
        assert set(extended) == {h.job_id for h, matched in before.items() if matched}, \
            "a heartbeat extends exactly the leases whose owner and attempt still match"
        for h, matched in before.items():
            row = self.store.get(h.job_id)
            if matched:
                assert row is not None and row.lease_until == self.clock.now() + timedelta(seconds=TTL)

    @rule(seconds=st.sampled_from([1.0, 10.0, TTL, TTL + 1.0, 2 * TTL]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def watcher_pass(self) -> None:
        now = self.clock.now()
        before = {j.id: j for j in self.store.list_jobs(limit=1000)}
        result = Watcher(self.store).run_once()
        rescued = result.retryable + result.dead + result.canceled
        expired = {j.id for j in before.values()
                   if j.state is JobState.LEASED and j.lease_until is not None and j.lease_until < now}
        assert set(rescued) == expired, "the watcher rescues exactly the expired leases"
        for job_id in rescued:
            old = before[job_id]
            self._end(job_id, old.attempts, "rescue")
            row = self.store.get(job_id)
            assert row is not None
            want = JobState.DEAD if old.attempts >= old.max_attempts else JobState.RETRYABLE
            assert row.state is want and row.lease_owner is None and row.run_after == now

    @precondition(lambda self: any(self._matches(h) for h in self.held))
    @rule(data=st.data(), kind=st.sampled_from(sorted(FINISHES)))
    def finish_by_owner(self, data: st.DataObject, kind: str) -> None:
        current = [h for h in self.held if self._matches(h)]
        h = data.draw(st.sampled_from(current), label="lease")
        self._finish(h, kind, expect=True)

    @precondition(lambda self: any(not self._matches(h) for h in self.held))
    @rule(data=st.data(), kind=st.sampled_from(sorted(FINISHES)))
    def finish_by_stale_worker(self, data: st.DataObject, kind: str) -> None:
        stale = [h for h in self.held if not self._matches(h)]
        h = data.draw(st.sampled_from(stale), label="stale lease")
        self._finish(h, kind, expect=False)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """The worker's drain: give the lease back, the attempt not spent (Worker._release)."""
        h = data.draw(st.sampled_from(self.held), label="lease")
        expect = self._matches(h)
        before = self.store.get(h.job_id)
        finish = Finish(id=h.job_id, attempt=h.attempt, state="runnable", outcome="released", delay=0.0,
                        error="released on shutdown", bump=1)
        matched = self.store.finish(worker=h.worker, finishes=[finish])
        assert matched == ({h.job_id} if expect else set())
        if expect:
            self._end(h.job_id, h.attempt, "release")
            row = self.store.get(h.job_id)
            assert before is not None and row is not None
            assert row.state is JobState.RUNNABLE and row.max_attempts == before.max_attempts + 1

    @rule()
    def replay(self) -> None:
        dead = {j.id: j for j in self.store.list_jobs(state="dead", limit=1000)}
        batch = self.store.dead_letters.replay_dead(filters=JobFilter(), after_id=0, limit=1000, budget=1)
        assert set(batch.replayed) == set(dead)
        for job_id in batch.replayed:
            row = self.store.get(job_id)
            assert row is not None and row.state is JobState.RUNNABLE
            assert row.attempts == dead[job_id].attempts, "a replay keeps the fencing token"
            assert row.max_attempts == row.attempts + 1

    @rule(older_than=st.sampled_from([0.0, TTL]))
    def prune(self, older_than: float) -> None:
        cutoff = self.clock.now() - timedelta(seconds=older_than)
        before = {j.id: j for j in self.store.list_jobs(limit=1000)}
        self.store.dead_letters.prune_finished(older_than=older_than, limit=1000)
        after = {j.id for j in self.store.list_jobs(limit=1000)}
        gone = set(before) - after
        for job_id in gone:
            job = before[job_id]
            assert job.state.finished and job.finished_at is not None and job.finished_at < cutoff
            assert not self.store.attempts(job_id), "a pruned job's history goes with it"
        for job_id, job in before.items():
            if job.state.finished and job.finished_at is not None and job.finished_at < cutoff:
                assert job_id in gone
        self.pruned |= gone

    # --- invariants ----------------------------------------------------------------------------------------

    @invariant()
    def tables_are_consistent(self) -> None:
        jobs = self.store.list_jobs(limit=1000)
        for job in jobs:
            if job.state is JobState.LEASED:
                assert job.lease_owner is not None and job.lease_until is not None, "a lease only on leased jobs"
            else:
                assert job.lease_owner is None and job.lease_until is None, "a lease only on leased jobs"
            assert job.finished_at is not None if job.state.finished else job.finished_at is None
            assert job.attempts >= self.attempts_seen.get(job.id, 0), "attempts never decrease"
            self.attempts_seen[job.id] = job.attempts
            history = [a.attempt for a in self.store.attempts(job.id)]
            ended = job.attempts - 1 if job.state is JobState.LEASED else job.attempts
            assert history == list(range(1, ended + 1)), \
                f"job {job.id}: every claim but a running one ends in exactly one history row, {history}"
            assert {a for (j, a) in self.ended if j == job.id} == set(history)
        assert not self.pruned & {j.id for j in jobs}

    # --- helpers -------------------------------------------------------------------------------------------

    def _matches(self, h: Held) -> bool:
        """Does the row still say this lease is the job's current one (owner, attempt, leased)?"""
        if h.job_id in self.pruned:
            return False
        job = self.store.get(h.job_id)
        return (job is not None and job.state is JobState.LEASED and job.lease_owner == h.worker
                and job.attempts == h.attempt)

    def _end(self, job_id: int, attempt: int, how: str) -> None:
        assert (job_id, attempt) not in self.ended, f"attempt {attempt} of job {job_id} ended twice ({how})"
        self.ended.add((job_id, attempt))

    def _finish(self, h: Held, kind: str, *, expect: bool) -> None:
        state, outcome, delay, bump = FINISHES[kind]
        before = self.store.get(h.job_id)
        wrote: list[int] = []

        def write(conn: sa.Connection) -> None:  # a domain write in the finish's transaction (Outcome.write)
            wrote.append(h.job_id)
            conn.execute(sa.text("UPDATE jobs SET progress = :p WHERE id = :id"),
                         {"p": json.dumps({"written_by": h.worker, "attempt": h.attempt}), "id": h.job_id})

        finish = Finish(id=h.job_id, attempt=h.attempt, state=state, outcome=outcome, delay=delay, bump=bump)
        matched = self.store.finish(worker=h.worker, finishes=[finish], write=write)
        after = self.store.get(h.job_id)
        if not expect:
            assert matched == set() and not wrote, "a stale worker's finish matches nothing and writes nothing"
            if before is not None and after is not None:
                assert (after.state, after.attempts, after.lease_owner, after.progress) == (
                    before.state, before.attempts, before.lease_owner, before.progress)
            return
        assert matched == {h.job_id} and wrote == [h.job_id], "the owner's finish matches, with its write"
        self._end(h.job_id, h.attempt, "finish")
        assert before is not None and after is not None
        assert after.state is JobState(state) and after.lease_owner is None
        assert after.progress == {"written_by": h.worker, "attempt": h.attempt}
        assert after.max_attempts == before.max_attempts + bump


def test_job_store_state_machine(db: Database) -> None:
    machine = type("JobStoreOn" + db.dialect.title(), (JobStoreMachine,), {"db": db})
    run_state_machine_as_test(machine)
