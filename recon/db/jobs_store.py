"""JobStore: the only code that executes the engine's SQL. It takes keyword arguments and returns engine
types (``Job``, ``AttemptRecord``), never driver rows.

Every write after a claim is fenced by ``id + lease_owner + attempts``: the attempt number is a monotonic
fencing token, so a worker whose lease expired and was re-claimed can change nothing.

The storage boundary (``recon.redact``): a job as it is enqueued (``_redacted``: queue, kind, payload, unique
key, tenant) and an attempt as it ends (``_redact_finishes``: error kind and text, in place, as ``finish`` and
``finish_together`` receive them) are redacted in one place each, whichever statement then writes them; a
checkpoint's progress too. The worker id (lease owner,
attempt history) is redacted once, where the worker gets it (``recon.engine.worker.Worker``): it is compared by
every fenced write, so it is never changed statement by statement.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from recon.db import jobs_queries as q
from recon.db.database import Database, DedicatedConnection, DedicatedSqlite, json_from_db
from recon.db.dead_letter_store import DeadLetterStore
from recon.db.jobs_queries import job_from_row
from recon.db.sql import Query
from recon.errors import StoreError
from recon.redact import redact, redact_json, redact_value
from recon.rows import AttemptRecord, EnqueueRow, Finish, Job, JobState

ENQUEUE_CHUNK = 5000

#: a hot loop's connection of its own: PostgreSQL's or SQLite's (``JobStore.dedicated``)
Dedicated = DedicatedConnection | DedicatedSqlite


class JobStore:
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

    # --- enqueue ---------------------------------------------------------------------------------------

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
        the unfinished job holding its unique key (read then, in a statement of its own)."""
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
        from recon.errors import QueueFull

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
        from recon.errors import QueueFull

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

    # --- lease ----------------------------------------------------------------------------------------

    def dedicated(self, *, finishing: bool = False) -> Dedicated:
        """A connection of its own for one thread's claim or finish loop: a psycopg connection in autocommit
        (PostgreSQL), a sqlite3 connection whose write transactions queue on ``Database.hot_lock`` (SQLite).
        Pass it as ``via``; close it when the loop ends.

        ``finishing``: the finisher's, with nested loops off. Its only statement joins the batch's rows
        (``jsonb_to_recordset``) to the jobs found by primary key; the planner, which expects one leased
        row, picks a nested loop that reads the whole batch again for every job: quadratic, 88 µs of server
        CPU a job in batches of 1,024. A hash join is linear (11 µs a job in batches of 256)."""
        if not self.db.is_postgresql:
            return DedicatedSqlite(self.db)
        return DedicatedConnection(self.db, session={"enable_nestloop": "off"} if finishing else None)

    def claim(self, *, worker: str, queues: Sequence[str], n: int, ttl: float,
              via: Dedicated | None = None) -> list[Job]:
        """Lease up to ``n`` due jobs of ``queues`` for ``worker``, in one statement."""
        params: dict[str, Any] = {"worker": worker, "n": n, "ttl": ttl, "now": self.db.now_param()}
        rows: Sequence[Any]
        if via is not None:
            for i, name in enumerate(queues):
                params[f"queues_{i}"] = name
            sql = q.job_claim_available.for_driver(self.db.dialect, queues=len(queues))
            if isinstance(via, DedicatedSqlite):
                rows = via.write(lambda conn: conn.execute(sql, params).fetchall())
                times: dict[int, datetime] = {}  # a batch's jobs share lease_until, often run_after and created_at
                jobs = [_claimed_sqlite(r, worker, times) for r in rows]
                jobs.sort(key=_claim_order)
                return jobs
            rows = via.execute(sql, params)
        else:
            params["queues"] = list(queues)
            with self.db.autocommit() as conn:
                rows = conn.execute(self._q(q.job_claim_available), params).all()
        claimed = claimed_job if via is not None else self._claimed
        jobs = [claimed(r, worker) for r in rows]
        jobs.sort(key=_claim_order)  # RETURNING order is unspecified
        return jobs

    def extend_leases(self, *, worker: str, leases: Sequence[tuple[int, int]], ttl: float) -> dict[int, bool]:
        """Heartbeat: extend every (id, attempt) still leased by ``worker``.

        Returns {id: cancel_requested} for the leases still held; an id that is missing was lost.
        """
        if not leases:
            return {}
        params: dict[str, Any] = {"worker": worker, "ttl": ttl, "now": self.db.now_param()}
        if self.db.is_postgresql:
            params |= {"ids": [i for i, _ in leases], "attempts": [a for _, a in leases]}
        else:
            params["pairs"] = json.dumps(list(leases))
        with self.db.autocommit() as conn:
            rows = conn.execute(self._q(q.job_extend_leases_if_owner), params).all()
        return {int(job_id): bool(cancel) for job_id, cancel in rows}

    def release_unknown_claims(self, *, worker: str, held: Collection[int], reason: str) -> int:
        """Give back (runnable now, the attempt not spent) every lease ``worker`` holds in the database on a job
        that is not in ``held``, and return how many: the jobs of a claim that committed while its answer was
        lost with the connection. Only the claim loop may call it (the only one that claims for ``worker``), with
        ``held`` the jobs it knows it leased: then every other lease of ``worker`` is such a job. The release is
        fenced like any finish."""
        with self.db.autocommit() as conn:
            leased = [(int(i), int(a)) for i, a in conn.execute(self._q(q.job_list_leased_by), {"worker": worker})]
        unknown = [Finish(id=i, attempt=a, state="runnable", outcome="released", delay=0.0, error=reason, bump=1)
                   for i, a in leased if i not in held]
        return len(self.finish(worker=worker, finishes=unknown)) if unknown else 0

    def save_progress(self, *, worker: str, job_id: int, attempt: int, progress: dict[str, Any]) -> bool:
        """Store a checkpoint under the lease; False when the lease is no longer ours."""
        with self.db.begin() as conn:
            result = conn.execute(self._q(q.job_save_progress_if_owner),
                                  {"id": job_id, "attempt": attempt, "worker": worker,
                                   "progress": json.dumps(redact_value(progress), separators=(",", ":"))})
        return result.rowcount == 1

    def holds_lease(self, conn: sa.Connection, *, worker: str, job_id: int, attempt: int) -> bool:
        """Inside a caller's transaction: is the lease still ours? (for fenced domain writes)"""
        row = conn.execute(self._q(q.job_is_leased_by), {"id": job_id, "worker": worker, "attempt": attempt})
        return row.first() is not None

    def finish(self, *, worker: str, finishes: Sequence[Finish],
               write: Callable[[sa.Connection], Any] | None = None,
               via: Dedicated | None = None) -> set[int]:
        """End attempts, fenced; return the ids whose lease still matched (the others are stale finishes).

        With ``write`` (only for a single finish), it runs in the same transaction after the fenced update
        matched, and its exception rolls everything back.
        """
        if not finishes:
            return set()
        _redact_finishes(finishes)
        if write is not None and len(finishes) != 1:
            raise ValueError("a finish with a domain write must be alone in its transaction")
        if write is None and isinstance(via, DedicatedSqlite):
            return via.write(lambda conn: self._finish_sqlite(conn, worker, finishes))
        if write is None and isinstance(via, DedicatedConnection):
            # one data-modifying CTE each: atomic on its own; plain successes (most finishes) take the
            # leaner statement, the rest the general one
            plain = [f for f in finishes if f.plain_success]
            matched: set[int] = set()
            if plain:
                ids = "{" + ",".join([str(f.id) for f in plain]) + "}"
                attempts = "{" + ",".join([str(f.attempt) for f in plain]) + "}"
                matched.update(job_id for (job_id,) in via.execute(
                    q.job_finish_succeeded_if_owner.for_driver("postgresql"),
                    {"ids": ids, "attempts": attempts, "worker": worker, "now": self.db.now_param()}))
            if len(plain) < len(finishes):
                rest = [f for f in finishes if not f.plain_success]
                matched.update(job_id for (job_id,) in via.execute(
                    q.job_finish_many_if_owner.for_driver("postgresql"), self._finish_many_params(worker, rest)))
            return matched
        if write is None and self.db.is_postgresql:
            # one data-modifying CTE: atomic on its own
            params = self._finish_many_params(worker, finishes)
            with self.db.autocommit() as conn:
                return {int(job_id) for (job_id,) in conn.execute(self._q(q.job_finish_many_if_owner), params)}
        with self._write_transaction() as conn:
            matched = self._finish_in(conn, worker, finishes)
            if write is not None and matched:
                write(conn)
        return matched

    def finish_together(self, *, worker: str, finishes: Sequence[Finish],
                        write: Callable[[sa.Connection, set[int]], Any]) -> set[int]:
        """End several attempts, fenced, with one domain write for them all, in one transaction; return the
        ids whose lease still matched. ``write`` receives the connection and those ids (it runs only when
        there are some) and writes only for them; its exception rolls everything back."""
        if not finishes:
            return set()
        _redact_finishes(finishes)
        with self._write_transaction() as conn:
            matched = self._finish_in(conn, worker, finishes)
            if matched:
                write(conn, matched)
        return matched

    @contextlib.contextmanager
    def _write_transaction(self) -> Iterator[sa.Connection]:
        """The transaction of a finish with a domain write. On SQLite it is taken under ``Database.hot_lock``,
        as the claim loop's and the plain finishes' transactions are (``DedicatedSqlite``): the worker's
        threads queue for SQLite's one write lock there, woken the moment it is free, rather than in SQLite's
        busy handler, which sleeps 1 ms, then longer (and held ``hot_lock`` meanwhile when it was the claim)."""
        if self.db.is_postgresql:
            with self.db.begin() as conn:
                yield conn
            return
        with self.db.hot_lock, self.db.begin() as conn:
            yield conn

    def _finish_in(self, conn: sa.Connection, worker: str, finishes: Sequence[Finish]) -> set[int]:
        now = self.db.now_param()
        if self.db.is_postgresql:
            result = conn.execute(self._q(q.job_finish_many_if_owner), self._finish_many_params(worker, finishes))
            return {int(job_id) for (job_id,) in result}
        matched: set[int] = set()
        finish_one, insert = self._q(q.job_finish_one_if_owner), self._q(q.job_attempt_insert)
        for f in finishes:
            row = conn.execute(finish_one, f.row() | {"worker": worker, "now": now}).first()
            if row is None:
                continue
            ended = row._mapping
            outcome = "canceled" if ended["state"] == "canceled" else f.outcome
            conn.execute(insert, {"id": f.id, "attempt": f.attempt, "worker": worker,
                                  "started_at": ended["attempted_at"], "now": now, "outcome": outcome,
                                  "error_kind": f.error_kind, "error": f.error})
            matched.add(f.id)
        return matched

    def _finish_sqlite(self, conn: Any, worker: str, finishes: Sequence[Finish]) -> set[int]:
        """The batch's history rows and fenced update, on a sqlite3 connection inside the caller's BEGIN
        IMMEDIATE: two statements per batch (``_finish_in`` runs two per job). Both carry the same fence, and
        the write lock held since BEGIN means no other writer comes between them."""
        now = self.db.now_param()
        plain = [f for f in finishes if f.plain_success]
        matched: set[int] = set()
        if plain:  # most finishes: the leaner pair of statements
            pairs = {"pairs": "[" + ",".join([f"[{f.id},{f.attempt}]" for f in plain]) + "]", "worker": worker,
                     "now": now}
            conn.execute(q.job_finish_succeeded_if_owner_sqlite.for_driver("sqlite"), pairs)
            matched.update(job_id for (job_id,) in conn.execute(
                q.job_finish_succeeded_update_sqlite.for_driver("sqlite"), pairs))
        if len(plain) < len(finishes):
            rest = [f for f in finishes if not f.plain_success]
            params = {"rows": "[" + ",".join([f.row_json() for f in rest]) + "]", "worker": worker, "now": now}
            conn.execute(q.job_attempt_insert_many_if_owner_sqlite.for_driver("sqlite"), params)
            matched.update(job_id for (job_id,) in conn.execute(
                q.job_finish_many_if_owner_sqlite.for_driver("sqlite"), params))
        return matched

    def _finish_many_params(self, worker: str, finishes: Sequence[Finish]) -> dict[str, Any]:
        rows = "[" + ",".join([f.row_json() for f in finishes]) + "]"
        # the ids as an array literal: psycopg dumps a list item by item in Python
        ids = "{" + ",".join([str(f.id) for f in finishes]) + "}"
        return {"rows": rows, "ids": ids, "worker": worker, "now": self.db.now_param()}

    # --- the stuck watcher ----------------------------------------------------------------------------

    def rescue_expired(self, *, limit: int) -> list[tuple[int, JobState]]:
        """Return expired leases to retryable (dead at max attempts) and record ``lease_expired``."""
        with self.db.begin() as conn:
            now = self.db.now_param()
            if self.db.is_postgresql:
                rows = conn.execute(self._q(q.job_rescue_expired), {"n": limit, "now": now}).all()
                return [(int(job_id), JobState(state)) for job_id, state in rows]
            out = []
            expired = conn.execute(self._q(q.job_list_expired), {"n": limit, "now": now}).all()
            for job_id, owner, attempt, started in expired:
                row = conn.execute(self._q(q.job_rescue_one),
                                   {"id": job_id, "worker": owner, "attempt": attempt, "now": now}).first()
                if row is None:
                    continue
                rescued = row._mapping
                conn.execute(self._q(q.job_attempt_insert),
                             {"id": job_id, "attempt": attempt, "worker": owner, "started_at": started,
                              "now": now, "outcome": "lease_expired", "error_kind": "lease_expired",
                              "error": rescued["last_error"]})
                out.append((int(job_id), JobState(rescued["state"])))
            return out

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

    def _claimed(self, r: Any, worker: str) -> Job:
        """A claimed job from a row of ``CLAIM_COLUMNS`` through SQLAlchemy (``claimed_job``, its values
        converted as every other read converts them)."""
        t = self.db.from_db
        m = r._mapping
        return Job(int(m["id"]), m["queue"], m["kind"], json_from_db(m["payload"]) or {}, JobState.LEASED,
                   m["priority"], t(m["run_after"]), m["attempts"], m["max_attempts"], t(m["created_at"]),  # type: ignore[arg-type]
                   worker, t(m["lease_until"]), None, None, m["unique_key"], m["last_error_kind"], None, m["tenant"],
                   json_from_db(m["progress"]), None, False, m["free_attempts"])

    def _attempt(self, m: Any) -> AttemptRecord:
        t = self.db.from_db
        return AttemptRecord(job_id=int(m["job_id"]), attempt=int(m["attempt"]), worker=m["worker"],
                             started_at=t(m["started_at"]), finished_at=t(m["finished_at"]),  # type: ignore[arg-type]
                             outcome=m["outcome"], error_kind=m["error_kind"], error=m["error"])

    def _job(self, r: Any) -> Job:
        return job_from_row(self.db, r)


def claimed_job(r: Any, worker: str) -> Job:
    """A job the claim loop leased, from a row of a dedicated PostgreSQL connection (``CLAIM_COLUMNS_PG``: its
    session is in UTC, see ``DedicatedConnection``, so psycopg's datetimes are aware UTC already).

    The claim loop's hot path, so the row is read by unpacking it into the names of ``CLAIM_FIELDS``, in their
    order (tests/unit/test_claim_rows.py checks each value lands in the field its column names), and the Job is
    built positionally, in its field order: SQLAlchemy's name access costs 1 µs a column (its mapping, 1 µs a
    row and 80 ns a column), more than the whole Job; unpacking costs less than reading by index."""
    (id_, queue, kind, payload, priority, run_after, attempts, max_attempts, lease_until, unique_key, tenant,
     progress, created_at, last_error_kind, free_attempts) = r
    return Job(id_, queue, kind, _scan_json(payload, 0)[0], JobState.LEASED, priority, run_after, attempts,
               max_attempts, created_at, worker, lease_until, None, None, unique_key, last_error_kind, None, tenant,
               None if progress is None else _scan_json(progress, 0)[0], None, False, free_attempts)


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


def _redact_finishes(finishes: Sequence[Finish]) -> None:
    """The storage boundary of error texts (jobs.last_error(_kind), job_attempts.error(_kind)), for every path
    that writes them: never a card number or key. In place (a Finish is a mutable value): what the worker
    counts and logs after the finish is what was written. A plain success carries none and costs two tests."""
    for f in finishes:
        if f.error:
            f.error = redact(f.error)
        if f.error_kind:
            f.error_kind = redact_value(f.error_kind)


def _claimed_sqlite(r: Any, worker: str, times: dict[int, datetime]) -> Job:
    """``claimed_job`` for a row from a ``DedicatedSqlite`` claim, unpacked by the same names: times are integer
    microseconds since the epoch (``recon.db.schema``), converted once per value and batch through ``times`` (a
    conversion costs 0.9 µs, three a job), and JSON documents are the compact text enqueue stored."""
    (id_, queue, kind, payload, priority, run_after_us, attempts, max_attempts, lease_until_us, unique_key, tenant,
     progress, created_at_us, last_error_kind, free_attempts) = r
    run_after, lease_until, created_at = times.get(run_after_us), times.get(lease_until_us), times.get(created_at_us)
    if run_after is None:
        run_after = times[run_after_us] = _EPOCH + timedelta(microseconds=run_after_us)
    if lease_until is None:
        lease_until = times[lease_until_us] = _EPOCH + timedelta(microseconds=lease_until_us)
    if created_at is None:
        created_at = times[created_at_us] = _EPOCH + timedelta(microseconds=created_at_us)
    return Job(id_, queue, kind, _json_text(payload) or {}, JobState.LEASED, priority, run_after, attempts,
               max_attempts, created_at, worker, lease_until, None, None, unique_key, last_error_kind, None, tenant,
               None if progress is None else _json_text(progress), None, False, free_attempts)


def _json_text(text: str) -> Any:
    """A JSON document stored as text: ``_scan_json`` when it starts with its value, else ``json.loads``."""
    if text[:1] in ("{", "["):
        try:
            return _scan_json(text, 0)[0]
        except (ValueError, StopIteration):
            pass
    return json.loads(text)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _claim_order(job: Job) -> tuple[int, datetime, int]:
    return -job.priority, job.run_after, job.id


_dumps = json.JSONEncoder(separators=(",", ":")).encode
#: json.loads without its two Python-level frames, for documents PostgreSQL printed (jsonb as text: no
#: leading whitespace, nothing after the value): (value, end)
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
