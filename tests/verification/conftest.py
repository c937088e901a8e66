"""tests/verification: the Spin model's statistics, and the hypothesis profiles of the stateful tests.

Each Spin test records its state-space statistics as ``user_properties`` (in ``--junitxml`` reports, also under
pytest-xdist); run without xdist, the terminal summary below prints them in one section, without ``-s``.

Hypothesis: the profile ``ci`` (default) bounds both state machines so that they finish in well under a
minute; ``RECON_HYPOTHESIS_PROFILE=long`` runs many more and longer examples (see docs/verification.md).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=30, stateful_step_count=35, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long", max_examples=1000, stateful_step_count=100, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("RECON_HYPOTHESIS_PROFILE", "ci"))

_SPIN_LINES: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _SPIN_LINES.extend(str(value) for name, value in report.user_properties if name == "spin")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _SPIN_LINES:
        terminalreporter.section("Spin: recon.pml state spaces")
        for line in sorted(_SPIN_LINES):
            terminalreporter.write_line(line)
