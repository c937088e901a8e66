"""recon.engine.periodic: the rules every background loop shares (start, stop, errors, back-off), once. Each
loop's pass is tested on its own (test_watcher, test_lease, test_presence, test_prune, test_scheduler)."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable

import pytest

from recon.engine.periodic import Periodic
from recon.errors import DatabaseUnavailable, StoreError


class Stop(threading.Event):
    """A real stop event that records every wait and sets itself after ``waits`` of them, so a test runs a loop
    for a known number of passes without sleeping."""

    def __init__(self, waits: int) -> None:
        super().__init__()
        self.waits: list[float | None] = []
        self._limit = waits

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) > self._limit:
            self.set()
        return self.is_set()


class Script:
    """A pass that raises the next exception of ``script`` (None: succeeds), then succeeds."""

    def __init__(self, script: Iterable[BaseException | None]) -> None:
        self._script = list(script)
        self.passes = 0
        self.stops: list[threading.Event] = []

    def __call__(self, stop: threading.Event) -> None:
        self.passes += 1
        self.stops.append(stop)
        if self._script:
            exc = self._script.pop(0)
            if exc is not None:
                raise exc


def records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "recon.engine.periodic"]


def test_periodic__a_failing_pass_never_kills_the_loop_and_each_run_of_failures_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    down = StoreError("database: disk full")
    script = Script([down, down, down, None, down, down])
    with caplog.at_level(logging.INFO, logger="recon.engine.periodic"):
        Periodic("pruner", script, interval=60.0).run(Stop(waits=7))
    assert script.passes == 7  # every pass ran: no failure ended the loop
    assert records(caplog) == [
        (logging.WARNING, "pruner: pass failed, trying again with backoff: database: disk full"),
        (logging.INFO, "pruner: working again after 3 failed passes"),
        (logging.WARNING, "pruner: pass failed, trying again with backoff: database: disk full"),
        (logging.INFO, "pruner: working again after 2 failed passes"),
    ]


def test_periodic__the_failures_of_a_run_are_at_debug_level(caplog: pytest.LogCaptureFixture) -> None:
    script = Script([StoreError("database: disk full")] * 3)
    loop = Periodic("watcher", script, interval=5.0)
    with caplog.at_level(logging.DEBUG, logger="recon.engine.periodic"):
        loop.run(Stop(waits=4))
    levels = [level for level, _ in records(caplog)]
    assert levels == [logging.WARNING, logging.DEBUG, logging.DEBUG, logging.INFO]
    assert loop.failures == 0


def test_periodic__an_outage_is_left_to_the_outage_log_another_error_in_it_still_warns(
        caplog: pytest.LogCaptureFixture) -> None:
    """recon.db.availability's Outage says once that the database is gone; the loops do not say it again. A
    different failure during the run (not the outage) is still worth its one warning."""
    gone = DatabaseUnavailable("database: connection refused")
    script = Script([gone, gone, StoreError("database: permission denied"), gone])
    with caplog.at_level(logging.INFO, logger="recon.engine.periodic"):
        Periodic("heartbeat", script, interval=1.0, immediate=False).run(Stop(waits=5))
    assert records(caplog) == [
        (logging.WARNING, "heartbeat: pass failed, trying again with backoff: database: permission denied"),
        (logging.INFO, "heartbeat: working again after 4 failed passes"),
    ]


def test_periodic__an_unexpected_exception_is_logged_with_its_traceback_and_the_loop_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    script = Script([KeyError("slot")])
    with caplog.at_level(logging.WARNING, logger="recon.engine.periodic"):
        Periodic("scheduler", script, interval=1.0).run(Stop(waits=2))
    [record] = [r for r in caplog.records if r.name == "recon.engine.periodic"]
    assert record.getMessage() == "scheduler: pass failed on an unexpected error, trying again with backoff"
    assert record.exc_info is not None and record.exc_info[0] is KeyError
    assert script.passes == 2


def test_periodic__backs_off_with_jitter_capped_at_its_interval_and_resets_after_a_success() -> None:
    failing = StoreError("database: deadlock detected")
    script = Script([failing] * 7 + [None, failing])
    stop = Stop(waits=9)
    Periodic("presence", script, interval=0.5, rng=random.Random(3)).run(stop)
    # the first pass at once; after each failure a wait in the upper half of a ceiling doubling from 0.05 s,
    # never past the interval; the interval after a success; the ceiling back at 0.05 s after it
    ceilings = [0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.5]
    assert stop.waits[0] == 0.0
    waits = [w for w in stop.waits[1:8] if w is not None]
    assert len(waits) == 7 and all(c / 2 <= w <= c for w, c in zip(waits, ceilings, strict=True))
    assert len(set(waits[4:])) == 3  # jittered: three capped waits, three different values
    assert stop.waits[8] == 0.5
    last = stop.waits[9]
    assert last is not None and 0.025 <= last <= 0.05


def test_periodic__the_first_pass_runs_at_once_or_after_one_interval() -> None:
    at_once, later = Stop(waits=1), Stop(waits=1)
    Periodic("watcher", Script([]), interval=30.0).run(at_once)
    Periodic("heartbeat", Script([]), interval=10.0, immediate=False).run(later)
    assert at_once.waits == [0.0, 30.0]
    assert later.waits == [10.0, 10.0]


def test_periodic__each_pass_is_handed_the_stop_event() -> None:
    script = Script([])
    stop = Stop(waits=2)
    Periodic("pruner", script, interval=1.0).run(stop)
    assert script.stops == [stop, stop]


def test_periodic__stop_ends_a_long_interval_at_once_and_join_sees_it() -> None:
    script = Script([])
    stop = threading.Event()
    loop = Periodic("pruner", script, interval=3600.0)
    thread = loop.start(stop)
    deadline = time.monotonic() + 5
    while script.passes == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    began = time.monotonic()
    stop.set()
    assert loop.join(5) and not thread.is_alive()
    assert time.monotonic() - began < 1.0  # not an hour
    assert thread.name == "recon-pruner" and thread.daemon
    assert script.passes == 1


def test_periodic__a_loop_never_started_has_nothing_to_join() -> None:
    assert Periodic("scheduler", Script([]), interval=1.0).join(0.1)


@pytest.mark.parametrize("interval", [0.0, -1.0, float("nan")])
def test_periodic__interval_must_be_positive(interval: float) -> None:
    with pytest.raises(ValueError, match="watcher: interval must be > 0"):
        Periodic("watcher", Script([]), interval=interval)
