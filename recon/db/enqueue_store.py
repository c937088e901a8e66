"""EnqueueStore: inserting jobs, the only code that executes ``recon.db.enqueue_queries``: one statement per
batch, a unique key held by an unfinished job answered with that job, a queue's ``max_depth`` enforced (QueueFull,
nothing inserted). ``JobStore`` is one.

The storage boundary (``recon.redact``): a job as it is enqueued (``_redacted``: queue, kind, payload, unique
key, tenant) is redacted in one place, whichever statement then writes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from recon.db import enqueue_queries as q
from recon.db.database import Database
from recon.db.sql import Query
from recon.errors import QueueFull, StoreError
from recon.redact import redact_json, redact_value
from recon.rows import EnqueueRow

ENQUEUE_CHUNK = 5000
#: the driver's text of the single enqueue's lean statement, rendered once (the producer's hot path)
_ENQUEUE_ONE_NOW = q.job_enqueue_one_now.for_driver("postgresql")


class EnqueueStore:
    """Jobs in: ``enqueue`` (a batch, or one job in the caller's transaction) and ``check_depth``."""

    db: Database

    def enqueue(self, rows: Sequence[EnqueueRow], *, max_depth: dict[str, int],
                conn: sa.Connection | None = None) -> list[int]:
        """Insert ``rows`` in one transaction; return one job id per row, in order.

        A row whose unique key is held by an unfinished job gets that job's id instead of a new job.
        ``max_depth`` maps queue -> limit (0 = none); past it raises QueueFull and inserts nothing.
        With ``conn``, the rows join the caller's transaction (a payment and its charge job commit together).

        On PostgreSQL a batch of up to ``ENQUEUE_CHUNK`` rows of queues without a max depth is one statement
        in autocommit (``job_enqueue``: insert, NOTIFY, held keys): one round trip. A queue with a max depth
        takes a transaction: BEGIN, its advisory lock, the same statement with the depth check, COMMIT (see
        ``job_lock_queue`` for why the lock cannot share the counting statement). Hazard, autocommit path
        only: a key whose holder committed during the statement and finished before the store's lookup is
        inserted by a second statement, so an error in that one leaves the rest of the batch committed.
        """
        if not rows:
            return []
        rows = [_redacted(r) for r in rows]  # the storage boundary, once, before any statement sees them
        if (conn is None and self.db.is_postgresql and len(rows) <= ENQUEUE_CHUNK
                and not any(max_depth.get(r.queue, 0) for r in rows)):
            if len(rows) == 1:
                return [self._enqueue_one(rows[0])]
            return self._enqueue_pg(None, rows, limits=[])
        if conn is not None:
            return self._enqueue_in(conn, rows, max_depth)
        with self.db.begin() as own:
            return self._enqueue_in(own, rows, max_depth)

    def _enqueue_in(self, conn: sa.Connection, rows: Sequence[EnqueueRow], max_depth: dict[str, int]) -> list[int]:
        queues = sorted({r.queue for r in rows})
        limited = [(queue, max_depth[queue]) for queue in queues if max_depth.get(queue, 0)]
        if not self.db.is_postgresql:
            return self._enqueue_sqlite(conn, rows, limited)
        for queue, _ in limited:  # sorted: two producers of the same queues never deadlock
            conn.execute(q.job_lock_queue.for_dialect("postgresql"), {"queue": queue})
        limits = [{"queue": queue, "max_depth": limit, "adding": sum(1 for r in rows if r.queue == queue)}
                  for queue, limit in limited]
        ids: list[int] = []
        for start in range(0, len(rows), ENQUEUE_CHUNK):
            # the depth check goes with the first chunk: later ones would count the first one's jobs again
            ids.extend(self._enqueue_pg(conn, rows[start:start + ENQUEUE_CHUNK], limits=limits if not start else []))
        return ids

    def _enqueue_one(self, r: EnqueueRow) -> int:
        """One job in one autocommit statement through the driver (``job_enqueue_one``): its id, or the id of
        the unfinished job holding its unique key (read then, in a statement of its own). A job due now without
        a unique key (most) takes ``job_enqueue_one_now``: nothing to conflict with, nothing to compute."""
        if r.unique_key is None and r.run_at is None and not r.delay:
            [(inserted, _woken)] = self.db.execute_driver(_ENQUEUE_ONE_NOW, {
                "queue": r.queue, "kind": r.kind, "payload": r.payload_json, "priority": r.priority,
                "max_attempts": r.max_attempts, "tenant": r.tenant, "now": self.db.now_param()}, generic_plans=True)
            return int(inserted)
        params = {"queue": r.queue, "kind": r.kind, "payload": r.payload_json, "priority": r.priority,
                  "run_at": r.run_at, "delay": r.delay, "max_attempts": r.max_attempts,
                  "unique_key": r.unique_key, "tenant": r.tenant, "now": self.db.now_param()}
        for _ in range(3):
            [(inserted, _woken)] = self.db.execute_driver(q.job_enqueue_one.for_driver("postgresql"), params,
                                                          generic_plans=True)
            if inserted is not None:
                return int(inserted)
            assert r.unique_key is not None  # nosec B101  # only a held key inserts nothing
            found = self._holders(None, [r.unique_key]).get(r.unique_key)
            if found is not None:
                return found  # else the holder finished meanwhile: insert again
        raise StoreError(f"enqueue: the job holding unique key {r.unique_key!r} keeps changing; retry")

    def _enqueue_pg(self, conn: sa.Connection | None, rows: Sequence[EnqueueRow], *,
                    limits: list[dict[str, Any]]) -> list[int]:
        """``job_enqueue`` in ``conn``'s transaction, or (None) alone in autocommit through the driver."""
        params = {"rows": self._enqueue_json(rows), "limits": _dumps(limits), "now": self.db.now_param()}
        result: Iterable[Any]
        if conn is None:
            result = self.db.execute_driver(q.job_enqueue.for_driver("postgresql"), params)
        else:
            result = conn.execute(self._q(q.job_enqueue), params)
        inserted: list[tuple[int, str | None]] = []
        held: dict[str, int] = {}
        for tag, n, text, depth, limit, ids, keys in result:
            if tag == "i":
                inserted = list(zip(ids or (), keys or (), strict=True))
            elif tag == "h":
                held[text] = int(n)
            elif tag == "f":
                raise QueueFull(f"queue {text!r} is full: {depth} unfinished jobs, max_depth {limit}, "
                                f"refusing {n} more")
        return self._ids(conn, rows, inserted, held, retry=lambda again: self._enqueue_pg(conn, again, limits=[]))

    def check_depth(self, conn: sa.Connection, adding: dict[str, int], *, max_depth: dict[str, int]) -> None:
        """Inside the caller's transaction, before it inserts jobs: raise QueueFull when ``adding[queue]`` more
        jobs would pass a queue's max depth. On PostgreSQL the queue's advisory lock is taken first and held
        until commit (``job_lock_queue``), so concurrent producers of the queue count one after another."""
        for queue in sorted(adding):  # sorted: two producers of the same queues never deadlock
            limit = max_depth.get(queue, 0)
            if not limit:
                continue
            if self.db.is_postgresql:
                conn.execute(q.job_lock_queue.for_dialect("postgresql"), {"queue": queue})
            depth = conn.execute(self._q(q.job_count_unfinished_in_queue), {"queue": queue}).scalar_one()
            if depth + adding[queue] > limit:
                raise QueueFull(f"queue {queue!r} is full: {depth} unfinished jobs, max_depth {limit}, "
                                f"refusing {adding[queue]} more")

    def _enqueue_sqlite(self, conn: sa.Connection, rows: Sequence[EnqueueRow],
                        limited: list[tuple[str, int]]) -> list[int]:
        # BEGIN IMMEDIATE holds the database's write lock: no producer races the count
        self.check_depth(conn, {queue: sum(1 for r in rows if r.queue == queue) for queue, _ in limited},
                         max_depth=dict(limited))
        now = self.db.now_param()
        ids: list[int] = []
        for start in range(0, len(rows), ENQUEUE_CHUNK):
            chunk = rows[start:start + ENQUEUE_CHUNK]
            returned = conn.execute(self._q(q.job_insert_many), {"rows": self._enqueue_json(chunk), "now": now})
            inserted = [(int(i), k) for i, k in returned]
            ids.extend(self._ids(conn, chunk, inserted, {}, retry=None))
        return ids

    def _ids(self, conn: sa.Connection | None, rows: Sequence[EnqueueRow], inserted: list[tuple[int, str | None]],
             held: dict[str, int], *, retry: Callable[[Sequence[EnqueueRow]], list[int]] | None) -> list[int]:
        """One id per row: the inserted ones in row order (ids grow with it), a held key's holder for the rest."""
        inserted.sort()
        inserted_keys = {k: i for i, k in inserted if k is not None}
        ids: list[int | None] = []
        it = iter(inserted)
        seen: set[str] = set()
        for r in rows:
            key = r.unique_key
            if key is None:
                ids.append(next(it)[0])
            elif key in inserted_keys:
                if key in seen:
                    ids.append(inserted_keys[key])  # the batch's own earlier row with this key
                else:
                    ids.append(next(it)[0])
                    seen.add(key)
            else:
                ids.append(held.get(key))
        missing = sorted({r.unique_key for r, i in zip(rows, ids, strict=True) if i is None and r.unique_key})
        if missing:
            # held by a job our statement could not see (committed after it started), or inserted by this
            # transaction's earlier statement (SQLite: every conflict)
            existing = self._holders(conn, missing)
            ids = [existing.get(r.unique_key) if i is None and r.unique_key else i
                   for r, i in zip(rows, ids, strict=True)]
            gone = [r for r, i in zip(rows, ids, strict=True) if i is None]
            if gone:
                # its holder finished between the two statements: the key is free, insert again
                if retry is None:
                    raise StoreError(f"enqueue: the job holding unique key {gone[0].unique_key!r} changed "
                                     f"meanwhile; retry")
                again = iter(retry(gone))
                ids = [next(again) if i is None else i for i in ids]
        return [int(i) for i in ids if i is not None]

    def _holders(self, conn: sa.Connection | None, keys: list[str]) -> dict[str, int]:
        if conn is None:
            with self.db.autocommit() as own:
                return self._holders(own, keys)
        return {k: int(i) for i, k in conn.execute(self._q(q.job_get_unfinished_by_unique_keys), {"keys": keys})}

    def _enqueue_json(self, rows: Sequence[EnqueueRow]) -> str:
        return _dumps([self._enqueue_row(r) for r in rows])

    def _enqueue_row(self, r: EnqueueRow) -> dict[str, Any]:
        run_at: Any = r.run_at.isoformat() if (r.run_at and self.db.is_postgresql) else self.db.to_db(r.run_at)
        return {"queue": r.queue, "kind": r.kind, "payload": r.payload_json, "priority": r.priority,
                "run_at": run_at, "delay": r.delay, "max_attempts": r.max_attempts,
                "unique_key": r.unique_key, "tenant": r.tenant}

    def _q(self, query: Query) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)


def _redacted(r: EnqueueRow) -> EnqueueRow:
    """A row to enqueue at the storage boundary: its texts and its payload's strings redacted (clean short strings
    are remembered: a queue, kind or tenant costs a set lookup; a payload one search); the same row when none
    changes."""
    queue, kind, payload = redact_value(r.queue), redact_value(r.kind), redact_json(r.payload_json)
    key = redact_value(r.unique_key) if r.unique_key else r.unique_key
    tenant = redact_value(r.tenant) if r.tenant else r.tenant
    if (queue, kind, key, tenant, payload) == (r.queue, r.kind, r.unique_key, r.tenant, r.payload_json):
        return r
    return EnqueueRow(queue=queue, kind=kind, payload_json=payload, priority=r.priority, run_at=r.run_at,
                      delay=r.delay, max_attempts=r.max_attempts, unique_key=key, tenant=tenant)


_dumps = json.JSONEncoder(separators=(",", ":")).encode
