"""recon.render.output.progress_while: the sweep's progress bar stays whole while the in-process worker logs.

A forced-terminal rich console writes into a buffer that recon's log handler writes into too, as both write
to the same terminal in ``recon sweep``. Rich redraws its live bar with cursor controls: after stripping the
escape sequences, every carriage return or newline starts a new screen line, and no log text may share a
screen line with the bar.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import threading
from collections.abc import Iterator

import pytest
from rich.console import Console

from recon.logs import configure
from recon.render import output as render

_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LABEL = "reconciling"


@pytest.fixture
def terminal() -> Iterator[io.StringIO]:
    """The terminal: a buffer both the console and recon's log handler (INFO, text) write to."""
    root = logging.getLogger()
    level = root.level
    screen = io.StringIO()
    handler = configure(level="INFO", stream=screen)
    yield screen
    root.removeHandler(handler)
    root.setLevel(level)


def run_logging_worker(screen: io.StringIO) -> None:
    console = Console(file=screen, force_terminal=True, width=100, color_system=None)
    done = [0]

    def work() -> None:
        log = logging.getLogger("recon.engine.worker")

        def thread() -> None:  # the worker's lines come from its own threads
            for n in range(20):
                log.info("worker line %d finished a job", n)
                done[0] += 1
                threading.Event().wait(0.02)

        t = threading.Thread(target=thread)
        t.start()
        t.join()

    render.progress_while(work, lambda: done[0], total=20, label=LABEL, console=console)


def screen_lines(screen: io.StringIO) -> list[str]:
    return [line for line in re.split(r"[\r\n]", _CSI.sub("", screen.getvalue())) if line.strip()]


def test_progress__log_lines_print_above_the_bar_not_inside_it(terminal: io.StringIO) -> None:
    run_logging_worker(terminal)
    lines = screen_lines(terminal)
    logged = [line for line in lines if "worker line" in line]
    assert len(logged) == 20  # every line printed, once, whole
    assert all(LABEL not in line for line in logged)
    assert all(line.split(" recon.engine.worker: ")[1].startswith("worker line") for line in logged)
    assert any(LABEL in line and "20/20" in line for line in lines)  # the bar, drawn to the end


def test_progress__the_check_bites_when_lines_bypass_the_bar(terminal: io.StringIO,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: log lines written straight to the terminal while the bar is up land on the bar's line."""
    monkeypatch.setattr(render, "lines_through", lambda stream: contextlib.nullcontext())
    run_logging_worker(terminal)
    assert any(LABEL in line and "worker line" in line for line in screen_lines(terminal))
