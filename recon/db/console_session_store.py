"""ConsoleSessionStore: the console's server-side sessions. The only code that executes
``console_session_queries``; what a session's times mean is decided in ``recon.console.session``.

The store never sees a session id, only its SHA-256 (``sid_hash``, bytes): the id lives in the browser's
cookie. ``principal``, the one text column, passes the redaction boundary like every stored text (its
format, recon.console.session's, is one redaction leaves as it is).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from recon.console_rows import ConsoleSession
from recon.db import console_session_queries as q
from recon.db.database import Database
from recon.redact import redact


class ConsoleSessionStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def open(self, *, sid_hash: bytes, principal: str, absolute: timedelta, idle: timedelta,
             operator_id: int | None = None) -> int:
        """Delete the sessions that have ended (revoked, past their deadline, idle for ``idle``), then open one
        that ends ``absolute`` from now, in one transaction. Returns its row id."""
        with self.db.begin() as conn:
            now = self.db.now_param()
            conn.execute(self._q(q.console_session_prune), {"now": now, "idle": idle.total_seconds()})
            return int(conn.execute(self._q(q.console_session_open), {
                "sid_hash": sid_hash, "principal": redact(principal), "operator_id": operator_id, "now": now,
                "absolute": absolute.total_seconds()}).scalar_one())

    def find(self, sid_hash: bytes) -> ConsoleSession | None:
        """The session whose id hashes to ``sid_hash``, whatever its state; None if there is none."""
        with self.db.autocommit() as conn:
            row = conn.execute(self._q(q.console_session_find), {"sid_hash": sid_hash,
                                                                  "now": self.db.now_param()}).first()
        if row is None:
            return None
        t = self.db.from_db
        return ConsoleSession(id=int(row.id), principal=row.principal, operator_id=row.operator_id,
                              created_at=t(row.created_at), last_seen_at=t(row.last_seen_at),  # type: ignore[arg-type]
                              expires_at=t(row.expires_at), revoked_at=t(row.revoked_at),  # type: ignore[arg-type]
                              checked_at=t(row.checked_at),  # type: ignore[arg-type]
                              operator_name=row.operator_name, operator_role=row.operator_role,
                              operator_disabled=bool(row.operator_disabled))

    def touch(self, session_id: int, *, older_than: timedelta) -> bool:
        """Move the session's last_seen_at to now if it is at least ``older_than`` old and not revoked."""
        with self.db.autocommit() as conn:
            return conn.execute(self._q(q.console_session_touch), {
                "id": session_id, "now": self.db.now_param(), "touch": older_than.total_seconds()}).rowcount == 1

    def revoke(self, session_id: int) -> bool:
        """End the session now; False when it was revoked already."""
        with self.db.autocommit() as conn:
            return conn.execute(self._q(q.console_session_revoke), {
                "id": session_id, "now": self.db.now_param()}).rowcount == 1

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]
