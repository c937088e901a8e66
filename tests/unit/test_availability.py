"""recon.db.availability: which driver errors mean the database is unavailable (SQLSTATEs from PostgreSQL's
Appendix A, raised as psycopg's own exception classes), the outage log (one warning when it starts, one when it
ends, whatever the number of failed calls), and the backoff."""

from __future__ import annotations

import logging
import random
import sqlite3

import psycopg
import psycopg.errors
import pytest

from recon.db.availability import QUIET_SECONDS, Backoff, Outage, error_class, log_failure
from recon.errors import DatabaseTransientError, DatabaseUnavailable, StoreError


@pytest.mark.parametrize(("sqlstate", "expected"), [
    ("08006", DatabaseUnavailable),  # connection_failure
    ("08001", DatabaseUnavailable),  # sqlclient_unable_to_establish_sqlconnection
    ("57P01", DatabaseUnavailable),  # admin_shutdown: pg_terminate_backend, a fast shutdown
    ("57P02", DatabaseUnavailable),  # crash_shutdown: another backend crashed
    ("57P03", DatabaseUnavailable),  # cannot_connect_now: starting up, in recovery
    ("25006", DatabaseUnavailable),  # read_only_sql_transaction: a standby, a primary made read-only
    ("40001", DatabaseTransientError),  # serialization_failure
    ("40P01", DatabaseTransientError),  # deadlock_detected
    ("55P03", DatabaseTransientError),  # lock_not_available
    ("23505", StoreError),  # unique_violation: a bug or a race the caller handles, never retried blindly
    ("42P01", StoreError),  # undefined_table
])
def test_error_class__postgresql_sqlstates(sqlstate: str, expected: type[StoreError]) -> None:
    exc = psycopg.errors.lookup(sqlstate)("server said no")
    assert exc.sqlstate == sqlstate  # psycopg's own class for the code
    assert error_class(exc, operational=isinstance(exc, psycopg.OperationalError)) is expected


def test_error_class__a_connection_that_failed_before_the_server_answered_is_unavailable() -> None:
    refused = psycopg.OperationalError('connection failed: connection to server at "127.0.0.1", port 1 failed: '
                                       "Connection refused")
    assert refused.sqlstate is None
    assert error_class(refused, operational=True) is DatabaseUnavailable
    closed = psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
    assert error_class(closed, operational=True) is DatabaseUnavailable


def test_error_class__a_broken_connection_is_unavailable_whatever_the_error() -> None:
    assert error_class(psycopg.errors.lookup("23505")("dup"), operational=False, broken=True) is DatabaseUnavailable


def test_error_class__sqlite_busy_is_transient_other_sqlite_errors_are_not() -> None:
    assert error_class(sqlite3.OperationalError("database is locked"), operational=True) is DatabaseTransientError
    assert error_class(sqlite3.OperationalError("no such table: jobs"), operational=True) is StoreError
    assert error_class(ValueError("not a driver error"), operational=False) is StoreError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_outage__one_warning_when_it_starts_and_one_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    outage = Outage(clock=clock)
    with caplog.at_level(logging.DEBUG, logger="recon.db"):
        for _ in range(50):  # six loops retrying for ten seconds
            outage.failed(DatabaseUnavailable("database: connection refused"))
            clock.now += 0.2
        outage.succeeded()
        outage.succeeded()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "database unavailable (database: connection refused); every connection retries with backoff until a "
        "server takes writes again",
        "database available again after 10.0 s (50 failed calls meanwhile)"]
    assert (outage.count, round(outage.seconds, 6), outage.down) == (1, 10.0, False)


def test_outage__a_failure_right_after_an_outage_reopens_it_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """A pooled connection opened before the outage and used after it fails once: the same outage."""
    clock = Clock()
    outage = Outage(clock=clock)
    outage.failed(DatabaseUnavailable("database: gone"))
    clock.now += 3
    outage.succeeded()
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="recon.db"):
        clock.now += QUIET_SECONDS / 2
        outage.failed(DatabaseUnavailable("database: terminating connection due to administrator command"))
        assert outage.down and round(outage.seconds, 6) == 3.0
        clock.now += 0.5
        outage.succeeded()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert (outage.count, round(outage.seconds, 6)) == (1, 3.5)
    clock.now += QUIET_SECONDS + 1  # later: a new outage, said again
    with caplog.at_level(logging.WARNING, logger="recon.db"):
        outage.failed(DatabaseUnavailable("database: gone again"))
    assert outage.count == 2 and "database unavailable (database: gone again)" in caplog.text


def test_log_failure__an_outage_is_debug_other_errors_warn(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("recon.test")
    with caplog.at_level(logging.DEBUG, logger="recon.test"):
        log_failure(log, "claim failed: %s", DatabaseUnavailable("database: gone"))
        log_failure(log, "claim failed: %s", DatabaseTransientError("database: deadlock detected"))
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "claim failed: database: gone"), (logging.WARNING, "claim failed: database: deadlock detected")]


def test_backoff__doubles_to_its_cap_with_jitter_and_resets() -> None:
    backoff = Backoff(base=0.05, cap=1.0, rng=random.Random(7))
    waits = [backoff.next() for _ in range(8)]
    ceilings = [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert all(c / 2 <= w <= c for w, c in zip(waits, ceilings, strict=True))
    backoff.reset()
    assert backoff.next() <= 0.05


def test_outage__a_call_that_began_before_the_outage_does_not_end_it() -> None:
    """A statement answered just before the primary died, whose caller tells of its success a moment after
    another call failed, says nothing about the server that is there now."""
    clock = Clock()
    outage = Outage(clock=clock)
    before = outage.epoch  # a call begins
    outage.failed(DatabaseUnavailable("database: server closed the connection unexpectedly"))  # another fails
    outage.succeeded(before)  # the first one's answer had come in before the failure
    assert outage.down
    during = outage.epoch  # a call that began during the outage
    clock.now += 1.5
    outage.succeeded(during)
    assert not outage.down and round(outage.seconds, 6) == 1.5
