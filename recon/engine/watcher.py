"""The stuck watcher: jobs whose lease expired go back to the queue, or to ``dead`` at max attempts.

``run_once()`` does all the work; a ``Periodic`` (recon.engine.periodic) runs it every
``engine.watcher_interval_seconds`` in every worker process, and alone as ``recon watch``. Its UPDATE
re-checks ``state = 'leased' AND lease_until < now`` on every row (and takes rows with SKIP LOCKED on
PostgreSQL), so any number of watchers on any number of hosts may run at once: each expired lease is rescued
exactly once and gets exactly one ``lease_expired`` row in its attempt history.

Hazard: a handler that runs longer than the TTL without heartbeats is rescued while it still runs, and the
job may execute twice. Fencing keeps the first run's finish out, but its side effects outside the
database are the handler's own business (idempotency keys for PSP calls).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from recon.db.jobs_store import JobStore
from recon.rows import JobState

log = logging.getLogger(__name__)

RESCUE_BATCH_DEFAULT = 500


@dataclass(slots=True)
class WatchResult:
    retryable: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)
    canceled: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.retryable) + len(self.dead) + len(self.canceled)


class Watcher:
    def __init__(self, store: JobStore, *, batch: int = RESCUE_BATCH_DEFAULT) -> None:
        self._store = store
        self._batch = batch
        self.lease_expirations = 0

    def run_once(self, stop: threading.Event | None = None) -> WatchResult:
        """Rescue every expired lease, a batch per transaction, until none is left (or ``stop`` is set between
        batches)."""
        result = WatchResult()
        while stop is None or not stop.is_set():
            rescued = self._store.rescue_expired(limit=self._batch)
            for job_id, state in rescued:
                target = {JobState.DEAD: result.dead, JobState.CANCELED: result.canceled}.get(state, result.retryable)
                target.append(job_id)
            if len(rescued) < self._batch:
                break
        self.lease_expirations += result.total
        if result.total:
            log.warning("stuck watcher: %d expired leases rescued (%d retryable, %d dead, %d canceled)",
                        result.total, len(result.retryable), len(result.dead), len(result.canceled))
        return result
