"""The rows of disputes (``recon.db.dispute_store``): a payment's chargeback, its audit events, and the dispute
state machine. A leaf, like ``recon.rows``.

A dispute is opened by the PSP (money withdrawn, or evidence asked for by ``evidence_due_by``), then won (the
money reinstated), lost, or reversed (Adyen's CHARGEBACK_REVERSED: the money came back after a chargeback). A won
or reversed one may be lost after all (Adyen's SECOND_CHARGEBACK, which comes after CHARGEBACK_REVERSED:
docs.adyen.com/risk-management/understanding-disputes/dispute-process-and-flow); lost is final. The transitions
are a status order without cycles, so news that comes late or twice (a CHARGEBACK_REVERSED delivered after the
SECOND_CHARGEBACK, a listing read again over older days) never moves a dispute back: it joins the audit trail
without a change, as every other word of the PSP about a dispute does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class DisputeStatus(StrEnum):
    OPENED = "opened"  #: money withdrawn or evidence asked for: the merchant may respond until evidence_due_by
    WON = "won"  #: decided for us: the money is reinstated
    LOST = "lost"  #: decided against us
    REVERSED = "reversed"  #: the chargeback was reversed: the money came back


D = DisputeStatus
DISPUTE_TRANSITIONS: dict[DisputeStatus, frozenset[DisputeStatus]] = {
    D.OPENED: frozenset({D.WON, D.LOST, D.REVERSED}),
    D.LOST: frozenset(),
    D.WON: frozenset({D.LOST}),
    D.REVERSED: frozenset({D.LOST}),
}


@dataclass(frozen=True, slots=True)
class Dispute:
    id: int
    payment_id: int
    psp: str
    psp_dispute_id: str
    status: DisputeStatus
    opened_at: datetime
    updated_at: datetime
    amount: int | None = None  #: withdrawn, minor units of ``currency``
    currency: str | None = None
    fee: int | None = None  #: the PSP's dispute fee, minor units of ``currency``
    reason: str | None = None
    psp_status: str | None = None
    evidence_due_by: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else str(value) if isinstance(
                value, StrEnum) else value
        return out


@dataclass(frozen=True, slots=True)
class DisputeWord:
    """What the PSP says about one dispute (a webhook's news), for ``DisputeStore.record``."""

    payment_id: int
    psp: str
    psp_dispute_id: str
    status: DisputeStatus
    amount: int | None
    currency: str | None
    fee: int | None
    reason: str | None
    psp_status: str | None
    evidence_due_by: datetime | None
    #: when the PSP opened it, when it says (a listing's); None: now, when recon first hears of it (a webhook's)
    opened_at: datetime | None = None


class DisputeSource(StrEnum):
    WEBHOOK = "webhook"  #: the webhook job, applying an event the PSP pushed
    LISTING = "listing"  #: the PSP's listing (``recon disputes fetch``, the ``disputes`` job)
    MANUAL = "manual"  #: a person


@dataclass(frozen=True, slots=True)
class DisputeEvent:
    """One entry of a dispute's audit trail (``from_status`` None: its first)."""

    from_status: DisputeStatus | None
    to_status: DisputeStatus
    source: str
    at: datetime
    details: dict[str, Any] | None = None
    job_id: int | None = None
    attempt: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"from_status": None if self.from_status is None else str(self.from_status),
                "to_status": str(self.to_status), "source": self.source, "at": self.at.isoformat(),
                "details": self.details, "job_id": self.job_id, "attempt": self.attempt}


@dataclass(frozen=True, slots=True)
class OpenDisputes:
    """The open disputes of one currency (``DisputeStore.open_totals``): how many, the money withdrawn and the
    fees (minor units), and how many have their evidence due soon."""

    currency: str
    count: int
    withdrawn: int
    fees: int
    due_soon: int
