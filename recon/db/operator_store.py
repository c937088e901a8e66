"""OperatorStore: the operators, the only code that executes ``recon.db.operator_queries``. What a role may do,
how passwords are hashed and when a login locks are decided in ``recon.operators``.

Writes take the caller's connection, so that the audit row of the change (``recon.db.audit_store``) commits in
the same transaction. The storage boundary: a name is refused at its entry when redaction would change it
(``recon.operators.check_name``), so the stored name is the one compared; the hash and the TOTP seed are
recon's own (argon2's encoding; the seed sealed by ``recon.totp_key``, or plain base32 from before sealing),
never outside text. The store never seals or opens a seed: it keeps what ``recon.operators`` gives it.
"""

from __future__ import annotations

import builtins
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from recon.db import console_session_queries as sq
from recon.db import operator_queries as q
from recon.db.database import Database
from recon.errors import UsageError
from recon.operator_rows import Credentials, Operator, Role
from recon.redact import redact


class OperatorStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, conn: sa.Connection, *, name: str, role: Role, password_hash: str | None,
            totp_secret: str | None = None) -> int:
        """A new operator; UsageError when the name is taken (nothing written)."""
        if self._find(conn, name) is not None:
            raise UsageError(f"operator {name!r} exists already (recon operators list)")
        return int(conn.execute(self._q(q.operator_insert), {
            "name": redact(name), "role": str(role), "password_hash": password_hash, "totp_secret": totp_secret,
            "now": self.db.now_param()}).scalar_one())

    def get(self, name: str) -> Operator | None:
        with self.db.autocommit() as conn:
            return self._find(conn, name)

    def find(self, conn: sa.Connection, name: str) -> Operator | None:
        """The operator named ``name`` in the caller's transaction."""
        return self._find(conn, name)

    def list(self) -> list[Operator]:
        with self.db.autocommit() as conn:
            return [self._operator(r._mapping) for r in conn.execute(self._q(q.operator_list))]

    def count(self, conn: sa.Connection) -> int:
        return int(conn.execute(self._q(q.operator_count)).scalar_one())

    def credentials(self, name: str) -> Credentials | None:
        """What a login checks, with the database's time; None for an unknown name."""
        with self.db.autocommit() as conn:
            row = conn.execute(self._q(q.operator_credentials), {"name": name, "now": self.db.now_param()}).first()
        if row is None:
            return None
        m = row._mapping
        last = m["totp_last_step"]
        return Credentials(operator=self._operator(m), password_hash=m["password_hash_value"],
                           totp_secret=m["totp_secret_value"], checked_at=_at(self.db.from_db(m["checked_at"])),
                           totp_last_step=int(last) if last is not None else None)

    def disable(self, conn: sa.Connection, operator: Operator) -> bool:
        """Disable the operator and end every console session of theirs, at once; False when disabled already."""
        done = conn.execute(self._q(q.operator_disable), {"name": operator.name,
                                                          "now": self.db.now_param()}).rowcount == 1
        self.end_sessions(conn, operator)
        return done

    def enable(self, conn: sa.Connection, operator: Operator) -> bool:
        return conn.execute(self._q(q.operator_enable), {"name": operator.name,
                                                         "now": self.db.now_param()}).rowcount == 1

    def set_password(self, conn: sa.Connection, operator: Operator, *, password_hash: str,
                     totp_secret: str | None = None, reset_totp: bool = False) -> None:
        """A new password (and TOTP secret with ``reset_totp``), the lockout cleared, every session ended."""
        conn.execute(self._q(q.operator_set_password), {
            "name": operator.name, "password_hash": password_hash, "totp_secret": totp_secret,
            "reset_totp": reset_totp, "now": self.db.now_param()})
        self.end_sessions(conn, operator)

    def set_role(self, conn: sa.Connection, operator: Operator, role: Role) -> bool:
        return conn.execute(self._q(q.operator_set_role), {"name": operator.name, "role": str(role),
                                                           "now": self.db.now_param()}).rowcount == 1

    def end_sessions(self, conn: sa.Connection, operator: Operator) -> int:
        return int(conn.execute(self._q(sq.console_session_revoke_operator), {
            "operator_id": operator.id, "now": self.db.now_param()}).rowcount)

    def login_failed(self, conn: sa.Connection, operator: Operator, *, limit: int,
                     lockout: timedelta) -> tuple[int, Any]:
        """One more failed login: (failures, locked_until) after it."""
        row = conn.execute(self._q(q.operator_login_failed), {
            "id": operator.id, "limit": limit, "lockout": lockout.total_seconds(),
            "now": self.db.now_param()}).one()
        return int(row.failed_logins), self.db.from_db(row.locked_until)

    def accept_totp_step(self, conn: sa.Connection, operator: Operator, step: int) -> bool:
        """Record ``step`` as the operator's last accepted TOTP step; False when that step or a later one was
        accepted already (the code is used)."""
        return conn.execute(self._q(q.operator_accept_totp_step), {"id": operator.id, "step": step}).rowcount == 1

    def login_succeeded(self, conn: sa.Connection, operator: Operator) -> None:
        conn.execute(self._q(q.operator_login_succeeded), {"id": operator.id})

    def totp_secrets(self, conn: sa.Connection) -> builtins.list[tuple[int, str, str]]:
        """Every stored TOTP seed as (operator id, name, stored form), in the caller's transaction."""
        return [(int(r.id), str(r.name), str(r.totp_secret))
                for r in conn.execute(self._q(q.operator_totp_secrets))]

    def replace_totp_secret(self, conn: sa.Connection, operator_id: int, *, old: str, new: str) -> bool:
        """The row's seed ``old`` replaced by ``new``; False when the row no longer holds ``old``."""
        return conn.execute(self._q(q.operator_replace_totp_secret), {
            "id": operator_id, "old": old, "new": new, "now": self.db.now_param()}).rowcount == 1

    def _find(self, conn: sa.Connection, name: str) -> Operator | None:
        row = conn.execute(self._q(q.operator_by_name), {"name": name}).first()
        return self._operator(row._mapping) if row is not None else None

    def _operator(self, m: Any) -> Operator:
        t = self.db.from_db
        created, updated = _at(t(m["created_at"])), _at(t(m["updated_at"]))
        return Operator(id=int(m["id"]), name=m["name"], role=Role(m["role"]), has_password=bool(m["has_password"]),
                        has_totp=bool(m["has_totp"]), totp_sealed=bool(m["totp_sealed"]),
                        disabled_at=t(m["disabled_at"]),
                        failed_logins=int(m["failed_logins"]), locked_until=t(m["locked_until"]),
                        created_at=created, updated_at=updated)

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]


def _at(value: datetime | None) -> datetime:
    """A NOT NULL time column's value."""
    if value is None:
        raise ValueError("a NOT NULL time column read as NULL")
    return value
