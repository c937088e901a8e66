"""JobSpec: what to enqueue (the engine's input; the rows it works on are ``recon.rows``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What to enqueue. ``run_at`` (absolute) wins over ``delay``; neither means now."""

    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int = 0
    run_at: datetime | None = None
    delay: timedelta | None = None
    max_attempts: int | None = None
    unique_key: str | None = None
    tenant: str | None = None
