"""LeaseStore: a job's lease, the only code that executes ``recon.db.lease_queries``: the claim, heartbeats,
progress checkpoints, the fenced finishes with their attempt history, and the stuck watcher's rescue of expired
leases. ``JobStore`` is one.

Every write after a claim is fenced by ``id + lease_owner + attempts``: the attempt number is a monotonic
fencing token, so a worker whose lease expired and was re-claimed can change nothing.

The storage boundary (``recon.redact``): an attempt as it ends (``_redact_finishes``: error kind and text, in
place, as ``finish`` and ``finish_together`` receive them) is redacted in one place, whichever statement then
writes it; a checkpoint's progress too. The worker id (lease owner, attempt history) is redacted once, where the
worker gets it (``recon.engine.worker.Worker``): it is compared by every fenced write, so it is never changed
statement by statement.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

import sqlalchemy as sa

from recon.db import lease_queries as q
from recon.db.database import Database, json_from_db
from recon.db.dedicated import DedicatedConnection, DedicatedSqlite
from recon.db.sql import Query
from recon.redact import redact, redact_value
from recon.rows import Finish, Job, JobState

#: a hot loop's connection of its own: PostgreSQL's or SQLite's (``LeaseStore.dedicated``)
Dedicated = DedicatedConnection | DedicatedSqlite


class LeaseStore:
    """Leases: claim, heartbeat, progress, finish; the stuck watcher's rescue."""

    db: Database

    def dedicated(self, *, finishing: bool = False) -> Dedicated:
        """A connection of its own for one thread's claim or finish loop: a psycopg connection in autocommit
        (PostgreSQL), a sqlite3 connection whose write transactions queue on ``Database.hot_lock`` (SQLite).
        Pass it as ``via``; close it when the loop ends.

        ``finishing``: the finisher's, with nested loops off. Its only statement joins the batch's rows
        (``jsonb_to_recordset``) to the jobs found by primary key; the planner, which expects one leased
        row, picks a nested loop that reads the whole batch again for every job: quadratic in the batch. A hash
        join is linear (docs/benchmarks.md has the figures)."""
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
                return _claimed_sqlite(via.write(lambda conn: conn.execute(sql, params).fetchall()), worker)
            rows = via.execute(sql, params)
            rows.sort(key=_BY_RUN_AFTER_ID)  # RETURNING order is unspecified: claim order, as _claimed_sqlite
            rows.sort(key=_BY_PRIORITY, reverse=True)
            return [claimed_job(r, worker) for r in rows]
        params["queues"] = list(queues)
        with self.db.autocommit() as conn:
            rows = conn.execute(self._q(q.job_claim_available), params).all()
        jobs = [self._claimed(r, worker) for r in rows]
        jobs.sort(key=_claim_order)  # RETURNING order is unspecified
        return jobs

    def extend_leases(self, *, worker: str, leases: Sequence[tuple[int, int]], ttl: float,
                      via: Dedicated | None = None) -> dict[int, bool]:
        """Heartbeat: extend every (id, attempt) still leased by ``worker``.

        Returns {id: cancel_requested} for the leases still held; an id that is missing was lost. ``via``: the
        heartbeat's own connection (``dedicated``), so that a beat never queues for the pool behind the
        handler threads (recon.engine.lease.Heartbeater).
        """
        if not leases:
            return {}
        params: dict[str, Any] = {"worker": worker, "ttl": ttl, "now": self.db.now_param()}
        if isinstance(via, DedicatedConnection):
            params |= {"ids": "{" + ",".join([str(i) for i, _ in leases]) + "}",
                       "attempts": "{" + ",".join([str(a) for _, a in leases]) + "}"}
            rows: Sequence[Any] = via.execute(q.job_extend_leases_if_owner.for_driver("postgresql"), params)
            return {int(job_id): bool(cancel) for job_id, cancel in rows}
        if isinstance(via, DedicatedSqlite):
            params["pairs"] = json.dumps(list(leases))
            sql = q.job_extend_leases_if_owner.for_driver("sqlite")
            rows = via.write(lambda conn: conn.execute(sql, params).fetchall())
            return {int(job_id): bool(cancel) for job_id, cancel in rows}
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
                matched.update(job_id for (job_id,) in via.execute(
                    q.job_finish_succeeded_if_owner.for_driver("postgresql"),
                    self._finish_succeeded_params(worker, plain)))
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

    def finish_succeeded(self, *, worker: str, ids: Sequence[int], attempts: Sequence[int],
                         via: Dedicated | None = None) -> set[int]:
        """End attempts that succeeded with nothing more to record (``Finish.plain_success``: no error, delay or
        bump), fenced; return the ids whose lease still matched. The same effect as ``finish`` with one plain
        success ``Finish`` per (id, attempt), in its leaner statements; no text to redact. The worker's finisher
        takes its handlers' plain ``Complete()`` results straight here (most finishes), without a ``Finish`` for
        each (docs/benchmarks.md, "SQLite drain, CPU per job")."""
        if not ids:
            return set()
        if isinstance(via, DedicatedSqlite):
            pairs = {"pairs": "[" + ",".join(map(_PAIR.format, ids, attempts)) + "]", "worker": worker,
                     "now": self.db.now_param()}

            def run(conn: Any) -> set[int]:
                conn.execute(_SUCCEEDED_HISTORY_SQLITE, pairs)
                return {job_id for (job_id,) in conn.execute(_SUCCEEDED_UPDATE_SQLITE, pairs)}

            return via.write(run)
        if isinstance(via, DedicatedConnection):
            params = {"ids": "{" + ",".join(map(str, ids)) + "}", "attempts": "{" + ",".join(map(str, attempts)) + "}",
                      "worker": worker, "now": self.db.now_param()}
            return {job_id for (job_id,) in via.execute(q.job_finish_succeeded_if_owner.for_driver("postgresql"),
                                                         params)}
        return self.finish(worker=worker, finishes=[Finish(i, a, "succeeded", "succeeded")
                                                    for i, a in zip(ids, attempts, strict=True)])

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
        matched: set[int] = set()
        if self.db.is_postgresql:
            # plain successes (a webhook batch's finishes, all of them) take the leaner statement, as on the
            # dedicated connection: two arrays rather than a JSON document for PostgreSQL to take apart
            plain = [f for f in finishes if f.plain_success]
            if plain:
                matched.update(int(job_id) for (job_id,) in self.db.run_in(
                    conn, q.job_finish_succeeded_if_owner, self._finish_succeeded_params(worker, plain)))
            if len(plain) < len(finishes):
                rest = [f for f in finishes if not f.plain_success]
                matched.update(int(job_id) for (job_id,) in self.db.run_in(
                    conn, q.job_finish_many_if_owner, self._finish_many_params(worker, rest)))
            return matched
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

    def _finish_succeeded_params(self, worker: str, plain: Sequence[Finish]) -> dict[str, Any]:
        """``job_finish_succeeded_if_owner``'s parameters: the ids and attempts as array literals."""
        return {"ids": "{" + ",".join([str(f.id) for f in plain]) + "}",
                "attempts": "{" + ",".join([str(f.attempt) for f in plain]) + "}",
                "worker": worker, "now": self.db.now_param()}

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

    def _claimed(self, r: Any, worker: str) -> Job:
        """A claimed job from a row of ``CLAIM_COLUMNS`` through SQLAlchemy (``claimed_job``, its values
        converted as every other read converts them)."""
        t = self.db.from_db
        m = r._mapping
        return Job(int(m["id"]), m["queue"], m["kind"], json_from_db(m["payload"]) or {}, JobState.LEASED,
                   m["priority"], t(m["run_after"]), m["attempts"], m["max_attempts"], t(m["created_at"]),  # type: ignore[arg-type]
                   worker, t(m["lease_until"]), None, None, m["unique_key"], m["last_error_kind"], None, m["tenant"],
                   json_from_db(m["progress"]), None, False, m["free_attempts"])

    def _q(self, query: Query) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)


def claimed_job(r: Any, worker: str) -> Job:
    """A job the claim loop leased, from a row of a dedicated PostgreSQL connection (``CLAIM_COLUMNS_PG``: its
    session is in UTC, see ``DedicatedConnection``, so psycopg's datetimes are aware UTC already).

    The claim loop's hot path, so the row is read by unpacking it into the names of ``CLAIM_FIELDS``, in their
    order (tests/unit/test_claim_rows.py checks each value lands in the field its column names), and the Job is
    built positionally, in its field order: SQLAlchemy's name access costs more per column than building the
    whole Job (docs/benchmarks.md); unpacking costs less than reading by index."""
    (id_, queue, kind, payload, priority, run_after, attempts, max_attempts, lease_until, unique_key, tenant,
     progress, created_at, last_error_kind, free_attempts) = r
    return Job(id_, queue, kind, _scan_json(payload, 0)[0], JobState.LEASED, priority, run_after, attempts,
               max_attempts, created_at, worker, lease_until, None, None, unique_key, last_error_kind, None, tenant,
               None if progress is None else _scan_json(progress, 0)[0], None, False, free_attempts)


def _redact_finishes(finishes: Sequence[Finish]) -> None:
    """The storage boundary of error texts (jobs.last_error(_kind), job_attempts.error(_kind)), for every path
    that writes them: never a card number or key. In place (a Finish is a mutable value): what the worker
    counts and logs after the finish is what was written. A plain success carries none and costs two tests."""
    for f in finishes:
        if f.error:
            f.error = redact(f.error)
        if f.error_kind:
            f.error_kind = redact_value(f.error_kind)


def _claimed_sqlite(rows: list[Any], worker: str) -> list[Job]:
    """``claimed_job`` for the rows of a ``DedicatedSqlite`` claim, unpacked by the same names, in claim order
    (priority, then run_after and id; RETURNING's order is unspecified). One loop for the batch, the claim loop's
    hot path: the rows are ordered before they become Jobs (by their integer columns, two stable sorts keyed in C),
    times are integer microseconds since the epoch (``recon.db.schema``) converted once per value and batch (a
    batch's jobs share lease_until, often run_after and created_at), and JSON documents are the compact text
    enqueue stored (``_scan_json``; ``json.loads`` for any other text)."""
    rows.sort(key=_BY_RUN_AFTER_ID)
    rows.sort(key=_BY_PRIORITY, reverse=True)  # stable: equal priorities keep their (run_after, id) order
    times: dict[int, datetime] = {}
    jobs: list[Job] = []
    append, scan, leased = jobs.append, _scan_json, JobState.LEASED
    for (id_, queue, kind, payload, priority, run_after_us, attempts, max_attempts, lease_until_us, unique_key, tenant,
         progress, created_at_us, last_error_kind, free_attempts) in rows:
        run_after, lease_until = times.get(run_after_us), times.get(lease_until_us)
        created_at = times.get(created_at_us)
        if run_after is None:
            run_after = times[run_after_us] = _EPOCH + timedelta(microseconds=run_after_us)
        if lease_until is None:
            lease_until = times[lease_until_us] = _EPOCH + timedelta(microseconds=lease_until_us)
        if created_at is None:
            created_at = times[created_at_us] = _EPOCH + timedelta(microseconds=created_at_us)
        try:
            value = scan(payload, 0)[0]
        except (ValueError, StopIteration):
            value = json.loads(payload)
        append(Job(id_, queue, kind, value or {}, leased, priority, run_after, attempts, max_attempts, created_at,
                   worker, lease_until, None, None, unique_key, last_error_kind, None, tenant,
                   None if progress is None else _json_text(progress), None, False, free_attempts))
    return jobs


#: the claim's row order (``_claimed_sqlite``): by run_after and id, then (stable) by priority, highest first
_BY_RUN_AFTER_ID = itemgetter(5, 0)
_BY_PRIORITY = itemgetter(4)


def _json_text(text: str) -> Any:
    """A JSON document stored as text: ``_scan_json`` when it starts with its value, else ``json.loads``."""
    if text[:1] in ("{", "["):
        try:
            return _scan_json(text, 0)[0]
        except (ValueError, StopIteration):
            pass
    return json.loads(text)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: one (id, attempt) pair of ``finish_succeeded``'s JSON array
_PAIR = "[{},{}]"
_SUCCEEDED_HISTORY_SQLITE = q.job_finish_succeeded_if_owner_sqlite.for_driver("sqlite")
_SUCCEEDED_UPDATE_SQLITE = q.job_finish_succeeded_update_sqlite.for_driver("sqlite")


def _claim_order(job: Job) -> tuple[int, datetime, int]:
    return -job.priority, job.run_after, job.id


#: json.loads without its two Python-level frames, for documents PostgreSQL printed (jsonb as text: no
#: leading whitespace, nothing after the value): (value, end)
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
