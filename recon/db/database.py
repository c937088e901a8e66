"""Connecting to the database: URL checks, per-dialect session setup, time conversion, error translation,
and applying migrations.

PostgreSQL (``postgresql+psycopg://``) is the production engine; SQLite (``sqlite:///FILE``) the embedded
default. SQLite runs in WAL mode and every transaction starts with ``BEGIN IMMEDIATE``: it takes the single
write lock up front, so a claim's conditional UPDATE never races another writer and never has to upgrade
a read lock (the classic SQLite deadlock).

A PostgreSQL URL may name several servers (recon.db.libpq: multi-host forms, services, sockets); with
``target_session_attrs=read-write`` libpq connects to the one that takes writes. Every connection that fails
in a way that leaves it or its server unusable (recon.db.availability: lost, shut down, read-only) is dropped
and counts as ``DatabaseUnavailable``; from the first of an outage on, the pools of both engines hand out no
connection opened before it (``Database.unavailable`` and a ``checkout`` hook: they all point at the server
that failed; SQLAlchemy drops a pool on a disconnect it sees itself, not on one met through a driver
connection of recon's own, and a stale connection idle in the producers' pool then failed seconds later, a
second outage in the log), and every new connection goes through the host list again. Each failure and the
first success after them are told to ``Database.outage``, which logs an outage once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url

import migrations
from recon.clock import Clock, SystemClock
from recon.db import plan_queries
from recon.db.availability import Outage, error_class
from recon.db.libpq import connect_params
from recon.db.sql import Query
from recon.errors import ConfigError, DatabaseTransientError, DatabaseUnavailable, StoreError

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def parse_url(raw: str) -> URL:
    """A database URL recon supports, normalised (``postgresql://`` gets the psycopg 3 driver)."""
    try:
        url = make_url(raw)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise ConfigError(f"database URL {raw!r}: not a valid URL ({exc})") from None
    backend = url.get_backend_name()
    if backend == "postgresql":
        if url.get_driver_name() not in ("psycopg", "psycopg2", ""):
            raise ConfigError(f"database URL: driver {url.drivername!r} is not supported; use postgresql+psycopg")
        url = url.set(drivername="postgresql+psycopg")
        connect_params(url)  # a URL libpq could not take is refused now (ConfigError), not at the first connection
        return url
    if backend == "sqlite":
        if url.drivername != "sqlite":
            raise ConfigError(f"database URL: driver {url.drivername!r} is not supported; use sqlite:///FILE")
        if not url.database or url.database == ":memory:":
            raise ConfigError("database URL: SQLite needs a file (sqlite:///recon.db); workers share it")
        parent = Path(url.database).expanduser().resolve().parent
        if not parent.is_dir():
            raise ConfigError(f"database URL: directory {str(parent)!r} does not exist")
        return url
    raise ConfigError(f"database URL: backend {backend!r} is not supported; use postgresql or sqlite")


#: a wait to start a transaction shorter than this is not counted (``Waits``): a free pooled connection is taken
#: in microseconds, a new PostgreSQL connection in milliseconds
WAIT_NOTED_SECONDS = 0.001


class Waits:
    """How long this process's threads waited to start a transaction: ``checkout`` for a connection of the
    pool (all in use: the pool's size and overflow bound them; or a new one being opened), and ``write_lock``
    on SQLite for the write lock (``BEGIN IMMEDIATE``). Only waits of at least WAIT_NOTED_SECONDS are counted,
    under a lock taken only then; ``snapshot()`` for the worker's counters (recon.engine.presence)."""

    KINDS = ("checkout", "write_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = dict.fromkeys(self.KINDS, 0)
        self._seconds = dict.fromkeys(self.KINDS, 0.0)
        self._longest = dict.fromkeys(self.KINDS, 0.0)

    def note(self, kind: str, seconds: float) -> None:
        if seconds < WAIT_NOTED_SECONDS:
            return
        with self._lock:
            self._count[kind] += 1
            self._seconds[kind] += seconds
            self._longest[kind] = max(self._longest[kind], seconds)

    def snapshot(self) -> dict[str, Any]:
        """Per kind: waits counted, their seconds summed, the longest (cumulative)."""
        with self._lock:
            return {kind: {"waits": self._count[kind], "seconds": round(self._seconds[kind], 3),
                           "longest": round(self._longest[kind], 3)} for kind in self.KINDS}


class Database:
    """An engine plus what every statement needs: the dialect name and the clock.

    ``begin()`` yields a connection inside one transaction and translates driver errors into
    ``recon.errors`` (``DatabaseUnavailable`` when no server takes our writes, ``DatabaseTransientError`` for
    the rest of what is worth retrying, ``StoreError`` otherwise); ``outage`` hears of every unavailable
    error and of the successes after them.
    """

    def __init__(self, engine: sa.Engine, *, clock: Clock | None = None,
                 producer_engine: sa.Engine | None = None) -> None:
        self.engine = engine
        #: the pool of ``execute_driver(generic_plans=True)`` (PostgreSQL): cached generic plans (PG_SESSION_OPTIONS)
        self.producer_engine = producer_engine or engine
        self.dialect = engine.dialect.name
        self.clock: Clock = clock or SystemClock()
        self.url = engine.url
        # single-statement writes on the worker's hot path (claim, heartbeat, grouped finish) need no
        # BEGIN/COMMIT round trips on PostgreSQL: each statement is atomic on its own
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT") if self.dialect == "postgresql" \
            else None
        #: SQLite: the worker's claim loop and finisher take this around their write transactions. SQLite has
        #: one write lock per database, and a writer that finds it taken sleeps in its busy handler (1 ms,
        #: then longer); two threads of one process queue here instead, at no cost
        self.hot_lock = threading.Lock()
        #: this process's view of the database's availability (recon.db.availability): one log line an outage
        self.outage = Outage()
        #: how long transactions waited for a pooled connection or SQLite's write lock (``Waits``)
        self.waits = Waits()
        self._stale_epoch = 0  # the outage whose start made the pools' older connections stale
        #: (time.monotonic) the pools give out no connection opened before this: the server it reaches failed
        self._stale_before = 0.0
        #: the producers' connections between two single enqueues (``execute_driver(generic_plans=True)``): each
        #: stays checked out of ``producer_engine``'s pool (which bounds how many there are) and is taken back
        #: here, a deque's pop and append instead of the pool's checkout and return (a visible share of a single
        #: enqueue's client CPU: docs/benchmarks.md). Kept by the process that opened them (``_held_pid``: a
        #: forked child opens its own) until ``dispose()``, whose ``_held_generation`` sends later returns back
        #: to the pool; a connection opened before an outage is given back to the pool, whose checkout hook
        #: drops it, as the pool's own would be
        self._held: deque[Any] = deque()
        self._held_pid = os.getpid()
        self._held_generation = 0
        #: a parent's held connections, in a forked child: never used or closed here (their sockets are the parent's),
        #: and kept referenced (collected, SQLAlchemy would return them to the child's copy of the pool)
        self._forked_away: list[deque[Any]] = []
        if self.dialect == "postgresql":
            for pooled in {self.engine, self.producer_engine}:
                event.listen(pooled, "connect", _stamp_opened)
                event.listen(pooled, "checkout", self._refuse_stale)

    def unavailable(self, error: DatabaseUnavailable) -> None:
        """A call found the database unavailable: tell ``outage``; the first such call of an outage also makes
        every connection the pools opened until now stale (module docstring): each is closed when it is next
        checked out, and a new one opened instead. Connections checked out now are left to their users, who
        drop them at their own failure."""
        self.outage.failed(error)
        epoch = self.outage.epoch
        if self._stale_epoch != epoch:
            self._stale_epoch, self._stale_before = epoch, time.monotonic()

    def _refuse_stale(self, _dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        """SQLAlchemy's ``checkout`` hook: a connection opened before the outage is discarded (the pool closes
        it and connects again, the documented use of DisconnectionError)."""
        if record.info.get(_OPENED, 0.0) < self._stale_before:
            raise sa.exc.DisconnectionError("opened before the database became unavailable")

    @property
    def is_postgresql(self) -> bool:
        return self.dialect == "postgresql"

    @property
    def dbapi(self) -> Any:
        """The driver module (its ``Error`` classes)."""
        return self.engine.dialect.loaded_dbapi

    @contextlib.contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        epoch = self.outage.epoch
        with translate_errors(self.unavailable):
            asked = time.monotonic()
            with self.engine.connect() as conn:  # what Engine.begin does, with the waits measured
                given = time.monotonic()
                self.waits.note("checkout", given - asked)
                with conn.begin():
                    if self.dialect == "sqlite":
                        self.waits.note("write_lock", time.monotonic() - given)
                    yield conn
        self.outage.succeeded(epoch)

    @contextlib.contextmanager
    def reading(self) -> Iterator[sa.Connection]:
        """A transaction that only reads: on SQLite a deferred ``BEGIN`` (a WAL reader: it takes no write lock,
        so reads never queue behind writers or make them wait), on PostgreSQL an ordinary transaction. A write
        in it may fail with "database is locked" on SQLite: write through ``begin``."""
        if self.is_postgresql:
            with self.begin() as conn:
                yield conn
            return
        epoch = self.outage.epoch
        asked = time.monotonic()
        with translate_errors(self.unavailable), self.engine.connect() as conn:
            self.waits.note("checkout", time.monotonic() - asked)
            conn = conn.execution_options(recon_read_only=True)
            with conn.begin():
                yield conn
        self.outage.succeeded(epoch)

    @contextlib.contextmanager
    def autocommit(self) -> Iterator[sa.Connection]:
        """A connection for ONE atomic statement: autocommit on PostgreSQL (saves the BEGIN and COMMIT round
        trips), an ordinary ``BEGIN IMMEDIATE`` transaction on SQLite."""
        if self._autocommit is None:
            with self.begin() as conn:
                yield conn
            return
        epoch = self.outage.epoch
        asked = time.monotonic()
        with translate_errors(self.unavailable), self._autocommit.connect() as conn:
            self.waits.note("checkout", time.monotonic() - asked)
            yield conn
        self.outage.succeeded(epoch)

    def execute_driver(self, sql: str, params: Mapping[str, Any], *,
                       generic_plans: bool = False) -> list[tuple[Any, ...]]:
        """ONE atomic statement in autocommit on a pooled connection, straight through the driver
        (PostgreSQL): a producer's single enqueue. SQLAlchemy's connection, execution context and result
        wrapping cost a producer more CPU than the driver's own round trip; ``sql`` is
        ``Query.for_driver``'s, which psycopg prepares on the server after a few runs. ``generic_plans``: on a
        session of ``producer_engine``, which keeps PostgreSQL's cached generic plan (only for a statement
        whose plan does not depend on the tables' sizes: PG_SESSION_OPTIONS). Errors are translated as in
        ``translate_errors``; a broken connection is dropped from the pool."""
        if not self.is_postgresql:
            raise ValueError("a driver statement is for PostgreSQL")
        epoch = self.outage.epoch
        # the producers' pool hands out connections in autocommit and takes them back as they are (no reset:
        # its statements leave no transaction open); the main pool's are switched for the one statement
        producer = generic_plans and self.producer_engine is not self.engine
        generation = self._held_generation
        pooled = self._take_held() if producer else checkout(self, self.engine)
        conn: Any = pooled.driver_connection
        try:
            if producer:  # the connection's own cursor, kept with it: no Cursor built a call (13 µs of CPU)
                cur = pooled.info.get(_CURSOR)
                if cur is None or cur.connection is not conn:
                    cur = pooled.info[_CURSOR] = conn.cursor()
                cur.execute(sql, params)
            else:
                conn.autocommit = True
                cur = conn.execute(sql, params)
            result = cur.pgresult  # its field count, not ``description`` (which builds a Column per field a call)
            rows: list[tuple[Any, ...]] = cur.fetchall() if result is not None and result.nfields else []
        except self.dbapi.Error as exc:
            error = driver_error(self, exc, broken=conn.broken or conn.closed)
            if isinstance(error, DatabaseUnavailable):
                pooled.invalidate()
            raise error from exc
        finally:
            if conn.broken or conn.closed:
                if producer and pooled.dbapi_connection is not None:  # not invalidated above already
                    pooled.invalidate()  # dropped (and the pool's place freed), never held again
            elif not producer:
                conn.autocommit = False  # as the pool hands it out
                pooled.close()
            elif generation == self._held_generation and self._held_pid == os.getpid():
                self._held.append(pooled)
            else:
                pooled.close()  # disposed meanwhile: back to the pool it came from
        if self.outage.down:
            self.outage.succeeded(epoch)
        return rows

    def _take_held(self) -> Any:
        """A producers' connection (``_held``): one this process holds, opened after the last outage began, or
        one checked out of ``producer_engine``."""
        if self._held_pid != os.getpid():  # a forked child: the parent's connections are the parent's
            self._forked_away.append(self._held)
            self._held, self._held_pid = deque(), os.getpid()
        try:
            pooled = self._held.pop()
        except IndexError:
            return checkout(self, self.producer_engine)
        if pooled.info.get(_OPENED, 0.0) < self._stale_before:
            pooled.close()  # the pool's checkout hook (_refuse_stale) closes it when it is handed out again
            return checkout(self, self.producer_engine)
        return pooled

    def run_in(self, conn: sa.Connection, query: Query, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """ONE statement of ``query`` inside ``conn``'s transaction, straight through the driver: its rows as
        plain tuples, in the statement's column order (nothing converted: what SQLAlchemy's ``text()`` would
        have returned). For a worker's finish, whose few statements per batch cost more CPU in SQLAlchemy's
        execution context and result wrapping than in the driver (docs/benchmarks.md, issue 29: webhook intake
        headroom). An expanding parameter (``Query.expanding``) is a sequence, one placeholder per item, as
        SQLAlchemy renders it, and has at least one (ValueError: the caller knows what none means for its
        statement). Driver errors are translated as ``translate_errors`` does; the transaction is the caller's
        (rolled back by its ``begin`` on the exception)."""
        expand = {name: len(params[name]) for name in query.expanding}
        if not all(expand.values()):
            raise ValueError(f"query {query.name}: an expanding parameter without items")
        if expand:
            flat = {k: v for k, v in params.items() if k not in expand}
            for name in expand:
                flat.update({f"{name}_{i}": v for i, v in enumerate(params[name])})
            params = flat
        driver: Any = conn.connection.driver_connection
        try:
            cur = driver.execute(query.for_driver(self.dialect, **expand), params)
            if self.is_postgresql:
                result = cur.pgresult  # its field count, not ``description`` (a Column built per field a call)
                return cur.fetchall() if result is not None and result.nfields else []
            return cur.fetchall()  # type: ignore[no-any-return]
        except self.dbapi.Error as exc:
            raise driver_error(self, exc, broken=bool(getattr(driver, "broken", False)
                                                       or getattr(driver, "closed", False))) from exc

    @contextlib.contextmanager
    def index_plans(self, conn: sa.Connection) -> Iterator[None]:
        """Inside ``conn``'s transaction on PostgreSQL, while the block runs: prepared statements and the
        foreign-key checks of the rows it writes keep one generic plan, made with sequential scans off
        (recon.db.plan_queries: why, and which statements may run inside). The settings are restored after
        the block; when it raises, the transaction's end (its rollback) restores them. Nothing on SQLite."""
        if not self.is_postgresql:
            yield
            return
        (row,) = self.run_in(conn, plan_queries.plans_keep_indexed, {})
        yield
        self.run_in(conn, plan_queries.plans_restore, dict(zip(plan_queries.GUARDED, row, strict=False)))

    def now_param(self) -> Any:
        """The ``:now`` parameter: None on PostgreSQL (use the database clock) unless the clock is fixed."""
        if self.is_postgresql:
            return self.clock.now() if self.clock.is_fixed else None
        return self.to_db(self.clock.now())

    def to_db(self, value: datetime | None) -> Any:
        if value is None or self.is_postgresql:
            return value
        if value.tzinfo is None:
            raise ValueError("naive datetime passed to the database; use aware UTC datetimes")
        return (value - _EPOCH) // _MICRO

    def from_db(self, value: Any) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            return value.astimezone(UTC)
        return _EPOCH + timedelta(microseconds=int(value))

    def dispose(self) -> None:
        self._held_generation += 1  # a connection in use now goes back to its pool, not to ``_held``
        if self._held_pid == os.getpid():
            while self._held:
                self._held.pop().close()
        self.engine.dispose()
        if self.producer_engine is not self.engine:
            self.producer_engine.dispose()


def json_from_db(value: Any) -> Any:
    """A JSON column's value: PostgreSQL's driver already decoded jsonb; SQLite returns the text."""
    if value is None or isinstance(value, dict | list):
        return value
    return json.loads(value)


@contextlib.contextmanager
def translate_errors(unavailable: Callable[[DatabaseUnavailable], None] | None = None) -> Iterator[None]:
    """SQLAlchemy's driver errors as ``recon.errors`` (recon.db.availability sorts them); an unavailable
    database is told to ``unavailable`` (``Database.unavailable``)."""
    try:
        yield
    except sa.exc.DBAPIError as exc:
        cls = error_class(exc.orig, operational=isinstance(exc, sa.exc.OperationalError),
                          broken=exc.connection_invalidated)
        error = cls(f"database: {_first_line(exc.orig)}")
        if unavailable is not None and isinstance(error, DatabaseUnavailable):
            unavailable(error)
        raise error from exc


def is_transient(exc: sa.exc.DBAPIError) -> bool:
    return issubclass(error_class(exc.orig, operational=isinstance(exc, sa.exc.OperationalError),
                                  broken=exc.connection_invalidated), DatabaseTransientError)


def checkout(db: Database, engine: sa.Engine | None = None) -> Any:
    """A pooled connection (of ``db.engine`` unless ``engine``) for the driver itself; failing to connect is
    ``DatabaseUnavailable``."""
    try:
        return (engine or db.engine).raw_connection()
    except sa.exc.DBAPIError as exc:
        raise driver_error(db, exc.orig or exc, broken=True) from exc
    except db.dbapi.Error as exc:  # raw_connection() lets the driver's own connect error through
        raise driver_error(db, exc, broken=True) from exc


def driver_error(db: Database, exc: BaseException, *, broken: bool) -> StoreError:
    """A driver error as ``translate_errors`` would raise it (an unavailable database told to ``db``)."""
    cls = error_class(exc, operational=isinstance(exc, db.dbapi.OperationalError), broken=broken)
    error = cls(f"database: {_first_line(exc)}")
    if isinstance(error, DatabaseUnavailable):
        db.unavailable(error)
    return error


def _first_line(exc: BaseException | None) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


#: recon's PostgreSQL sessions plan each statement for its parameters and the tables as they are now
#: (``plan_cache_mode = force_custom_plan``). psycopg prepares a statement on its fifth run, and PostgreSQL
#: then keeps a generic plan when it looks no dearer than the custom ones: a worker that started on an empty
#: queue kept the sequential scans of a one-page ``jobs`` table for the rest of its life (its claims read the
#: whole table as it grew; the webhook marks hash-joined a sequential scan of webhook_events),
#: until an ANALYZE, which a server without autovacuum never runs. recon's statements are batched, so
#: planning each run costs little; the prepared statements still save the parsing. The one exception is a
#: producer's single enqueue (``Database.execute_driver(generic_plans=True)``, a pool of its own): one job a
#: statement, where planning each run was a large share of its cost (docs/benchmarks.md), and a statement that
#: reads no table.
PG_SESSION_OPTIONS = "-c plan_cache_mode=force_custom_plan"


def connect(url: str, *, clock: Clock | None = None, pool_size: int = 10) -> Database:
    """A Database for ``url``. Raises ConfigError for a URL recon cannot use."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(
            parsed,
            connect_args={"timeout": 60, "check_same_thread": False},
            pool_size=pool_size,
            max_overflow=pool_size,
        )
        _setup_sqlite(engine)
    else:
        engine = sa.create_engine(
            parsed,
            pool_size=pool_size,
            max_overflow=pool_size,
            # No pre-ping: it costs a round trip per checkout (a fifth of a claim). After a database
            # restart the first statement on a dead connection fails as a transient error, SQLAlchemy
            # invalidates the pool, and every loop (claim, heartbeat, finish, watcher) retries.
            pool_pre_ping=False,
            connect_args=connect_params(parsed, options=PG_SESSION_OPTIONS),
        )
        # the producers' pool: only Database.execute_driver(generic_plans=True) uses it, one autocommit statement
        # at a time, so its connections are in autocommit from the start and need no reset on return (a
        # rollback and two autocommit switches a call were a visible share of a single enqueue's client CPU)
        producer = sa.create_engine(parsed, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=False,
                                    pool_reset_on_return=None, connect_args=connect_params(parsed))
        event.listen(producer, "connect", _autocommit_from_the_start)
        for e in (engine, producer):
            event.listen(e, "handle_error", _unavailable_is_a_disconnect)
        return Database(engine, clock=clock, producer_engine=producer)
    return Database(engine, clock=clock)


#: the key of ``ConnectionPoolEntry.info`` that says when (time.monotonic) the connection was opened
_OPENED = "recon_opened"
#: the key of ``ConnectionPoolEntry.info`` holding a producers' connection's cursor (``execute_driver``)
_CURSOR = "recon_cursor"


def _autocommit_from_the_start(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.autocommit = True


def _stamp_opened(_dbapi_conn: Any, record: Any) -> None:
    record.info[_OPENED] = time.monotonic()


def _unavailable_is_a_disconnect(context: sa.engine.ExceptionContext) -> None:
    """SQLAlchemy's ``handle_error``: an error after which the server will not take our writes (a read-only
    transaction on a standby, an admin shutdown: recon.db.availability) counts as a disconnect, so the
    connection is invalidated, and with it every pooled connection opened before it (they point at the
    same server); the next checkout connects through the URL's host list again. SQLAlchemy sees a lost
    connection as a disconnect already; a read-only answer it would leave in the pool."""
    if context.is_disconnect or context.original_exception is None:
        return
    orig = context.original_exception
    if error_class(orig, operational=False) is DatabaseUnavailable:
        context.is_disconnect = True


def _setup_sqlite(engine: sa.Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=60000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        # a reading transaction (Database.reading) defers its lock: a WAL reader blocks no writer
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("recon_read_only") else "BEGIN IMMEDIATE")


def schema_revisions(db: Database) -> tuple[str | None, str]:
    """(the database's migration revision, None for an empty database; the revision this recon needs)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(Path(migrations.__file__).parent)).get_current_head()
    assert head is not None  # nosec B101  # type narrowing, not a check
    with translate_errors(), db.engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    return current, head


def upgrade(db: Database, revision: str = "head") -> None:
    """Apply the Alembic migrations up to ``revision``; a no-op when the schema is current."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    with translate_errors(), db.engine.begin() as conn:
        if db.is_postgresql:
            # many workers may run `db upgrade` at once on start: one at a time
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext('recon.migrations'))")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
