"""Observing a worker: what it tells its observer (recon.metrics implements ``WorkerObserver``), the fields of
every log line about a job, and how often a worker publishes its row in the workers table."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from recon.rows import Job

#: how often a worker upserts its row in the workers table (at most; never slower than its heartbeat)
PRESENCE_INTERVAL_SECONDS_DEFAULT = 5.0
#: a worker starting up deletes the rows of workers not seen for this long
WORKER_RETENTION = timedelta(days=1)


class WorkerObserver(Protocol):
    """What a worker tells its observer. Calls come from the finisher thread and must be cheap (in-memory
    counting); the observer's ``snapshot()`` travels to the database with the worker's presence row."""

    def job_finished(self, job: Job, *, outcome: str, error_kind: str | None, seconds: float) -> None:
        """An attempt's finish committed with ``outcome``; ``seconds`` is the handler's run time."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """Cumulative counters as a JSON-able dict, for the ``workers`` row."""
        ...


def job_log_fields(job: Job, worker: str) -> dict[str, Any]:
    """The fields of every log line about ``job`` (recon.logs.job_scope)."""
    return {"job_id": job.id, "kind": job.kind, "attempt": job.attempts, "queue": job.queue, "worker": worker}
