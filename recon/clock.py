"""Clock protocol, SystemClock and FixedClock: the only place that reads the wall clock.

Lease arithmetic in production uses the *database* clock (one clock for every worker host): the store
passes ``now=None`` to SQL, which then uses ``now()``. A clock that ``is_fixed`` makes the store pass its
time instead, so database comparisons follow a frozen test clock. SQLite has no shared server clock; the
store always passes the process clock there (every SQLite writer is on the same host).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    is_fixed: bool

    def now(self) -> datetime:
        """An aware UTC datetime."""
        ...


class SystemClock:
    """The wall clock. ``datetime.now`` is also what freezegun freezes, so tests may freeze it."""

    is_fixed = False

    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock:
    """A clock that only moves when told to; the store passes its time to every SQL statement."""

    is_fixed = True

    def __init__(self, at: datetime) -> None:
        if at.tzinfo is None:
            raise ValueError("FixedClock needs an aware datetime")
        self._at = at.astimezone(UTC)

    def now(self) -> datetime:
        return self._at

    def advance(self, delta: timedelta | float) -> datetime:
        self._at += delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        return self._at

    def set(self, at: datetime) -> None:
        self._at = at.astimezone(UTC)


class ProcessClock:
    """The process's wall clock, passed to SQL like a fixed clock: what freezegun tests use, so that the
    database compares against the frozen time instead of its own ``now()``."""

    is_fixed = True

    def now(self) -> datetime:
        return datetime.now(UTC)


def parse_instant(text: str) -> datetime:
    """An ISO-8601 date-time from outside (a CSV cell, ``--since``), as aware UTC: UTC when it has no offset.
    Raises ValueError when it does not parse or, once in UTC, falls outside the years 1..9999 (datetime's
    range: ``0001-01-01T00:00:00+01:00`` would otherwise raise OverflowError wherever it was converted)."""
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{text!r} is outside the years 1..9999 in UTC") from None
