"""Periodic: the one lifecycle of every background loop of a worker process (River's ``startstop`` service and its
``…Loop``/``…Once`` pairs).

A loop is a pass and a ``Periodic``. The pass (``Watcher.run_once``, ``Heartbeater.beat_once``,
``Presence.run_once``, ``Pruner.run_once``, ``Scheduler.run_once``) does all the work and is tested alone, with a
frozen clock; the ``Periodic`` runs it every ``interval`` seconds in a thread of its own, by the same rules for
all five:

- **start**: ``start(stop)`` runs the loop in a daemon thread named ``recon-<name>``; the first pass runs at
  once (``immediate``) or after one interval (the heartbeat: the leases were just taken; the presence: its row
  was just published). ``run(stop)`` runs it in the calling thread (``recon watch``).
- **stop**: every wait is ``stop.wait``, so setting the injected stop event ends the loop at once between
  passes, and within the pass in progress for a pass that checks it between its steps (the watcher's and the
  pruner's batches); ``join`` waits for the thread. Freezing the wall clock in a test does not touch these waits
  (they use the monotonic clock).
- **errors**: an exception in a pass never kills the loop. The first failure of a run of failures is logged once:
  a warning with its message for a ``ReconError``, with its traceback for any other exception (a bug); a
  ``DatabaseUnavailable`` only at debug level, because the database's ``Outage`` has said it once for the whole
  process (recon.db.availability). Further failures of the run are logged at debug level, and the first pass
  that succeeds again says how many failed.
- **back-off**: after a failed pass the next one waits ``Backoff`` (a random wait in the upper half of a ceiling
  that doubles with each failure in a row, recon.db.availability), capped at the interval: a failing loop tries
  again soon, never in lockstep with the other processes' loops, and never more seldom than when it works.

Hazard: a pass that blocks (a statement waiting for a lock) holds its loop: stop is prompt only between passes
and between the steps a pass checks. ``join`` is bounded; the thread is a daemon, so a stuck pass never keeps
the process alive.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from recon.db.availability import BACKOFF_BASE_SECONDS, Backoff
from recon.errors import DatabaseUnavailable, ReconError

log = logging.getLogger(__name__)

#: one pass of a loop; it is handed the loop's stop event, to end early between its steps
PassFunc = Callable[[threading.Event], object]


class Periodic:
    """Runs ``pass_func`` every ``interval`` seconds until its stop event is set (module docstring).

    ``in_burst``: also runs in a worker run with ``burst`` (the scheduler does not: a burst run ends once its
    queues are empty, and is no place to queue the pool's periodic jobs). ``note``: logged at info level when
    the loop starts (what it does, for the operator). ``rng``: the back-off's jitter (tests seed it).
    """

    def __init__(self, name: str, pass_func: PassFunc, *, interval: float, immediate: bool = True,
                 in_burst: bool = True, note: str | None = None, rng: random.Random | None = None) -> None:
        if not interval > 0:
            raise ValueError(f"{name}: interval must be > 0 (got {interval!r})")
        self.name = name
        self.interval = interval
        self.immediate = immediate
        self.in_burst = in_burst
        self.note = note
        self.failures = 0  #: passes failed in a row
        self._pass = pass_func
        self._backoff = Backoff(base=min(BACKOFF_BASE_SECONDS, interval), cap=interval, rng=rng)
        self._warned = False  # the run of failures in progress has been logged above debug
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> threading.Thread:
        """Run the loop in a daemon thread ``recon-<name>`` until ``stop`` is set."""
        thread = threading.Thread(target=self.run, args=(stop,), name=f"recon-{self.name}", daemon=True)
        thread.start()
        self._thread = thread
        return thread

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the thread ``start`` began; True when it has ended (or never began)."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def run(self, stop: threading.Event) -> None:
        """Pass, wait, pass, ... in the calling thread until ``stop`` is set."""
        if self.note:
            log.info("%s: %s", self.name, self.note)
        wait = 0.0 if self.immediate else self.interval
        while not stop.wait(wait):
            wait = self.run_pass(stop)

    def run_pass(self, stop: threading.Event) -> float:
        """One pass under the loop's error rules; returns how long to wait before the next one."""
        try:
            self._pass(stop)
        except Exception as exc:  # any exception: a pass never kills its loop
            self._failed(exc)
            return self._backoff.next()
        if self.failures:
            log.info("%s: working again after %d failed passes", self.name, self.failures)
        self.failures = 0
        self._warned = False
        self._backoff.reset()
        return self.interval

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        if self._warned or isinstance(exc, DatabaseUnavailable):
            log.debug("%s: pass failed (%d in a row): %s", self.name, self.failures, exc)
            return
        self._warned = True
        if isinstance(exc, ReconError):
            log.warning("%s: pass failed, trying again with backoff: %s", self.name, exc)
        else:
            log.warning("%s: pass failed on an unexpected error, trying again with backoff", self.name,
                        exc_info=exc)
