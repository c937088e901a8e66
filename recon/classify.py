"""The one error table: a PspError or database error -> an engine outcome (Retry | Dead) and an error kind.

Handlers never invent retry logic: they call ``classify(exc)`` and return what it gives. Budgets and
backoff per kind (base, cap, max attempts) are configuration, not this module's business.

| what happened                                        | kind            | outcome                    |
| ---------------------------------------------------- | --------------- | -------------------------- |
| connect error / timeout, request never sent          | network         | Retry                      |
| PspUnknownOutcome (no answer after send)             | unknown_outcome | Retry (same key)           |
| PspRateLimited (429)                                 | rate_limited    | Retry(retry_after)         |
| PspTransientError 408 / 421 / 423 / 425              | psp_busy        | Retry                      |
| PspTransientError 5xx / 424                          | psp_unavailable | Retry                      |
| PspTransientError 409 (or another 4xx: key in flight)| conflict        | Retry                      |
| PspIdempotencyError (key reused, other parameters)   | idempotency_bug | Dead                       |
| PspRejectedError (400 / 422 / other 4xx)             | validation      | Dead                       |
| PspAuthError (401 / 403)                             | auth            | Dead                       |
| PspProtocolError                                     | protocol        | Retry (small budget)       |
| DatabaseTransientError, DB error below (*)           | db_transient    | Retry                      |
| anything else                                        | bug             | Retry                      |

(*) a SQLAlchemy DBAPIError (or driver error) with SQLSTATE 40P01 (deadlock) or 40001 (serialization
failure), or ``connection_invalidated``, or SQLite's "database is locked"; also when raised ``from`` one.

The worker's classifier, ``classify_failure``, is this table with one row before it: a handler that found the
database unavailable (``DatabaseUnavailable``: the connection lost, the server shut down, failing over or
read-only) snoozes its job for ``DB_UNAVAILABLE_SNOOZE``, no attempt spent. The outage is the database's, not
the job's: a failover must not bring a job closer to ``dead``. (Handlers call ``classify`` on the PSP's
errors; a database error leaves the handler and reaches ``classify_failure``.)

A PSP's explicit hint (``PspError.should_retry``, e.g. Stripe's ``Stripe-Should-Retry``) overrides the row:
True makes a Dead row a Retry (kind psp_unavailable; a Retry row keeps its kind), False makes any row Dead.
The stored error text is one line, at most ERROR_TEXT_LIMIT characters, with credentials masked.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from datetime import timedelta

from sqlalchemy.exc import DBAPIError

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
from recon.engine.outcome import Dead, Outcome, Retry, Snooze
from recon.errors import DatabaseTransientError, DatabaseUnavailable
from recon.redact import redact

ERROR_TEXT_LIMIT = 500

_BUSY = frozenset({408, 421, 423, 425})
_TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure
_CAUSE_DEPTH = 5
#: how long a job whose handler found the database unavailable waits before it runs again (no attempt spent)
DB_UNAVAILABLE_SNOOZE = timedelta(seconds=1)


class ErrorKind(enum.StrEnum):
    """Why an attempt failed; the values are stored in ``jobs.last_error_kind`` and key the retry config."""

    NETWORK = "network"  #: the request never reached the PSP
    UNKNOWN_OUTCOME = "unknown_outcome"  #: sent, no answer: retry with the same idempotency key
    RATE_LIMITED = "rate_limited"  #: HTTP 429
    PSP_BUSY = "psp_busy"  #: HTTP 408, 421, 423, 425
    PSP_UNAVAILABLE = "psp_unavailable"  #: HTTP 5xx, 424
    CONFLICT = "conflict"  #: HTTP 409: the same idempotency key is in flight
    IDEMPOTENCY_BUG = "idempotency_bug"  #: the same key reused with other parameters
    VALIDATION = "validation"  #: HTTP 400, 422, other 4xx
    AUTH = "auth"  #: HTTP 401, 403
    PROTOCOL = "protocol"  #: the PSP's answer could not be understood
    DB_TRANSIENT = "db_transient"  #: deadlock, serialization failure, lost connection, busy
    BUG = "bug"  #: anything else


def classify(exc: BaseException) -> Retry | Dead:
    """The engine outcome for ``exc``, following the table in the module docstring. Never raises."""
    kind, retryable, retry_after = _row(exc)
    hint = exc.should_retry if isinstance(exc, PspError) else None
    if hint is True and not retryable:
        kind, retryable = ErrorKind.PSP_UNAVAILABLE, True
    elif hint is False:
        retryable = False
    text = error_text(exc)
    if retryable:
        return Retry(error_kind=kind.value, error=text, retry_after=retry_after)
    return Dead(error_kind=kind.value, error=text)


def classify_failure(exc: BaseException) -> Outcome:
    """The worker's ``ClassifyFunc``: a snooze, no attempt spent, when ``exc`` says the database is unavailable
    (module docstring); else ``classify(exc)``. Never raises."""
    if any(isinstance(error, DatabaseUnavailable) for error in _causes(exc)):
        return Snooze(DB_UNAVAILABLE_SNOOZE, reason=f"database unavailable: {error_text(exc)}")
    return classify(exc)


def error_text(exc: BaseException) -> str:
    """``Type: first line of the message``, credentials masked, at most ERROR_TEXT_LIMIT characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    text = redact(text)
    if len(text) > ERROR_TEXT_LIMIT:
        text = text[: ERROR_TEXT_LIMIT - 1] + "…"
    return text


def _row(exc: BaseException) -> tuple[ErrorKind, bool, float | None]:
    """(kind, retryable, retry_after) before any PSP hint. Subclasses are tested before their parents."""
    match exc:
        case PspRateLimited():
            return ErrorKind.RATE_LIMITED, True, exc.retry_after
        case PspUnknownOutcome():
            return ErrorKind.UNKNOWN_OUTCOME, True, None
        case PspTransientError():
            return _transient_kind(exc.status_code), True, None
        case PspIdempotencyError():
            return ErrorKind.IDEMPOTENCY_BUG, False, None
        case PspRejectedError():
            return ErrorKind.VALIDATION, False, None
        case PspAuthError():
            return ErrorKind.AUTH, False, None
        case PspProtocolError():
            return ErrorKind.PROTOCOL, True, None
    if _is_db_transient(exc):
        return ErrorKind.DB_TRANSIENT, True, None
    return ErrorKind.BUG, True, None


def _transient_kind(status: int | None) -> ErrorKind:
    if status is None:
        return ErrorKind.NETWORK
    if status in _BUSY:
        return ErrorKind.PSP_BUSY
    if status == 424:  # Failed Dependency: the PSP's own dependency is down
        return ErrorKind.PSP_UNAVAILABLE
    if 400 <= status < 500:
        # 409, or a PSP's own in-flight code on another 4xx (Adyen's 704 on 422): the key is executing
        return ErrorKind.CONFLICT
    return ErrorKind.PSP_UNAVAILABLE


def _is_db_transient(exc: BaseException) -> bool:
    for error in _causes(exc):
        if isinstance(error, DatabaseTransientError):
            return True
        if isinstance(error, DBAPIError) and error.connection_invalidated:
            return True
        orig = error.orig if isinstance(error, DBAPIError) else error
        sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        if sqlstate in _TRANSIENT_SQLSTATES:
            return True
        if type(orig).__name__ == "OperationalError" and "database is locked" in str(orig).lower():
            return True  # SQLite's SQLITE_BUSY, raw or wrapped by SQLAlchemy
    return False


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (the stores wrap driver errors with ``from``)."""
    current: BaseException | None = exc
    for _ in range(_CAUSE_DEPTH):
        if current is None:
            return
        yield current
        current = current.__cause__
