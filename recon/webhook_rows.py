"""The rows of the webhook events PSPs push: what the webhook store took in and what it hands the job that
applies an event. A leaf, like ``recon.rows`` (it imports nothing of recon)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


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
    news: str | None  #: succeeded, failed, pending, action_required, unknown, refund, dispute, refund_<state>
    psp_status: str | None
    reason: str | None
    report: str | None
    body: dict[str, Any] | None
    state: WebhookState
    payment_id: int | None
    applied_at: datetime | None
    movement_reference: str | None = None  #: the PSP's id of the refund (or dispute) the news is about
    due_by: datetime | None = None  #: a dispute's evidence deadline
    fee: int | None = None  #: a dispute's fee (minor units)


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """What one event of a webhook request became (``WebhookStore.intake``): ``stored`` False for a redelivery
    (nothing written)."""

    event_id: str
    stored: bool
    webhook_id: int | None
    job_id: int | None
