"""Lint, typing and the security lint as tests, so CI runs them: ruff, mypy --strict, bandit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_code_checks__ruff_is_clean() -> None:
    result = subprocess.run([str(BIN / "ruff"), "check", "recon", "psp_adapters", "tests", "bench", "migrations"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:]


def test_code_checks__mypy_strict_is_clean() -> None:
    result = subprocess.run([str(BIN / "mypy"), "--strict", "recon", "psp_adapters"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:]


def test_code_checks__no_setting_of_a_shipped_process_can_switch_fencing_off() -> None:
    """The planted bug that proves the chaos suite bites lives in tests/chaos/unfenced_worker.py only."""
    offenders = [f"{path.relative_to(REPO)}:{n}" for package in ("recon", "psp_adapters")
                 for path in sorted((REPO / package).rglob("*.py"))
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
                 if "DISABLE_FENCING" in line or "unfenced" in line.lower()]
    assert offenders == []


def test_code_checks__bandit_finds_nothing_unjustified() -> None:
    """A security lint over the shipped code: real findings fixed, the rest marked ``# nosec BXXX`` with a reason."""
    result = subprocess.run([str(BIN / "bandit"), "-q", "-r", "recon", "psp_adapters", "-f", "custom",
                             "--msg-template", "{relpath}:{line}: {test_id} {msg}"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:]
