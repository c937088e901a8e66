"""The worker pool: claim, run, take the handler's outcome, store the result.

One process runs one claim loop (the calling thread), ``concurrency`` handler threads, a finisher thread
that groups finishes into few transactions, its background loops, and on PostgreSQL a LISTEN thread for
wake-ups. ``Worker`` composes the parts, one module each:

- ``claimer``: the claim loop (free slots, prefetch, batched claims, idle and burst, wake-ups);
- ``runners``: the handler threads (a job under its lease and log scope; exceptions become outcomes);
- ``finisher``: grouped fenced finishes, single finishes with a domain write, stale finishes, releases;
- ``periodic``: the background loops, each a pass run by one ``Periodic`` under the same start, stop, error and
  back-off rules: the heartbeat (``lease``), the presence (this process's row in the ``workers`` table), the
  stuck watcher, and the ``loops`` the caller adds (``App.worker``: the pruner, the scheduler);
- ``slots``: the book of slots and leases they share, and the hand-offs between them.

Per job the hot path does little: one ``Job`` and ``Lease``, one queue hand-off to a runner and one back;
the runners wake the claim loop only when half a batch of slots is free (or none is busy).

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
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from recon.config import EngineConfig
from recon.db.jobs_store import JobStore
from recon.db.pool_store import PoolStore
from recon.engine.claimer import Claimer
from recon.engine.finisher import Finisher
from recon.engine.handlers import Handlers
from recon.engine.lease import Heartbeater
from recon.engine.observe import PRESENCE_INTERVAL_SECONDS_DEFAULT, WORKER_LOGGER, WorkerObserver, WorkerStats
from recon.engine.outcome import ClassifyFunc, classify_as_bug
from recon.engine.periodic import Periodic
from recon.engine.presence import Presence
from recon.engine.retry import RetryPolicy
from recon.engine.runners import Runners
from recon.engine.sizing import SIZER_INTERVAL_SECONDS, Pressure, Sizer, Sizing, SizingBounds
from recon.engine.slots import Slots
from recon.engine.watcher import Watcher
from recon.errors import StoreError
from recon.pool_rows import WorkerPresence
from recon.redact import redact

__all__ = ["ClassifyFunc", "Pressure", "WakeupFunc", "Worker", "WorkerStats", "classify_as_bug", "make_worker_id"]

log = logging.getLogger(WORKER_LOGGER)

WakeupFunc = Callable[[threading.Event, Callable[[str], None]], None]

#: how long ``run`` waits, when it ends, for the finisher and each loop (runner threads may be stuck in a
#: handler: not joined)
JOIN_SECONDS = 10.0


def make_worker_id() -> str:
    """host:pid:random, so a restarted process with a recycled pid never shares a lease owner."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    """A pool of handler threads fed by one claim loop. Use ``run()``; stop with ``request_stop()``.

    ``loops``: background loops started and stopped with the worker's own (``App.worker``: the pruner and the
    scheduler); a burst run leaves out those that are not ``in_burst``. With ``config.autosize`` the worker sizes
    itself (recon.engine.sizing), told the outside parties' pressure by ``pressure_func`` (``App.worker``: the
    PSP guard's rate limits, call times and 429s).
    """

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
        loops: Sequence[Periodic] = (),
        pressure_func: Callable[[], Pressure] | None = None,
    ) -> None:
        self.store = store
        self.handlers = handlers
        self.config = config
        self.policy = policy
        self.queues = list(queues or [config.default_queue])
        self.queue_caps = {q: c for q, c in (queue_caps or {}).items() if c > 0 and q in self.queues}
        self.classify_func = classify_func
        self.wakeup_func = wakeup_func
        # redacted here, once (a host name is outside text): the id is compared by every fenced write, so no store
        # may change it statement by statement
        self.worker_id = redact(worker_id or make_worker_id())
        self.run_watcher = run_watcher
        self.observer = observer
        self.presence_interval = presence_interval or min(PRESENCE_INTERVAL_SECONDS_DEFAULT,
                                                          config.heartbeat_interval_seconds)
        self.stats = WorkerStats()
        self._stop = threading.Event()  # stop claiming
        self._halt = threading.Event()  # stop the helper threads
        self._slots = Slots.for_config(config)
        self._heartbeater = Heartbeater(store, worker=self.worker_id, ttl=config.lease_ttl_seconds,
                                        leases_func=self._slots.leases)
        self._watcher = Watcher(store)
        self._finisher = Finisher(store, self._slots, self.stats, worker=self.worker_id, policy=policy,
                                  batch_size=config.finish_batch_size, classify_func=classify_func,
                                  observer=observer, halt=self._halt)
        self.sizer: Sizer | None = None
        if config.autosize:
            bounds = SizingBounds(min_concurrency=config.concurrency,
                                  max_concurrency=max(config.max_concurrency, config.concurrency),
                                  claim_batch_size=config.claim_batch_size, max_prefetch=config.max_prefetch,
                                  lease_ttl_seconds=config.lease_ttl_seconds)
            slots = self._slots
            self.sizer = Sizer(bounds, apply=self._resize, gather=self._window, peek=lambda: slots.ran,
                               pressure_func=pressure_func)
            first = self.sizer.current
            slots.resize(capacity=first.concurrency + first.prefetch, claim_batch=first.claim_batch)
        self._runners = Runners(handlers, self._slots, done=self._finisher.submit, worker=self.worker_id,
                                concurrency=self.sizing.concurrency, classify_func=classify_func)
        pool = PoolStore(store.db)
        waiting_func = None
        if wakeup_func is not None and store.db.is_postgresql:  # woken by NOTIFY: tell producers when it waits
            worker_id = self.worker_id

            def waiting_func(waiting: bool) -> None:
                pool.set_waiting(worker=worker_id, waiting=waiting)

        self._claimer = Claimer(store, self._slots, submit=self._runners.submit, stats=self.stats,
                                worker=self.worker_id, config=config, queues=self.queues, queue_caps=self.queue_caps,
                                waiting_func=waiting_func)
        self._presence = Presence(pool, worker=self.worker_id, queues=self.queues,
                                  sizing_func=lambda: self.sizing, slots=self._slots, stats=self.stats,
                                  heartbeater=self._heartbeater, watcher=self._watcher, observer=observer,
                                  interval=self.presence_interval)
        self.loops = self._own_loops() + list(loops)

    # --- public ---------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming and drain (thread- and signal-safe)."""
        self._stop.set()
        self._slots.wake.set()

    @property
    def sizing(self) -> Sizing:
        """Threads, claim batch and prefetch now (the sizer's, or the settings' when autosize is off)."""
        if self.sizer is not None:
            return self.sizer.current
        c = self.config
        return Sizing(concurrency=c.concurrency, claim_batch=c.claim_batch_size, prefetch=c.prefetch, reason="fixed")

    @property
    def waiting(self) -> bool:
        """Listening, its last claim drained its queues, and the database knows: enqueues NOTIFY it
        (recon.engine.claimer)."""
        return self._claimer.waiting

    @property
    def in_flight(self) -> int:
        """Leases held: jobs running or waiting for their finish to commit."""
        return self._slots.in_flight

    def presence(self, *, stopped: bool = False) -> WorkerPresence:
        """This process as the workers table shows it: slots, busy slots and cumulative counters."""
        return self._presence.snapshot(stopped=stopped)

    def run(self, *, burst: bool = False) -> WorkerStats:
        """Claim and run jobs until ``request_stop()`` (or, with ``burst``, until nothing is claimable)."""
        if burst and self.run_watcher:
            # rescue expired leases first, or a burst could find nothing claimable and exit before the
            # watcher thread's first pass (a rerun after a crash must pick the crashed jobs up)
            try:
                self._watcher.run_once()
            except StoreError as exc:
                log.warning("stuck watcher failed: %s", exc)
        self._presence.publish(start=True)
        self._heartbeater.open()  # before the handler threads may hold every pooled connection
        finisher = self._start_threads()
        loops = [loop for loop in self.loops if loop.in_burst or not burst]
        for loop in loops:
            loop.start(self._halt)
        log.info("worker %s started: queues=%s concurrency=%d%s", self.worker_id, self.queues, self.sizing.concurrency,
                 " (autosize)" if self.sizer is not None else "")
        try:
            self._claimer.run(self._stop, burst=burst)
            self._drain()
        finally:
            self._halt.set()
            self._finisher.stop()
            self._runners.stop()
            finisher.join(timeout=JOIN_SECONDS)
            joined = {loop.name: loop.join(JOIN_SECONDS) for loop in loops}
            if joined.get("heartbeat", False):
                self._heartbeater.close()  # a beat still stuck in its statement keeps it (a daemon thread)
            self.stats.lease_expirations = self._watcher.lease_expirations
            self.stats.leases_lost = self._heartbeater.lost
            self._presence.publish(stopped=True)
        log.info("worker %s stopped: %s", self.worker_id, self.stats.to_dict())
        return self.stats

    # --- threads --------------------------------------------------------------------------------------

    def _own_loops(self) -> list[Periodic]:
        """The heartbeat (first beat after one interval: the leases were just taken), the presence (published
        at start) and, unless ``run_watcher`` is off, the stuck watcher."""
        loops = [Periodic("heartbeat", lambda _stop: self._heartbeater.beat_once(),
                          interval=self.config.heartbeat_interval_seconds, immediate=False),
                 Periodic("presence", lambda _stop: self._presence.run_once(), interval=self.presence_interval,
                          immediate=False)]
        if self.run_watcher:
            loops.append(Periodic("watcher", self._watcher.run_once, interval=self.config.watcher_interval_seconds))
        if self.sizer is not None:
            loops.append(Periodic("sizer", self.sizer.run_once, interval=SIZER_INTERVAL_SECONDS, immediate=False))
        return loops

    def _window(self) -> tuple[int, float, float, bool, int]:
        """The sizer's window (recon.engine.sizing): the slots' counts and the threads inside a handler now."""
        active = max(0, self._slots.busy - self._runners.queued())
        return (*self._slots.take_window(), active)

    def _resize(self, sizing: Sizing) -> None:
        self._slots.resize(capacity=sizing.concurrency + sizing.prefetch, claim_batch=sizing.claim_batch)
        self._runners.resize(sizing.concurrency)

    def _start_threads(self) -> threading.Thread:
        """The runners, the finisher (returned: ``run`` waits for it) and the LISTEN thread."""
        self._runners.start()
        specs: list[tuple[str, Callable[[], None]]] = [("recon-finisher", self._finisher.run)]
        if self.wakeup_func is not None:
            wakeup = self.wakeup_func
            specs.append(("recon-listener", lambda: wakeup(self._halt, self._on_notify)))
        threads = {name: threading.Thread(target=fn, name=name, daemon=True) for name, fn in specs}
        for t in threads.values():
            t.start()
        return threads["recon-finisher"]

    def _on_notify(self, queue: str) -> None:
        if queue == "*" or queue in self.queues:
            self._slots.wake.set()

    # --- shutdown -------------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Once the claim loop stopped: give prefetched jobs back at once (the drain window is for running
        ones), wait up to ``drain_timeout_seconds`` for the leases held, then give back those still running."""
        unstarted = self._runners.unstarted()
        if unstarted:
            released = self._finisher.release(unstarted, reason="released on shutdown before it started")
            log.info("stopping: released %d prefetched jobs", released)
        wake = self._slots.wake
        deadline = time.monotonic() + self.config.drain_timeout_seconds
        while self._slots.in_flight and time.monotonic() < deadline:
            wake.clear()
            wake.wait(min(0.05, max(deadline - time.monotonic(), 0)))
        leftover = self._slots.executing_now()
        if leftover:
            released = self._finisher.release(leftover, reason="released on shutdown")
            log.warning("drain window over: released %d running jobs", released)
