"""The rows of the scheduler (``recon.db.schedule_store``): the job a slot queues and the latest claimed slot.
A leaf, like ``recon.rows``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class SlotJob:
    """The job a slot queues (None: the slot is recorded as skipped)."""

    queue: str
    kind: str
    payload: dict[str, Any]
    max_attempts: int


@dataclass(frozen=True, slots=True)
class ClaimedSlot:
    schedule: str
    slot_at: datetime
    enqueued_at: datetime
    job_id: int | None
    scheduler: str
    job_state: str | None
    job_error: str | None
    job_finished_at: datetime | None
