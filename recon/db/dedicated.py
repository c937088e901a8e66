"""The worker's own driver connections, kept by one thread each for its hot loop (the claim loop, the finisher,
the heartbeat): ``DedicatedConnection`` on PostgreSQL, ``DedicatedSqlite`` on SQLite. They bypass SQLAlchemy's
per-statement work but take their connections from ``Database``'s pool and translate driver errors as
``recon.db.database.translate_errors`` does (``checkout``, ``driver_error``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from recon.db.database import Database, checkout, driver_error
from recon.errors import DatabaseUnavailable

T = TypeVar("T")


class DedicatedConnection:
    """One driver connection kept by one thread for its hot loop: the worker's claim loop and finisher
    (PostgreSQL only, autocommit: each of their statements is atomic on its own).

    They run a statement per batch, and going through SQLAlchemy for each (pool checkout and checkin,
    isolation-level switch, compiled-statement lookup, result wrapping) cost the worker more CPU than the
    statement's own client side. Here a statement is a plain string (``queries.Query.for_driver``) that
    psycopg prepares on the server after a few runs. A connection that failed as unavailable (lost, its
    server shut down or read-only: a failover) is dropped and the next call opens a new one, through the
    URL's host list; errors are translated as in ``translate_errors``.
    """

    def __init__(self, db: Database, *, session: Mapping[str, str] | None = None) -> None:
        if not db.is_postgresql:
            raise ValueError("a dedicated driver connection is for PostgreSQL")
        self._db = db
        #: settings for this connection's session (names and values are recon's own, never user input);
        #: TimeZone UTC always: datetimes come back aware in UTC, without a conversion per value
        self._session = {"TimeZone": "UTC", **(session or {})}
        self._pooled: Any = None  # SQLAlchemy's pooled wrapper, returned to the pool on close()
        self._conn: Any = None  # the psycopg connection inside it

    def execute(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows (an empty list for a statement without rows)."""
        epoch = self._db.outage.epoch
        conn = self._conn if self._conn is not None else self._open()
        try:
            cur = conn.execute(sql, params)
            rows: list[tuple[Any, ...]] = cur.fetchall() if cur.description is not None else []
        except self._db.dbapi.Error as exc:
            error = driver_error(self._db, exc, broken=conn.broken or conn.closed)
            if isinstance(error, DatabaseUnavailable):
                self._drop(invalidate=True)
            raise error from exc
        if self._db.outage.down:
            self._db.outage.succeeded(epoch)
        return rows

    def open(self) -> None:
        """Take the connection now rather than at the first statement (the heartbeat's: when the worker starts,
        before its handler threads may hold every pooled one)."""
        if self._conn is None:
            self._open()

    def close(self) -> None:
        self._drop(invalidate=False)

    def _open(self) -> Any:
        pooled = checkout(self._db)
        conn: Any = pooled.driver_connection
        conn.autocommit = True
        try:
            for name, value in self._session.items():
                conn.execute(f"SET {name} = '{value}'")
        except self._db.dbapi.Error as exc:
            pooled.invalidate()
            raise driver_error(self._db, exc, broken=True) from exc
        self._pooled, self._conn = pooled, conn
        return conn

    def _drop(self, *, invalidate: bool) -> None:
        pooled, self._pooled, self._conn = self._pooled, None, None
        if pooled is None:
            return
        if not invalidate:
            # a connection that cannot be reset (the server ended it) is dropped below, not returned to the pool
            with contextlib.suppress(Exception):
                driver: Any = pooled.driver_connection
                driver.execute("RESET ALL")  # the pool's next user gets the session as the pool opened it
                driver.autocommit = False  # as the pool handed it out
                pooled.close()
                return
        with contextlib.suppress(Exception):
            pooled.invalidate()


#: pages of WAL after which a commit checkpoints: SQLite's default, and the worker's hot connections'
SQLITE_WAL_AUTOCHECKPOINT_DEFAULT = 1000
SQLITE_HOT_WAL_AUTOCHECKPOINT = 10_000


class DedicatedSqlite:
    """The SQLite counterpart of ``DedicatedConnection``: one sqlite3 connection kept by one thread of the
    worker (the claim loop, the finisher) for its write transactions.

    ``write(fn)`` runs ``fn(connection)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` under ``Database.hot_lock``;
    statements are ``Query.for_driver("sqlite")`` strings, which sqlite3 keeps prepared in its statement
    cache. An exception rolls the transaction back; driver errors are translated as in ``translate_errors``
    (a busy or locked database is transient).
    """

    def __init__(self, db: Database) -> None:
        if db.is_postgresql:
            raise ValueError("a dedicated sqlite3 connection is for SQLite")
        self._db = db
        self._pooled: Any = None
        self._conn: Any = None

    def write(self, fn: Callable[[Any], T]) -> T:
        conn = self._conn if self._conn is not None else self._open()
        with self._db.hot_lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except self._db.dbapi.Error as exc:
                raise driver_error(self._db, exc, broken=False) from exc
        return result

    def open(self) -> None:
        """Take the connection now rather than at the first write (``DedicatedConnection.open``)."""
        if self._conn is None:
            self._open()

    def close(self) -> None:
        pooled, self._pooled, self._conn = self._pooled, None, None
        if pooled is not None:
            with contextlib.suppress(Exception):
                pooled.driver_connection.execute(f"PRAGMA wal_autocheckpoint = {SQLITE_WAL_AUTOCHECKPOINT_DEFAULT}")
                pooled.close()

    def _open(self) -> Any:
        pooled = checkout(self._db)  # set up by the engine's connect hook (WAL, busy timeout, no implicit BEGIN)
        conn = pooled.driver_connection
        try:
            # A checkpoint runs in the commit that takes the WAL past this many pages: at SQLite's 1,000 (4 MB)
            # the drain's commits spent much of their time checkpointing pages the next batch rewrites anyway
            # (docs/benchmarks.md). 10,000 pages (40 MB) lets one checkpoint write each hot page once for several
            # batches; durability is the same (synchronous = NORMAL syncs the WAL at every checkpoint either way).
            conn.execute(f"PRAGMA wal_autocheckpoint = {SQLITE_HOT_WAL_AUTOCHECKPOINT}")
        except self._db.dbapi.Error as exc:
            pooled.invalidate()
            raise driver_error(self._db, exc, broken=True) from exc
        self._pooled, self._conn = pooled, conn
        return conn
