"""The totals of a filtered list (the review queue, the payments list), kept a few seconds per filter in this
console process; the overview's document is kept the same way (``pages.overview``).

Over 100,000 items in review, a filter's totals (a count and a sum per currency over every matching row) are
most of a page's cost (docs/benchmarks.md, the review queue at 100,000 items), while paging through the filter,
a reload, the live refresh and the back button ask for the same totals again within seconds. So each filter's
totals are kept ``[console] totals_ttl`` (default 10 s, at most 60 s; 0 s: computed for every page), and the
page says when they were computed. The rows of a page are always read fresh.

Staleness is bounded and visible: every write the console makes (any POST, whoever makes it) clears every kept
total in this process, so an operator sees their own change at once; a change made elsewhere (a worker, the
command line, another console process) shows within the TTL. Nothing that writes reads these totals: a bulk
resolve's preview counts afresh (recon.review_bulk), and so do ``recon review`` and the metrics.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

T = TypeVar("T")

#: filters kept at once per process (the least recently computed goes first)
MAX_ENTRIES = 256


@dataclass(frozen=True, slots=True)
class Kept(Generic[T]):
    value: T
    at: datetime  #: when it was computed (the database's clock)
    cached: bool  #: read from the cache, not computed for this page


class TotalsCache:
    """``get(key, compute_func, now=...)``: the kept value of ``key`` if younger than ``ttl``, else
    ``compute_func()`` kept. Thread-safe (the console renders pages in a thread pool); two pages missing at once
    both compute, which is harmless."""

    def __init__(self, ttl: timedelta) -> None:
        self.ttl = ttl
        self._kept: OrderedDict[Hashable, tuple[object, datetime]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute_func: Callable[[], T], *, now: datetime) -> Kept[T]:
        if self.ttl > timedelta(0):
            with self._lock:
                found = self._kept.get(key)
            if found is not None and now - found[1] < self.ttl and found[1] <= now:
                return Kept(value=found[0], at=found[1], cached=True)  # type: ignore[arg-type]
        value = compute_func()
        if self.ttl > timedelta(0):
            with self._lock:
                self._kept[key] = (value, now)
                self._kept.move_to_end(key)
                while len(self._kept) > MAX_ENTRIES:
                    self._kept.popitem(last=False)
        return Kept(value=value, at=now, cached=False)

    def clear(self) -> None:
        """Forget every kept total (a write was made)."""
        with self._lock:
            self._kept.clear()
