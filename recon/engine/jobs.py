"""Job, JobState, JobSpec and AttemptRecord: the engine's value types.

A job is a durable intent to do work; a lease is a temporary right to attempt it. ``Job.attempts`` is
both the claim counter and the fencing token: every claim increments it, and every write made under a
lease is conditional on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any


class JobState(StrEnum):
    PENDING = "pending"  #: created or snoozed, runs at run_after
    RUNNABLE = "runnable"  #: a worker may claim it
    LEASED = "leased"  #: owned by lease_owner until lease_until
    SUCCEEDED = "succeeded"  #: terminal success
    RETRYABLE = "retryable"  #: failed; claimable again at run_after (backoff)
    DEAD = "dead"  #: terminal failure: permanent error or attempts exhausted (the dead-letter set)
    CANCELED = "canceled"  #: canceled before completion

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELED)


@dataclass(slots=True)
class Job:
    """One row of ``jobs``, as engine code sees it. Datetimes are aware UTC.

    A value: nothing changes a Job after the store made it (a handler that wants another one asks the
    store). It is not ``frozen`` only because the claim loop builds one per claimed job, and a frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` per field) cost 2.5 µs of the worker's budget
    where a plain one costs 0.4 (bench/compare.py).
    """

    id: int
    queue: str
    kind: str
    payload: dict[str, Any]
    state: JobState
    priority: int
    run_after: datetime
    attempts: int
    max_attempts: int
    created_at: datetime
    lease_owner: str | None = None
    lease_until: datetime | None = None
    heartbeat_at: datetime | None = None
    attempted_at: datetime | None = None
    unique_key: str | None = None
    last_error_kind: str | None = None
    last_error: str | None = None
    tenant: str | None = None
    progress: dict[str, Any] | None = None
    finished_at: datetime | None = None
    cancel_requested: bool = False
    free_attempts: int = 0  #: claims that did not spend the retry budget (snoozes, releases, replays)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else value
        out["state"] = str(self.state)
        return out


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


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One row of ``job_attempts``: how one claim of a job ended."""

    job_id: int
    attempt: int
    worker: str
    started_at: datetime | None
    finished_at: datetime
    outcome: str
    error_kind: str | None
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            name: (getattr(self, name).isoformat() if isinstance(getattr(self, name), datetime)
                   else getattr(self, name))
            for name in self.__slots__
        }
