"""The worker pool: claim, run, take the handler's outcome, store the result.

One process runs one claim loop (the calling thread), ``concurrency`` handler threads, a finisher thread
that groups finishes into few transactions, a heartbeat thread, the stuck watcher, and on PostgreSQL a
LISTEN thread for wake-ups. Commits are the cost of a database queue, so claims are batched (up to the
free slots, plus ``prefetch`` more) and finishes without domain writes are grouped; a finish that carries a
domain write (``Outcome.write``) gets its own transaction, shared with that write. On PostgreSQL the claim
loop and the finisher each keep a dedicated driver connection (``JobStore.dedicated``). Per job the hot
path does little: one ``Job`` and ``Lease``, one queue hand-off to a runner and one back; the runners
wake the claim loop only when half a batch of slots is free (or none is busy).

A presence thread upserts the process's row in ``workers`` every few seconds (slots, busy slots, and the
counters of its ``WorkerObserver``, which the finisher tells of every committed finish in memory): that is
how one metrics endpoint and ``recon stats`` see the whole pool (recon/metrics.py). Each handler runs
inside ``recon.logs.job_scope``, so every line logged meanwhile names its job.

The worker never computes a delay (``RetryPolicy`` does) and never decides whether an error is retryable
(the handler returns an outcome; an exception it did not classify goes through ``classify_func``, by
default a retryable ``bug``).

Graceful shutdown (``request_stop``, SIGTERM/SIGINT in the CLI): stop claiming; release prefetched jobs
no thread has started; let running jobs finish within the drain window while heartbeating; then release
the leases still held (back to ``runnable``, outcome ``released``, the attempt not spent).
"""

from __future__ import annotations

import logging
import os
import queue as queue_mod
import secrets
import socket
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from recon.config import EngineConfig
from recon.db.database import DedicatedConnection
from recon.db.jobs_store import Finish, JobStore
from recon.db.pool_store import PoolStore, WorkerPresence
from recon.engine.handlers import Handlers
from recon.engine.lease import Heartbeater, Lease
from recon.engine.observe import PRESENCE_INTERVAL_SECONDS_DEFAULT, WORKER_RETENTION, WorkerObserver, job_log_fields
from recon.engine.outcome import Cancel, Complete, Dead, Outcome, Retry, Snooze
from recon.engine.retry import RetryPolicy
from recon.engine.watcher import Watcher
from recon.errors import LeaseLost, StoreError, UnknownJobKind
from recon.logs import enter_job, leave_job
from recon.rows import Job

log = logging.getLogger(__name__)

ClassifyFunc = Callable[[BaseException], Outcome]
WakeupFunc = Callable[[threading.Event, Callable[[str], None]], None]

FINISH_RETRIES = 5
#: how long the claim loop waits for more slots to free up when only a few are free (see _low_water)
GATHER_SECONDS = 0.002
#: what a handler's None means (outcomes are immutable: one serves every job)
_COMPLETE = Complete()


def make_worker_id() -> str:
    """host:pid:random, so a restarted process with a recycled pid never shares a lease owner."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def classify_as_bug(exc: BaseException) -> Outcome:
    """The default for exceptions a handler did not classify: a retryable ``bug``."""
    return Retry(error_kind="bug", error=_short(exc))


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


@dataclass(slots=True)
class WorkerStats:
    claimed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    stale_finishes: int = 0
    released: int = 0
    lease_expirations: int = 0
    leases_lost: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"claimed": self.claimed, "outcomes": dict(self.outcomes), "stale_finishes": self.stale_finishes,
                "released": self.released, "lease_expirations": self.lease_expirations,
                "leases_lost": self.leases_lost}


@dataclass(slots=True)
class _Running:
    job: Job
    lease: Lease


@dataclass(slots=True)
class _Done:
    job: Job
    lease: Lease
    outcome: Outcome | None  #: None: the handler found its lease lost, nothing to write
    seconds: float = 0.0  #: the handler's run time
    log_fields: dict[str, Any] = field(default_factory=dict)  #: the job's log context (recon.logs)


class Worker:
    """A pool of handler threads fed by one claim loop. Use ``run()``; stop with ``request_stop()``."""

    def __init__(
        self,
        store: JobStore,
        handlers: Handlers,
        *,
        config: EngineConfig,
        policy: RetryPolicy,
        queues: Sequence[str] | None = None,
        queue_caps: Mapping[str, int] | None = None,
        classify_func: ClassifyFunc = classify_as_bug,
        wakeup_func: WakeupFunc | None = None,
        worker_id: str | None = None,
        run_watcher: bool = True,
        observer: WorkerObserver | None = None,
        presence_interval: float | None = None,
    ) -> None:
        self.store = store
        self.handlers = handlers
        self.config = config
        self.policy = policy
        self.queues = list(queues or [config.default_queue])
        self.queue_caps = {q: c for q, c in (queue_caps or {}).items() if c > 0 and q in self.queues}
        self.classify_func = classify_func
        self.wakeup_func = wakeup_func
        self.worker_id = worker_id or make_worker_id()
        self.run_watcher = run_watcher
        self.observer = observer
        self.presence_interval = presence_interval or min(PRESENCE_INTERVAL_SECONDS_DEFAULT,
                                                          config.heartbeat_interval_seconds)
        self.stats = WorkerStats()
        self._stop = threading.Event()  # stop claiming
        self._halt = threading.Event()  # stop the helper threads
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[int, _Running] = {}  # every lease this process holds (heartbeated)
        self._executing: set[int] = set()  # the subset whose handler is queued or running: the slots
        self._per_queue: Counter[str] = Counter()  # executing per queue, for the per-queue caps
        self._todo: queue_mod.SimpleQueue[_Running | None] = queue_mod.SimpleQueue()
        #: the claim loop waits (up to GATHER_SECONDS) for this many free slots while others are busy, so
        #: that short jobs are claimed in batches rather than one per freed slot
        self._capacity = config.concurrency + config.prefetch  # jobs queued for or running in a thread
        self._low_water = max(1, min(config.claim_batch_size, self._capacity) // 2)
        self._claim_via: DedicatedConnection | None = None  # the claim loop's own connection (PostgreSQL)
        self._finish_via: DedicatedConnection | None = None  # the finisher's
        self._done: queue_mod.SimpleQueue[_Done | None] = queue_mod.SimpleQueue()
        self._heartbeater = Heartbeater(store, worker=self.worker_id, ttl=config.lease_ttl_seconds,
                                        leases_func=self._leases)
        self._watcher = Watcher(store)
        self._pool = PoolStore(store.db)  # this process's row in the workers table

    # --- public ---------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming and drain (thread- and signal-safe)."""
        self._stop.set()
        self._wake.set()

    @property
    def in_flight(self) -> int:
        """Leases held: jobs running or waiting for their finish to commit."""
        with self._lock:
            return len(self._running)

    def _free_slots(self) -> int:
        # A slot frees when the handler returns, before its finish commits, so claiming overlaps
        # finishing. The backlog of results waiting to be finished is bounded all the same.
        with self._lock:
            executing = len(self._executing)
            awaiting_finish = len(self._running) - executing
        if awaiting_finish >= 2 * self.config.finish_batch_size:
            return 0
        return self._capacity - executing

    def run(self, *, burst: bool = False) -> WorkerStats:
        """Claim and run jobs until ``request_stop()`` (or, with ``burst``, until nothing is claimable)."""
        if burst and self.run_watcher:
            # rescue expired leases first, or a burst could find nothing claimable and exit before the
            # watcher thread's first pass (a rerun after a crash must pick the crashed jobs up)
            try:
                self._watcher.run_once()
            except StoreError as exc:
                log.warning("stuck watcher failed: %s", exc)
        self._publish_presence(start=True)
        threads = self._start_threads()
        log.info("worker %s started: queues=%s concurrency=%d", self.worker_id, self.queues, self.config.concurrency)
        try:
            self._claim_loop(burst=burst)
            self._drain()
        finally:
            self._halt.set()
            self._done.put(None)
            for _ in range(self.config.concurrency):
                self._todo.put(None)
            for t in threads:
                if t.name.startswith(("recon-finisher", "recon-heartbeat", "recon-presence")):
                    t.join(timeout=10)
            self.stats.lease_expirations = self._watcher.lease_expirations
            self.stats.leases_lost = self._heartbeater.lost
            self._publish_presence(stopped=True)
        log.info("worker %s stopped: %s", self.worker_id, self.stats.to_dict())
        return self.stats

    # --- threads --------------------------------------------------------------------------------------

    def _start_threads(self) -> list[threading.Thread]:
        specs: list[tuple[str, Callable[[], None]]] = [(f"recon-runner-{i}", self._runner)
                                                        for i in range(self.config.concurrency)]
        specs.append(("recon-finisher", self._finisher))
        specs.append(("recon-presence", self._presence_loop))
        specs.append(("recon-heartbeat", lambda: self._heartbeater.run_forever(
            self._halt, interval=self.config.heartbeat_interval_seconds)))
        if self.run_watcher:
            specs.append(("recon-watcher", lambda: self._watcher.run_forever(
                self._halt, interval=self.config.watcher_interval_seconds)))
        if self.wakeup_func is not None:
            wakeup = self.wakeup_func
            specs.append(("recon-listener", lambda: wakeup(self._halt, self._on_notify)))
        threads = [threading.Thread(target=fn, name=name, daemon=True) for name, fn in specs]
        for t in threads:
            t.start()
        return threads

    def _on_notify(self, queue: str) -> None:
        if queue == "*" or queue in self.queues:
            self._wake.set()

    def _leases(self) -> list[Lease]:
        with self._lock:
            return [r.lease for r in self._running.values()]

    # --- claiming -------------------------------------------------------------------------------------

    def _claim_loop(self, *, burst: bool) -> None:
        poll = self.config.poll_interval_seconds
        self._claim_via = self.store.dedicated()
        try:
            while not self._stop.is_set():
                self._wake.clear()
                free = self._free_slots()
                if free <= 0:
                    self._wake.wait(poll)
                    continue
                if free < self._low_water and self._wake.wait(GATHER_SECONDS):
                    continue  # a few slots are free while most run: let more free up, then claim them together
                # idle before the claim, not after: a finish committed between the two can make a job
                # claimable again (a retry without delay) that this claim did not see
                idle = burst and self._idle()
                try:
                    asked, claimed = self._claim(free)
                except StoreError as exc:
                    log.warning("claim failed, retrying: %s", exc)
                    self._stop.wait(min(poll, 1.0))
                    continue
                if claimed < asked:
                    if idle and claimed == 0:
                        return
                    self._wake.wait(poll)
        finally:
            if self._claim_via is not None:
                self._claim_via.close()

    def _claim(self, free: int) -> tuple[int, int]:
        asked = claimed = 0
        if not self.queue_caps:
            n = min(free, self.config.claim_batch_size)
            asked, claimed = n, self._claim_into(self.queues, n)
            return asked, claimed
        for q in self.queues:
            room = free - claimed
            cap = self.queue_caps.get(q)
            if cap is not None:
                with self._lock:
                    room = min(room, cap - self._per_queue[q])
            n = min(room, self.config.claim_batch_size)
            if n > 0:
                asked += n
                claimed += self._claim_into([q], n)
        return asked, claimed

    def _claim_into(self, queues: Sequence[str], n: int) -> int:
        jobs = self.store.claim(worker=self.worker_id, queues=queues, n=n, ttl=self.config.lease_ttl_seconds,
                                via=self._claim_via)
        if not jobs:
            return 0
        store, worker = self.store, self.worker_id
        batch = [_Running(job, Lease(store, job.id, job.attempts, worker)) for job in jobs]
        with self._lock:
            running, executing, per_queue = self._running, self._executing, self._per_queue
            for r in batch:
                running[r.job.id] = r
                executing.add(r.job.id)
                per_queue[r.job.queue] += 1
        put = self._todo.put
        for r in batch:
            put(r)
        self.stats.claimed += len(jobs)
        return len(jobs)

    def _idle(self) -> bool:
        with self._lock:
            return not self._running

    # --- running --------------------------------------------------------------------------------------

    def _runner(self) -> None:
        get, done, lock, executing = self._todo.get, self._done.put, self._lock, self._executing
        wake_at = (self._capacity - self._low_water, 0)  # executing counts that free enough slots
        while (item := get()) is not None:
            job = item.job
            fields = job_log_fields(job, self.worker_id)
            started = time.monotonic()
            token = enter_job(fields)  # every line logged while the handler runs names the job
            try:
                outcome = self._execute(job, item.lease)
            finally:
                leave_job(token)
            seconds = time.monotonic() - started
            with lock:
                if job.id in executing:
                    executing.discard(job.id)
                    self._per_queue[job.queue] -= 1
                left = len(executing)
            if left in wake_at:
                self._wake.set()  # the claim loop waits for a batch's worth of free slots (or none busy)
            done(_Done(job, item.lease, outcome, seconds, fields))

    def _execute(self, job: Job, lease: Lease) -> Outcome | None:
        try:
            handler = self.handlers.get(job.kind)
        except UnknownJobKind as exc:
            return Dead(error_kind="unknown_kind", error=str(exc))
        try:
            return handler(job, lease) or _COMPLETE
        except LeaseLost:
            return None
        except Exception as exc:  # a handler's unclassified failure must never kill the worker
            log.debug("job %s raised:\n%s", job.id, traceback.format_exc())
            try:
                return self.classify_func(exc)
            except Exception:
                return classify_as_bug(exc)

    # --- finishing ------------------------------------------------------------------------------------

    def _finisher(self) -> None:
        self._finish_via = self.store.dedicated(finishing=True)
        get, get_nowait, size = self._done.get, self._done.get_nowait, self.config.finish_batch_size
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
                self._finish_batch(batch)
        finally:
            if self._finish_via is not None:
                self._finish_via.close()

    def _finish_batch(self, batch: list[_Done]) -> None:
        for done in batch:
            done.lease.finishing = True
        grouped: list[tuple[_Done, Finish]] = []
        for done in batch:
            outcome = done.outcome
            if type(outcome) is Complete and outcome.write is None:  # the common case first
                grouped.append((done, Finish(done.job.id, done.job.attempts, "succeeded", "succeeded")))
            elif done.outcome is None:
                self.stats.stale_finishes += 1
                log.warning("job %s attempt %s: lease lost, result dropped", done.job.id, done.job.attempts,
                            extra=done.log_fields)
            elif getattr(done.outcome, "write", None) is not None:
                self._finish_with_write(done)
                continue
            else:
                grouped.append((done, self._to_finish(done.job, done.outcome)))
        try:
            if grouped:
                matched = self._store_finish([f for _, f in grouped], via=self._finish_via)
                self._record_many(grouped, matched)
        except StoreError as exc:
            # the leases stay in the database until they expire; the watcher returns the jobs to the queue
            log.error("could not finish %d jobs (%s); their leases will expire", len(grouped), exc)
        finally:
            self._release_slots([d.job for d in batch])

    def _finish_with_write(self, done: _Done) -> None:
        assert done.outcome is not None  # nosec B101  # type narrowing, not a check
        finish = self._to_finish(done.job, done.outcome)
        try:
            try:
                matched = self._store_finish([finish], write=done.outcome.write)
            except Exception as exc:  # the domain write failed: finish without it, as the error says
                log.warning("job %s: write with finish failed: %s", done.job.id, _short(exc))
                finish = self._to_finish(done.job, self.classify_func(exc))
                matched = self._store_finish([finish])
        except StoreError as exc:
            log.error("could not finish job %s (%s); its lease will expire", done.job.id, exc)
            return
        self._record(done.job, finish, matched, done)

    def _store_finish(self, finishes: list[Finish], write: Any = None, via: Any = None) -> set[int]:
        for attempt in range(FINISH_RETRIES):
            try:
                return self.store.finish(worker=self.worker_id, finishes=finishes, write=write, via=via)
            except StoreError as exc:
                if attempt == FINISH_RETRIES - 1 or not _is_transient(exc):
                    raise
                log.warning("finish failed (%s); retrying", exc)
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def _record_many(self, finished: list[tuple[_Done, Finish]], matched: set[int]) -> None:
        if self.observer is None and not log.isEnabledFor(logging.DEBUG):
            # the hot path (no observer, no debug lines): count, and warn about what fencing rejected
            outcomes = self.stats.outcomes
            for done, finish in finished:
                if done.job.id in matched:
                    outcomes[finish.outcome] += 1
                else:
                    self._record(done.job, finish, matched, done)
            return
        for done, finish in finished:
            self._record(done.job, finish, matched, done)

    def _record(self, job: Job, finish: Finish, matched: set[int], done: _Done | None = None) -> None:
        fields = done.log_fields if done is not None else job_log_fields(job, self.worker_id)
        if job.id in matched:
            self.stats.outcomes[finish.outcome] += 1
            if self.observer is not None:
                self.observer.job_finished(job, outcome=finish.outcome, error_kind=finish.error_kind,
                                           seconds=done.seconds if done is not None else 0.0)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("job %s attempt %s: %s", job.id, job.attempts, finish.outcome, extra=fields)
        else:
            self.stats.stale_finishes += 1
            log.warning("stale finish rejected by fencing: job %s attempt %s (%s)", job.id, job.attempts,
                        finish.outcome, extra=fields)

    def _release_slots(self, jobs: Sequence[Job]) -> None:
        with self._lock:
            for job in jobs:
                current = self._running.get(job.id)
                if current is not None and current.job.attempts != job.attempts:
                    # Claimed again by this worker between its finish's commit and now (a retry or snooze
                    # with no delay): that attempt holds the slot and the lease. Dropping it here lost its
                    # heartbeats and let a burst worker exit with it still running.
                    continue
                self._running.pop(job.id, None)
                if job.id in self._executing:
                    self._executing.discard(job.id)
                    self._per_queue[job.queue] -= 1
        self._wake.set()

    def _to_finish(self, job: Job, outcome: Outcome) -> Finish:
        base = partial(Finish, id=job.id, attempt=job.attempts)
        match outcome:
            case Complete():
                return base(state="succeeded", outcome="succeeded")
            case Retry(error_kind=kind, error=error, retry_after=retry_after):
                decision = self.policy.decide(kind, attempt=job.attempts, max_attempts=job.max_attempts,
                                              free_attempts=job.free_attempts,
                                              retry_after=retry_after)
                if decision.dead:
                    return base(state="dead", outcome="dead", error_kind=kind, error=error)
                return base(state="retryable", outcome="retried", delay=decision.delay,
                              error_kind=kind, error=error)
            case Snooze(delay=delay, reason=reason):
                return base(state="pending", outcome="snoozed", delay=delay.total_seconds(),
                              error=reason, bump=1)
            case Dead(error_kind=kind, error=error):
                return base(state="dead", outcome="dead", error_kind=kind, error=error)
            case Cancel(reason=reason):
                return base(state="canceled", outcome="canceled", error=reason)
        raise TypeError(f"handler for job {job.id} returned {outcome!r}, not an Outcome")

    # --- presence: this process's row in the workers table (recon.metrics reads it) ----------------------

    def presence(self, *, stopped: bool = False) -> WorkerPresence:
        """This process as the workers table shows it: slots, busy slots and cumulative counters."""
        with self._lock:
            busy = len(self._executing)
        counters: dict[str, Any] = {
            "claimed": self.stats.claimed, "released": self.stats.released,
            "stale_finishes": self.stats.stale_finishes, "leases_lost": self._heartbeater.lost,
            "lease_expirations": self._watcher.lease_expirations}
        if self.observer is not None:
            counters = self.observer.snapshot() | counters
        return WorkerPresence(id=self.worker_id, host=socket.gethostname(), pid=os.getpid(),
                              queues=tuple(self.queues), slots=self.config.concurrency, busy_slots=busy,
                              counters=counters, stopped=stopped)

    def _publish_presence(self, *, start: bool = False, stopped: bool = False) -> None:
        # Never fatal: without its row the worker still works; only the pool's view of it is missing.
        try:
            if start:
                self._pool.prune_workers(older_than=WORKER_RETENTION)
            self._pool.upsert_worker(self.presence(stopped=stopped))
        except StoreError as exc:
            log.warning("could not update this worker's row in the workers table: %s", exc)

    def _presence_loop(self) -> None:
        while not self._halt.wait(self.presence_interval):
            self._publish_presence()


    # --- shutdown -------------------------------------------------------------------------------------

    def _drain(self) -> None:
        # prefetched jobs that no thread has started go back at once: the drain window is for running ones
        unstarted: list[_Running] = []
        while True:
            try:
                item = self._todo.get_nowait()
            except queue_mod.Empty:
                break
            if item is not None:
                unstarted.append(item)
        if unstarted:
            released = self._release(unstarted, reason="released on shutdown before it started")
            log.info("stopping: released %d prefetched jobs", released)
        deadline = time.monotonic() + self.config.drain_timeout_seconds
        while self.in_flight and time.monotonic() < deadline:
            self._wake.clear()
            self._wake.wait(min(0.05, max(deadline - time.monotonic(), 0)))
        with self._lock:
            leftover = [self._running[i] for i in self._executing]
        if leftover:
            released = self._release(leftover, reason="released on shutdown")
            log.warning("drain window over: released %d running jobs", released)

    def _release(self, items: list[_Running], *, reason: str) -> int:
        """Give leases back (runnable now, the attempt not spent); returns how many were still ours."""
        finishes = [Finish(id=r.job.id, attempt=r.job.attempts, state="runnable", outcome="released", delay=0.0,
                           error=reason, bump=1) for r in items]
        try:
            matched = self.store.finish(worker=self.worker_id, finishes=finishes)
        except StoreError as exc:
            log.error("could not release %d leases (%s); the watcher will rescue them", len(finishes), exc)
            return 0
        finally:
            # only now (a handler told earlier could finish first and beat the release): the handlers may
            # keep running, but nothing they finish will count
            for r in items:
                r.lease.mark_lost()
        self.stats.released += len(matched)
        self._release_slots([r.job for r in items])
        return len(matched)


def _is_transient(exc: StoreError) -> bool:
    from recon.errors import DatabaseTransientError

    return isinstance(exc, DatabaseTransientError)
