"""Operators for tests: the staff every write test acts as (recon.operators), made straight in the store."""

from __future__ import annotations

import functools

from recon.db.database import Database, connect
from recon.db.operator_store import OperatorStore
from recon.operator_rows import Role
from recon.operators import hash_password

PASSWORD = "correct horse battery staple"
#: name -> role: one of each role
STAFF = {"ann": Role.OPERATOR, "bob": Role.APPROVER, "root": Role.ADMIN, "vic": Role.VIEWER, "amy": Role.APPROVER}


@functools.cache
def _hash() -> str:
    return hash_password(PASSWORD)  # argon2id once per process: every test operator shares it


def add_operator(db: Database, name: str, role: Role, *, password: bool = True) -> int:
    with db.begin() as conn:
        return OperatorStore(db).add(conn, name=name, role=role, password_hash=_hash() if password else None)


def add_staff(target: Database | str) -> dict[str, Role]:
    """``STAFF`` in the database (a Database, or its URL)."""
    db = connect(target) if isinstance(target, str) else target
    try:
        for name, role in STAFF.items():
            add_operator(db, name, role)
    finally:
        if isinstance(target, str):
            db.dispose()
    return STAFF
