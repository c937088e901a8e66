from __future__ import annotations

from datetime import timedelta

import pytest

from recon.durations import parse_duration
from recon.errors import UsageError


@pytest.mark.parametrize(("text", "expected"), [
    ("90", timedelta(seconds=90)), ("1.5", timedelta(seconds=1.5)), ("30s", timedelta(seconds=30)),
    ("15m", timedelta(minutes=15)), ("1h30m", timedelta(minutes=90)), ("2d", timedelta(days=2)),
    ("500ms", timedelta(milliseconds=500)), ("1w", timedelta(weeks=1)), (" 5M ", timedelta(minutes=5)),
])
def test_parse_duration__accepts(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "5x", "-5s", "5 m", "m5", "1h-2m"])
def test_parse_duration__rejects_with_a_clear_error(text: str) -> None:
    with pytest.raises(UsageError, match=r"--older-than: .* is not a duration"):
        parse_duration(text, what="--older-than")
