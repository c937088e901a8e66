"""Complete | Retry | Snooze | Dead | Cancel: the engine's whole vocabulary for a handler's result.

A handler returns one of these (``None`` means ``Complete()``). The engine obeys it; it never decides on
its own whether an error is worth retrying (that is ``recon.classify``).

Every outcome may carry ``write``: a function that receives the open SQLAlchemy ``Connection`` of the
transaction that finishes the job. It runs only after the fenced finish matched this worker's lease, and
commits or rolls back together with it, so a domain write (a payment's status) can never be made by a
worker that lost its lease. Outcomes with a ``write`` are finished one job per transaction; outcomes
without one are grouped with other finishes, which is what makes the engine fast.

An exception a handler raised instead of returning goes through a ``ClassifyFunc`` (the application's,
``recon.classify``; by default ``classify_as_bug``, a retryable ``bug``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Connection

WriteFunc = Callable[["Connection"], Any]


@dataclass(frozen=True, slots=True)
class Complete:
    """The job is done: ``succeeded``."""

    write: WriteFunc | None = None


@dataclass(frozen=True, slots=True)
class Retry:
    """The attempt failed but may succeed later: ``retryable`` after backoff, or ``dead`` when the budget is spent.

    ``retry_after`` (seconds) is the outside world's own wait (HTTP Retry-After); it wins over the computed
    backoff, bounded by the kind's cap.
    """

    error_kind: str
    error: str
    retry_after: float | None = None
    write: WriteFunc | None = None


@dataclass(frozen=True, slots=True)
class Snooze:
    """Not ready yet, not a failure: run again after ``delay`` without spending an attempt."""

    delay: timedelta
    reason: str = "snoozed"
    write: WriteFunc | None = None


@dataclass(frozen=True, slots=True)
class Dead:
    """A permanent failure: ``dead`` at once, kept for inspection and replay."""

    error_kind: str
    error: str
    write: WriteFunc | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """The handler honoured a cancel request: ``canceled``."""

    reason: str = "canceled"
    write: WriteFunc | None = None


Outcome = Complete | Retry | Snooze | Dead | Cancel

ClassifyFunc = Callable[[BaseException], Outcome]


def classify_as_bug(exc: BaseException) -> Outcome:
    """The default for exceptions a handler did not classify: a retryable ``bug``."""
    return Retry(error_kind="bug", error=error_text(exc))


def error_text(exc: BaseException) -> str:
    """An exception as the error text of an attempt: its type and message, at most 500 characters."""
    return f"{type(exc).__name__}: {exc}"[:500]
