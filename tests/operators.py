"""Operators for tests: the staff every write test acts as (recon.operators), made straight in the store."""

from __future__ import annotations

import functools

import argon2

from recon.db.database import Database, connect
from recon.db.operator_store import OperatorStore
from recon.operator_rows import Role
from recon.operators import check_password

PASSWORD = "correct horse battery staple"
#: name -> role: one of each role
STAFF = {"ann": Role.OPERATOR, "bob": Role.APPROVER, "root": Role.ADMIN, "vic": Role.VIEWER, "amy": Role.APPROVER}


@functools.cache
def _hash() -> str:
    """argon2id once per process, every test operator sharing it, at argon2's lowest cost: a login checks a
    password with the parameters its stored hash names, so each test login costs a millisecond, not recon's
    64 MiB and 3 passes (a second under load; the lockout tests log in 25 times). The hashes recon makes
    itself carry its own parameters (test_operators)."""
    return argon2.PasswordHasher(time_cost=1, memory_cost=8, parallelism=1).hash(check_password(PASSWORD))


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
