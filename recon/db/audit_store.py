"""AuditStore: the audit trail's rows and seals, the only code that executes ``recon.db.audit_queries``. The
encoding, the chain and what a mismatch means are ``recon.audit``'s.

``append`` writes in the caller's transaction, so an action and its audit row commit together, and takes no lock:
it is on the paths people and workers write by. The storage boundary: every text and the evidence are redacted
here (``redact_row``), whoever writes them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from recon.db import audit_queries as q
from recon.db.database import Database, json_from_db
from recon.operator_rows import AuditEntry, AuditRecord, Seal
from recon.redact import redact_row

#: the streams the sealer chains: audit_log's rows, and the payment events (every payment transition)
STREAMS = ("audit", "payment_events")
#: the columns of each stream's page (``audit_rows_after``, ``payment_events_after``), in their order
_ROW_COLUMNS = {"audit": ("id", "at", "actor", "action", "subject", "outcome", "evidence", "read_at"),
                "payment_events": ("id", "payment_id", "from_status", "to_status", "source", "job_id", "attempt",
                                   "details", "at", "read_at")}


class AuditStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def append(self, conn: sa.Connection, entries: Sequence[AuditEntry]) -> None:
        """The entries as audit rows, in the caller's transaction, unchained."""
        if not entries:
            return
        now = self.db.now_param()
        rows = [redact_row({"actor": e.actor, "action": e.action, "subject": e.subject, "outcome": e.outcome,
                            "evidence": e.evidence}) for e in entries]
        conn.execute(self._q(q.audit_insert), [  # one executemany
            {**row, "evidence": json.dumps(row["evidence"], default=str) if row["evidence"] is not None else None,
             "now": now} for row in rows])

    def record(self, *entries: AuditEntry) -> None:
        """``append`` in a transaction of its own (an action whose own write is elsewhere, or none: a login)."""
        with self.db.begin() as conn:
            self.append(conn, entries)

    # --- the sealer's and verify's reads ---------------------------------------------------------------------

    def lock_sealer(self, conn: sa.Connection) -> None:
        conn.execute(self._q(q.audit_seal_lock))

    def last_seal(self, conn: sa.Connection, stream: str) -> Seal | None:
        row = conn.execute(self._q(q.audit_seal_last), {"stream": stream}).first()
        return self._seal(row._mapping) if row is not None else None

    def seal_before(self, conn: sa.Connection, stream: str, row_id: int) -> Seal | None:
        row = conn.execute(self._q(q.audit_seal_before), {"stream": stream, "row_id": row_id}).first()
        return self._seal(row._mapping) if row is not None else None

    def seals_after(self, conn: sa.Connection, stream: str, after: int, n: int) -> list[Seal]:
        return [self._seal(r._mapping) for r in conn.execute(self._q(q.audit_seals_after),
                                                             {"stream": stream, "after": after, "n": n})]

    def insert_seals(self, conn: sa.Connection, seals: Sequence[Seal]) -> None:
        if not seals:
            return
        now = self.db.now_param()
        if self.db.is_postgresql:  # one statement through the driver (the worker's sealer: docs/benchmarks.md)
            self.db.run_in(conn, q.audit_seal_insert_many, {
                "streams": [s.stream for s in seals], "row_ids": [s.row_id for s in seals],
                "kinds": [s.kind for s in seals], "row_hashes": [s.row_hash for s in seals],
                "chain_hashes": [s.chain_hash for s in seals], "now": now})
            return
        conn.execute(self._q(q.audit_seal_insert), [  # one executemany
            {"stream": s.stream, "row_id": s.row_id, "kind": s.kind, "row_hash": s.row_hash,
             "chain_hash": s.chain_hash, "now": now} for s in seals])

    def rows_after(self, conn: sa.Connection, stream: str, after: int, n: int) -> tuple[list[AuditRecord], datetime]:
        """A page of a stream's rows after id ``after``, each with its columns as the sealer encodes them, and
        the database's time of the read."""
        query = q.audit_rows_after if stream == "audit" else q.payment_events_after
        # straight through the driver (plain tuples, named here): SQLAlchemy's result rows were a tenth of the
        # worker's CPU under a webhook load, the sealer chaining every payment event (docs/benchmarks.md)
        names = _ROW_COLUMNS[stream]
        rows = [dict(zip(names, r, strict=True))
                for r in self.db.run_in(conn, query, {"after": after, "n": n, "now": self.db.now_param()})]
        read_at = _at(self.db.from_db(rows[0]["read_at"])) if rows else self.db.clock.now()
        return [AuditRecord(stream=stream, id=int(m["id"]), fields=self._fields(stream, m)) for m in rows], read_at

    def first_at_or_after(self, conn: sa.Connection, stream: str, since: datetime) -> int | None:
        query = q.audit_first_at_or_after if stream == "audit" else q.payment_events_first_at_or_after
        found = conn.execute(self._q(query), {"since": self.db.to_db(since)}).scalar_one()
        return int(found) if found is not None else None

    def between(self, since: datetime, until: datetime, *, after: int, n: int) -> list[AuditRecord]:
        """A page of audit rows of [since, until) after id ``after`` (``recon audit export``)."""
        with self.db.autocommit() as conn:
            rows = [r._mapping for r in conn.execute(self._q(q.audit_between), {
                "since": self.db.to_db(since), "until": self.db.to_db(until), "after": after, "n": n})]
        return [AuditRecord(stream="audit", id=int(m["id"]), fields=self._fields("audit", m)) for m in rows]

    def prune(self, before: datetime) -> int:
        """Delete the sealed audit rows older than ``before`` and their seals; returns the newest id deleted (0:
        none). The caller checked ``before`` against the retention."""
        with self.db.begin() as conn:
            bound = conn.execute(self._q(q.audit_prune_bound), {"before": self.db.to_db(before)}).scalar_one()
            if bound is None:
                return 0
            conn.execute(self._q(q.audit_prune_rows), {"before": self.db.to_db(before), "max_id": int(bound)})
            conn.execute(self._q(q.audit_prune_seals), {"max_id": int(bound)})
            return int(bound)

    def _fields(self, stream: str, m: Any) -> dict[str, Any]:
        if stream == "audit":
            return {"id": int(m["id"]), "at": self.db.from_db(m["at"]), "actor": m["actor"], "action": m["action"],
                    "subject": m["subject"], "outcome": m["outcome"], "evidence": json_from_db(m["evidence"])}
        return {"id": int(m["id"]), "payment_id": int(m["payment_id"]), "from_status": m["from_status"],
                "to_status": m["to_status"], "source": m["source"],
                "job_id": int(m["job_id"]) if m["job_id"] is not None else None,
                "attempt": int(m["attempt"]) if m["attempt"] is not None else None,
                "details": json_from_db(m["details"]), "at": self.db.from_db(m["at"])}

    def _seal(self, m: Any) -> Seal:
        return Seal(stream=m["stream"], row_id=int(m["row_id"]), kind=m["kind"], row_hash=m["row_hash"],
                    chain_hash=m["chain_hash"], sealed_at=_at(self.db.from_db(m["sealed_at"])))

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]


def _at(value: datetime | None) -> datetime:
    """A NOT NULL time column's value."""
    if value is None:
        raise ValueError("a NOT NULL time column read as NULL")
    return value
