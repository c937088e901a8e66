"""The sizing rule of a worker that sizes itself (recon.engine.sizing): a pure function on a table, its bounds on a
grid, and the Sizer's windows on a fake clock. Expected values are worked out by hand in the comments."""

from __future__ import annotations

import itertools

import pytest

from recon.engine.sizing import (
    LEASE_WAIT_SHARE,
    MIN_FINISHED,
    Pressure,
    Sizer,
    Sizing,
    SizingBounds,
    Window,
    initial,
    plan,
)

B = SizingBounds(min_concurrency=8, max_concurrency=256, claim_batch_size=50, max_prefetch=256,
                 lease_ttl_seconds=30.0)  # a quarter of the TTL: 7.5 s of waiting for a thread at most


def test_initial__the_least_threads_no_prefetch_claims_of_a_job_per_thread() -> None:
    assert initial(B) == Sizing(concurrency=8, claim_batch=8, prefetch=0, reason="start")


CASES = [
    pytest.param(  # 20,000 no-op jobs a second: threads 5 % busy, unchanged; prefetch max(8, 50) = 50, claims 50
        Sizing(8, 8, 0), Window(1.0, 20_000, 0.4, 0.001, True),
        Sizing(8, 50, 50, "start", None, 0.001), id="short-jobs-batch-and-prefetch"),
    pytest.param(  # 200 ms PSP calls on 8 threads, all busy, work waiting: x2
        Sizing(8, 50, 50), Window(1.0, 40, 8.0, 0.3, True),
        Sizing(16, 50, 50, "busy", None, 0.3), id="busy-doubles"),
    pytest.param(  # 100/s x 0.2 s = 20 threads; x 1.25 = 25 < 32
        Sizing(16, 50, 50), Window(1.0, 80, 16.0, 0.3, True, demand=20.0),
        Sizing(25, 50, 50, "psp rate limit", None, 0.3), id="psp-rate-limit-caps-growth"),
    pytest.param(  # a 429: 32 x 3/4 = 24, remembered as the ceiling
        Sizing(32, 50, 50), Window(1.0, 100, 32.0, 0.3, True, throttled=3),
        Sizing(24, 50, 50, "throttled", 32, 0.3), id="throttled-shrinks"),
    pytest.param(  # past 3/4 of the ceiling (24): + 10 % = ceil(26.4) = 27, not 48
        Sizing(24, 50, 50, "throttled", 32), Window(1.0, 80, 24.0, 0.3, True),
        Sizing(27, 50, 50, "busy", 32, 0.3), id="after-throttle-additive"),
    pytest.param(  # 10 % busy, nothing waiting: 64 / 2
        Sizing(64, 50, 64), Window(1.0, 100, 6.4, 0.1, False),
        Sizing(32, 50, 50, "idle", None, 0.1), id="idle-halves"),
    pytest.param(  # 4 is under the least: 8
        Sizing(8, 50, 50), Window(1.0, 10, 0.1, 0.01, False),
        Sizing(8, 50, 50, "idle", None, 0.01), id="idle-at-min"),
    pytest.param(  # 512 is over the most: 256; prefetch max(256, 50) = 256 (bound 256 x 7.5 / 0.3 = 6,400)
        Sizing(256, 50, 256), Window(1.0, 1000, 256.0, 0.3, True),
        Sizing(256, 50, 256, "busy", None, 0.3), id="busy-at-max"),
    pytest.param(  # 2 s calls at 100/s: 200 x 1.25 = 250 < 256; prefetch 250 (bound 250 x 7.5 / 2.2 = 852)
        Sizing(128, 50, 128), Window(4.0, 256, 512.0, 2.2, True, demand=200.0),
        Sizing(250, 50, 250, "psp rate limit", None, 2.2), id="two-second-calls"),
    pytest.param(  # 10 s jobs: 16 threads x 7.5 s / 10 s = 12 may wait; claims 16 + 12 = 28 at most
        Sizing(8, 8, 0), Window(10.0, 8, 80.0, 10.0, True),
        Sizing(16, 28, 12, "busy", None, 10.0), id="long-jobs-lease-bounds-prefetch"),
    pytest.param(  # no handler returned in 5 s, all 8 inside one: busy; durations still unknown: no prefetch
        Sizing(8, 8, 0), Window(5.0, 0, 0.0, 0.0, True, active=8),
        Sizing(16, 16, 0, "busy", None, 0.0), id="unknown-durations-no-prefetch"),
    pytest.param(  # 120 s jobs: 8 x 7.5 / 120 < 1: none may wait
        Sizing(8, 8, 0), Window(1200.0, 8, 960.0, 120.0, False),
        Sizing(8, 8, 0, "idle", None, 120.0), id="very-long-jobs-no-prefetch"),
    pytest.param(  # a window without a finish keeps the seconds known before (10 s: 8 x 7.5 / 10 = 6)
        Sizing(8, 14, 6, "busy", None, 10.0), Window(5.0, 0, 0.0, 0.0, True, active=4),
        Sizing(8, 14, 6, "busy", None, 10.0), id="no-finish-keeps-seconds"),
    pytest.param(  # throttled at the least: 6 is under it, 8; the ceiling is 8
        Sizing(8, 50, 50), Window(1.0, 40, 8.0, 0.2, True, throttled=1),
        Sizing(8, 50, 50, "throttled", 8, 0.2), id="throttled-at-min"),
    pytest.param(  # the ramp at 2 s calls: 8 threads all inside a call, 100/s x 2 s = 200 known: straight to
        # 200 x 1.25 = 250 (not 16); prefetch 250 (bound 250 x 7.5 / 2.5 = 750)
        Sizing(8, 8, 0), Window(2.0, 8, 16.0, 2.5, True, demand=200.0, active=8),
        Sizing(250, 50, 250, "psp rate limit", None, 2.5), id="ramp-straight-to-littles-law"),
    pytest.param(  # the same after a 429 (ceiling 240): no jump, past 3/4 of it + 10 %: ceil(205 x 1.1) = 226
        Sizing(205, 50, 205, "throttled", 240), Window(2.0, 205, 410.0, 2.5, True, demand=200.0),
        Sizing(226, 50, 226, "busy", 240, 2.5), id="ramp-after-a-429-is-additive"),
    pytest.param(  # 250 threads at 100/s x 2 s: the bucket stayed empty for some (saturated): 250 x 3/4 = 188,
        # but the rate keeps 200 busy: 200, ceiling 250
        Sizing(250, 50, 250), Window(2.0, 200, 500.0, 2.5, True, saturated=5, demand=200.0),
        Sizing(200, 50, 200, "psp rate limit reached", 250, 2.5), id="saturated-keeps-what-the-rate-needs"),
    pytest.param(  # saturated with no figure known: x 3/4 (64 -> 48)
        Sizing(64, 50, 64), Window(2.0, 100, 128.0, 1.0, True, saturated=2),
        Sizing(48, 50, 50, "psp rate limit reached", 64, 1.0), id="saturated-without-demand"),
]


@pytest.mark.parametrize(("current", "window", "expected"), CASES)
def test_plan__table(current: Sizing, window: Window, expected: Sizing) -> None:
    assert plan(current, window, B) == expected


def test_plan__bounds_hold_on_a_grid() -> None:
    """Whatever the window: threads within the settings, claims within the setting and the room, and a prefetched
    job never waits for a thread longer than a quarter of the lease TTL at the window's longest duration."""
    bounds = SizingBounds(min_concurrency=2, max_concurrency=64, claim_batch_size=40, max_prefetch=100,
                          lease_ttl_seconds=10.0)
    for n, finished, longest, busy_share, waiting, throttled, saturated, demand, active in itertools.product(
            (1, 2, 7, 64, 100), (0, 1, 50), (0.0, 0.0001, 0.2, 3.0, 40.0), (0.0, 0.5, 1.0), (False, True),
            (0, 2), (0, 1), (None, 0.5, 30.0, 500.0), (0, 5)):
        current = Sizing(n, 10, 5, seconds=0.0)
        window = Window(2.0, finished, busy_share * 2.0 * n if finished else 0.0, longest if finished else 0.0,
                        waiting, throttled=throttled, saturated=saturated, demand=demand, active=active)
        s = plan(current, window, bounds)
        assert 2 <= s.concurrency <= 64
        assert 1 <= s.claim_batch <= min(40, s.concurrency + s.prefetch)
        assert 0 <= s.prefetch <= 100
        if s.seconds > 0:
            assert s.prefetch * s.seconds <= s.concurrency * LEASE_WAIT_SHARE * 10.0
        else:
            assert s.prefetch == 0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_sizer__waits_for_enough_finishes_then_applies_and_counts_throttles_since_the_last_pass() -> None:
    clock = Clock()
    applied: list[Sizing] = []
    counts = {"ran": 0}
    windows = [(40, 8.0, 0.3, True, 8), (40, 16.0, 0.3, True, 16), (40, 16.0, 0.3, True, 16)]
    throttles = iter([5, 5, 5, 7])  # at start, then one per window that closes

    def gather() -> tuple[int, float, float, bool, int]:
        counts["ran"] = 0
        return windows.pop(0)

    sizer = Sizer(B, apply=applied.append, gather=gather, peek=lambda: counts["ran"],
                  pressure_func=lambda: Pressure(demand=None, throttles=next(throttles)), monotonic_func=clock)
    clock.now += 1.0
    counts["ran"] = MIN_FINISHED - 1
    assert sizer.run_once() == initial(B) and applied == []  # too few finishes, too soon: the window stays open
    counts["ran"] = MIN_FINISHED
    first = sizer.run_once()  # 8 threads 100 % busy over 1 s: 16 (the 5 throttles before the start do not count)
    assert (first.concurrency, first.prefetch, first.reason) == (16, 50, "busy") and applied == [first]
    clock.now += 1.0
    counts["ran"] = MIN_FINISHED
    second = sizer.run_once()  # no new throttle: x2
    assert second.concurrency == 32
    clock.now += 1.0
    counts["ran"] = MIN_FINISHED
    third = sizer.run_once()  # 2 throttles since: 32 x 3/4
    assert (third.concurrency, third.reason, third.ceiling) == (24, "throttled", 32)
    assert sizer.changes == 3 and applied == [first, second, third]


def test_sizer__counts_429s_and_empty_bucket_snoozes_apart() -> None:
    """A window with new saturation snoozes but no new 429 sheds threads down to the rate's figure, not x 3/4; a
    window stays open until it lasted the last window's longest handler."""
    clock = Clock()
    pressures = iter([Pressure(200.0, 1, 3), Pressure(200.0, 1, 3), Pressure(200.0, 1, 9)])  # start, then per window

    gathered: list[float] = []

    def gather() -> tuple[int, float, float, bool, int]:
        gathered.append(clock.now)
        return (200, 400.0, 2.5, True, 200)

    sizer = Sizer(B, apply=lambda _s: None, gather=gather, peek=lambda: MIN_FINISHED,
                  pressure_func=lambda: next(pressures), monotonic_func=clock)
    clock.now += 2.0
    first = sizer.run_once()  # the 429 and the 3 snoozes before the start do not count: straight to 250
    assert (first.concurrency, first.reason) == (250, "psp rate limit")
    clock.now += 2.0
    assert sizer.run_once() == first and gathered == [102.0]  # 2 s < the last window's longest handler: open
    clock.now += 1.0
    second = sizer.run_once()  # 6 snoozes since, no 429: max(188, 200)
    assert (second.concurrency, second.reason, second.ceiling) == (200, "psp rate limit reached", 250)
