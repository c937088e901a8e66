"""A migrated, empty database of a benchmark's own, removed afterwards (shared by the bench scripts).

PostgreSQL: created next to RECON_BENCH_DATABASE_URL's database (default: the test database's server) and
dropped at the end. SQLite: a file in a temporary directory.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from recon.db.database import connect, upgrade

PG_URL = os.environ.get("RECON_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def scratch_database(backend: str, tag: str) -> Iterator[str]:
    """Yield the URL of a migrated, empty database named after ``tag``; remove it afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix=f"recon-bench-{tag}-") as tmp:
            url = f"sqlite:///{tmp}/bench.db"
            _migrate(url)
            yield url
        return
    base = make_url(PG_URL).set(drivername="postgresql+psycopg")
    name = f"{base.database}_bench_{tag}_{os.getpid()}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        url = base.set(database=name).render_as_string(hide_password=False)
        _migrate(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def _migrate(url: str) -> None:
    db = connect(url)
    upgrade(db)
    db.dispose()
