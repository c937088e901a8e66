"""The worker's wake-ups on PostgreSQL: a connection of its own that LISTENs for the NOTIFY every enqueue sends.

The connection is built from the database URL as the pool's are (recon.db.libpq), so it reaches the same
server over every URL form, multi-host and ``target_session_attrs=read-write`` included. When it fails (the
server died, was shut down, or a failover left it read-only: LISTEN is refused during recovery), it is opened
again with backoff, through the URL's host list: the new primary. Notifications sent while no connection
listened are lost; on every (re)connection the worker is told ``"*"`` (look at every queue), and its polling
covers the rest. An outage is logged once for the process (recon.db.availability), not once a try.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from recon.db.availability import Backoff, log_failure
from recon.db.database import Database
from recon.db.libpq import connect, driver_error
from recon.errors import StoreError

log = logging.getLogger(__name__)

#: how long one wait for notifications lasts before the stop event is looked at again
NOTIFY_WAIT_SECONDS = 0.5

ListenFunc = Callable[[threading.Event, Callable[[str], None]], None]


def make_listener(db: Database, *, channel: str = "recon_jobs") -> ListenFunc | None:
    """A wake-up function for the worker: LISTEN on ``channel`` and call ``on_notify(queue)`` for every NOTIFY
    (and ``on_notify("*")`` on every connection) until ``stop`` is set. None on SQLite (workers poll)."""
    if not db.is_postgresql:
        return None

    def listen(stop: threading.Event, on_notify: Callable[[str], None]) -> None:
        backoff = Backoff()
        while not stop.is_set():
            try:
                _listen_once(db, channel, stop, on_notify, backoff)
            except StoreError as exc:
                log_failure(log, "LISTEN connection failed (%s); polling until it is back", exc)
                stop.wait(backoff.next())

    return listen


def _listen_once(db: Database, channel: str, stop: threading.Event, on_notify: Callable[[str], None],
                 backoff: Backoff) -> None:
    """One LISTEN connection, until ``stop`` or its failure (raised as a StoreError)."""
    import psycopg

    conn: Any = connect(db.url, outage=db.outage)
    try:
        with conn:
            conn.execute(f"LISTEN {channel}")
            backoff.reset()
            on_notify("*")  # anything enqueued while we were not listening
            while not stop.is_set():
                for note in conn.notifies(timeout=NOTIFY_WAIT_SECONDS, stop_after=1):
                    on_notify(note.payload)
    except psycopg.Error as exc:
        raise driver_error(exc, db.outage, broken=bool(conn.broken or conn.closed)) from exc
