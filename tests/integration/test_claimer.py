"""The claim loop (recon.engine.claimer) on its own: batches as large as the free slots allow, per-queue caps,
burst and stop, failed claims, and the dedicated connection on PostgreSQL."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from recon import Client, JobSpec, JobState, JobStore, Settings
from recon.config import EngineConfig
from recon.db.database import Database
from recon.engine.claimer import Claimer
from recon.engine.observe import WorkerStats
from recon.engine.slots import Running, Slots
from recon.errors import StoreError
from recon.rows import Finish

CONFIG = EngineConfig(lease_ttl_seconds=30, heartbeat_interval_seconds=5, poll_interval_seconds=0.02,
                      concurrency=2, prefetch=2, claim_batch_size=3)


def claimer(store: JobStore, config: EngineConfig = CONFIG, *, stats: WorkerStats | None = None,
            queues: tuple[str, ...] = ("default",),
            caps: dict[str, int] | None = None) -> tuple[Claimer, Slots, list[Running]]:
    """A claim loop whose jobs go to a list (no runner takes them)."""
    slots = Slots.for_config(config)
    handed: list[Running] = []
    c = Claimer(store, slots, submit=handed.append, stats=stats or WorkerStats(), worker="w1", config=config,
                queues=queues, queue_caps=caps)
    return c, slots, handed


def test_claimer__claims_as_many_as_the_free_slots_in_batches_and_hands_them_on_in_order(db: Database) -> None:
    store = JobStore(db)
    ids = Client(store, Settings()).enqueue_many([JobSpec("k", {"i": i}, priority=i % 2) for i in range(10)])
    stats = WorkerStats()
    c, slots, handed = claimer(store, stats=stats)
    assert c.claim(slots.free()) == (3, 3)  # four slots free (two threads, two prefetched), batches of three
    assert c.claim(slots.free()) == (1, 1)
    assert slots.free() == 0 and c.claim(0) == (0, 0)
    assert len(handed) == 4 and slots.in_flight == 4 and slots.busy == 4
    first_batch = [r.job.id for r in handed[:3]]
    assert first_batch == [ids[1], ids[3], ids[5]]  # priority first, then age
    for r in handed:
        assert r.job.state is JobState.LEASED and r.job.lease_owner == "w1"
        assert (r.lease.job_id, r.lease.attempt, r.lease.worker) == (r.job.id, r.job.attempts, "w1")
        stored = store.get(r.job.id)
        assert stored is not None and stored.state is JobState.LEASED and stored.lease_owner == "w1"
    assert stats.claimed == 4


def test_claimer__per_queue_caps_count_what_already_executes(db: Database) -> None:
    store = JobStore(db)
    Client(store, Settings()).enqueue_many([JobSpec("k", queue="psp") for _ in range(5)]
                                           + [JobSpec("k", queue="bulk") for _ in range(5)])
    config = replace(CONFIG, concurrency=8, prefetch=0, claim_batch_size=10)
    c, slots, handed = claimer(store, config, queues=("psp", "bulk"), caps={"psp": 2, "bulk": 0})
    assert c.claim(slots.free()) == (8, 7)  # psp: its cap of 2; bulk (cap 0 = none): the other 6 slots, 5 there
    assert sorted(r.job.queue for r in handed) == ["bulk"] * 5 + ["psp"] * 2
    assert c.claim(slots.free()) == (1, 0)  # psp is at its cap; bulk is empty
    slots.release([next(r.job for r in handed if r.job.queue == "psp")])  # its finish committed
    assert c.claim(slots.free()) == (2, 1)  # one psp slot free again


def finishing_submit(store: JobStore, slots: Slots, seen: list[int]) -> Any:
    """Stands in for a runner and the finisher: every job succeeds at once."""
    def submit(r: Running) -> None:
        seen.append(r.job.id)
        assert store.finish(worker="w1", finishes=[Finish(r.job.id, r.job.attempts, "succeeded", "succeeded")])
        slots.release([r.job])
    return submit


def test_claimer__a_burst_claims_until_nothing_is_claimable_and_nothing_is_held(db: Database) -> None:
    store = JobStore(db)
    ids = Client(store, Settings()).enqueue_many([JobSpec("k") for _ in range(25)])
    seen: list[int] = []
    slots = Slots.for_config(CONFIG)
    c = Claimer(store, slots, submit=finishing_submit(store, slots, seen), stats=WorkerStats(), worker="w1",
                config=CONFIG, queues=["default"])
    c.run(threading.Event(), burst=True)
    assert sorted(seen) == ids and len(set(seen)) == 25
    assert all(store.get(i).state is JobState.SUCCEEDED for i in ids)  # type: ignore[union-attr]
    assert slots.idle()


def test_claimer__a_burst_waits_for_the_leases_it_holds(db: Database) -> None:
    """Nothing claimable is not the end while a job runs: its retry may be claimable when it finishes."""
    store = JobStore(db)
    Client(store, Settings()).enqueue("k")
    c, slots, handed = claimer(store)
    t = threading.Thread(target=c.run, args=(threading.Event(),), kwargs={"burst": True}, daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while not handed and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert len(handed) == 1 and t.is_alive()
    store.finish(worker="w1", finishes=[Finish(handed[0].job.id, 1, "succeeded", "succeeded")])
    slots.release([handed[0].job])
    t.join(5)
    assert not t.is_alive()


def test_claimer__stops_when_told_and_never_claims_past_the_free_slots(db: Database) -> None:
    store = JobStore(db)
    Client(store, Settings()).enqueue_many([JobSpec("k") for _ in range(10)])
    c, slots, handed = claimer(store)
    stop = threading.Event()
    t = threading.Thread(target=c.run, args=(stop,), daemon=True)
    t.start()
    time.sleep(0.2)
    assert len(handed) == 4 == slots.capacity  # the slots are full: nobody frees them here
    stop.set()
    slots.wake.set()
    t.join(5)
    assert not t.is_alive()
    leased = [j for j in store.list_jobs(limit=100) if j.state is JobState.LEASED]
    assert len(leased) == 4


def test_claimer__a_failed_claim_is_logged_and_retried(db: Database, caplog: pytest.LogCaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("k")
    real_claim, failures = store.claim, [1]

    def flaky_claim(**kw: Any) -> Any:
        if failures:
            failures.pop()
            raise StoreError("database: connection refused")
        return real_claim(**kw)

    monkeypatch.setattr(store, "claim", flaky_claim)
    seen: list[int] = []
    slots = Slots.for_config(CONFIG)
    c = Claimer(store, slots, submit=finishing_submit(store, slots, seen), stats=WorkerStats(), worker="w1",
                config=CONFIG, queues=["default"])
    with caplog.at_level(logging.WARNING, logger="recon.engine.worker"):
        c.run(threading.Event(), burst=True)
    assert seen == [job_id]
    assert "claim failed, retrying: database: connection refused" in caplog.text


def test_claimer__claims_through_a_connection_of_its_own(db: Database,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = JobStore(db)
    Client(store, Settings()).enqueue_many([JobSpec("k") for _ in range(3)])
    opened: list[Any] = []
    vias: list[Any] = []
    real_dedicated, real_claim = store.dedicated, store.claim

    def dedicated(**kw: Any) -> Any:
        via = real_dedicated(**kw)
        opened.append(via)
        if via is not None:
            real_close = via.close
            monkeypatch.setattr(via, "close", lambda: (opened.remove(via), real_close()))
        return via

    def claim(**kw: Any) -> Any:
        vias.append(kw["via"])
        return real_claim(**kw)

    monkeypatch.setattr(store, "dedicated", dedicated)
    monkeypatch.setattr(store, "claim", claim)
    seen: list[int] = []
    slots = Slots.for_config(CONFIG)
    c = Claimer(store, slots, submit=finishing_submit(store, slots, seen), stats=WorkerStats(), worker="w1",
                config=CONFIG, queues=["default"])
    c.run(threading.Event(), burst=True)
    assert len(seen) == 3
    # psycopg's on PostgreSQL, sqlite3's on SQLite (DedicatedSqlite)
    assert vias and all(v is vias[0] and v is not None for v in vias)
    assert opened == []  # closed when the loop ended


def test_claimer__a_job_claimed_again_while_its_earlier_attempt_runs_here_is_given_back(db: Database) -> None:
    """Its lease expired and was rescued while the handler went on; the next claim here takes it again: run, the
    new attempt would replace the old one in the slots (the old one's end unaccounted, a burst ending with it
    still running), so it is given back, its attempt not spent, and the old attempt keeps its slot."""
    from recon import Watcher

    store = JobStore(db)
    [jid] = Client(store, Settings()).enqueue_many([JobSpec("k")])
    config = replace(CONFIG, lease_ttl_seconds=1)
    stats = WorkerStats()
    c, slots, handed = claimer(store, config, stats=stats)
    assert c.claim(slots.free()) == (3, 1) and [r.job.id for r in handed] == [jid]
    first = handed[0].job
    time.sleep(1.2)  # the handler goes on past its lease; the watcher rescues it
    assert Watcher(store).run_once().total == 1
    with db.begin() as conn:  # claimable at once, as a retry without backoff would be
        conn.execute(sa.text("UPDATE jobs SET run_after = created_at WHERE id = :id"), {"id": jid})
    assert c.claim(slots.free())[1] == 0  # claimed, then given back: nothing handed on
    assert len(handed) == 1 and slots.running[jid].job.attempts == first.attempts and slots.busy == 1
    stored = store.get(jid)
    assert stored is not None and stored.state is JobState.RUNNABLE and stored.lease_owner is None
    # the second claim counted an attempt; the give-back is a free one (max_attempts raised by it)
    assert stored.attempts == first.attempts + 1 and stored.max_attempts == first.max_attempts + 1
    assert stats.released == 1
