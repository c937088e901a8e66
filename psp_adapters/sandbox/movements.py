"""What moves money after a charge, as the sandbox's books hold it: refunds and disputes (``Adjustment``), and the
modifications Adyen receives now and processes later (``Modification``).

Refund statuses are Stripe's (docs.stripe.com/api/refunds/object): ``pending`` -> ``succeeded`` | ``failed`` |
``canceled``, and ``succeeded`` -> ``failed`` when the card network returns the money later (Stripe's
``pm_card_refundFail``; Adyen's ``REFUND_FAILED``, or ``REFUNDED_REVERSED`` when ``metadata["reversed"]``). A
refund that is not failed or canceled counts against what
was captured: the ledger refuses one that would take back more. Disputes are ``needs_response`` until the admin
API decides them (``admin_movements``): ``won`` or ``lost``.

Amounts are positive integer minor units; times aware UTC.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from psp_adapters.sandbox.records import dt, ts
from psp_adapters.sandbox.wire import parse_timestamp

#: refund statuses (Stripe's ``Refund.status``)
REFUND_PENDING, REFUND_SUCCEEDED, REFUND_FAILED, REFUND_CANCELED = "pending", "succeeded", "failed", "canceled"
#: a dispute's status while the funds are withdrawn and nobody answered (Stripe's ``Dispute.status``)
DISPUTE_NEEDS_RESPONSE = "needs_response"
#: a dispute decided (Stripe's ``won`` / ``lost``): won reinstates the funds (Adyen: CHARGEBACK_REVERSED); a won
#: dispute may still be lost (Adyen: SECOND_CHARGEBACK); ``metadata["won_at"]`` keeps when it was won
DISPUTE_WON, DISPUTE_LOST = "won", "lost"
#: the kinds of Adyen modifications (docs.adyen.com/online-payments/modify-payments): each is answered
#: ``received`` at once and decided later, by a webhook
MODIFICATION_KINDS = ("capture", "cancel", "refund", "reversal")
#: a processed capture's ``outcome`` once the card scheme rejected it after it was sent (Adyen's CAPTURE_FAILED;
#: the report's CaptureFailed row; its ``reason`` the scheme's): the payment is authorised again
#: (``admin_movements.fail_capture``)
CAPTURE_FAILED = "capture_failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Adjustment:
    """A refund or a dispute (chargeback) of a succeeded payment."""

    id: str  #: the flavour's id: Stripe ``re_…``/``dp_…``, an Adyen modification pspReference, ``rf_…``/``dp_…``
    kind: str  #: "refund" or "dispute"
    psp_reference: str  #: the payment it adjusts
    amount: int  #: positive minor units (taken back from the merchant)
    currency: str
    fee: int  #: what the PSP charges for it (a dispute fee; 0 for refunds)
    reason: str | None
    created_at: datetime
    status: str = REFUND_SUCCEEDED  #: see the module docstring; a dispute: ``needs_response``
    failure_reason: str | None = None  #: a failed refund: why (Stripe's ``failure_reason``)
    settle_to: str | None = None  #: a status this refund moves to at ``settle_at`` (pending, or failing later)
    settle_at: datetime | None = None
    updated_at: datetime | None = None  #: its last status change (a refund failed after success: when it failed)
    metadata: Mapping[str, str] = field(default_factory=dict)
    reference: str | None = None  #: the merchant's own reference for it (Adyen ``reference``)

    @property
    def holds_money(self) -> bool:
        """Whether it takes money back now or will (a refund not failed or canceled, any dispute)."""
        return self.status not in (REFUND_FAILED, REFUND_CANCELED)

    def _params(self) -> tuple[object, ...]:
        return (
            self.id, self.kind, self.psp_reference, self.amount, self.currency, self.fee, self.reason,
            ts(self.created_at), self.status, self.failure_reason, self.settle_to, ts(self.settle_at),
            ts(self.updated_at), json.dumps(dict(self.metadata), sort_keys=True) if self.metadata else None,
            self.reference,
        )  # fmt: skip

    @classmethod
    def _from_row(cls, row: sqlite3.Row, prefix: str = "") -> Adjustment:
        r = {name.strip(): row[prefix + name.strip()] for name in ADJUSTMENT_COLUMNS.split(",")}
        default = REFUND_SUCCEEDED if r["kind"] == "refund" else DISPUTE_NEEDS_RESPONSE  # rows of older files
        return cls(
            id=r["id"],
            kind=r["kind"],
            psp_reference=r["psp_reference"],
            amount=r["amount"],
            currency=r["currency"],
            fee=r["fee"],
            reason=r["reason"],
            created_at=parse_timestamp(r["created_at"]),
            status=r["status"] or default,
            failure_reason=r["failure_reason"],
            settle_to=r["settle_to"],
            settle_at=dt(r["settle_at"]),
            updated_at=dt(r["updated_at"]),
            metadata=json.loads(r["metadata"]) if r["metadata"] else {},
            reference=r["reference"],
        )


#: the adjustments columns, in ``Adjustment._params`` order
ADJUSTMENT_COLUMNS = (
    "id, kind, psp_reference, amount, currency, fee, reason, created_at, status, failure_reason, settle_to, "
    "settle_at, updated_at, metadata, reference"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Modification:
    """A capture, cancel, refund or reversal Adyen answered ``received`` and processes at ``due_at``."""

    id: str  #: its own pspReference (the webhook's ``pspReference``; ``originalReference`` is the payment's)
    kind: str  #: one of MODIFICATION_KINDS
    psp_reference: str  #: the payment it modifies
    merchant_account: str
    amount: int | None  #: captures and refunds; None for cancels and reversals
    currency: str | None
    reference: str | None  #: the merchant's reference for it
    reason: str | None  #: a refund's ``merchantRefundReason``; a capture failed after it was sent: the scheme's
    created_at: datetime
    due_at: datetime
    status: str = "received"  #: "received", then "processed" or "refused"
    outcome: str | None = None  #: what processing did: "capture", "cancel", "refund" (a reversal: one of the two),
    #: CAPTURE_FAILED (a capture the scheme rejected after it was sent),
    #: or why it was refused (the webhook's ``reason``)

    def _params(self) -> tuple[object, ...]:
        return (
            self.id, self.kind, self.psp_reference, self.merchant_account, self.amount, self.currency,
            self.reference, self.reason, ts(self.created_at), ts(self.due_at), self.status, self.outcome,
        )  # fmt: skip

    @classmethod
    def _from_row(cls, row: sqlite3.Row) -> Modification:
        return cls(
            id=row["id"],
            kind=row["kind"],
            psp_reference=row["psp_reference"],
            merchant_account=row["merchant_account"],
            amount=row["amount"],
            currency=row["currency"],
            reference=row["reference"],
            reason=row["reason"],
            created_at=parse_timestamp(row["created_at"]),
            due_at=parse_timestamp(row["due_at"]),
            status=row["status"],
            outcome=row["outcome"],
        )


MODIFICATION_COLUMNS = (
    "id, kind, psp_reference, merchant_account, amount, currency, reference, reason, created_at, due_at, status, "
    "outcome"
)
