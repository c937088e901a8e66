"""A worker that sizes itself: handler threads, claim batch and prefetch follow what the jobs do.

Every ``interval`` seconds the worker's ``sizer`` loop (recon.engine.periodic) looks at the window since its
last pass (``Window``: finished handlers and their run time, whether claims found more work than room, and
the outside parties' pressure: the threads the PSPs' rate limits could keep busy and the 429s they answered)
and ``plan`` decides the next ``Sizing``. ``plan`` is a pure function, tested on a table:

| the window says                                             | handler threads (``concurrency``)            |
| ----------------------------------------------------------- | -------------------------------------------- |
| a PSP answered 429                                          | x 3/4 (multiplicative decrease)              |
| the guard snoozed jobs because the PSP's rate-limit bucket  | x 3/4, but not below the threads the rate    |
| stayed empty (``saturated``: more threads than the rate     | limits keep busy (rate x call seconds) when  |
| needs; never a wait for another thread's statement)         | that is known                                |
| threads >= 85 % busy and work is waiting (a claim came back | x 2; when the PSPs' rate limits' figure is   |
| full, or no slot was free)                                  | known (Little's law: rate x call seconds x   |
|                                                             | 1.25), straight to it and no further         |
| after a throttle, growing past 3/4 of the count throttled  | + 10 % (at least one; additive increase)     |
| threads < 25 % busy and nothing waiting                     | x 1/2                                        |
| otherwise                                                   | unchanged                                    |

always within ``[min_concurrency, max_concurrency]`` (``[engine] concurrency`` and ``max_concurrency``).
Short jobs (a no-op drains at 20 µs a job) never make threads busy: their speed comes from claiming in
batches and overlapping the next claim with the running batch, so

- ``claim_batch`` = ``claim_batch_size`` (the setting: the largest claim), at most threads + prefetch;
- ``prefetch`` = ``max(concurrency, claim_batch)`` (the next batch waits while this one runs), at most
  ``max_prefetch``, and never more than a prefetched job can wait for a thread within a quarter of the lease
  TTL: the last of ``prefetch`` queued jobs starts after about ``prefetch / concurrency`` handler durations,
  so ``prefetch <= concurrency * LEASE_WAIT_SHARE * lease_ttl / longest_seconds`` (the window's longest handler,
  a conservative mean; a window in which no handler returned keeps the last one). A worker starts with no
  prefetch: until a handler returned, the durations are unknown. Prefetched jobs are heartbeated like running
  ones; the bound keeps a worker from leasing work it cannot start soon (other workers could), and keeps that
  wait far inside the lease even if beats are late.

``Sizer`` gathers the window from the parts (the runners add each handler's seconds under the slots' lock
they take anyway, the claim loop notes full claims) and applies a plan: ``Slots`` gets the new capacity and
claim batch, ``Runners`` starts or stops threads. With ``[engine] autosize = false`` none of this runs and
the settings are used as they are.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recon.engine.observe import WORKER_LOGGER

log = logging.getLogger(WORKER_LOGGER)

#: how often the sizer looks (seconds): a short drain (20,000 no-op jobs take 1-4 s) should not spend most of its
#: time at the start's sizing
SIZER_INTERVAL_SECONDS = 0.25
#: a window with fewer finished handlers than this, or shorter than the last window's longest handler, is extended
#: (unless it is this many intervals old: 5 s)
MIN_FINISHED = 8
MAX_WINDOW_INTERVALS = 20
#: threads at least this busy, with work waiting, grow
GROW_BUSY = 0.85
#: threads less busy than this, with nothing waiting, shrink
SHRINK_BUSY = 0.25
#: Little's law headroom over rate x call seconds (latency jitter)
DEMAND_HEADROOM = 1.25
#: a prefetched job waits for a thread at most this share of the lease TTL (see the module docstring)
LEASE_WAIT_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class SizingBounds:
    """The settings a plan stays within."""

    min_concurrency: int
    max_concurrency: int
    claim_batch_size: int
    max_prefetch: int
    lease_ttl_seconds: float


@dataclass(frozen=True, slots=True)
class Sizing:
    """What a worker runs with now."""

    concurrency: int
    claim_batch: int
    prefetch: int
    reason: str = "start"
    #: the thread count at which the outside party last throttled us: growth past 3/4 of it is additive
    ceiling: int | None = None
    #: the handler seconds the prefetch bound was computed from (0: none returned yet)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "claim_batch": self.claim_batch, "prefetch": self.prefetch,
                "reason": self.reason, "ceiling": self.ceiling, "seconds": round(self.seconds, 6)}


@dataclass(frozen=True, slots=True)
class Pressure:
    """What the outside parties say: ``demand``, the handler threads the PSPs' rate limits can keep busy (rate x
    call seconds summed over the rate-limited PSPs; None: no rate-limited PSP was called yet), ``throttles``,
    cumulative 429s, and ``saturated``, cumulative snoozes because a rate-limit bucket stayed empty (the sizer
    takes the differences between passes). A worker's own contention (threads waiting for each other) is
    neither: it says nothing about the PSP."""

    demand: float | None = None
    throttles: int = 0
    saturated: int = 0


@dataclass(frozen=True, slots=True)
class Window:
    """What one sizer window saw."""

    seconds: float
    finished: int  #: handlers that returned
    busy_seconds: float  #: their run time, summed
    longest: float  #: the longest of them
    waiting: bool  #: a claim came back full, or the claim loop found no free slot
    throttled: int = 0  #: 429s in the window
    saturated: int = 0  #: snoozes for an empty rate-limit bucket in the window
    demand: float | None = None  #: Pressure.demand
    active: int = 0  #: threads inside a handler when the window closed (long handlers return in no window)

    @property
    def mean_seconds(self) -> float:
        return self.busy_seconds / self.finished if self.finished else 0.0


def initial(bounds: SizingBounds) -> Sizing:
    """The sizing a worker starts with: the least threads, no prefetch (nothing is known of the jobs' durations
    yet: a long job would make every prefetched one wait), claims of at most a job per thread."""
    n = min(max(bounds.min_concurrency, 1), bounds.max_concurrency)
    return Sizing(concurrency=n, claim_batch=min(max(1, bounds.claim_batch_size), n), prefetch=0, reason="start")


def plan(current: Sizing, window: Window, bounds: SizingBounds) -> Sizing:
    """The next sizing after ``window`` (the table of the module docstring)."""
    n, ceiling = current.concurrency, current.ceiling
    busy = window.busy_seconds / (window.seconds * n) if window.seconds > 0 and n else 0.0
    busy = max(busy, window.active / n if n else 0.0)
    if window.throttled > 0:
        target, reason, ceiling = math.ceil(n * 3 / 4), "throttled", n
    elif window.saturated > 0:
        # more threads than the rate needs waited for tokens: shed them, but keep the ones the rate keeps busy
        target, reason, ceiling = math.ceil(n * 3 / 4), "psp rate limit reached", n
        if window.demand is not None:
            target = min(max(target, math.ceil(window.demand)), n)
    elif busy >= GROW_BUSY and window.waiting:
        target, reason = n * 2, "busy"
        if ceiling is not None and target > ceiling * 3 // 4:
            target = max(n + 1, math.ceil(n * 1.1))  # near where the PSP throttled: additive increase
        if window.demand is not None:
            cap = math.ceil(window.demand * DEMAND_HEADROOM)
            if ceiling is None and target < cap:
                target, reason = cap, "psp rate limit"  # Little's law: straight to what the rate keeps busy
            if target > cap:
                target, reason = cap, "psp rate limit"  # more threads would only wait for tokens
    elif busy < SHRINK_BUSY and not window.waiting:
        target, reason = math.ceil(n / 2), "idle"
    else:
        target, reason = n, current.reason
    seconds = window.longest if window.finished else current.seconds
    return _fit(target, bounds, seconds=seconds, reason=reason, ceiling=ceiling)


def prefetch_bound(concurrency: int, seconds: float, bounds: SizingBounds) -> int:
    """The most jobs that may wait for a thread so that the last starts within LEASE_WAIT_SHARE of the TTL when
    handlers take ``seconds`` (the window's longest: a conservative mean)."""
    if seconds <= 0:
        return 0  # nothing returned yet: unknown
    return max(0, math.floor(concurrency * LEASE_WAIT_SHARE * bounds.lease_ttl_seconds / seconds))


def _fit(concurrency: int, bounds: SizingBounds, *, seconds: float, reason: str,
         ceiling: int | None = None) -> Sizing:
    n = min(max(concurrency, bounds.min_concurrency), bounds.max_concurrency)
    claim = max(1, bounds.claim_batch_size)
    prefetch = min(max(n, claim), bounds.max_prefetch, prefetch_bound(n, seconds, bounds))
    return Sizing(concurrency=n, claim_batch=min(claim, n + prefetch), prefetch=prefetch, reason=reason,
                  ceiling=ceiling, seconds=seconds)


class Sizer:
    """Applies ``plan``'s answer to a worker through ``apply``, one window at a time.

    ``gather`` returns and resets what the worker's parts counted since the last call (``Slots.take_window``:
    handlers that returned, their seconds, the longest, whether the claim loop found more work than room, and
    the threads inside a handler now);
    ``pressure_func`` tells the outside parties' pressure (``recon.app`` wires the PSP guard's).
    """

    def __init__(self, bounds: SizingBounds, *, apply: Callable[[Sizing], None],
                 gather: Callable[[], tuple[int, float, float, bool, int]], peek: Callable[[], int],
                 pressure_func: Callable[[], Pressure] | None = None,
                 monotonic_func: Callable[[], float] = time.monotonic) -> None:
        self.bounds = bounds
        self.current = initial(bounds)
        self.changes = 0
        self._apply = apply
        self._gather = gather
        self._peek = peek
        self._pressure = pressure_func
        self._monotonic = monotonic_func
        self._since = monotonic_func()
        start = self._pressure() if self._pressure is not None else Pressure()
        self._throttles, self._saturated = start.throttles, start.saturated

    def run_once(self, _stop: threading.Event | None = None) -> Sizing:
        """One pass: close the window if it holds enough (``peek``: handlers returned so far, at least
        MIN_FINISHED) and lasted at least the last window's longest handler (a window shorter than a handler
        counts handlers that ran mostly before it: at 2 s calls 0.25 s windows read 50 % to 190 % busy and the
        threads swung by a quarter every pass), or is MAX_WINDOW_INTERVALS old; plan, apply."""
        now = self._monotonic()
        seconds = now - self._since
        if seconds < MAX_WINDOW_INTERVALS * SIZER_INTERVAL_SECONDS and (
                self._peek() < MIN_FINISHED or seconds < self.current.seconds):
            return self.current  # too few finished, or shorter than a handler: busy-ness would be noise
        pressure = self._pressure() if self._pressure is not None else Pressure()
        finished, busy, longest, waiting, active = self._gather()
        window = Window(seconds=seconds, finished=finished, busy_seconds=busy, longest=longest, waiting=waiting,
                        active=active, throttled=max(0, pressure.throttles - self._throttles),
                        saturated=max(0, pressure.saturated - self._saturated), demand=pressure.demand)
        self._since, self._throttles, self._saturated = now, pressure.throttles, pressure.saturated
        nxt = plan(self.current, window, self.bounds)
        if (nxt.concurrency, nxt.claim_batch, nxt.prefetch) != (self.current.concurrency, self.current.claim_batch,
                                                                self.current.prefetch):
            log.info("worker resized: %d threads, claims of %d, prefetch %d (%s; %.0f%% busy, %.3fs a job)",
                     nxt.concurrency, nxt.claim_batch, nxt.prefetch, nxt.reason,
                     100 * busy / max(seconds * self.current.concurrency, 1e-9), window.mean_seconds)
            self._apply(nxt)
            self.changes += 1
        self.current = nxt
        return nxt
