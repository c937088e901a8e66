"""recon.classify: every row of the error table (docs/design.md), the PSP hint override, and the stored text."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import psycopg.errors
import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from psp_adapters.errors import (
    PspAuthError,
    PspError,
    PspIdempotencyError,
    PspProtocolError,
    PspRateLimited,
    PspRejectedError,
    PspTransientError,
    PspUnknownOutcome,
)
from psp_adapters.http import parse_retry_after
from recon.classify import ERROR_TEXT_LIMIT, ErrorKind, classify, error_text
from recon.engine.outcome import Dead, Retry
from recon.errors import DatabaseTransientError, LeaseLost, StoreError

NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)


def _db_error(orig: BaseException, *, invalidated: bool = False) -> DBAPIError:
    return OperationalError("UPDATE jobs SET state = 'leased'", {}, orig, connection_invalidated=invalidated)


ROWS = [
    # (exception, kind, retry?)
    (PspTransientError("connect failed", psp="stripe"), ErrorKind.NETWORK, True),
    (PspUnknownOutcome("no answer", psp="stripe"), ErrorKind.UNKNOWN_OUTCOME, True),
    (PspRateLimited("slow down", psp="stripe", status_code=429), ErrorKind.RATE_LIMITED, True),
    (PspTransientError("x", status_code=408), ErrorKind.PSP_BUSY, True),
    (PspTransientError("x", status_code=421), ErrorKind.PSP_BUSY, True),
    (PspTransientError("x", status_code=423), ErrorKind.PSP_BUSY, True),
    (PspTransientError("x", status_code=425), ErrorKind.PSP_BUSY, True),
    (PspTransientError("x", status_code=500), ErrorKind.PSP_UNAVAILABLE, True),
    (PspTransientError("x", status_code=502), ErrorKind.PSP_UNAVAILABLE, True),
    (PspTransientError("x", status_code=503), ErrorKind.PSP_UNAVAILABLE, True),
    (PspTransientError("x", status_code=504), ErrorKind.PSP_UNAVAILABLE, True),
    (PspTransientError("x", status_code=424), ErrorKind.PSP_UNAVAILABLE, True),
    (PspTransientError("x", status_code=507), ErrorKind.PSP_UNAVAILABLE, True),
    (PspTransientError("in flight", status_code=409), ErrorKind.CONFLICT, True),
    (PspTransientError("adyen 704", status_code=422, code="704"), ErrorKind.CONFLICT, True),
    (PspIdempotencyError("key reused", status_code=400), ErrorKind.IDEMPOTENCY_BUG, False),
    (PspRejectedError("bad", status_code=400), ErrorKind.VALIDATION, False),
    (PspRejectedError("bad", status_code=422), ErrorKind.VALIDATION, False),
    (PspRejectedError("gone", status_code=404), ErrorKind.VALIDATION, False),
    (PspAuthError("no", status_code=401), ErrorKind.AUTH, False),
    (PspAuthError("no", status_code=403), ErrorKind.AUTH, False),
    (PspProtocolError("garbage"), ErrorKind.PROTOCOL, True),
    (DatabaseTransientError(), ErrorKind.DB_TRANSIENT, True),
    (_db_error(psycopg.errors.DeadlockDetected("deadlock detected")), ErrorKind.DB_TRANSIENT, True),
    (_db_error(psycopg.errors.SerializationFailure("could not serialize")), ErrorKind.DB_TRANSIENT, True),
    (
        _db_error(psycopg.OperationalError("server closed the connection"), invalidated=True),
        ErrorKind.DB_TRANSIENT,
        True,
    ),
    (_db_error(sqlite3.OperationalError("database is locked")), ErrorKind.DB_TRANSIENT, True),
    (sqlite3.OperationalError("database is locked"), ErrorKind.DB_TRANSIENT, True),
    (_db_error(sqlite3.OperationalError("no such table: jobs")), ErrorKind.BUG, True),
    (IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed")), ErrorKind.BUG, True),
    (PspError("untyped"), ErrorKind.BUG, True),
    (LeaseLost(), ErrorKind.BUG, True),
    (KeyError("payload"), ErrorKind.BUG, True),
    (ZeroDivisionError("division by zero"), ErrorKind.BUG, True),
]


@pytest.mark.parametrize(("exc", "kind", "retry"), ROWS, ids=[f"{type(r[0]).__name__}-{r[1]}" for r in ROWS])
def test_classify__every_row_of_the_table(exc: BaseException, kind: ErrorKind, retry: bool) -> None:
    outcome = classify(exc)
    assert type(outcome) is (Retry if retry else Dead)
    assert outcome.error_kind == kind.value
    assert outcome.error.startswith(type(exc).__name__)


def test_classify__table_covers_every_kind() -> None:
    assert {row[1] for row in ROWS} == set(ErrorKind)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", 120.0),
        (format_datetime(NOW + timedelta(seconds=45), usegmt=True), 45.0),
        ("Sunday, 06-Nov-94 08:49:37 GMT", 0.0),
        (None, None),
    ],
    ids=["seconds", "imf-fixdate", "rfc850-in-the-past", "absent"],
)
def test_classify__rate_limited_carries_retry_after(header: str | None, expected: float | None) -> None:
    exc = PspRateLimited("429", psp="stripe", status_code=429, retry_after=parse_retry_after(header, NOW))
    outcome = classify(exc)
    assert isinstance(outcome, Retry)
    assert outcome.retry_after == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        (" 7 ", 7.0),
        ("Sun Nov  6 08:49:37 1994", 0.0),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
    ],
)
def test_parse_retry_after__edge_cases(value: str, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (PspRejectedError("x", status_code=400, should_retry=True), ErrorKind.PSP_UNAVAILABLE),
        (PspAuthError("x", status_code=401, should_retry=True), ErrorKind.PSP_UNAVAILABLE),
        (PspTransientError("x", status_code=409, should_retry=True), ErrorKind.CONFLICT),
        (PspTransientError("x", status_code=503, should_retry=True), ErrorKind.PSP_UNAVAILABLE),
    ],
)
def test_classify__should_retry_true_overrides_to_retry(exc: PspError, kind: ErrorKind) -> None:
    outcome = classify(exc)
    assert isinstance(outcome, Retry) and outcome.error_kind == kind.value


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (PspTransientError("x", status_code=500, should_retry=False), ErrorKind.PSP_UNAVAILABLE),
        (PspTransientError("x", status_code=409, should_retry=False), ErrorKind.CONFLICT),
        (PspRateLimited("x", status_code=429, retry_after=3.0, should_retry=False), ErrorKind.RATE_LIMITED),
        (PspProtocolError("x", should_retry=False), ErrorKind.PROTOCOL),
    ],
)
def test_classify__should_retry_false_overrides_to_dead(exc: PspError, kind: ErrorKind) -> None:
    outcome = classify(exc)
    assert isinstance(outcome, Dead) and outcome.error_kind == kind.value


def test_classify__store_error_raised_from_a_deadlock_is_db_transient() -> None:
    try:
        try:
            raise _db_error(psycopg.errors.DeadlockDetected("deadlock detected"))
        except DBAPIError as exc:
            raise StoreError("claim failed") from exc
    except StoreError as wrapped:
        outcome = classify(wrapped)
    assert isinstance(outcome, Retry) and outcome.error_kind == ErrorKind.DB_TRANSIENT


def test_classify__error_text_is_one_short_line() -> None:
    outcome = classify(_db_error(sqlite3.OperationalError("database is locked")))
    assert "\n" not in outcome.error and "[SQL" not in outcome.error
    long = classify(PspProtocolError("x" * 2000))
    assert len(long.error) <= ERROR_TEXT_LIMIT


@pytest.mark.parametrize(
    ("message", "secret"),
    [
        ("could not connect to postgresql://recon:hunter2@db:5432/recon", "hunter2"),
        ("auth failed: password=hunter2 user=recon", "hunter2"),
        ("header was Authorization: Bearer sk_live_abcdefgh12345678", "sk_live_abcdefgh12345678"),
        ("Invalid API Key provided: sk_test_51Nabcdefghijklmnop", "sk_test_51Nabcdefghijklmnop"),
        (
            "x-api-key AQEyhmfxLKzIbhFDw0m/n3Q5qf3VaY9UCJ14XWZE03G2",
            "AQEyhmfxLKzIbhFDw0m/n3Q5qf3VaY9UCJ14XWZE03G2",
        ),
        ("api_key=abc123secret in config", "abc123secret"),
    ],
)
def test_classify__error_text_never_carries_secrets(message: str, secret: str) -> None:
    assert secret not in classify(RuntimeError(message)).error
    assert secret not in error_text(OperationalError("SELECT 1", {}, RuntimeError(message)))


def test_classify__error_kind_values_are_the_stored_strings() -> None:
    assert [kind.value for kind in ErrorKind] == [
        "network",
        "unknown_outcome",
        "rate_limited",
        "psp_busy",
        "psp_unavailable",
        "conflict",
        "idempotency_bug",
        "validation",
        "auth",
        "protocol",
        "db_transient",
        "bug",
    ]


def test_classify_failure__an_unavailable_database_snoozes_the_job_no_attempt_spent() -> None:
    """The worker's classifier: a failover is the database's outage, not the job's (recon.classify)."""
    from recon.classify import DB_UNAVAILABLE_SNOOZE, classify_failure
    from recon.engine.outcome import Snooze
    from recon.errors import DatabaseUnavailable

    try:
        try:
            raise psycopg.errors.lookup("25006")("cannot execute UPDATE in a read-only transaction")
        except psycopg.Error as driver:
            raise DatabaseUnavailable("database: cannot execute UPDATE in a read-only transaction") from driver
    except DatabaseUnavailable as exc:
        wrapped = RuntimeError("charge failed")
        wrapped.__cause__ = exc
        for error in (exc, wrapped):
            outcome = classify_failure(error)
            assert isinstance(outcome, Snooze) and outcome.delay == DB_UNAVAILABLE_SNOOZE
            assert outcome.reason.startswith("database unavailable: ")
    deadlock = DatabaseTransientError("database: deadlock detected")
    assert classify_failure(deadlock) == classify(deadlock) == Retry(error_kind="db_transient",
                                                                     error="DatabaseTransientError: database: "
                                                                           "deadlock detected")
    rejected = PspRejectedError("amount must be positive", status_code=400)
    assert classify_failure(rejected) == classify(rejected)
