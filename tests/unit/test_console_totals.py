"""recon.console.totals: a filter's totals kept ``ttl`` by the clock the page reads, forgotten on ``clear``, the
least recently computed dropped first; ``[console] totals_ttl`` bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from recon.console import totals
from recon.console.config import ConsoleConfig
from recon.console.totals import TotalsCache
from recon.errors import ConfigError

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def counter() -> tuple[list[int], object]:
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    return calls, compute


def test_totals__kept_for_the_ttl_then_computed_again() -> None:
    cache = TotalsCache(timedelta(seconds=10))
    calls, compute = counter()
    first = cache.get("f", compute, now=T0)  # type: ignore[arg-type]
    assert (first.value, first.at, first.cached) == (1, T0, False)
    kept = cache.get("f", compute, now=T0 + timedelta(seconds=9.9))  # type: ignore[arg-type]
    assert (kept.value, kept.at, kept.cached) == (1, T0, True)
    assert cache.get("g", compute, now=T0).value == 2  # type: ignore[arg-type]  # another filter: its own
    again = cache.get("f", compute, now=T0 + timedelta(seconds=10))  # type: ignore[arg-type]
    assert (again.value, again.at, again.cached) == (3, T0 + timedelta(seconds=10), False)
    assert len(calls) == 3


def test_totals__clear_forgets_everything_and_a_clock_gone_back_computes() -> None:
    cache = TotalsCache(timedelta(seconds=10))
    calls, compute = counter()
    cache.get("f", compute, now=T0)  # type: ignore[arg-type]
    cache.clear()
    assert cache.get("f", compute, now=T0).cached is False  # type: ignore[arg-type]
    assert cache.get("f", compute, now=T0 - timedelta(seconds=1)).cached is False  # type: ignore[arg-type]
    assert len(calls) == 3


def test_totals__ttl_zero_computes_every_time() -> None:
    cache = TotalsCache(timedelta(0))
    calls, compute = counter()
    for _ in range(3):
        assert cache.get("f", compute, now=T0).cached is False  # type: ignore[arg-type]
    assert len(calls) == 3


def test_totals__the_least_recently_computed_goes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(totals, "MAX_ENTRIES", 2)
    cache = TotalsCache(timedelta(seconds=10))
    for key in ("a", "b", "c"):
        cache.get(key, lambda: 0, now=T0)
    assert cache.get("a", lambda: 1, now=T0).cached is False
    assert cache.get("c", lambda: 1, now=T0).cached is True


def test_config__totals_ttl_bounded() -> None:
    assert ConsoleConfig.load({}).totals_ttl == timedelta(seconds=10)
    assert ConsoleConfig.load({"totals_ttl": "0s"}).totals_ttl == timedelta(0)
    assert ConsoleConfig.load({"totals_ttl": "60s"}).totals_ttl == timedelta(seconds=60)
    for bad in ("61s", "2m", "soon", True, [1]):
        with pytest.raises(ConfigError, match=r"console\.totals_ttl"):
            ConsoleConfig.load({"totals_ttl": bad})
