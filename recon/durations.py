"""Durations as people type them: ``90``, ``90s``, ``15m``, ``1h30m``, ``2d``, ``500ms``."""

from __future__ import annotations

import re
from datetime import timedelta

from recon.errors import UsageError

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: the longest duration recon accepts anywhere (100 years): past it, dates overflow
DURATION_MAX = timedelta(days=36500)


def parse_duration(text: str, *, what: str = "duration") -> timedelta:
    """Parse ``text``; raise UsageError naming ``what`` and the accepted forms when it is not a duration, or
    when it is longer than DURATION_MAX."""
    raw = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        return _bounded(float(raw), text, what)
    pos, total = 0, 0.0
    for m in _PART.finditer(raw):
        if m.start() != pos:
            break
        total += float(m[1]) * _UNITS[m[2]]
        pos = m.end()
    if not raw or pos != len(raw):
        raise UsageError(f"{what}: {text!r} is not a duration (use e.g. 30, 30s, 15m, 1h30m, 2d)")
    return _bounded(total, text, what)


def _bounded(seconds: float, text: str, what: str) -> timedelta:
    if not seconds <= DURATION_MAX.total_seconds():  # also false for inf and nan
        raise UsageError(f"{what}: {text!r} is too long (at most {DURATION_MAX.days}d)")
    return timedelta(seconds=seconds)
