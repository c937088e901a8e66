from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def test_demo__tells_the_story_and_proves_no_double_charge(tmp_path: Path) -> None:
    """The README's first command, smaller: charges under faults, a sweep that heals, the sandbox's proof."""
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "recon", "demo", "--payments", "60", "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert time.monotonic() - started < 60
    lines = r.stdout.splitlines()
    assert any(line.startswith("created 60 payments") for line in lines)
    assert any(line.startswith("sweep checked") for line in lines)
    assert any("most charges for one key: 1 -> no double charge" in line for line in lines)
    final = next(line for line in lines if line.startswith("final: "))
    assert "pending" not in final and "processing" not in final
    assert "INFO recon.engine" not in r.stderr  # the story is the output
    assert (tmp_path / "recon.db").exists() and (tmp_path / "psp-sandbox.db").exists()
