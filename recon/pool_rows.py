"""The rows of the worker pool (``recon.db.pool_store``): what a worker writes about itself, and its row as
read. A leaf, like ``recon.rows``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class WorkerPresence:
    """What a worker process writes about itself every few seconds (``PoolStore.upsert_worker``)."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    slots: int
    busy_slots: int
    counters: dict[str, Any]  #: cumulative since the process started; the shape is recon.metrics's
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """One row of ``workers``. Datetimes are aware UTC."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    slots: int
    busy_slots: int
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None
    counters: dict[str, Any]
