"""Shared fixtures: every integration test runs on real PostgreSQL and on SQLite.

PostgreSQL: each test run creates a database of its own next to the one named by RECON_TEST_DATABASE_URL,
migrates it once from empty (so the migrations themselves are tested) and empties its tables before each
test as TRUNCATE … RESTART IDENTITY would, touching only the tables the last test wrote (``_empty``).
SQLite: each test gets its own file, copied from a migrated template.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from recon.db.database import Database, connect, upgrade
from recon.operator_rows import Role
from recon.totp_key import ENV_VARIABLE, TotpKey, write_new_key
from tests import cli
from tests.chaos.server_lock import holding
from tests.operators import add_staff

PG_URL = os.environ.get("RECON_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos-seconds", type=float, default=float(os.environ.get("RECON_CHAOS_SECONDS", "20")),
                     help="seconds of chaos in tests/chaos (CI: 20; a longer run: 120)")


#: the tests that take longest (a minute or more under load, CI's --durations), run first: pytest-xdist hands the
#: first quarter of the tests out in turn, so each worker starts on its share of them instead of one ending the
#: run alone on one of them (an order only: a test missing here or moved elsewhere runs all the same)
LONGEST_FIRST = (
    "tests/integration/test_bank_import_size.py::test_bank_import__a_100_mb",
    "tests/unit/test_code_checks.py",
    "tests/verification/",
    "tests/integration/test_worker_processes.py",
    "tests/integration/test_demo.py",
    "tests/adapters/sandbox/test_sandbox_docs.py",
    "tests/integration/test_metrics.py::test_metrics__one_worker_endpoint",
)


#: the chaos suite's order (``pytest -n 2 -m chaos`` gives each process two consecutive tests first, then one at a
#: time to whichever is free): the run that restarts the shared server (alone on it, tests/chaos/server_lock.py)
#: then the longest of the others on one process, the two failover runs (servers of their own) on the other
#: meanwhile; the rest as they come
CHAOS_FIRST = (
    "tests/chaos/test_chaos.py::test_chaos__money_is_never_lost_or_taken_twice[sandbox]",
    "tests/chaos/test_capture_chaos.py",
    "tests/chaos/test_failover.py::test_failover__synchronous_standby",
    "tests/chaos/test_failover.py::test_failover__asynchronous_standby",
)


def _chaos_rank(item: pytest.Item) -> int:
    return next((i for i, prefix in enumerate(CHAOS_FIRST) if item.nodeid.startswith(prefix)), len(CHAOS_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The chaos suite restarts PostgreSQL: run it last (``CHAOS_FIRST`` first). ``LONGEST_FIRST`` first."""
    items.sort(key=lambda item: ("tests/chaos/" in str(item.fspath).replace("\\", "/"),
                                 not item.nodeid.startswith(LONGEST_FIRST), _chaos_rank(item)))
#: tables a test never empties: Alembic's own bookkeeping
KEPT_TABLES = frozenset({"alembic_version"})


@pytest.fixture(scope="session")
def pg_migrated(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of its own for this test run (``<test db>_<pid>``) on the server of
    RECON_TEST_DATABASE_URL, migrated from empty, dropped at the end: concurrent runs never meet.

    Unless the run holds a chaos test (which restarts or kills servers and checks what their commits kept),
    its commits do not wait for the WAL to reach the disk (``synchronous_commit = off``, this database's
    only): what every session sees is the same, only a crash of the server could lose the last commits, and
    on a loaded machine each commit's flush costs more than most tests' own work."""
    base = make_url(PG_URL).set(drivername="postgresql+psycopg")
    name = f"{base.database}_run_{os.getpid()}"
    chaos = any(item.get_closest_marker("chaos") for item in request.session.items)
    # a chaos run's other pytest process may be restarting the server: made and dropped while sharing it
    server = holding(PG_URL, alone=False) if chaos else contextlib.nullcontext()
    with server:
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
            if not chaos:
                conn.exec_driver_sql(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        admin.dispose()  # the chaos suite restarts PostgreSQL: never keep a connection across the session
        url = base.set(database=name).render_as_string(hide_password=False)
        db = connect(url)
        upgrade(db)
        db.dispose()
    yield url
    server = holding(PG_URL, alone=False) if chaos else contextlib.nullcontext()
    with server:
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    db = connect(f"sqlite:///{path}")
    upgrade(db)
    db.dispose()
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database URL on each backend."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "recon.db"
        shutil.copyfile(template, target)
        return f"sqlite:///{target}"
    url: str = request.getfixturevalue("pg_migrated")
    engine: sa.Engine = request.getfixturevalue("pg_emptier")
    with engine.begin() as conn:
        existing = {r[0] for r in conn.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
        tables = sorted(existing - KEPT_TABLES)  # every table the migrations made, whatever adds one
        _empty(conn, tables)
    return url


@pytest.fixture(scope="session")
def pg_emptier(pg_migrated: str) -> Iterator[sa.Engine]:
    """The one connection that empties this run's PostgreSQL database before each test (``db_url``), kept for the
    session: a new server process for each test read the catalogue of every table again (about 20 ms of a test's
    setup, most of it the server's CPU; kept, the emptying costs a third of that). Idle between tests, outside any
    transaction, under its own application_name (never counted as recon's); checked before each use
    (``pool_pre_ping``), so a server restarted meanwhile costs a reconnect, not a failure."""
    engine = sa.create_engine(pg_migrated, pool_size=1, max_overflow=0, pool_pre_ping=True,
                              connect_args={"application_name": "recon-tests-emptier"})
    yield engine
    engine.dispose()


#: a table holding this many rows is emptied by TRUNCATE, fewer by DELETE
MANY_ROWS = 2000
#: (child, parent) of every foreign key between two tables of this schema
_FOREIGN_KEYS = """
SELECT c.conrelid::regclass::text, c.confrelid::regclass::text FROM pg_constraint c
JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE c.contype = 'f' AND n.nspname = current_schema() AND c.conrelid <> c.confrelid
"""
#: every sequence of this schema that has handed out a value since it was created or restarted, and its start
_USED_SEQUENCES = """
SELECT quote_ident(schemaname) || '.' || quote_ident(sequencename), start_value FROM pg_sequences
WHERE schemaname = current_schema() AND last_value IS NOT NULL
"""


def _empty(conn: sa.Connection, tables: list[str]) -> None:
    """Leave ``tables`` as ``TRUNCATE … RESTART IDENTITY`` would (every row gone, every sequence at its start)
    at a fraction of its cost: a TRUNCATE gives each table and index new files, which the commit syncs, empty
    or not, and a test leaves most tables untouched. The tables holding a row lose them by DELETE, children
    before their parents, but those holding thousands (where a DELETE costs more) by TRUNCATE; each sequence that
    was used starts again (``setval(…, start, false)``)."""
    if tables:
        rows = " UNION ALL ".join(f"SELECT '{t}', (SELECT count(*) FROM (SELECT 1 FROM \"{t}\" LIMIT {MANY_ROWS}) "
                                  f"AS s) WHERE EXISTS (SELECT 1 FROM \"{t}\")" for t in tables)
        counted = {str(t): int(n) for t, n in conn.exec_driver_sql(rows)}
        many = sorted(t for t, n in counted.items() if n >= MANY_ROWS)
        if many:
            conn.exec_driver_sql(f"TRUNCATE {', '.join(many)} CASCADE")
        dirty = set(counted) - set(many)
        parents: dict[str, set[str]] = {t: set() for t in dirty}
        for child, parent in conn.exec_driver_sql(_FOREIGN_KEYS):
            if child in dirty and parent in dirty:
                parents[child].add(parent)
        while parents:  # children first: a table no other remaining table refers to
            leaves = sorted(t for t in parents if not any(t in p for p in parents.values()))
            assert leaves, f"a cycle of foreign keys among {sorted(parents)}"
            for t in leaves:
                conn.exec_driver_sql(f'DELETE FROM "{t}"')
                del parents[t]
    for name, start in list(conn.exec_driver_sql(_USED_SEQUENCES)):
        conn.exec_driver_sql("SELECT setval(%(name)s::regclass, %(start)s, false)", {"name": name, "start": start})


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = connect(db_url)
    yield database
    database.dispose()


@pytest.fixture
def staff(db_url: str) -> dict[str, Role]:
    """One operator of each role in the test's database (tests/operators.py): ann operator, bob and amy
    approvers, root admin, vic viewer; every password ``tests.operators.PASSWORD``."""
    return add_staff(db_url)


@pytest.fixture
def totp_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TotpKey:
    """A TOTP key file (recon.totp_key) named by RECON_TOTP_KEY_FILE for the test: enrolments seal with it."""
    key = write_new_key(tmp_path / "totp.key")
    monkeypatch.setenv(ENV_VARIABLE, key.path)
    return key


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for `recon` runs that import test handlers: this process's, with the repository on
    PYTHONPATH (for a `python -m recon` child) and no RECON_CONFIG."""
    env = cli.python_env()
    env.pop("RECON_CONFIG", None)
    return env


@pytest.fixture
def recon() -> cli.Runner:
    """Run the ``recon`` command line: ``recon("stats", "--json", db_url=db_url)`` -> ``Result(returncode,
    stdout, stderr)``, in this process (``subprocess=True``: ``python -m recon``). See tests/cli.py."""
    return cli.run
