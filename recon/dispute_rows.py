"""The rows of disputes (``recon.db.dispute_store``): a payment's chargeback, its audit events, and the dispute
state machine. A leaf, like ``recon.rows``.

A dispute is opened by the PSP (money withdrawn, or evidence asked for by ``evidence_due_by``), then won (the
money reinstated), lost, or reversed (Adyen's CHARGEBACK_REVERSED: the money came back after a chargeback). A
lost dispute may still be reversed; a won one lost after all (Adyen's SECOND_CHARGEBACK). Every other word of
the PSP about a dispute joins its audit trail without a change.
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
    D.LOST: frozenset({D.REVERSED}),
    D.WON: frozenset({D.LOST}),
    D.REVERSED: frozenset(),
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
