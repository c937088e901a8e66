"""Presence: a worker process's row in the ``workers`` table, which is how one metrics endpoint and
``recon stats`` see the whole pool (recon.metrics).

The row carries the process's slots and busy slots, its queues, and cumulative counters: the worker's own
(claimed, released, stale finishes, leases lost to the heartbeat, expirations the watcher rescued, database
outages and their seconds: recon.db.availability; written once the database is back; waits for a pooled
connection or SQLite's write lock: ``Database.waits``) over
its observer's ``snapshot()`` (the finisher tells the observer of every committed finish, in memory).
It is published when the worker starts (after forgetting workers unseen for ``WORKER_RETENTION``), every
``interval`` seconds by the worker's ``presence`` loop (``run_once``, recon.engine.periodic), and once more,
``stopped``, when the worker ends.

Publishing is never fatal: a worker without its row still works; only the pool's view of it is missing.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

from recon.db.availability import log_failure
from recon.db.pool_store import PoolStore
from recon.engine.lease import Heartbeater
from recon.engine.observe import WORKER_LOGGER, WORKER_RETENTION, WorkerObserver, WorkerStats
from recon.engine.sizing import Sizing
from recon.engine.slots import Slots
from recon.engine.watcher import Watcher
from recon.errors import StoreError
from recon.pool_rows import WorkerPresence

log = logging.getLogger(WORKER_LOGGER)


class Presence:
    """The ``workers`` row of the worker ``worker`` (serving ``queues``; its slots are ``sizing_func()``'s threads,
    and the sizing is in its counters document as ``sizing``)."""

    def __init__(self, pool: PoolStore, *, worker: str, queues: Sequence[str], sizing_func: Callable[[], Sizing],
                 slots: Slots,
                 stats: WorkerStats, heartbeater: Heartbeater, watcher: Watcher,
                 observer: WorkerObserver | None = None, interval: float) -> None:
        self._pool = pool
        self._worker = worker
        self._queues = tuple(queues)
        self._sizing = sizing_func
        self._slots = slots
        self._stats = stats
        self._heartbeater = heartbeater
        self._watcher = watcher
        self._observer = observer
        self.interval = interval

    def snapshot(self, *, stopped: bool = False) -> WorkerPresence:
        """This process as the workers table shows it: slots, busy slots and cumulative counters."""
        busy = self._slots.busy
        stats, outage = self._stats, self._pool.db.outage
        counters: dict[str, Any] = {
            "claimed": stats.claimed, "released": stats.released, "stale_finishes": stats.stale_finishes,
            "leases_lost": self._heartbeater.lost, "lease_expirations": self._watcher.lease_expirations,
            "database_outages": outage.count, "database_outage_seconds": round(outage.seconds, 3),
            "database_waits": self._pool.db.waits.snapshot()}
        if self._observer is not None:
            counters = self._observer.snapshot() | counters
        sizing = self._sizing()
        counters["sizing"] = sizing.to_dict()
        return WorkerPresence(id=self._worker, host=socket.gethostname(), pid=os.getpid(), queues=self._queues,
                              slots=sizing.concurrency, busy_slots=busy, counters=counters, stopped=stopped)

    def publish(self, *, start: bool = False, stopped: bool = False) -> None:
        """Upsert the row (``start``: first prune the rows of long-gone workers); log a failure, never raise."""
        try:
            if start:
                self._pool.prune_workers(older_than=WORKER_RETENTION)
            self.run_once(stopped=stopped)
        except StoreError as exc:
            log_failure(log, "could not update this worker's row in the workers table: %s", exc)

    def run_once(self, *, stopped: bool = False) -> None:
        """Upsert the row; raises StoreError (the presence loop's pass: its ``Periodic`` logs and backs off)."""
        self._pool.upsert_worker(self.snapshot(stopped=stopped))
