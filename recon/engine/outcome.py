"""Complete | Retry | Snooze | Dead | Cancel: the engine's whole vocabulary for a handler's result.

A handler returns one of these (``None`` means ``Complete()``). The engine obeys it; it never decides on
its own whether an error is worth retrying (that is ``recon.classify``).

Every outcome may carry ``write``: a function that receives the open SQLAlchemy ``Connection`` of the
transaction that finishes the job. It runs only after the fenced finish matched this worker's lease, and
commits or rolls back together with it, so a domain write (a payment's status) can never be made by a
worker that lost its lease. Outcomes with a plain ``write`` are finished one job per transaction; outcomes
without one are grouped with other finishes, which is what makes the engine fast.

A ``write`` may instead be a ``BatchWrite``: one item for a function that writes many items at once. The
finisher then stores the finishes of a batch whose writes share that function in one transaction: the
fenced finish of them all, then the function once, with the items of the finishes that matched (a job
whose lease was lost writes nothing, exactly as alone). When that transaction fails, each job of it is
finished alone, its write called with its own item, so one bad item cannot hold the others back.

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
class BatchWrite:
    """A domain write that may be stored together with others of the same ``apply``: ``apply(conn, items)``
    writes all of ``items`` inside the caller's transaction, or raises to write none. Called with one item,
    it is this job's write alone."""

    apply: Callable[[Connection, list[Any]], Any]
    item: Any

    def __call__(self, conn: Connection) -> Any:
        return self.apply(conn, [self.item])


@dataclass(frozen=True, slots=True)
class Complete:
    """The job is done: ``succeeded``."""

    write: WriteFunc | BatchWrite | None = None


@dataclass(frozen=True, slots=True)
class Retry:
    """The attempt failed but may succeed later: ``retryable`` after backoff, or ``dead`` when the budget is spent.

    ``retry_after`` (seconds) is the outside world's own wait (HTTP Retry-After); it wins over the computed
    backoff, bounded by the kind's cap.
    """

    error_kind: str
    error: str
    retry_after: float | None = None
    write: WriteFunc | BatchWrite | None = None


@dataclass(frozen=True, slots=True)
class Snooze:
    """Not ready yet, not a failure: run again after ``delay`` without spending an attempt."""

    delay: timedelta
    reason: str = "snoozed"
    write: WriteFunc | BatchWrite | None = None


@dataclass(frozen=True, slots=True)
class Dead:
    """A permanent failure: ``dead`` at once, kept for inspection and replay."""

    error_kind: str
    error: str
    write: WriteFunc | BatchWrite | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """The handler honoured a cancel request: ``canceled``."""

    reason: str = "canceled"
    write: WriteFunc | BatchWrite | None = None


Outcome = Complete | Retry | Snooze | Dead | Cancel

ClassifyFunc = Callable[[BaseException], Outcome]


def classify_as_bug(exc: BaseException) -> Outcome:
    """The default for exceptions a handler did not classify: a retryable ``bug``."""
    return Retry(error_kind="bug", error=error_text(exc))


def error_text(exc: BaseException) -> str:
    """An exception as the error text of an attempt: its type and message, at most 500 characters."""
    return f"{type(exc).__name__}: {exc}"[:500]
