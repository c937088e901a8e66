"""The worker's book of slots and leases (recon.engine.slots): what the claim loop, the runners and the
finisher share."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from recon.config import EngineConfig
from recon.engine.lease import Lease
from recon.engine.slots import Running, Slots
from recon.rows import Job, JobState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(job_id: int, *, queue: str = "default", attempts: int = 1) -> Job:
    return Job(job_id, queue, "k", {}, JobState.LEASED, 0, T0, attempts, 25, T0, lease_owner="w")


def running(job_id: int, *, queue: str = "default", attempts: int = 1) -> Running:
    j = job(job_id, queue=queue, attempts=attempts)
    return Running(j, Lease(None, j.id, j.attempts, "w"))  # type: ignore[arg-type]  # no store: nothing is written


def test_slots__sized_from_the_config() -> None:
    slots = Slots.for_config(replace(EngineConfig(), concurrency=8, prefetch=4, claim_batch_size=10,
                                     finish_batch_size=3))
    assert (slots.capacity, slots.low_water, slots.finish_backlog) == (12, 5, 6)
    tiny = Slots.for_config(replace(EngineConfig(), concurrency=1, prefetch=0, claim_batch_size=1))
    assert tiny.low_water == 1  # never zero: one free slot is always worth a claim
    assert Slots.for_config(replace(EngineConfig(), concurrency=2, prefetch=0, claim_batch_size=100)).low_water == 1


def test_slots__a_claimed_job_holds_a_lease_and_a_slot_until_released() -> None:
    slots = Slots(capacity=4, low_water=2, finish_backlog=10)
    assert slots.free() == 4 and slots.idle() and slots.in_flight == 0
    batch = [running(1), running(2, queue="psp"), running(3, queue="psp")]
    slots.take(batch)
    assert slots.free() == 1 and slots.busy == 3 and slots.in_flight == 3 and not slots.idle()
    assert slots.room("psp", 2) == 0 and slots.room("default", 2) == 1
    assert [lease.job_id for lease in slots.leases()] == [1, 2, 3]
    assert sorted(r.job.id for r in slots.executing_now()) == [1, 2, 3]

    with slots.lock:  # what a runner does, inline, when a handler returns: the slot frees, the lease stays
        slots.executing.discard(2)
        slots.per_queue["psp"] -= 1
    assert slots.free() == 2 and slots.busy == 2 and slots.in_flight == 3 and slots.room("psp", 2) == 1
    assert sorted(r.job.id for r in slots.executing_now()) == [1, 3]

    slots.wake.clear()
    slots.release([batch[1].job])  # its finish committed
    assert slots.wake.is_set() and slots.in_flight == 2 and slots.free() == 2
    slots.release([batch[0].job, batch[2].job])  # released while still executing (shutdown): both go
    assert slots.idle() and slots.free() == 4 and slots.room("psp", 2) == 2 and slots.room("default", 2) == 2


def test_slots__claiming_pauses_while_the_finish_backlog_is_full() -> None:
    slots = Slots(capacity=8, low_water=2, finish_backlog=2)
    slots.take([running(1), running(2), running(3)])
    with slots.lock:
        slots.executing.difference_update({1, 2})
        slots.per_queue["default"] -= 2
    assert slots.free() == 0  # two results wait for the finisher
    slots.release([job(1)])
    assert slots.free() == 7


def test_slots__release_leaves_a_newer_attempt_of_the_same_job_alone() -> None:
    """A retry without delay can be claimed again by this worker before its first attempt's slot is released:
    the release of attempt 1 must not drop attempt 2's lease (its heartbeats) or slot."""
    slots = Slots(capacity=4, low_water=1, finish_backlog=10)
    first = running(7, attempts=1)
    slots.take([first])
    with slots.lock:
        slots.executing.discard(7)
        slots.per_queue["default"] -= 1
    again = running(7, attempts=2)
    slots.take([again])
    slots.release([first.job])
    assert slots.in_flight == 1 and slots.busy == 1 and slots.leases() == [again.lease]
    slots.release([again.job])
    assert slots.idle() and slots.busy == 0
