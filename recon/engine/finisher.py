"""The finisher: stores handlers' outcomes as fenced finishes, grouped into few transactions.

One thread takes ``Done`` results from its queue, up to ``finish_batch_size`` at a time, and:

- finishes those without a domain write together on its dedicated connection (``JobStore.dedicated(
  finishing=True)``), marking their leases ``finishing`` first so that a heartbeat missing the row is not taken
  for a lost lease: the plain successes (``Complete()``, most of them) by their ids and attempts alone
  (``JobStore.finish_succeeded``, no ``Finish`` built for each), the others as ``Finish`` rows;
- finishes the outcomes whose writes are ``BatchWrite``s of one function together, in one transaction: the
  fenced finish of them all and the function once, for the items of the finishes that matched; when that
  transaction fails for another reason than the database's, each of them is finished alone, as below;
- finishes each other outcome that carries a ``write`` alone, in one transaction with that write; when the
  write fails, the job is finished without it, as ``classify_func`` says of the error;
- drops the result of a handler that found its lease lost, and counts a finish that fencing rejected: both
  are ``stale_finishes``, and neither changes anything in the database;
- releases the batch's slots and leases (``Slots.release``) whatever the database said: a finish that
  could not be stored leaves the lease in the database until it expires and the watcher rescues the job.

The handler's outcome becomes a ``Finish`` here: a retry's delay (or death at the budget's end) is the
``RetryPolicy``'s. Transient database errors (a deadlock) are retried ``FINISH_RETRIES`` times with backoff.
An unavailable database (the primary died, a failover is under way) is waited out: the finish is tried again
with backoff (recon.db.availability, up to 1 s apart) until it commits or the worker halts, so a failover
costs no job its attempt; it is logged once for the outage, not once a try.

A finish whose commit's outcome is unknown (the connection died during it) is tried again: if the first one
committed, the second matches no lease (the job is no longer leased) and changes nothing, and its domain write,
in the same transaction as the fenced finish, is not made twice. Such a finish is counted among
``stale_finishes``. Nothing here calls a PSP: a finish that never commits leaves the lease to expire, and the
job's next attempt asks again under the same idempotency key. Every committed finish is counted in
``WorkerStats.outcomes`` and told to the observer, if any.

``release`` gives leases back on shutdown (runnable at once, the attempt not spent); it runs in the thread
that stops the worker, on the pool's connections, never on the finisher's own.
"""

from __future__ import annotations

import logging
import queue as queue_mod
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from recon.db.availability import Backoff, log_failure
from recon.db.jobs_store import Dedicated, JobStore
from recon.engine.observe import WORKER_LOGGER, WorkerObserver, WorkerStats, job_log_fields
from recon.engine.outcome import (
    BatchWrite,
    Cancel,
    ClassifyFunc,
    Complete,
    Dead,
    Outcome,
    Retry,
    Snooze,
    classify_as_bug,
    error_text,
)
from recon.engine.retry import RetryPolicy
from recon.engine.slots import Done, Running, Slots
from recon.errors import DatabaseTransientError, DatabaseUnavailable, StoreError
from recon.rows import Finish, Job

log = logging.getLogger(WORKER_LOGGER)

FINISH_RETRIES = 5


class Finisher:
    """Finishes ``worker``'s attempts. ``submit`` queues a result; ``run()`` is the finisher thread, until
    ``stop()``."""

    def __init__(self, store: JobStore, slots: Slots, stats: WorkerStats, *, worker: str, policy: RetryPolicy,
                 batch_size: int, classify_func: ClassifyFunc = classify_as_bug,
                 observer: WorkerObserver | None = None, halt: threading.Event | None = None) -> None:
        self._store = store
        self._slots = slots
        self._stats = stats
        self._worker = worker
        self._policy = policy
        self._batch_size = batch_size
        self._classify = classify_func
        self._observer = observer
        #: set when the worker halts: an unavailable database is no longer waited out
        self._halt = halt or threading.Event()
        self._via: Dedicated | None = None
        self._done: queue_mod.SimpleQueue[Done | None] = queue_mod.SimpleQueue()
        self.submit: Callable[[Done], None] = self._done.put

    def run(self) -> None:
        """The finisher thread: finish what arrives, in batches, until the stop sentinel."""
        self._via = self._store.dedicated(finishing=True)
        get, get_nowait, size = self._done.get, self._done.get_nowait, self._batch_size
        try:
            while True:
                item = get()
                if item is None:
                    return
                batch = [item]
                while len(batch) < size:
                    try:
                        nxt = get_nowait()
                    except queue_mod.Empty:
                        break
                    if nxt is None:
                        self._done.put(None)
                        break
                    batch.append(nxt)
                self.finish_batch(batch)
        finally:
            if self._via is not None:
                self._via.close()
                self._via = None

    def stop(self) -> None:
        """The sentinel: ``run`` returns once everything queued before it is finished."""
        self._done.put(None)

    def finish_batch(self, batch: list[Done]) -> None:
        """Finish ``batch`` (grouped where no write is carried), then release its slots. Each lease is marked
        ``finishing`` just before its own finish is sent, not when the batch is taken: the finishes with a
        write go one transaction each, and a lease that waits behind them keeps its heartbeat (after a
        failover a worker finishes hundreds at once, and marked all at once they outlived a short TTL)."""
        succeeded: list[Done] = []  # plain Complete() results: most finishes, stored without a Finish each
        grouped: list[tuple[Done, Finish]] = []
        together: dict[Any, list[tuple[Done, Finish, BatchWrite]]] = {}
        for done in batch:
            outcome = done.outcome
            if type(outcome) is Complete and outcome.write is None:  # the common case first
                succeeded.append(done)
            elif outcome is None:
                self._stats.stale_finishes += 1
                log.warning("job %s attempt %s: lease lost, result dropped", done.job.id, done.job.attempts,
                            extra=done.log_fields)
            elif type(write := getattr(outcome, "write", None)) is BatchWrite:
                together.setdefault(write.apply, []).append((done, self.to_finish(done.job, outcome), write))
            elif write is not None:
                self._finish_with_write(done, outcome)
            else:
                grouped.append((done, self.to_finish(done.job, outcome)))
        for items in together.values():
            self._finish_together(items)
        try:
            if succeeded:
                self._finish_succeeded(succeeded)
            if grouped:
                for done, _ in grouped:
                    done.lease.finishing = True
                matched = self._store_finish([f for _, f in grouped], via=self._via)
                self._record_many(grouped, matched)
        except StoreError as exc:
            # the leases stay in the database until they expire; the watcher returns the jobs to the queue
            log.error("could not finish %d jobs (%s); their leases will expire", len(succeeded) + len(grouped), exc)
        finally:
            self._slots.release([d.job for d in batch])

    def _finish_succeeded(self, items: list[Done]) -> None:
        """The plain successes of a batch: one fenced statement (``JobStore.finish_succeeded``), retried as every
        finish is, then counted (a ``Finish`` is built only for a line or the observer)."""
        ids, attempts = [], []
        for done in items:
            done.lease.finishing = True
            job = done.job
            ids.append(job.id)
            attempts.append(job.attempts)
        matched = self._retrying(lambda: self._store.finish_succeeded(worker=self._worker, ids=ids, attempts=attempts,
                                                                      via=self._via))
        if len(matched) == len(items) and self._observer is None and not log.isEnabledFor(logging.DEBUG):
            self._stats.outcomes["succeeded"] += len(items)  # the hot path: every lease matched, nothing to tell
            return
        self._record_many([(d, Finish(d.job.id, d.job.attempts, "succeeded", "succeeded")) for d in items], matched)

    def _finish_together(self, items: list[tuple[Done, Finish, BatchWrite]]) -> None:
        for done, _, _ in items:
            done.lease.finishing = True
        if len(items) == 1:
            self._finish_with_write(items[0][0], items[0][0].outcome)  # type: ignore[arg-type]
            return
        apply = items[0][2].apply

        def write(conn: Any, matched: set[int]) -> None:
            apply(conn, [w.item for d, _, w in items if d.job.id in matched])

        try:
            matched = self._store_finish([f for _, f, _ in items], together=write)
        except DatabaseTransientError as exc:
            log.error("could not finish %d jobs (%s); their leases will expire", len(items), exc)
            return
        except Exception as exc:  # the batch's write failed: each alone, so only a bad item's job pays
            log.info("%d finishes with one write failed together (%s); finishing each alone", len(items),
                     error_text(exc))
            for done, _, _ in items:
                self._finish_with_write(done, done.outcome)  # type: ignore[arg-type]
            return
        self._record_many([(d, f) for d, f, _ in items], matched)

    def _finish_with_write(self, done: Done, outcome: Outcome) -> None:
        done.lease.finishing = True
        finish = self.to_finish(done.job, outcome)
        try:
            try:
                matched = self._store_finish([finish], write=outcome.write)
            except Exception as exc:  # the domain write failed: finish without it, as the error says
                log.warning("job %s: write with finish failed: %s", done.job.id, error_text(exc))
                finish = self.to_finish(done.job, self._classify(exc))
                matched = self._store_finish([finish])
        except StoreError as exc:
            log.error("could not finish job %s (%s); its lease will expire", done.job.id, exc)
            return
        self._record(done.job, finish, matched, done)

    def _store_finish(self, finishes: list[Finish], write: Any = None, via: Any = None,
                      together: Callable[[Any, set[int]], None] | None = None) -> set[int]:
        """Store ``finishes``: transient errors retried ``FINISH_RETRIES`` times, an unavailable database until
        it is back or the worker halts (module docstring).

        On the dedicated connection (PostgreSQL) the store writes plain successes and the other finishes by two
        statements, each committed on its own: each group is stored, and retried, alone, so a retry after the
        second failed never repeats the first (its jobs, finished, would read as stale finishes)."""
        if via is not None and write is None and together is None:
            plain = [f for f in finishes if f.plain_success]
            if plain and len(plain) < len(finishes):
                rest = [f for f in finishes if not f.plain_success]
                return self._store_finish(plain, via=via) | self._store_finish(rest, via=via)
        if together is not None:
            return self._retrying(lambda: self._store.finish_together(worker=self._worker, finishes=finishes,
                                                                      write=together))
        return self._retrying(lambda: self._store.finish(worker=self._worker, finishes=finishes, write=write, via=via))

    def _retrying(self, store: Callable[[], set[int]]) -> set[int]:
        """``store()``, its transient errors retried ``FINISH_RETRIES`` times, an unavailable database until it is
        back or the worker halts (module docstring)."""
        transient, backoff = 0, Backoff()
        while True:
            try:
                return store()
            except StoreError as exc:
                if isinstance(exc, DatabaseUnavailable):
                    if self._halt.wait(backoff.next()):
                        raise
                elif isinstance(exc, DatabaseTransientError) and transient < FINISH_RETRIES - 1:
                    time.sleep(0.05 * 2**transient)
                    transient += 1
                else:
                    raise
                log_failure(log, "finish failed (%s); retrying", exc)

    def _record_many(self, finished: list[tuple[Done, Finish]], matched: set[int]) -> None:
        if self._observer is None and not log.isEnabledFor(logging.DEBUG):
            # the hot path (no observer, no debug lines): count, and warn about what fencing rejected
            outcomes = self._stats.outcomes
            for done, finish in finished:
                if done.job.id in matched:
                    outcomes[finish.outcome] += 1
                else:
                    self._record(done.job, finish, matched, done)
            return
        for done, finish in finished:
            self._record(done.job, finish, matched, done)

    def _record(self, job: Job, finish: Finish, matched: set[int], done: Done | None = None) -> None:
        fields = done.log_fields if done is not None else job_log_fields(job, self._worker)
        if job.id in matched:
            self._stats.outcomes[finish.outcome] += 1
            if self._observer is not None:
                self._observer.job_finished(job, outcome=finish.outcome, error_kind=finish.error_kind,
                                            seconds=done.seconds if done is not None else 0.0)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("job %s attempt %s: %s", job.id, job.attempts, finish.outcome, extra=fields)
        else:
            self._stats.stale_finishes += 1
            log.warning("stale finish rejected by fencing: job %s attempt %s (%s)", job.id, job.attempts,
                        finish.outcome, extra=fields)

    def to_finish(self, job: Job, outcome: Outcome) -> Finish:
        """The fenced finish of ``job``'s attempt for ``outcome`` (the next state, the attempt's history row)."""
        base = partial(Finish, id=job.id, attempt=job.attempts)
        match outcome:
            case Complete():
                return base(state="succeeded", outcome="succeeded")
            case Retry(error_kind=kind, error=error, retry_after=retry_after):
                decision = self._policy.decide(kind, attempt=job.attempts, max_attempts=job.max_attempts,
                                               free_attempts=job.free_attempts, retry_after=retry_after)
                if decision.dead:
                    return base(state="dead", outcome="dead", error_kind=kind, error=error)
                return base(state="retryable", outcome="retried", delay=decision.delay, error_kind=kind,
                            error=error)
            case Snooze(delay=delay, reason=reason):
                return base(state="pending", outcome="snoozed", delay=delay.total_seconds(), error=reason, bump=1)
            case Dead(error_kind=kind, error=error):
                return base(state="dead", outcome="dead", error_kind=kind, error=error)
            case Cancel(reason=reason):
                return base(state="canceled", outcome="canceled", error=reason)
        raise TypeError(f"handler for job {job.id} returned {outcome!r}, not an Outcome")

    def release(self, items: list[Running], *, reason: str) -> int:
        """Give leases back (runnable now, the attempt not spent); return how many were still ours."""
        finishes = [Finish(id=r.job.id, attempt=r.job.attempts, state="runnable", outcome="released", delay=0.0,
                           error=reason, bump=1) for r in items]
        try:
            matched = self._store.finish(worker=self._worker, finishes=finishes)
        except StoreError as exc:
            log.error("could not release %d leases (%s); the watcher will rescue them", len(finishes), exc)
            return 0
        finally:
            # only now (a handler told earlier could finish first and beat the release): the handlers may
            # keep running, but nothing they finish will count
            for r in items:
                r.lease.mark_lost()
        self._stats.released += len(matched)
        self._slots.release([r.job for r in items])
        return len(matched)
