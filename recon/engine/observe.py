"""Observing a worker: the counters it keeps (``WorkerStats``, what ``Worker.run`` returns), what it tells its
observer (recon.counters implements ``WorkerObserver``), the logger and fields of every log line about a job,
and how often a worker publishes its row in the workers table."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from recon.rows import Job

#: the one logger every part of a worker (claim loop, runners, finisher, presence) writes to, so that a
#: log configuration or filter names the worker pool once
WORKER_LOGGER = "recon.engine.worker"

#: how often a worker upserts its row in the workers table (at most; never slower than its heartbeat)
PRESENCE_INTERVAL_SECONDS_DEFAULT = 5.0
#: a worker starting up deletes the rows of workers not seen for this long
WORKER_RETENTION = timedelta(days=1)


@dataclass(slots=True)
class WorkerStats:
    """A worker process's cumulative counters. Each is written by one thread only: ``claimed`` by the claim
    loop, ``outcomes`` (finishes that committed) and ``stale_finishes`` by the finisher, ``released`` by the
    thread that stops the worker (the claim loop's: it also gives back the jobs of a claim whose answer was
    lost), ``lease_expirations`` and ``leases_lost`` by ``run`` when it ends."""

    claimed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    stale_finishes: int = 0
    released: int = 0
    lease_expirations: int = 0
    leases_lost: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"claimed": self.claimed, "outcomes": dict(self.outcomes), "stale_finishes": self.stale_finishes,
                "released": self.released, "lease_expirations": self.lease_expirations,
                "leases_lost": self.leases_lost}


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
