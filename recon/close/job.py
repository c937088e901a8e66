"""Job kind ``close``, which ``[schedule.NAME] kind = "close"`` queues daily: a PSP's payouts of a day fetched
(where its adapter lists them), matched and written as the close's report.

Payload ``{"psp": "stripe", "directory": "closes", "days_back": 1, "format": "csv"}``: the close of the UTC day
``days_back`` days before the job runs into ``DIRECTORY/close-PSP-YYYY-MM-DD.FORMAT``, replaced only when
complete (``recon close --output``). Open items are the report's business, not a failure: the job completes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, date, timedelta
from typing import Any, ClassVar

from psp_adapters.errors import PspError
from recon.classify import classify
from recon.clock import Clock, SystemClock
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome
from recon.errors import ConfigError, UsageError
from recon.rows import Job

CLOSE_KIND = "close"
CLOSE_KEYS = {"psp", "directory", "days_back", "format"}
#: (psp, since, until, path, fmt, as_of) -> how many items are open
CloseFunc = Callable[[str, date, date, str, str, date], int]


class CloseJob:
    kind: ClassVar[str] = CLOSE_KIND
    queue: ClassVar[str | None] = None

    def __init__(self, close_func: CloseFunc, *, psp_names: tuple[str, ...], clock: Clock | None = None) -> None:
        self.close_func, self.psp_names = close_func, psp_names
        self.clock = clock or SystemClock()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        try:
            psp, directory, days_back, fmt = close_options(job.payload, self.psp_names)
        except UsageError as exc:
            return Dead(error_kind="validation", error=str(exc))
        today = self.clock.now().astimezone(UTC).date()
        day = today - timedelta(days=days_back)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"close-{psp}-{day.isoformat()}.{fmt}")
        try:
            self.close_func(psp, day, day + timedelta(days=1), path, fmt, today)
        except PspError as exc:
            return classify(exc)
        except (ConfigError, UsageError) as exc:
            return Dead(error_kind="config", error=f"{type(exc).__name__}: {exc}")
        return Complete()


def close_options(payload: Mapping[str, Any], psp_names: tuple[str, ...]) -> tuple[str, str, int, str]:
    """(psp, directory, days_back, format); UsageError naming the key that is wrong."""
    extra = sorted(set(payload) - CLOSE_KEYS)
    if extra:
        raise UsageError(f"{extra[0]}: unknown key (known: {', '.join(sorted(CLOSE_KEYS))})")
    psp = payload.get("psp")
    if psp not in psp_names:
        raise UsageError(f"psp: unknown PSP {psp!r} (known: {', '.join(psp_names)})")
    directory = payload.get("directory", "closes")
    if not isinstance(directory, str) or not directory or len(directory) > 4096:
        raise UsageError("directory: must be a directory path")
    days_back = payload.get("days_back", 1)
    if isinstance(days_back, bool) or not isinstance(days_back, int) or not 0 <= days_back <= 366:
        raise UsageError("days_back: must be an integer from 0 to 366")
    fmt = payload.get("format", "csv")
    if fmt not in ("csv", "json"):
        raise UsageError("format: must be \"csv\" or \"json\"")
    return str(psp), directory, days_back, fmt
