"""The pruner: finished jobs older than a cutoff are deleted with their history, a batch per transaction.

``run_once()`` does all the work; a ``Periodic`` (recon.engine.periodic) runs it every
``engine.prune_interval_seconds`` in every worker process whose config sets ``engine.prune_older_than``
(``recon worker``, ``recon sweep``, the demo: ``App.worker``), and it runs once as ``recon jobs prune``. Only
succeeded, dead and canceled jobs whose ``finished_at`` is older than the cutoff are deleted; an unfinished job
is never selected, and the delete re-checks the state.

Each batch is one short transaction (``engine.prune_batch_size`` jobs, 1,000 by default): on PostgreSQL
its rows come from the ``jobs_finished_at`` partial index with FOR UPDATE SKIP LOCKED, so pruners on many
hosts split the work and never wait for each other or for workers; on SQLite each batch holds the single
write lock for a few milliseconds, between which workers claim and finish as usual. Pruning keeps the
hot set small; the claim itself reads the claimable partial index and does not slow down as
finished jobs accumulate (``bench/prune.py``).

Hazard: pruned jobs are gone, with their attempt history. A dead job pruned before anyone looked at it
cannot be replayed; keep ``prune_older_than`` longer than the time it takes to notice dead letters.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from recon.db.jobs_store import JobStore

log = logging.getLogger(__name__)

PRUNE_BATCH_DEFAULT = 1000


@dataclass(slots=True)
class PruneResult:
    jobs: int = 0  #: jobs deleted
    attempts: int = 0  #: attempt-history rows deleted with them
    batches: int = 0  #: transactions committed
    seconds: float = 0.0

    def to_dict(self) -> dict[str, float | int]:
        return {"jobs": self.jobs, "attempts": self.attempts, "batches": self.batches,
                "seconds": round(self.seconds, 3)}


class Pruner:
    """Deletes jobs that finished more than ``older_than`` ago. ``older_than`` may be zero (everything
    finished so far), never negative."""

    def __init__(self, store: JobStore, *, older_than: timedelta, batch: int = PRUNE_BATCH_DEFAULT) -> None:
        if older_than < timedelta(0):
            raise ValueError("older_than must not be negative")
        if batch < 1:
            raise ValueError("batch must be >= 1")
        self._store = store
        self._older_than = older_than.total_seconds()
        self._batch = batch
        self.pruned = 0  #: jobs deleted over this pruner's life

    def run_once(self, stop: threading.Event | None = None) -> PruneResult:
        """Delete every prunable job, a batch per transaction, until a batch comes back short (or ``stop``
        is set between batches). The cutoff moves with the clock: each batch takes ``now - older_than``."""
        result = PruneResult()
        start = time.monotonic()
        while stop is None or not stop.is_set():
            count = self._store.dead_letters.prune_finished(older_than=self._older_than, limit=self._batch)
            if count.jobs:
                result.batches += 1
                result.jobs += count.jobs
                result.attempts += count.attempts
            if count.jobs < self._batch:
                break
        result.seconds = time.monotonic() - start
        self.pruned += result.jobs
        if result.jobs:
            log.info("pruner: deleted %d finished jobs and %d attempt rows in %d batches (%.1fs)",
                     result.jobs, result.attempts, result.batches, result.seconds)
        return result
