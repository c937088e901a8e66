"""A PostgreSQL URL as libpq connection parameters, read once the way SQLAlchemy reads it, for the pool and for
every driver connection recon opens itself.

SQLAlchemy's psycopg dialect turns the URL into the keywords it hands psycopg (``create_connect_args``):
multi-host query parameters (``?host=10.0.0.1:5432&host=10.0.0.2:5432``), a ``host=a,b&port=p1,p2`` list, a
service (``?service=name``, with ``PGSERVICEFILE``), a Unix socket directory (``?host=/var/run/postgresql``),
and every other libpq keyword of the query (``target_session_attrs``, ``sslmode``, ``keepalives_idle``). The
same URL rendered back to a string and handed to libpq reads differently: libpq takes ``10.0.0.1:5432`` in a
``host`` parameter for a host name, so the worker's LISTEN connection never connected over a multi-host URL.
``connect_params`` asks SQLAlchemy's own dialect instead, and every connection recon builds (the pool's, the
LISTEN connection, the webhook intake's asyncio connection, the benchmarks') takes its parameters from it.

``AsyncSession`` is the webhook intake's asyncio connection: opened on first use, dropped when it failed in a
way that leaves it or its server unusable (recon.db.availability), opened again on the next use, but not before
its backoff allows: while no primary answers, a batch fails at once (its requests are answered 503) instead of
waiting out a connection attempt each.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError

from recon.db.availability import Backoff, Outage, error_class
from recon.errors import ConfigError, DatabaseUnavailable, StoreError

#: what recon's connections say when the URL does not: how long one connection attempt may take (per host
#: of a multi-host URL), and the name in pg_stat_activity
DEFAULT_PARAMS = {"connect_timeout": "10", "application_name": "recon"}
#: psycopg's own keywords SQLAlchemy passes beside libpq's (the adapters map): not connection parameters
_DRIVER_KEYWORDS = frozenset({"context"})

_DIALECT = PGDialect_psycopg()  # type: ignore[no-untyped-call]


def connect_params(url: URL, *, options: str | None = None) -> dict[str, str]:
    """The libpq keywords for ``url`` as SQLAlchemy's psycopg dialect reads it, with ``DEFAULT_PARAMS`` where
    the URL sets none, and ``options`` (``-c name=value`` settings for the session) after the URL's own.
    Raises ConfigError for a URL the dialect refuses (multi-host forms mixed, a port that is not a number)
    or a keyword given twice."""
    try:
        _args, given = _DIALECT.create_connect_args(url)  # type: ignore[no-untyped-call]
    except ArgumentError as exc:
        raise ConfigError(f"database URL: {exc}") from None
    params = dict(DEFAULT_PARAMS)
    for key, value in given.items():
        if key in _DRIVER_KEYWORDS:
            continue
        if isinstance(value, list | tuple):
            raise ConfigError(f"database URL: {key!r} is given {len(value)} times; libpq takes it once")
        params[key] = str(value)
    if options:
        params["options"] = f"{params['options']} {options}" if params.get("options") else options
    return params


def conninfo(url: URL, *, options: str | None = None) -> str:
    """``connect_params`` as a libpq connection string (values quoted as libpq wants them), for a tool that
    takes one."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo("", **connect_params(url, options=options))


def connect(url: URL, *, autocommit: bool = True, outage: Outage | None = None) -> Any:
    """A psycopg connection of its own to ``url`` (``connect_params``). Raises DatabaseUnavailable (told to
    ``outage``) when no server of the URL takes it, StoreError for another refusal."""
    import psycopg

    epoch = outage.epoch if outage is not None else 0
    try:
        conn = psycopg.connect(conninfo(url), autocommit=autocommit)
    except psycopg.Error as exc:
        raise driver_error(exc, outage) from exc
    if outage is not None:
        outage.succeeded(epoch)
    return conn


class AsyncSession:
    """One psycopg ``AsyncConnection`` (autocommit, TimeZone UTC) to ``url`` for one task, across failures
    (module docstring). ``connection()`` gives it, opening it if needed; ``failed(exc, conn)`` tells the session
    what a statement on it raised and returns the StoreError to raise instead; ``succeeded()`` after a statement
    that worked (with the outage ``epoch`` read before it); ``close()`` at the end."""

    def __init__(self, url: URL, *, outage: Outage | None = None, backoff: Backoff | None = None) -> None:
        self.url = url
        self.outage = outage
        self.backoff = backoff or Backoff()
        self._conn: Any = None
        self._retry_at = 0.0  # no new connection before this (time.monotonic)

    async def connection(self) -> Any:
        import psycopg

        conn = self._conn
        if conn is not None and not (conn.closed or conn.broken):
            return conn
        self._conn = None
        if time.monotonic() < self._retry_at:
            raise DatabaseUnavailable("database: unavailable, waiting before the next connection attempt")
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo(self.url), autocommit=True)
            await conn.execute("SET TimeZone = 'UTC'")
        except psycopg.Error as exc:
            self._retry_at = time.monotonic() + self.backoff.next()
            raise driver_error(exc, self.outage) from exc
        self._conn = conn
        return conn

    async def failed(self, exc: BaseException, conn: Any) -> StoreError:
        """The StoreError for ``exc``, raised by a statement on ``conn``; an unavailable error drops the
        connection (the next ``connection()`` opens another, through the URL's host list)."""
        error = driver_error(exc, self.outage, broken=bool(conn.broken or conn.closed))
        if isinstance(error, DatabaseUnavailable) and conn is self._conn:
            self._conn = None
            self._retry_at = time.monotonic() + self.backoff.next()
            with contextlib.suppress(Exception):
                await conn.close()
        return error

    def succeeded(self, epoch: int | None = None) -> None:
        self.backoff.reset()
        if self.outage is not None:
            self.outage.succeeded(epoch)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


def driver_error(exc: BaseException, outage: Outage | None, *, broken: bool = False) -> StoreError:
    """``exc`` (a psycopg error) as recon.errors says it (recon.db.availability), told to ``outage`` when the
    database is unavailable. ``broken``: the connection it came from is broken or closed."""
    import psycopg

    lines = str(exc).strip().splitlines()
    cls = error_class(exc, operational=isinstance(exc, psycopg.OperationalError), broken=broken)
    error = cls(f"database: {lines[0][:300] if lines else type(exc).__name__}")
    if outage is not None and isinstance(error, DatabaseUnavailable):
        outage.failed(error)
    return error
