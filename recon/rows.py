"""The values that cross between the stores and everything above them: jobs and their attempts, payments and
their audit events, and the payment state machine the payment store enforces.

A leaf module (it imports nothing of recon but ``recon.errors``), so ``recon.db`` depends on no engine or
payments module: the stores return these rows, the engine and the handlers read them.

``Job.attempts`` is both the claim counter and the fencing token: every claim increments it, and every write
made under a lease is conditional on it. Payments move by the transitions of ``TRANSITIONS``
(docs/design.md): every change is compare-and-set in the database and writes a payment event; an illegal
transition is an error, never a silent write.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from recon.errors import IllegalTransition


class JobState(StrEnum):
    PENDING = "pending"  #: created or snoozed, runs at run_after
    RUNNABLE = "runnable"  #: a worker may claim it
    LEASED = "leased"  #: owned by lease_owner until lease_until
    SUCCEEDED = "succeeded"  #: terminal success
    RETRYABLE = "retryable"  #: failed; claimable again at run_after (backoff)
    DEAD = "dead"  #: terminal failure: permanent error or attempts exhausted (the dead-letter set)
    CANCELED = "canceled"  #: canceled before completion

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELED)


@dataclass(slots=True)
class Job:
    """One row of ``jobs``, as engine code sees it. Datetimes are aware UTC.

    A value: nothing changes a Job after the store made it (a handler that wants another one asks the
    store). It is not ``frozen`` only because the claim loop builds one per claimed job, and a frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` per field) costs several times a plain one's on that
    hot path (docs/benchmarks.md; bench/compare.py).
    """

    id: int
    queue: str
    kind: str
    payload: dict[str, Any]
    state: JobState
    priority: int
    run_after: datetime
    attempts: int
    max_attempts: int
    created_at: datetime
    lease_owner: str | None = None
    lease_until: datetime | None = None
    heartbeat_at: datetime | None = None
    attempted_at: datetime | None = None
    unique_key: str | None = None
    last_error_kind: str | None = None
    last_error: str | None = None
    tenant: str | None = None
    progress: dict[str, Any] | None = None
    finished_at: datetime | None = None
    cancel_requested: bool = False
    free_attempts: int = 0  #: claims that did not spend the retry budget (snoozes, releases, replays)

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One row of ``job_attempts``: how one claim of a job ended."""

    job_id: int
    attempt: int
    worker: str
    started_at: datetime | None
    finished_at: datetime
    outcome: str
    error_kind: str | None
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


class PaymentStatus(StrEnum):
    CREATED = "created"  #: recorded, charge not sent yet
    PROCESSING = "processing"  #: charge sent (or about to be): the PSP may have it
    PENDING = "pending"  #: the PSP has no final answer, or we do not know what happened
    SUCCEEDED = "succeeded"  #: the PSP took the money
    FAILED = "failed"  #: declined, rejected, or never reached the PSP
    NEEDS_REVIEW = "needs_review"  #: a person must look: mismatch, or no answer in time

    @property
    def final(self) -> bool:
        return self in (PaymentStatus.SUCCEEDED, PaymentStatus.FAILED, PaymentStatus.NEEDS_REVIEW)


class EventSource(StrEnum):
    CHARGE = "charge"  #: the charge job
    RECONCILE = "reconcile"  #: the reconcile job
    WEBHOOK = "webhook"  #: the webhook job, applying an event the PSP pushed
    MANUAL = "manual"  #: a person: the import, a review resolution (``recon review resolve``)


P = PaymentStatus
TRANSITIONS: dict[PaymentStatus, frozenset[PaymentStatus]] = {
    # created: never sent. Reconciliation may still find it at the PSP (a crash between send and commit of
    # an older version, or a charge made elsewhere with our reference), so it may move like processing.
    P.CREATED: frozenset({P.PROCESSING, P.SUCCEEDED, P.FAILED, P.PENDING, P.NEEDS_REVIEW}),
    P.PROCESSING: frozenset({P.SUCCEEDED, P.FAILED, P.PENDING, P.NEEDS_REVIEW}),
    P.PENDING: frozenset({P.SUCCEEDED, P.FAILED, P.NEEDS_REVIEW}),
    P.SUCCEEDED: frozenset({P.NEEDS_REVIEW}),  # the PSP later disagrees (refund, chargeback): a person looks
    P.FAILED: frozenset({P.NEEDS_REVIEW}),
    P.NEEDS_REVIEW: frozenset({P.SUCCEEDED, P.FAILED}),  # only by hand
}


def check_transition(current: PaymentStatus, target: PaymentStatus) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"payment cannot go from {current} to {target}")


#: stored merchant accounts that name no account of the PSP's: empty, or "default", the import's label for a
#: payment of a PSP without merchant accounts (``recon.payments.importer.DEFAULT_ACCOUNT``, never sent to a PSP).
#: Evidence matches such a payment whatever account it names (``recon.reconcile.decide.accounts_agree``).
NO_ACCOUNT: frozenset[str] = frozenset({"", "default"})


@dataclass(frozen=True, slots=True)
class Payment:
    id: int
    merchant_account: str
    merchant_reference: str
    amount: int  #: minor units
    currency: str  #: ISO-4217
    psp: str
    idempotency_key: str
    status: PaymentStatus
    created_at: datetime
    updated_at: datetime
    psp_reference: str | None = None
    failure_reason: str | None = None
    review_reason: str | None = None
    payment_method: str | None = None  #: the PSP's token of the stored payment method
    customer_reference: str | None = None  #: the PSP's customer / shopper reference
    key_generation: int = 0  #: 0: ``idempotency_key`` itself; N: ``idempotency_key-gN`` (see ``charge_key``)
    key_sent_at: datetime | None = None  #: when the current key was first sent to the PSP (retention counts from it)
    review_since: datetime | None = None  #: when it last entered needs_review

    @property
    def charge_key(self) -> str:
        """The idempotency key the next charge sends: a new generation only after the PSP was proved to
        hold no payment for the previous one and to have forgotten it."""
        return self.idempotency_key if self.key_generation == 0 else f"{self.idempotency_key}-g{self.key_generation}"

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True, slots=True)
class PaymentEvent:
    id: int
    payment_id: int
    from_status: str | None
    to_status: str
    source: str
    at: datetime
    job_id: int | None = None
    attempt: int | None = None
    details: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


class WebhookState(StrEnum):
    RECEIVED = "received"  #: stored; its job has not applied it yet
    APPLIED = "applied"  #: changed the payment, or joined its audit trail as evidence
    UNKNOWN_PAYMENT = "unknown_payment"  #: no payment of ours matches (a missing_locally candidate)
    STALE = "stale"  #: nothing new: a redelivery, or older news than the payment's final state
    IGNORED = "ignored"  #: concerns no payment (a report became available: reconcile jobs were queued)


@dataclass(frozen=True, slots=True)
class WebhookRecord:
    """One row of ``webhook_events``: an event a PSP pushed and what it says about one payment."""

    id: int
    psp: str
    event_id: str
    event_type: str
    occurred_at: datetime | None
    received_at: datetime
    psp_reference: str | None
    merchant_reference: str | None
    merchant_account: str | None
    amount: int | None
    currency: str | None
    news: str | None  #: succeeded, failed, pending, action_required, unknown, refund, dispute; None: no payment news
    psp_status: str | None
    reason: str | None
    report: str | None
    body: dict[str, Any] | None
    state: WebhookState
    payment_id: int | None
    applied_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """One row of ``console_sessions``: a console login, as the store read it (recon.console.session decides
    whether it still serves). ``checked_at`` is the time of that read, by the clock the store's SQL uses."""

    id: int
    principal: str  #: who logged in: "access-token/<fingerprint>" (the access token's holder)
    operator_id: int | None  #: a named operator (issue 27); None until they exist
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime  #: the absolute deadline set at login
    revoked_at: datetime | None
    checked_at: datetime


def _as_dict(row: Any) -> dict[str, Any]:
    """A row as JSON-ready values: datetimes in ISO 8601, enum members as their strings."""
    out: dict[str, Any] = {}
    for name in row.__slots__:
        value = getattr(row, name)
        out[name] = value.isoformat() if isinstance(value, datetime) else str(value) if isinstance(
            value, StrEnum) else value
    return out
