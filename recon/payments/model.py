"""Payment, PaymentStatus and the transitions a payment may make (docs/design.md).

created -> processing (charge sent) -> succeeded | failed | pending (no final answer, or unknown outcome)
pending -> succeeded | failed | needs_review. Every change is compare-and-set in the database and writes a
payment event (the audit trail); an illegal transition is an error, never a silent write.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from recon.errors import ReconError


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
    MANUAL = "manual"  #: a person (import, fixes)


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


class IllegalTransition(ReconError):
    """The payment cannot move between these states."""


def check_transition(current: PaymentStatus, target: PaymentStatus) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"payment cannot go from {current} to {target}")


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
    key_sent_at: datetime | None = None  #: when the current key was last sent to the PSP

    @property
    def charge_key(self) -> str:
        """The idempotency key the next charge sends: a new generation only after the PSP was proved to
        hold no payment for the previous one and to have forgotten it."""
        return self.idempotency_key if self.key_generation == 0 else f"{self.idempotency_key}-g{self.key_generation}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else value
        out["status"] = str(self.status)
        return out


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
        return {name: (getattr(self, name).isoformat() if isinstance(getattr(self, name), datetime)
                       else getattr(self, name)) for name in self.__slots__}
