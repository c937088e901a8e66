"""The runners: ``concurrency`` handler threads, each running one claimed job at a time under its lease.

A runner takes a ``Running`` from its queue, runs the job's handler inside the job's log scope
(``recon.logs``: every line logged meanwhile names the job; the fields are built only when a line is logged),
and hands the same object, its outcome set (a ``Done``), to the finisher. It never
raises and never decides whether an error is retryable:

- a handler's ``None`` is ``Complete()``; an outcome it returns is passed on as it is;
- an exception it did not classify goes through ``classify_func`` (a failing ``classify_func`` counts as
  ``classify_as_bug``, a retryable ``bug``); ``LeaseLost`` becomes the outcome ``None`` (nothing to write);
- a job kind with no handler is ``Dead`` with error kind ``unknown_kind``.

The slot frees as soon as the handler returns, before the finish commits. A runner wakes the claim loop only
when the slots it frees add up to a batch worth claiming (``Slots.low_water``) or none is busy. The per-job
work is one ``Done``, one log-fields dict and two queue hand-offs; no lock but the slots' one.
"""

from __future__ import annotations

import logging
import queue as queue_mod
import threading
import time
import traceback
from collections.abc import Callable

from recon.engine.handlers import Handlers
from recon.engine.lease import Lease
from recon.engine.observe import WORKER_LOGGER
from recon.engine.outcome import ClassifyFunc, Complete, Dead, Outcome, classify_as_bug
from recon.engine.slots import Done, Running, Slots
from recon.errors import LeaseLost, UnknownJobKind
from recon.logs import enter_job, leave_job
from recon.rows import Job

log = logging.getLogger(WORKER_LOGGER)

#: what a handler's None means (outcomes are immutable: one serves every job)
_COMPLETE = Complete()


class Runners:
    """The handler threads' shared queue and loop. ``submit`` queues a claimed job; each thread runs
    ``run()`` until ``stop()`` (one sentinel per thread); results go to ``done`` (the finisher's queue)."""

    def __init__(self, handlers: Handlers, slots: Slots, *, done: Callable[[Done], None], worker: str,
                 concurrency: int, classify_func: ClassifyFunc = classify_as_bug) -> None:
        self._handlers = handlers
        self._slots = slots
        self._done = done
        self._worker = worker
        self._concurrency = concurrency
        self._classify = classify_func
        self._todo: queue_mod.SimpleQueue[Running | None] = queue_mod.SimpleQueue()
        self.submit: Callable[[Running], None] = self._todo.put
        self._threads_lock = threading.Lock()
        self._started = 0  #: threads ever started (their names)
        self.threads = 0  #: threads that will be running once every stop sentinel queued so far is taken
        self.started: list[threading.Thread] = []  #: the threads started and not seen ended (``resize``)

    def start(self, n: int | None = None) -> None:
        """Start runner threads until ``n`` (default: ``concurrency``) will be running."""
        self.resize(self._concurrency if n is None else n)

    def resize(self, n: int) -> None:
        """Run ``n`` handler threads: start more, or queue stop sentinels for the surplus (each ends after the
        jobs queued before its sentinel; a job is never dropped)."""
        with self._threads_lock:
            self.started = [t for t in self.started if t.is_alive()]
            while self.threads < n:
                self._started += 1
                self.threads += 1
                thread = threading.Thread(target=self.run, name=f"recon-runner-{self._started}", daemon=True)
                thread.start()
                self.started.append(thread)
            while self.threads > n:
                self.threads -= 1
                self._todo.put(None)

    def run(self) -> None:
        """One runner thread: run queued jobs until a stop sentinel."""
        get, done, execute = self._todo.get, self._done, self.execute
        slots = self._slots
        lock, executing, per_queue, wake = slots.lock, slots.executing, slots.per_queue, slots.wake
        monotonic = time.monotonic
        while (item := get()) is not None:
            job = item.job
            started = monotonic()
            token = enter_job(item)  # every line logged while the handler runs names the job (fields built then)
            try:
                outcome = execute(job, item.lease)
            finally:
                leave_job(token)
            seconds = monotonic() - started
            with lock:
                if job.id in executing:
                    executing.discard(job.id)
                    per_queue[job.queue] -= 1
                left = len(executing)
                slots.ran += 1  # the sizer's window (recon.engine.sizing)
                slots.ran_seconds += seconds
                if seconds > slots.ran_longest:
                    slots.ran_longest = seconds
                wake_at = slots.wake_at  # executing counts that free enough slots
            if left in wake_at:
                wake.set()  # the claim loop waits for a batch's worth of free slots (or none busy)
            item.outcome, item.seconds = outcome, seconds
            done(item)  # the same object, now a Done

    def execute(self, job: Job, lease: Lease) -> Outcome | None:
        """Run ``job``'s handler; its outcome, never an exception (None: the lease was lost)."""
        try:
            handler = self._handlers.get(job.kind)
        except UnknownJobKind as exc:
            return Dead(error_kind="unknown_kind", error=str(exc))
        try:
            return handler(job, lease) or _COMPLETE
        except LeaseLost:
            return None
        except Exception as exc:  # a handler's unclassified failure must never kill the worker
            log.debug("job %s raised:\n%s", job.id, traceback.format_exc())
            try:
                return self._classify(exc)
            except Exception:
                return classify_as_bug(exc)

    def queued(self) -> int:
        """Jobs (and stop sentinels) waiting for a thread."""
        return self._todo.qsize()

    def unstarted(self) -> list[Running]:
        """Take every queued job no thread has started (the drain gives them back at once)."""
        out: list[Running] = []
        sentinels = 0
        get_nowait = self._todo.get_nowait
        while True:
            try:
                item = get_nowait()
            except queue_mod.Empty:
                break
            if item is None:
                sentinels += 1
            else:
                out.append(item)
        for _ in range(sentinels):  # a shrink's stop sentinels: their threads must still end
            self._todo.put(None)
        return out

    def stop(self) -> None:
        """One sentinel per thread: each ends after the job it runs (if any)."""
        self.resize(0)
