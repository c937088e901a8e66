"""ApprovalStore: the four-eyes requests, the only code that executes ``recon.db.approval_queries``. Writes take
the caller's connection, so each change commits with its audit row. Texts and the payload are redacted here."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from recon.db import approval_queries as q
from recon.db.database import Database, json_from_db
from recon.operator_rows import Approval, ApprovalState
from recon.redact import redact, redact_row


class ApprovalStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def insert(self, conn: sa.Connection, *, action: str, subject: str, payload: dict[str, Any], requested_by: str,
               ttl: timedelta) -> Approval:
        row = redact_row({"action": action, "subject": subject, "payload": payload})
        found = conn.execute(self._q(q.approval_insert), {
            "action": row["action"], "subject": row["subject"], "payload": json.dumps(row["payload"]),
            "requested_by": requested_by, "ttl": ttl.total_seconds(), "now": self.db.now_param()}).one()
        return self._approval(found._mapping)

    def get(self, conn: sa.Connection, approval_id: int) -> Approval | None:
        row = conn.execute(self._q(q.approval_get), {"id": approval_id}).first()
        return self._approval(row._mapping) if row is not None else None

    def in_state(self, conn: sa.Connection, state: ApprovalState, *, limit: int) -> list[Approval]:
        return [self._approval(r._mapping) for r in conn.execute(self._q(q.approval_list),
                                                                 {"state": str(state), "n": limit})]

    def expire(self, conn: sa.Connection) -> list[Approval]:
        return [self._approval(r._mapping) for r in conn.execute(self._q(q.approval_expire),
                                                                 {"now": self.db.now_param()})]

    def decide(self, conn: sa.Connection, approval_id: int, *, state: ApprovalState, by: str) -> Approval | None:
        """The compare-and-set: the request, decided, or None when it was not pending, expired or ``by``'s own."""
        row = conn.execute(self._q(q.approval_decide), {"id": approval_id, "state": str(state), "by": by,
                                                        "now": self.db.now_param()}).first()
        return self._approval(row._mapping) if row is not None else None

    def set_result(self, conn: sa.Connection, approval_id: int, *, failed: bool, result: str) -> None:
        conn.execute(self._q(q.approval_result), {"id": approval_id, "result": redact(result)[:2000],
                                                  "state": str(ApprovalState.FAILED if failed
                                                               else ApprovalState.APPROVED)})

    def _approval(self, m: Any) -> Approval:
        t = self.db.from_db
        requested, expires = _at(t(m["requested_at"])), _at(t(m["expires_at"]))
        return Approval(id=int(m["id"]), action=m["action"], subject=m["subject"], payload=json_from_db(m["payload"]),
                        state=ApprovalState(m["state"]), requested_by=m["requested_by"], requested_at=requested,
                        expires_at=expires, decided_by=m["decided_by"], decided_at=t(m["decided_at"]),
                        result=m["result"])

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]


def _at(value: datetime | None) -> datetime:
    """A NOT NULL time column's value."""
    if value is None:
        raise ValueError("a NOT NULL time column read as NULL")
    return value
