"""Lease and Heartbeater: a worker's time-limited, fenced hold on one job.

A lease is not a lock: it ends by itself when ``lease_until`` passes without a heartbeat, so a crashed
worker never holds a job forever. The price is that a slow-but-alive worker can lose its lease while its
handler still runs (a long GC pause, SIGSTOP, a partitioned host). The engine makes that safe by fencing:
every write after the claim says ``WHERE id AND lease_owner AND attempts`` (the attempt number is a
monotonic token), so the stale worker's writes match nothing. A handler learns of the loss through
``Lease.lost`` (set by the heartbeat) and ``Lease.check()``; it cannot be killed mid-call (Python threads
cannot be), so its own domain writes must go through the job's finish (``Outcome.write``) or be guarded by
``Lease.holds(conn)`` in the same transaction.

Hazard: a lease TTL shorter than a handler's run *without heartbeats* causes duplicate execution; the
heartbeat interval must stay well under the TTL (config validates ``heartbeat_interval < lease_ttl``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from recon.db.jobs_store import Dedicated, JobStore
from recon.errors import LeaseLost, StoreError

log = logging.getLogger(__name__)


class Lease:
    """The handler's view of its claim: lost? cancel requested? and the fencing token for its writes.

    One is made per claimed job, on the claim loop's hot path: the flags are plain booleans (written by
    the heartbeat thread, read by the handler; a bool assignment is atomic in CPython) and the Event a
    sleeping handler waits on is created only when a handler first calls ``wait()``.
    """

    __slots__ = ("_cancel", "_changed", "_lost", "_store", "attempt", "finishing", "job_id", "worker")

    def __init__(self, store: JobStore, job_id: int, attempt: int, worker: str) -> None:
        self.job_id = job_id
        self.attempt = attempt  #: the fencing token
        self.worker = worker
        self._store = store
        self._lost = False
        self._cancel = False
        self._changed: threading.Event | None = None
        #: set by the worker just before it commits this attempt's finish: from then on a heartbeat that
        #: misses the row is seeing the finish, not a lost lease
        self.finishing = False

    @property
    def lost(self) -> bool:
        """True once a heartbeat or fenced write found that another worker may own the job."""
        return self._lost

    @property
    def cancel_requested(self) -> bool:
        return self._cancel

    def check(self) -> None:
        """Raise LeaseLost if the lease is gone; call it before any side effect."""
        if self._lost:
            raise LeaseLost(f"lease on job {self.job_id} (attempt {self.attempt}) was lost")

    def save_progress(self, progress: dict[str, Any]) -> None:
        """Store a small JSON checkpoint that the next attempt receives as ``job.progress``.

        Raises LeaseLost (and writes nothing) when the lease is no longer ours.
        """
        self.check()
        if not self._store.save_progress(worker=self.worker, job_id=self.job_id, attempt=self.attempt,
                                         progress=progress):
            self.mark_lost()
            self.check()

    def holds(self, conn: sa.Connection) -> bool:
        """Inside the caller's transaction: is the lease still ours? Guard compare-and-set writes with it."""
        return self._store.holds_lease(conn, worker=self.worker, job_id=self.job_id, attempt=self.attempt)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; return True early when the lease is lost or a cancel is requested."""
        if self._changed is None:
            with _EVENT_LOCK:
                if self._changed is None:
                    self._changed = threading.Event()
        # the markers set their flag before the event, so a mark between this check and the wait is seen
        if self._lost or self._cancel:
            return True
        self._changed.wait(seconds)
        return self._lost or self._cancel

    def mark_lost(self) -> None:
        if not self._lost:
            log.warning("lease lost", extra={"job_id": self.job_id, "attempt": self.attempt, "worker": self.worker})
        self._lost = True
        self._wake()

    def mark_cancel_requested(self) -> None:
        self._cancel = True
        self._wake()

    def _wake(self) -> None:
        with _EVENT_LOCK:
            event = self._changed
        if event is not None:
            event.set()


_EVENT_LOCK = threading.Lock()


class Heartbeater:
    """Extends every lease a worker holds in one statement per beat.

    ``leases_func`` returns the leases currently running. A lease missing from the database's answer is
    marked lost; a set ``cancel_requested`` is passed on. ``beat_once`` is the pass of the worker's
    ``heartbeat`` loop (recon.engine.periodic): a failed beat (database down) is retried after a backoff no
    longer than the interval; if the outage outlasts the TTL, the leases expire and fencing keeps the worker's
    late results out.

    A beat runs on a connection of its own (``open``, when the worker starts; ``close`` when its loop ended),
    never on the pool's: the handler threads share the pool (a worker that sizes itself runs up to
    ``max_concurrency`` of them), and a beat that queued there behind them for up to the pool's timeout (30 s)
    let the leases expire under load; another worker then ran the jobs again and this one's finishes were
    stale. On SQLite its write queues on ``Database.hot_lock`` with the claim loop's and the finisher's, never
    in SQLite's busy handler, where a writer can lose the lock to them for as long as they keep it busy.
    """

    def __init__(self, store: JobStore, *, worker: str, ttl: float, leases_func: Callable[[], Sequence[Lease]]) -> None:
        self._store = store
        self._worker = worker
        self._ttl = ttl
        self._leases_func = leases_func
        self._via: Dedicated | None = None
        self.lost = 0

    def open(self) -> None:
        """Take the heartbeat's connection now; if the database is unavailable, the first beat takes it."""
        self._via = self._store.dedicated()
        try:
            self._via.open()
        except StoreError as exc:
            log.debug("heartbeat connection not opened yet: %s", exc)

    def close(self) -> None:
        """Give the connection back (once the heartbeat loop has ended)."""
        via, self._via = self._via, None
        if via is not None:
            via.close()

    def beat_once(self) -> None:
        leases = list(self._leases_func())
        if not leases:
            return
        leases = [lease for lease in leases if not lease.finishing]
        if not leases:
            return
        pairs = [(lease.job_id, lease.attempt) for lease in leases]
        held = self._store.extend_leases(worker=self._worker, leases=pairs, ttl=self._ttl, via=self._via)
        for lease in leases:
            if lease.job_id not in held:
                if lease.finishing:
                    continue  # its finish committed between our snapshot and our statement
                if not lease.lost:
                    self.lost += 1
                lease.mark_lost()
            elif held[lease.job_id]:
                lease.mark_cancel_requested()
