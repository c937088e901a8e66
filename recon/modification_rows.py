"""The rows of captures and cancels (``recon.db.modification_store``): a modification of an authorised payment,
a new one and a compare-and-set transition (its audit events are ``recon.movement_rows.MovementEvent``s). A
leaf, like ``recon.rows``.

A manual-capture payment is *authorised* by its charge (``PaymentStatus.AUTHORISED``); a capture takes the money
(all of it, or part: the rest is released) and a cancel releases it. Each is a modification with the states of a
refund (``recon.refund_rows.REFUND_TRANSITIONS``: a charge's, failed being the end), its own job, its own
idempotency key and its own audit trail, and one move more (``MODIFICATION_TRANSITIONS``): failed ->
needs_review, when the PSP says a capture we hold as failed succeeded (``recon.reconcile.decide``: money moved
that we think did not). What a modification's state means for its payment is the store's:

| the modification        | its payment                                                                |
| ----------------------- | -------------------------------------------------------------------------- |
| created (a capture)     | ``authorisation_claimed`` = its amount (at most the authorised amount)     |
| created (a cancel)      | ``authorisation_claimed`` = the whole amount                               |
|                         | (either only when nothing is claimed: one live capture or cancel a payment) |
| capture succeeded       | authorised -> succeeded, ``captured_amount`` = the capture's amount        |
| cancel succeeded        | authorised -> failed ("cancelled: ...")                                    |
| failed                  | its claim given back: the payment may be captured or cancelled again       |
| succeeded or failed ->  | needs_review too, the same reason (from any status but needs_review)       |
| needs_review (the PSP   |                                                                            |
| contradicts it)         |                                                                            |
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from recon.movement_rows import MovementKind, row_dict
from recon.refund_rows import REFUND_TRANSITIONS
from recon.rows import PaymentStatus

#: the kinds of modification, each also its job's kind
CAPTURE = "capture"
CANCEL = "cancel"
MODIFICATION_KINDS = (CAPTURE, CANCEL)


#: a refund's state machine, and failed -> needs_review: the PSP says a capture we hold as failed succeeded (a
#: person looks; its claim was given back when it failed, and its payment goes to review with it)
MODIFICATION_TRANSITIONS: dict[PaymentStatus, frozenset[PaymentStatus]] = {
    **REFUND_TRANSITIONS, PaymentStatus.FAILED: frozenset({PaymentStatus.NEEDS_REVIEW})}

#: a capture or cancel as a movement (recon.movement_rows): its table, columns, jobs and state machine
MODIFICATION = MovementKind(
    noun="modification", table="modifications", events_table="modification_events", id_field="modification_id",
    reference_field="modification_reference", psp_id_field="psp_modification_id",
    columns=("id, payment_id, kind, modification_reference, amount, currency, psp, status, psp_modification_id, "
             "idempotency_key, requested_by, failure_reason, review_reason, created_at, updated_at, sent_at"),
    job_key="modification", reconcile_kind="reconcile_modification", transitions=MODIFICATION_TRANSITIONS)


class ModificationSource(StrEnum):
    MODIFICATION = "modification"  #: the capture or cancel job
    RECONCILE = "reconcile"  #: the modification's reconcile job
    WEBHOOK = "webhook"  #: the webhook job, applying an event the PSP pushed
    MANUAL = "manual"  #: a person: `recon capture`, `recon cancel`, a review resolution


@dataclass(frozen=True, slots=True)
class Modification:
    id: int
    payment_id: int
    kind: str  #: capture or cancel
    modification_reference: str  #: ours, unique
    amount: int  #: a capture's amount; a cancel's: the payment's (what it releases); minor units of ``currency``
    currency: str
    psp: str
    status: PaymentStatus
    idempotency_key: str  #: fixed at creation: every attempt sends it
    requested_by: str
    created_at: datetime
    updated_at: datetime
    psp_modification_id: str | None = None  #: the PSP's id, once known; never replaced
    failure_reason: str | None = None
    review_reason: str | None = None
    sent_at: datetime | None = None  #: when the request first went out

    @property
    def reference(self) -> str:
        return self.modification_reference

    @property
    def psp_id(self) -> str | None:
        return self.psp_modification_id

    def to_dict(self) -> dict[str, Any]:
        return row_dict(self)


@dataclass(frozen=True, slots=True)
class NewModification:
    """A capture (``amount``: at most what the authorisation has unclaimed) or a cancel (``amount`` ignored: the
    payment's) of payment ``payment_id`` (``ModificationStore.create``)."""

    payment_id: int
    kind: str
    modification_reference: str
    requested_by: str
    amount: int | None = None  #: a capture's; None: the whole authorised amount


@dataclass(frozen=True, slots=True)
class ModificationTransition:
    """One compare-and-set status change of a modification with its audit event (``ModificationStore.apply``)."""

    modification_id: int
    from_status: PaymentStatus
    to_status: PaymentStatus
    source: ModificationSource
    details: dict[str, Any] | None = None
    job_id: int | None = None
    attempt: int | None = None
    psp_modification_id: str | None = None
    failure_reason: str | None = None
    review_reason: str | None = None
    captured: int | None = None  #: a capture that succeeded: what the PSP captured (None: its amount)

    @property
    def movement_id(self) -> int:
        return self.modification_id

    @property
    def psp_id(self) -> str | None:
        return self.psp_modification_id
