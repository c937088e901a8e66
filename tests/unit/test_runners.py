"""The runners (recon.engine.runners): a job's handler under its lease and log scope, exceptions turned into
outcomes, the slot freed when the handler returns, the result handed on."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from recon.engine.handlers import Handlers
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Retry, Snooze
from recon.engine.runners import Runners
from recon.engine.slots import Done, Running, Slots
from recon.errors import LeaseLost
from recon.logs import bind
from recon.rows import Job, JobState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def running(job_id: int, kind: str, *, queue: str = "default") -> Running:
    job = Job(job_id, queue, kind, {"n": job_id}, JobState.LEASED, 0, T0, 1, 25, T0, lease_owner="w")
    return Running(job, Lease(None, job.id, job.attempts, "w"))  # type: ignore[arg-type]  # no store: nothing is written


class Pool:
    """Runners on their own threads, feeding a list instead of a finisher."""

    def __init__(self, handlers: Handlers, *, concurrency: int = 2, capacity: int = 4, low_water: int = 2,
                 **kw: object) -> None:
        self.slots = Slots(capacity=capacity, low_water=low_water, finish_backlog=100)
        self.done: list[Done] = []
        self.runners = Runners(handlers, self.slots, done=self.done.append, worker="w", concurrency=concurrency,
                               **kw)  # type: ignore[arg-type]
        self.runners.start()
        self.threads = list(self.runners.started)

    def submit(self, items: list[Running]) -> None:
        self.slots.take(items)
        for item in items:
            self.runners.submit(item)

    def stop(self) -> None:
        self.runners.stop()
        for t in self.threads:
            t.join(5)
        assert not any(t.is_alive() for t in self.threads)

    def outcomes(self) -> dict[int, Outcome | None]:
        return {d.job.id: d.outcome for d in self.done}


def wait_until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def lose_lease(job: Job, lease: Lease) -> None:
    raise LeaseLost(f"lease on job {job.id} was lost")


def waiting_for(gate: threading.Event) -> Callable[[Job, Lease], None]:
    def handle(job: Job, lease: Lease) -> None:
        assert gate.wait(5)
    return handle


def test_runners__every_result_becomes_an_outcome_and_none_escapes() -> None:
    handlers = Handlers()
    snooze = Snooze(timedelta(seconds=5))
    handlers.register("none", lambda job, lease: None)
    handlers.register("snooze", lambda job, lease: snooze)
    handlers.register("lost", lose_lease)
    handlers.register("boom", lambda job, lease: 1 / 0)
    handlers.register("bad_classify", lambda job, lease: {}["missing"])

    def classify(exc: BaseException) -> Outcome:
        if isinstance(exc, KeyError):
            raise RuntimeError("the classifier itself failed")
        return Dead(error_kind="math", error=str(exc))

    pool = Pool(handlers, classify_func=classify)
    pool.submit([running(1, "none"), running(2, "snooze"), running(3, "lost"), running(4, "boom"),
                 running(5, "bad_classify"), running(6, "nobody-handles-this")])
    wait_until(lambda: len(pool.done) == 6)
    pool.stop()
    outcomes = pool.outcomes()
    assert outcomes[1] == Complete() and outcomes[2] is snooze
    assert outcomes[3] is None  # the handler found its lease lost: nothing to write
    assert outcomes[4] == Dead(error_kind="math", error="division by zero")  # classify_func decides
    assert outcomes[5] == Retry(error_kind="bug", error="KeyError: 'missing'")  # a failing classifier: a bug
    assert isinstance(outcomes[6], Dead) and outcomes[6].error_kind == "unknown_kind"
    assert "'nobody-handles-this'" in outcomes[6].error


def test_runners__an_unclassified_exception_is_a_retryable_bug_by_default() -> None:
    handlers = Handlers()
    handlers.register("boom", lambda job, lease: int("x"))
    outcome = Runners(handlers, Slots(capacity=1, low_water=1, finish_backlog=1), done=print, worker="w",
                      concurrency=1).execute(running(1, "boom").job, running(1, "boom").lease)
    assert isinstance(outcome, Retry) and outcome.error_kind == "bug"
    assert outcome.error.startswith("ValueError: invalid literal")


def test_runners__the_handler_runs_in_its_jobs_log_scope_and_its_run_time_is_measured() -> None:
    handlers = Handlers()
    seen: list[tuple[int, int]] = []

    def handle(job: Job, lease: Lease) -> None:
        seen.append((job.id, lease.job_id))
        bind(payment_reference=f"order-{job.id}")  # lands in the scope's dict, which the result carries
        time.sleep(0.05)

    handlers.register("k", handle)
    pool = Pool(handlers, concurrency=1)
    pool.submit([running(1, "k"), running(2, "k", queue="psp")])
    wait_until(lambda: len(pool.done) == 2)
    pool.stop()
    assert seen == [(1, 1), (2, 2)]
    for done in pool.done:
        assert done.log_fields == {"job_id": done.job.id, "kind": "k", "attempt": 1, "queue": done.job.queue,
                                   "worker": "w", "payment_reference": f"order-{done.job.id}"}
        assert done.seconds >= 0.04
        assert done.lease.job_id == done.job.id


def test_runners__a_line_a_handler_logs_names_its_job_and_the_same_object_goes_to_the_finisher(
        caplog: pytest.LogCaptureFixture) -> None:
    """The runner hands the finisher the ``Running`` it took (a ``Done``, its outcome set), and enters the job's log
    scope with it: a line the handler logs carries the job's fields, built then (a job that logs nothing never
    builds them) and kept, so the finisher's lines show them too."""
    from recon.logs import JobContextFilter

    handlers = Handlers()
    handlers.register("quiet", lambda job, lease: None)
    handlers.register("chatty", lambda job, lease: logging.getLogger("recon.test").warning("charging %s", job.id))
    pool = Pool(handlers, concurrency=1)
    items = [running(1, "quiet"), running(2, "chatty")]
    handler_filter = JobContextFilter()
    caplog.handler.addFilter(handler_filter)
    try:
        with caplog.at_level(logging.WARNING, logger="recon.test"):
            pool.submit(items)
            wait_until(lambda: len(pool.done) == 2)
    finally:
        caplog.handler.removeFilter(handler_filter)
        pool.stop()
    assert sorted(map(id, pool.done)) == sorted(map(id, items))  # the same objects, no copy
    quiet, chatty = sorted(pool.done, key=lambda d: d.job.id)
    assert quiet.outcome == Complete() and quiet._log_fields is None  # nothing logged: no fields built
    [record] = [r for r in caplog.records if r.name == "recon.test"]
    assert (record.job_id, record.kind, record.attempt, record.worker) == (2, "chatty", 1, "w")  # type: ignore[attr-defined]
    assert chatty.log_fields is chatty.log_fields and chatty.log_fields["job_id"] == 2


def test_runners__a_slot_frees_when_the_handler_returns_and_the_lease_stays_for_the_finisher() -> None:
    gate = threading.Event()
    handlers = Handlers()
    handlers.register("wait", waiting_for(gate))
    handlers.register("quick", lambda job, lease: None)
    pool = Pool(handlers, concurrency=2, capacity=4, low_water=2)
    pool.submit([running(1, "wait", queue="psp"), running(2, "quick", queue="psp")])
    wait_until(lambda: len(pool.done) == 1)
    slots = pool.slots
    assert slots.busy == 1 and slots.room("psp", 2) == 1 and slots.in_flight == 2
    slots.wake.clear()
    gate.set()
    wait_until(lambda: len(pool.done) == 2)
    assert slots.wake.is_set()  # none busy: the claim loop is told
    assert slots.busy == 0 and slots.in_flight == 2  # the leases are the finisher's to release
    pool.stop()


def test_runners__wake_the_claim_loop_only_once_a_batch_of_slots_is_free() -> None:
    gate = threading.Event()
    handlers = Handlers()
    handlers.register("wait", waiting_for(gate))
    handlers.register("quick", lambda job, lease: None)
    pool = Pool(handlers, concurrency=4, capacity=4, low_water=2)  # wakes when 2 are executing, or none
    pool.slots.wake.clear()
    pool.submit([running(1, "wait"), running(2, "wait"), running(3, "wait"), running(4, "quick")])
    wait_until(lambda: len(pool.done) == 1)
    time.sleep(0.02)
    assert not pool.slots.wake.is_set()  # one slot free: not worth a claim yet
    gate.set()
    wait_until(lambda: len(pool.done) == 4)
    assert pool.slots.wake.is_set()
    pool.stop()


def test_runners__unstarted_takes_what_no_thread_has_started() -> None:
    slots = Slots(capacity=4, low_water=1, finish_backlog=4)
    runners = Runners(Handlers(), slots, done=print, worker="w", concurrency=2)
    items = [running(1, "k"), running(2, "k")]
    for item in items:
        runners.submit(item)
    runners.stop()  # sentinels are skipped
    assert runners.unstarted() == items
    assert runners.unstarted() == []


def test_runners__each_thread_ends_at_its_stop_sentinel(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="recon.engine.worker")
    handlers = Handlers()
    handlers.register("boom", lambda job, lease: 1 / 0)
    pool = Pool(handlers, concurrency=3)
    pool.submit([running(1, "boom")])
    wait_until(lambda: len(pool.done) == 1)
    pool.stop()
    assert "job 1 raised" in caplog.text and "ZeroDivisionError" in caplog.text  # the traceback, at debug
