"""``Database.waits``: how long transactions waited for a pooled connection, and on SQLite for the write lock,
on both databases (the figures a worker publishes in its counters, ``database_waits``)."""

from __future__ import annotations

import sqlite3
import threading
import time

import sqlalchemy as sa

from recon.db.database import Database, connect


def begin_in_thread(db: Database) -> tuple[threading.Thread, list[float]]:
    """A thread that starts a transaction at once; its start time (monotonic) in the list."""
    asked: list[float] = []

    def run() -> None:
        asked.append(time.monotonic())
        with db.begin() as conn:
            conn.execute(sa.text("SELECT 1"))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, asked


def test_waits__a_transaction_that_waited_for_a_pooled_connection_is_counted(db_url: str) -> None:
    db = connect(db_url, pool_size=1)  # 1 + 1 overflow
    try:
        with db.begin() as conn:
            conn.execute(sa.text("SELECT 1"))  # opened once: later checkouts reuse it
        before = db.waits.snapshot()["checkout"]
        held = [db.engine.connect(), db.engine.connect()]  # every connection the pool may hand out
        thread, asked = begin_in_thread(db)
        time.sleep(0.4)
        released = time.monotonic()
        for conn in held:
            conn.close()
        thread.join(30)
        after = db.waits.snapshot()["checkout"]
        waited = released - asked[0]
        assert after["waits"] == before["waits"] + 1
        assert after["seconds"] - before["seconds"] >= waited - 0.01
        assert after["longest"] >= waited - 0.01
    finally:
        db.dispose()


def test_waits__sqlite_counts_the_wait_for_the_write_lock(db_url: str) -> None:
    if not db_url.startswith("sqlite"):
        db = connect(db_url)
        try:
            with db.begin() as conn:
                conn.execute(sa.text("SELECT 1"))
            assert db.waits.snapshot()["write_lock"]["waits"] == 0  # PostgreSQL has no database-wide write lock
        finally:
            db.dispose()
        return
    db = connect(db_url)
    other = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        with db.begin() as conn:
            conn.execute(sa.text("SELECT 1"))
        before = db.waits.snapshot()["write_lock"]
        other.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
        thread, asked = begin_in_thread(db)
        time.sleep(0.4)
        released = time.monotonic()
        other.execute("COMMIT")
        thread.join(30)
        after = db.waits.snapshot()["write_lock"]
        waited = released - asked[0]
        assert after["waits"] == before["waits"] + 1
        assert after["seconds"] - before["seconds"] >= waited - 0.01
    finally:
        other.close()
        db.dispose()
