"""JobStore: the only code that executes the engine's SQL. It takes keyword arguments and returns engine
types (``Job``, ``AttemptRecord``), never driver rows.

One store, three rooms: ``recon.db.enqueue_store.EnqueueStore`` (jobs in), ``recon.db.lease_store.LeaseStore``
(claim, heartbeat, finish, the watcher's rescue: every write after a claim fenced by ``id + lease_owner +
attempts``), and here what reads and operates on jobs as a table (one job, a page, its history, cancel, retry,
the counts: ``recon.db.jobs_queries``). The dead-letter set and pruning are ``dead_letters``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from recon.db import jobs_queries as q
from recon.db.database import Database
from recon.db.dead_letter_store import DeadLetterStore
from recon.db.enqueue_store import EnqueueStore
from recon.db.jobs_queries import job_from_row
from recon.db.lease_store import Dedicated, LeaseStore
from recon.db.sql import Query
from recon.rows import AttemptRecord, Job

__all__ = ["Dedicated", "JobStore"]


class JobStore(EnqueueStore, LeaseStore):
    """Jobs: enqueue, claim, heartbeat, finish, the stuck watcher's rescue, operations. The dead-letter set and
    pruning are ``dead_letters`` (a ``recon.db.dead_letter_store.DeadLetterStore`` on the same database)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.dead_letters = DeadLetterStore(db)

    def db_now(self) -> datetime:
        """The clock leases use: PostgreSQL's now() (or the fixed test clock); the process clock on SQLite."""
        with self.db.begin() as conn:
            raw = conn.execute(self._q(q.job_db_now), {"now": self.db.now_param()}).scalar_one()
        now = self.db.from_db(raw)
        assert now is not None  # nosec B101  # type narrowing, not a check
        return now

    # --- operations -----------------------------------------------------------------------------------

    def get(self, job_id: int) -> Job | None:
        with self.db.begin() as conn:
            row = conn.execute(self._q(q.job_get), {"id": job_id}).first()
        return self._job(row) if row else None

    def get_many(self, ids: Sequence[int]) -> list[Job]:
        out: list[Job] = []
        with self.db.begin() as conn:
            for start in range(0, len(ids), 1000):
                out.extend(self._job(r) for r in conn.execute(self._q(q.job_get_many),
                                                              {"ids": list(ids[start:start + 1000])}))
        return out

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        with self.db.begin() as conn:
            rows = conn.execute(self._q(q.job_attempts_for), {"id": job_id}).all()
        return [self._attempt(r._mapping) for r in rows]

    def cancel(self, job_id: int) -> str | None:
        """Cancel at once if not running ("canceled"), else ask through the heartbeat ("requested")."""
        with self.db.begin() as conn:
            if conn.execute(self._q(q.job_cancel_unleased), {"id": job_id, "now": self.db.now_param()}).first():
                return "canceled"
            if conn.execute(self._q(q.job_request_cancel_leased), {"id": job_id}).first():
                return "requested"
        return None

    def retry_now(self, job_id: int) -> bool:
        with self.db.begin() as conn:
            row = conn.execute(self._q(q.job_retry_now), {"id": job_id, "now": self.db.now_param()}).first()
        return row is not None

    def list_jobs(self, *, state: str | None = None, queue: str | None = None, kind: str | None = None,
                  after_id: int = 0, limit: int = 100) -> list[Job]:
        with self.db.begin() as conn:
            rows = conn.execute(self._q(q.job_list_page), {"state": state, "queue": queue, "kind": kind,
                                                           "after_id": after_id, "n": limit}).all()
        return [self._job(r) for r in rows]

    def stats(self, *, window: timedelta, detail: bool = True) -> dict[str, Any]:
        """Depth per queue and state, oldest due job per queue, attempt outcomes within ``window``. Without
        ``detail`` (the console's overview), only the unfinished and dead jobs are counted (through their
        partial indexes) and no attempt outcomes are read: what would scan every finished job or attempt."""
        with self.db.begin() as conn:
            now_param = self.db.now_param()
            now = self.db.from_db(conn.execute(self._q(q.job_db_now), {"now": now_param}).scalar_one())
            assert now is not None  # nosec B101  # type narrowing, not a check
            counted = q.job_stats_depth if detail else q.job_stats_depth_unfinished
            depth = [(queue, state, int(n)) for queue, state, n in conn.execute(self._q(counted))]
            oldest = {queue: self.db.from_db(due) for queue, due in
                      conn.execute(self._q(q.job_stats_oldest_runnable), {"now": now_param})}
            outcomes = {outcome: int(n) for outcome, n in conn.execute(
                self._q(q.job_stats_attempt_outcomes), {"since": self.db.to_db(now - window)})} if detail else {}
        return {"now": now, "depth": depth, "oldest_due": oldest, "outcomes": outcomes}

    # --- plumbing ---------------------------------------------------------------------------------------

    def _q(self, query: Query) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)

    def _attempt(self, m: Any) -> AttemptRecord:
        t = self.db.from_db
        return AttemptRecord(job_id=int(m["job_id"]), attempt=int(m["attempt"]), worker=m["worker"],
                             started_at=t(m["started_at"]), finished_at=t(m["finished_at"]),  # type: ignore[arg-type]
                             outcome=m["outcome"], error_kind=m["error_kind"], error=m["error"])

    def _job(self, r: Any) -> Job:
        return job_from_row(self.db, r)
