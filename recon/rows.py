"""The values that cross between the stores and everything above them, for jobs and payments: jobs, their
attempts, what is enqueued and how an attempt ends, the dead-letter set's filters and replays; payments, their
audit events, new payments, transitions and notes, and the payment state machine the payment store enforces.

A leaf module (it imports nothing of recon but ``recon.errors``), so ``recon.db`` depends on no engine or
payments module: the stores take and return these rows, the engine and the handlers build and read them. The
other table groups' rows are its siblings, leaves too: ``recon.webhook_rows``, ``recon.pool_rows``,
``recon.control_rows``, ``recon.schedule_rows``, ``recon.report_rows``, ``recon.console_rows``. Nothing here
redacts: each store does, at its one row builder (``recon.redact``), whatever built the row.

``Job.attempts`` is both the claim counter and the fencing token: every claim increments it, and every write
made under a lease is conditional on it. Payments move by the transitions of ``TRANSITIONS``
(docs/design.md): every change is compare-and-set in the database and writes a payment event; an illegal
transition is an error, never a silent write.
"""

from __future__ import annotations

import json
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


@dataclass(frozen=True, slots=True)
class EnqueueRow:
    """One job to insert (``JobStore.enqueue``): its payload already JSON (``recon.engine.client`` encodes it)."""

    queue: str
    kind: str
    payload_json: str
    priority: int
    run_at: datetime | None
    delay: float
    max_attempts: int
    unique_key: str | None
    tenant: str | None


@dataclass(slots=True)
class Finish:
    """How one attempt ends: the job's next state and the attempt-history row (a value; not frozen for
    the same reason as ``Job``: one is made per finished job). ``JobStore.finish`` redacts its texts in place
    before any statement sees them (the storage boundary), so what the caller reads afterwards is what was
    written."""

    id: int
    attempt: int
    state: str  #: the job's next state
    outcome: str  #: the attempt's outcome (schema.ATTEMPT_OUTCOMES)
    delay: float | None = None  #: seconds until run_after, for retryable/pending/runnable
    error_kind: str | None = None
    error: str | None = None
    bump: int = 0  #: 1 when the attempt is not spent (snooze, release)

    def row(self) -> dict[str, Any]:
        return {"id": self.id, "attempt": self.attempt, "state": self.state, "delay": self.delay,
                "outcome": self.outcome, "error_kind": self.error_kind, "error": self.error, "bump": self.bump}

    @property
    def plain_success(self) -> bool:
        """A success with nothing more to record: no error text or kind, no delay, the attempt spent."""
        return (self.state == "succeeded" and self.outcome == "succeeded" and self.error is None
                and self.error_kind is None and self.delay is None and not self.bump)

    def row_json(self) -> str:
        """``row()`` as JSON; a plain success (most finishes) is formatted directly, without the encoder."""
        if (self.state == "succeeded" and self.outcome == "succeeded" and self.error is None
                and self.error_kind is None and self.delay is None):
            return _SUCCEEDED_ROW % (self.id, self.attempt, self.bump)
        return _dumps(self.row())


#: the finish row of a plain success; absent keys are NULL in jsonb_to_recordset
_SUCCEEDED_ROW = '{"id":%d,"attempt":%d,"state":"succeeded","outcome":"succeeded","bump":%d}'
_dumps = json.JSONEncoder(separators=(",", ":")).encode


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs `recon jobs list` and `recon jobs replay` select; None matches anything."""

    queue: str | None = None
    kind: str | None = None
    error_kind: str | None = None  #: the job's last_error_kind
    finished_since: datetime | None = None  #: finished at or after this instant (aware UTC)


@dataclass(frozen=True, slots=True)
class ReplayBatch:
    """What one replay transaction looked at and did."""

    jobs: list[Job]  #: the matching dead jobs of the batch, as they were before the replay
    replayed: list[int]  #: ids made runnable (with dry_run: that would be)
    skipped: list[int]  #: ids left dead: an unfinished job (or one replayed earlier in the run) holds the key
    last_id: int  #: the id cursor for the next batch
    keys: frozenset[str]  #: unique keys taken so far in this run (pass them to the next batch)


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    """One row of ``job_replays``: a dead job made runnable again, after attempt ``attempt``."""

    job_id: int
    attempt: int  #: the job's attempts when it was replayed; the next claim is attempt + 1
    replayed_at: datetime
    max_attempts_before: int
    max_attempts_after: int
    error_kind: str | None  #: the error kind that had killed the job
    replayed_by: str | None

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True, slots=True)
class PruneCount:
    jobs: int = 0
    attempts: int = 0


class PaymentStatus(StrEnum):
    CREATED = "created"  #: recorded, charge not sent yet
    PROCESSING = "processing"  #: charge sent (or about to be): the PSP may have it
    PENDING = "pending"  #: the PSP has no final answer, or we do not know what happened
    AUTHORISED = "authorised"  #: manual capture: the PSP holds the amount; nothing captured until `recon capture`
    SUCCEEDED = "succeeded"  #: the PSP took the money
    FAILED = "failed"  #: declined, rejected, or never reached the PSP
    NEEDS_REVIEW = "needs_review"  #: a person must look: mismatch, or no answer in time

    @property
    def final(self) -> bool:
        """The charge is over: nothing more to send or heal for it. An authorised payment's charge is over too;
        its captures and cancels (recon.modification_rows) are what moves it on."""
        return self in (PaymentStatus.SUCCEEDED, PaymentStatus.FAILED, PaymentStatus.NEEDS_REVIEW,
                        PaymentStatus.AUTHORISED)


class EventSource(StrEnum):
    CHARGE = "charge"  #: the charge job
    RECONCILE = "reconcile"  #: the reconcile job
    WEBHOOK = "webhook"  #: the webhook job, applying an event the PSP pushed
    MANUAL = "manual"  #: a person: the import, a review resolution (``recon review resolve``)


P = PaymentStatus
TRANSITIONS: dict[PaymentStatus, frozenset[PaymentStatus]] = {
    # created: never sent. Reconciliation may still find it at the PSP (a crash between send and commit of
    # an older version, or a charge made elsewhere with our reference), so it may move like processing.
    P.CREATED: frozenset({P.PROCESSING, P.SUCCEEDED, P.FAILED, P.PENDING, P.NEEDS_REVIEW, P.AUTHORISED}),
    P.PROCESSING: frozenset({P.SUCCEEDED, P.FAILED, P.PENDING, P.NEEDS_REVIEW, P.AUTHORISED}),
    P.PENDING: frozenset({P.SUCCEEDED, P.FAILED, P.NEEDS_REVIEW, P.AUTHORISED}),
    # authorised (manual capture): captured (succeeded), cancelled or expired (failed), or a person looks
    P.AUTHORISED: frozenset({P.SUCCEEDED, P.FAILED, P.NEEDS_REVIEW}),
    P.SUCCEEDED: frozenset({P.NEEDS_REVIEW}),  # the PSP later disagrees (refund, chargeback): a person looks
    P.FAILED: frozenset({P.NEEDS_REVIEW}),
    P.NEEDS_REVIEW: frozenset({P.SUCCEEDED, P.FAILED}),  # only by hand
}


def check_transition(current: PaymentStatus, target: PaymentStatus) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"payment cannot go from {current} to {target}")


#: how a payment's money is taken: with the charge, or by a capture after the charge authorised it
CAPTURE_MODES = ("automatic", "manual")


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
    review_assignee: str | None = None  #: who works on it in review (``recon review assign``)
    captured_amount: int = 0  #: minor units the PSP captured: the amount, once succeeded
    refunded_amount: int = 0  #: minor units our refunds that have not failed take back (<= captured_amount)
    capture_mode: str = "automatic"  #: ``CAPTURE_MODES``: manual payments are authorised, then captured by hand
    authorised_at: datetime | None = None  #: when it became authorised (its expiry counts from it)
    authorisation_claimed: int = 0  #: its captures and cancels not failed (a cancel: the whole amount)

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


@dataclass(frozen=True, slots=True)
class NewPayment:
    """A payment to create (``PaymentStore.create``), with status ``created``."""

    merchant_account: str
    merchant_reference: str
    amount: int  #: minor units, > 0
    currency: str  #: ISO-4217, upper case
    psp: str
    created_at: datetime | None = None
    payment_method: str | None = None
    customer_reference: str | None = None
    capture_mode: str = "automatic"  #: one of ``CAPTURE_MODES``


@dataclass(frozen=True, slots=True)
class Transition:
    """One compare-and-set status change with its audit event (``PaymentStore.apply``)."""

    payment_id: int
    from_status: PaymentStatus
    to_status: PaymentStatus
    source: EventSource
    details: dict[str, Any] | None = None
    job_id: int | None = None
    attempt: int | None = None
    psp_reference: str | None = None
    failure_reason: str | None = None
    review_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Note:
    """One audit event without a status change (``PaymentStore.note``), compare-and-set on ``status``."""

    payment_id: int
    status: PaymentStatus
    source: EventSource
    details: dict[str, Any] | None = None
    job_id: int | None = None
    attempt: int | None = None


def _as_dict(row: Any) -> dict[str, Any]:
    """A row as JSON-ready values: datetimes in ISO 8601, enum members as their strings."""
    out: dict[str, Any] = {}
    for name in row.__slots__:
        value = getattr(row, name)
        out[name] = value.isoformat() if isinstance(value, datetime) else str(value) if isinstance(
            value, StrEnum) else value
    return out

