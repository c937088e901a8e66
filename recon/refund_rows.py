"""The rows of refunds (``recon.db.refund_store``): a refund, a new refund and a refund's compare-and-set
transition (its audit events are ``recon.movement_rows.MovementEvent``s). A leaf, like ``recon.rows``.

A refund has the states of a charge (``recon.rows.PaymentStatus`` and its state machine,
``recon.rows.TRANSITIONS``): created (stored, not sent), processing (sent, or about to be), pending (the PSP
has it, no final answer), succeeded, failed, needs_review. What the states mean for the money is the refund
store's bound: every refund that has not failed counts against the payment's captured amount.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from recon.movement_rows import MovementKind, row_dict
from recon.rows import TRANSITIONS, PaymentStatus

#: a refund's states are a charge's
RefundStatus = PaymentStatus

#: a charge's state machine, but failed is the end: the refund's money was given back to the payment's
#: captured amount when it failed, and a later word of the PSP about it is kept as evidence (a note) for a person
REFUND_TRANSITIONS: dict[PaymentStatus, frozenset[PaymentStatus]] = {
    s: targets - {PaymentStatus.AUTHORISED} for s, targets in TRANSITIONS.items() if s is not PaymentStatus.AUTHORISED}
REFUND_TRANSITIONS[PaymentStatus.FAILED] = frozenset()


#: a refund as a movement (recon.movement_rows): its table, columns, jobs and state machine
REFUND = MovementKind(
    noun="refund", table="refunds", events_table="refund_events", id_field="refund_id",
    reference_field="refund_reference", psp_id_field="psp_refund_id",
    columns=("id, payment_id, refund_reference, amount, currency, reason, psp, status, psp_refund_id, "
             "idempotency_key, requested_by, failure_reason, review_reason, created_at, updated_at, sent_at"),
    job_key="refund", reconcile_kind="reconcile_refund", transitions=REFUND_TRANSITIONS)


class RefundSource(StrEnum):
    REFUND = "refund"  #: the refund job
    RECONCILE = "reconcile"  #: the refund's reconcile job
    WEBHOOK = "webhook"  #: the webhook job, applying an event the PSP pushed
    MANUAL = "manual"  #: a person: the import, `recon refund`, a review resolution


@dataclass(frozen=True, slots=True)
class Refund:
    id: int
    payment_id: int
    refund_reference: str  #: ours, unique
    amount: int  #: minor units of ``currency``, the payment's
    currency: str
    psp: str
    status: PaymentStatus
    idempotency_key: str  #: fixed at creation: every attempt of the refund sends it
    requested_by: str
    created_at: datetime
    updated_at: datetime
    reason: str | None = None  #: the PSP's reason code
    psp_refund_id: str | None = None  #: the PSP's id of the refund, once known; never replaced
    failure_reason: str | None = None
    review_reason: str | None = None
    sent_at: datetime | None = None  #: when the request first went out

    @property
    def reference(self) -> str:
        return self.refund_reference

    @property
    def psp_id(self) -> str | None:
        return self.psp_refund_id

    def to_dict(self) -> dict[str, Any]:
        return row_dict(self)


@dataclass(frozen=True, slots=True)
class NewRefund:
    """A refund to create (``RefundStore.create``) of payment ``payment_id``: ``amount`` minor units of its
    currency, at most what the payment's captured amount has left."""

    payment_id: int
    refund_reference: str
    amount: int
    reason: str | None
    requested_by: str


@dataclass(frozen=True, slots=True)
class RefundTransition:
    """One compare-and-set status change of a refund with its audit event (``RefundStore.apply``)."""

    refund_id: int
    from_status: PaymentStatus
    to_status: PaymentStatus
    source: RefundSource
    details: dict[str, Any] | None = None
    job_id: int | None = None
    attempt: int | None = None
    psp_refund_id: str | None = None
    failure_reason: str | None = None
    review_reason: str | None = None

    @property
    def movement_id(self) -> int:
        return self.refund_id

    @property
    def psp_id(self) -> str | None:
        return self.psp_refund_id
