"""Every connection recon builds reaches the server of the database URL, in every form SQLAlchemy and libpq take
it (recon.db.libpq): multi-host query parameters, ``host`` and ``port`` lists, a service file, a Unix socket.
Against the test run's own database on the shared PostgreSQL (TCP on 127.0.0.1 and its socket directory), with
a port nothing listens on first in each host list, so that libpq must walk the list: the pool, the worker's
own claim and finish sessions, its LISTEN connection (a wake-up must arrive), the webhook intake's asyncio
connection, and a whole worker run.

The LISTEN connection used to hand the URL back to libpq as a string, where ``host=127.0.0.1:5432`` names a
host that does not resolve: it never connected over multi-host query parameters, and every worker so
configured polled and logged a warning a second."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from recon import Client, JobState, JobStore, RetryPolicy, Settings, Worker
from recon.config import EngineConfig
from recon.db import libpq
from recon.db.database import connect
from recon.db.listener import make_listener
from recon.db.webhook_store import WebhookStore
from recon.engine.handlers import Handlers
from tests.chaos.harness import free_port
from tests.conftest import PG_URL

SOCKET_DIR = "/var/run/postgresql"
WHO = "SELECT current_database(), inet_server_port()"
#: a worker that would wait 30 s between polls: a job that starts at once was woken by its NOTIFY
SLOW_POLL = EngineConfig(lease_ttl_seconds=30, heartbeat_interval_seconds=5, watcher_interval_seconds=5,
                         poll_interval_seconds=30, concurrency=2, drain_timeout_seconds=5)


def url_forms(database: str, service_file: Path) -> dict[str, str]:
    """Each form, for ``database`` on the test server; a dead port first wherever a list allows it."""
    server = make_url(PG_URL)
    host, port, user, dead = server.host or "127.0.0.1", server.port or 5432, server.username, free_port()
    service_file.write_text(f"[recon_failover_test]\nhost={host}\nport={port}\nuser={user}\ndbname={database}\n")
    return {
        "multi-host parameters": f"postgresql+psycopg://{user}@/{database}?host={host}:{dead}&host={host}:{port}"
                                 f"&target_session_attrs=read-write",
        "host and port lists": f"postgresql+psycopg://{user}@/{database}?host={host},{host}&port={dead},{port}"
                               f"&target_session_attrs=read-write",
        "service file": "postgresql+psycopg:///?service=recon_failover_test",
        "unix socket": f"postgresql+psycopg://{user}@/{database}?host={SOCKET_DIR}&port={port}",
    }


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize("form", ["multi-host parameters", "host and port lists", "service file", "unix socket"])
def test_url_form__every_connection_reaches_the_server_and_wakeups_arrive(
        db_url: str, form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if form == "unix socket" and not os.path.isdir(SOCKET_DIR):
        pytest.skip(f"the test server has no socket in {SOCKET_DIR}")
    monkeypatch.setenv("PGSERVICEFILE", str(tmp_path / "pg_service.conf"))
    database = make_url(db_url).database
    assert database
    url = url_forms(database, tmp_path / "pg_service.conf")[form]
    server_port = None if form == "unix socket" else (make_url(PG_URL).port or 5432)
    expected = (database, server_port)  # a socket connection has no server port
    db = connect(url)
    try:
        with db.begin() as conn:  # the pool
            assert tuple(conn.exec_driver_sql(WHO).one()) == expected
        with libpq.connect(db.url) as own:  # a driver connection of recon's own
            assert tuple(own.execute(WHO).fetchone()) == expected  # type: ignore[arg-type]
        for finishing in (False, True):  # the claim loop's and the finisher's sessions
            session = JobStore(db).dedicated(finishing=finishing)
            try:
                assert [tuple(r) for r in session.execute(WHO, {})] == [expected]  # type: ignore[attr-defined]
            finally:
                session.close()
        assert asyncio.run(_intake_session_reaches(WebhookStore(db))) == expected
        _worker_is_woken_by_notify(db)
    finally:
        db.dispose()


async def _intake_session_reaches(store: WebhookStore) -> tuple[Any, ...]:
    session = store.async_session()  # the webhook intake's group-commit connection
    try:
        conn = await session.connection()
        return tuple(await (await conn.execute(WHO)).fetchone())  # type: ignore[arg-type]
    finally:
        await session.close()


def _worker_is_woken_by_notify(db: Any) -> None:
    """A worker that polls every 30 s runs a job enqueued after it went idle within seconds: the NOTIFY of the
    enqueue reached its LISTEN connection."""
    store = JobStore(db)
    heard: list[str] = []
    listen = make_listener(db)
    assert listen is not None
    started = threading.Event()

    def wakeup(stop: threading.Event, on_notify: Callable[[str], None]) -> None:
        listen(stop, lambda queue: (heard.append(queue), on_notify(queue)))

    handlers = Handlers()
    handlers.register("ping", lambda _job, _lease: started.set())
    worker = Worker(store, handlers, config=replace(SLOW_POLL), policy=RetryPolicy(Settings().retry),
                    wakeup_func=wakeup)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while "*" not in heard and time.monotonic() < deadline:  # the LISTEN connection is up
            time.sleep(0.01)
        assert "*" in heard, "the LISTEN connection never connected"
        while not worker.waiting and time.monotonic() < deadline:  # its claims found nothing: it waits for a
            time.sleep(0.01)  # wake-up (producers NOTIFY it from now on) or 30 s
        assert worker.waiting
        job_id = Client(store, Settings()).enqueue("ping")
        assert started.wait(5), "no wake-up arrived"
        assert "default" in heard
    finally:
        worker.request_stop()
        t.join(10)
    assert not t.is_alive()
    job = store.get(job_id)
    assert job is not None and job.state is JobState.SUCCEEDED
