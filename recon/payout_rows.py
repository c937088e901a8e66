"""What the payout store takes and returns, and what the close computes on (a leaf: it imports nothing of recon).

A payout is one transfer a PSP made (or will make) to our bank: Stripe's ``po_…``, Adyen's payable batch of a
merchant account. Its lines are what it carries (charges, refunds, disputes, fees, …) and its own line, kind
``payout``, the transfer itself. Amounts are integer minor units of ``currency``, signed as the PSP signs them
(a refund's net is negative); a payout's ``amount`` is what reaches the bank (negative: the PSP debits us).
The invariant the close checks: the nets of a payout's lines but its own ``payout`` line add up to its amount,
per currency.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any


class PayoutStatus(StrEnum):
    """A payout's state at the PSP (Stripe's words; Adyen's batches are paid once their report exists)."""

    PENDING = "pending"  #: created, not yet sent to the bank
    IN_TRANSIT = "in_transit"  #: sent, not yet confirmed arrived
    PAID = "paid"  #: the PSP says it arrived
    FAILED = "failed"  #: the bank refused it; the money went back to the PSP balance
    CANCELED = "canceled"  #: canceled before it was sent


class LineKind(StrEnum):
    """What a payout line is."""

    CHARGE = "charge"  #: a payment's funds
    REFUND = "refund"  #: a refund taken from the balance
    DISPUTE = "dispute"  #: a chargeback's withdrawal
    DISPUTE_REVERSAL = "dispute_reversal"  #: a won dispute's funds back
    FEE = "fee"  #: a PSP fee not attached to a payment
    ADJUSTMENT = "adjustment"  #: a correction, a transfer between balances
    PAYOUT = "payout"  #: the transfer itself (its net is minus the payout's amount)
    OTHER = "other"  #: anything else the PSP books into the payout


class ExceptionKind(StrEnum):
    """Why a payout or a bank credit is not explained (``payout_exceptions.kind``); the review desk's payout kinds."""

    BANK_MISSING = "bank_missing"  #: no bank credit for the payout within its window
    AMOUNT_DIFFERS = "amount_differs"  #: the credit its reference names has another amount
    AMBIGUOUS = "ambiguous"  #: two or more candidates: never guessed, both named
    UNEXPLAINED_CREDIT = "unexplained_credit"  #: a credit on a PSP's account that no payout explains
    LINES_DIFFER = "lines_differ"  #: the payout's lines do not add up to its amount
    PAYOUT_FAILED = "payout_failed"  #: the PSP says the payout failed or was canceled
    DISPUTE_FEE_DIFFERS = "dispute_fee_differs"  #: a dispute's fee is not what its payout lines carry


class ExceptionState(StrEnum):
    OPEN = "open"  #: waits for a person, or for the evidence that explains it
    RESOLVED = "resolved"  #: a person resolved it, with a reason
    CLEARED = "cleared"  #: later evidence explained it (a credit arrived, the payout changed)


@dataclass(frozen=True, slots=True)
class NewPayoutLine:
    line_ref: str  #: the PSP's id of the line (Stripe's ``txn_…``; Adyen's row), unique in its payout
    kind: LineKind
    psp_reference: str | None
    merchant_reference: str | None
    gross: int
    fee: int
    net: int
    currency: str
    #: the PSP's id of the refund or dispute the line carries (``PspPayoutLine.movement_reference``)
    movement_reference: str | None = None


@dataclass(frozen=True, slots=True)
class NewPayout:
    psp: str
    merchant_account: str  #: "" where the PSP has no merchant accounts (Stripe)
    payout_ref: str  #: the PSP's payout id (``po_…``; Adyen ``ACCOUNT/batch``)
    amount: int
    currency: str
    status: PayoutStatus
    arrival_date: date
    trace_ref: str | None  #: what the bank credit may carry: Stripe's trace id, Adyen's batch number
    statement_descriptor: str | None
    lines: tuple[NewPayoutLine, ...]

    @property
    def lines_net(self) -> int:
        """The nets of the lines but the payout's own, in the payout's currency."""
        return sum(line.net for line in self.lines if line.kind != LineKind.PAYOUT and line.currency == self.currency)


@dataclass(frozen=True, slots=True)
class Payout:
    id: int
    psp: str
    merchant_account: str
    payout_ref: str
    amount: int
    currency: str
    status: PayoutStatus
    arrival_date: date
    trace_ref: str | None
    statement_descriptor: str | None
    digest: str
    version: int
    line_count: int
    lines_net: int
    fetched_at: datetime
    updated_at: datetime

    @property
    def lines_add_up(self) -> bool:
        return self.lines_net == self.amount

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "psp": self.psp, "merchant_account": self.merchant_account,
                "payout_id": self.payout_ref, "amount": self.amount, "currency": self.currency,
                "status": self.status.value, "arrival_date": self.arrival_date.isoformat(),
                "trace_ref": self.trace_ref, "statement_descriptor": self.statement_descriptor,
                "version": self.version, "line_count": self.line_count, "lines_net": self.lines_net,
                "lines_add_up": self.lines_add_up, "fetched_at": self.fetched_at.isoformat(),
                "updated_at": self.updated_at.isoformat()}


@dataclass(frozen=True, slots=True)
class PayoutLine:
    id: int
    payout_id: int
    line_ref: str
    kind: LineKind
    psp_reference: str | None
    merchant_reference: str | None
    gross: int
    fee: int
    net: int
    currency: str
    payment_id: int | None
    missing_locally: bool
    movement_reference: str | None = None  #: the PSP's id of the refund or dispute it carries
    refund_id: int | None = None  #: our refund it is, when we know it
    dispute_id: int | None = None  #: our dispute it is, when we know it

    @property
    def category(self) -> str:
        """``matched`` (linked to our payment), ``missing_locally``, or ``not_a_payment`` (fees, the payout…)."""
        if self.payment_id is not None:
            return "matched"
        return "missing_locally" if self.missing_locally else "not_a_payment"

    def to_dict(self) -> dict[str, Any]:
        return {"line_ref": self.line_ref, "kind": self.kind.value, "psp_reference": self.psp_reference,
                "merchant_reference": self.merchant_reference, "gross": self.gross, "fee": self.fee,
                "net": self.net, "currency": self.currency, "payment_id": self.payment_id,
                "category": self.category, "movement_reference": self.movement_reference,
                "refund_id": self.refund_id, "dispute_id": self.dispute_id}


@dataclass(frozen=True, slots=True)
class PayoutEvent:
    payout_id: int
    at: datetime
    kind: str  #: fetched, changed, matched, reopened, resolved
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at.isoformat(), "kind": self.kind, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class StoreOutcome:
    """What storing one fetched payout did: ``new``, ``same`` (nothing changed) or ``changed`` (with what)."""

    payout_id: int
    result: str
    changes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Credit:
    """A bank entry as matching sees it (from ``bank_entries``): a credit, or a debit (what a negative payout
    takes from the bank account), whose ``amount`` is then negative: signed as the payouts are."""

    id: int
    account: str
    amount: int
    currency: str
    booking_date: date
    value_date: date | None
    bank_reference: str | None
    end_to_end_id: str | None
    remittance: str | None
    payout_id: int | None = None
    direction: str = "credit"  #: or debit (``amount`` negative)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "account": self.account, "amount": self.amount, "direction": self.direction,
                "currency": self.currency,
                "booking_date": self.booking_date.isoformat(),
                "value_date": self.value_date.isoformat() if self.value_date else None,
                "bank_reference": self.bank_reference, "end_to_end_id": self.end_to_end_id}


@dataclass(frozen=True, slots=True)
class Match:
    """Payouts and credits that explain each other: 1:1, N:1 or 1:N, sums equal (less a bank fee in tolerance)."""

    payout_ids: tuple[int, ...]
    entry_ids: tuple[int, ...]
    rule: str  #: reference, amount_date, several_payouts, split_credit
    bank_fee: int = 0  #: what the bank kept: payouts' sum minus credits' sum


@dataclass(frozen=True, slots=True)
class DisputeFee:
    """A dispute one of a payout's lines carries, with the fee the PSP gave for it (its webhook's or listing's,
    ``disputes.fee``) and what all the payout lines linked to it carry in its currency (``carried``), and how many
    of those lines are in another currency (not comparable)."""

    payout_id: int
    payout_ref: str
    dispute_id: int
    psp_dispute_id: str
    fee: int
    currency: str
    carried: int
    other_currency_lines: int


@dataclass(frozen=True, slots=True)
class Finding:
    """An exception matching found: its kind, the payout and/or the credit it concerns, and why."""

    kind: ExceptionKind
    payout_id: int | None
    entry_id: int | None
    detail: str

    @property
    def key(self) -> str:
        """One open exception per key (the store's partial unique index): the close run twice adds nothing."""
        return f"{self.kind.value}:{self.payout_id or 0}:{self.entry_id or 0}"


@dataclass(frozen=True, slots=True)
class PayoutException:
    id: int
    kind: ExceptionKind
    payout_id: int | None
    entry_id: int | None
    detail: str
    state: ExceptionState
    created_at: datetime
    resolved_by: str | None
    resolution: str | None
    resolved_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind.value, "payout_id": self.payout_id, "bank_entry_id": self.entry_id,
                "detail": self.detail, "state": self.state.value, "created_at": self.created_at.isoformat(),
                "resolved_by": self.resolved_by, "resolution": self.resolution,
                "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None}
