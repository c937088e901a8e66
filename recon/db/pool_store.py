"""PoolStore: the workers table (each worker process's presence and counters) and the pool-wide views that
one metrics endpoint and `recon stats` read (recon.metrics). SQL in ``recon.db.pool_queries``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from recon.db import jobs_queries as q
from recon.db import pool_queries as pq
from recon.db.database import Database, json_from_db
from recon.db.sql import Query
from recon.pool_rows import WorkerPresence, WorkerRecord
from recon.redact import redact_row


class PoolStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def upsert_worker(self, presence: WorkerPresence) -> None:
        """Write a worker process's row (``last_seen_at = now``; ``stopped_at = now`` when it stops)."""
        row = redact_row({"id": presence.id, "host": presence.host, "queues": list(presence.queues),
                          "counters": presence.counters})  # the storage boundary (recon.redact)
        with self.db.begin() as conn:
            conn.execute(self._q(pq.worker_upsert), {
                "id": row["id"], "host": row["host"], "pid": presence.pid, "queues": json.dumps(row["queues"]),
                "slots": presence.slots, "busy_slots": presence.busy_slots, "stopped": 1 if presence.stopped else 0,
                "counters": json.dumps(row["counters"], separators=(",", ":")), "now": self.db.now_param()})

    def set_waiting(self, *, worker: str, waiting: bool) -> None:
        """Whether enqueues wake ``worker`` (its id as the Worker redacted it): true when it listens and its claims
        drained its queues, false when they come back full (``jobs_queries.worker_waits_for``)."""
        with self.db.autocommit() as conn:
            conn.execute(self._q(pq.worker_set_waiting), {"id": worker, "waiting": waiting})

    def prune_workers(self, *, older_than: timedelta) -> int:
        """Forget workers not seen for ``older_than``; return how many rows went."""
        with self.db.begin() as conn:
            result = conn.execute(self._q(pq.worker_delete_not_seen_since),
                                  {"retention": older_than.total_seconds(), "now": self.db.now_param()})
        return int(result.rowcount or 0)

    def pool_snapshot(self, *, workers_within: timedelta | None, depth_detail: bool = True,
                      oldest_due: bool = True) -> dict[str, Any]:
        """One transaction's view of the pool: the database clock (``now``), unfinished jobs per queue, kind,
        tenant, priority and state (``depth``: tuples ending in the count; empty without ``depth_detail``),
        the oldest due job per queue (``oldest_due``; empty without ``oldest_due``: ``recon stats`` has it from
        JobStore.stats), and the workers seen within ``workers_within`` (all rows when None)."""
        with self.db.begin() as conn:
            now_param = self.db.now_param()
            now = self.db.from_db(conn.execute(self._q(q.job_db_now), {"now": now_param}).scalar_one())
            assert now is not None  # nosec B101  # type narrowing, not a check
            depth = [(m["queue"], m["kind"], m["tenant"], int(m["priority"]), m["state"], int(m["n"]))
                     for m in (r._mapping for r in conn.execute(self._q(pq.job_stats_depth_detail)))] \
                if depth_detail else []
            oldest = {}
            if oldest_due:
                oldest = {queue: self.db.from_db(due) for queue, due in
                          conn.execute(self._q(q.job_stats_oldest_runnable), {"now": now_param})}
            since = (now - workers_within if workers_within is not None
                     else datetime.fromtimestamp(0, now.tzinfo))
            workers = [self._worker(r) for r in conn.execute(self._q(pq.worker_list_seen_since),
                                                             {"since": self.db.to_db(since)})]
        return {"now": now, "depth": depth, "oldest_due": oldest, "workers": workers}

    def attempt_stats(self, *, since: datetime) -> dict[str, Any]:
        """Attempts ended since ``since``: per kind and outcome (count, sum and max of attempt numbers), and
        per kind the duration count, p50, p95, max and sum in seconds (claim to finish commit)."""
        with self.db.begin() as conn:
            params = {"since": self.db.to_db(since)}
            by_kind = [(m["kind"], m["outcome"], int(m["n"]), int(m["attempts"] or 0), int(m["most"] or 0))
                       for m in (r._mapping for r in conn.execute(self._q(pq.job_attempt_stats_by_kind), params))]
            durations = {m["kind"]: {"count": int(m["n"]), "p50": _float(m["p50"]), "p95": _float(m["p95"]),
                                     "max": _float(m["most"]), "sum": _float(m["total"])}
                         for m in (r._mapping for r in
                                   conn.execute(self._q(pq.job_attempt_stats_durations), params))}
        return {"by_kind": by_kind, "durations": durations}

    def _worker(self, r: Any) -> WorkerRecord:
        m, t = r._mapping, self.db.from_db
        return WorkerRecord(id=m["id"], host=m["host"], pid=int(m["pid"]),
                            queues=tuple(json_from_db(m["queues"]) or ()), slots=int(m["slots"]),
                            busy_slots=int(m["busy_slots"]),
                            started_at=t(m["started_at"]), last_seen_at=t(m["last_seen_at"]),  # type: ignore[arg-type]
                            stopped_at=t(m["stopped_at"]), counters=json_from_db(m["counters"]) or {})

    def _q(self, query: Query) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
