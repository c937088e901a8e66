"""STYLE §10's checks as tests, so CI runs them: ruff and mypy --strict."""

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
