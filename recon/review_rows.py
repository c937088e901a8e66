"""The review queue's rows: why a payment is in review, the queue's filter and the rules it is read with, the
totals of a filtered queue, and the comments on an item (``recon.db.review_store``, ``recon.review``). A leaf,
like ``recon.rows``: the SQL layer names these without importing the desk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class ReviewKind(StrEnum):
    """Why a payment is in review: the first word of its review reason."""

    AMOUNT_MISMATCH = "amount_mismatch"  #: the PSP took another amount
    CURRENCY_MISMATCH = "currency_mismatch"  #: the PSP took another currency
    MISSING_AT_PSP = "missing_at_psp"  #: the PSP has no payment for a reference it gave us
    NO_FINAL_ANSWER = "no_final_answer"  #: still pending at the PSP at the end of the reconcile schedule
    AUTHENTICATION_REQUIRED = "authentication_required"  #: the customer must authenticate (3-D Secure)
    PSP_REVERSED = "psp_reversed"  #: refunded or disputed at the PSP after it succeeded
    STATUS_MISMATCH = "status_mismatch"  #: we hold it as failed, the PSP says it succeeded
    REFERENCE_CONFLICT = "reference_conflict"  #: the PSP speaks of another PSP reference under our reference
    OTHER = "other"  #: anything else


class Severity(StrEnum):
    """How urgent an item is, from its amount and its age (``[review.severity]``)."""

    HIGH = "high"  #: at or over the high amount, or in review longer than the high age
    MEDIUM = "medium"  #: at or over the medium amount, or in review longer than the medium age
    LOW = "low"  #: neither


class CommentKind(StrEnum):
    """What a row of review_comments records."""

    COMMENT = "comment"  #: a note an operator wrote
    ASSIGNED = "assigned"  #: the item was assigned (body: to whom, or "unassigned")


@dataclass(frozen=True, slots=True)
class QueueRules:
    """The configured rules made concrete at one instant, as the SQL compares them: the severity thresholds in
    ten-thousandths of a currency's major unit (every ISO-4217 exponent is at most 4, so one integer scale fits
    all), the currencies of each exponent but 2, and each kind's due cutoff (in review since before it:
    overdue)."""

    high_scaled: int
    medium_scaled: int
    high_since: datetime  #: in review since before this: high
    medium_since: datetime
    exponent_0: tuple[str, ...]
    exponent_3: tuple[str, ...]
    exponent_4: tuple[str, ...]
    due_cutoffs: dict[str, datetime]  #: ReviewKind value -> in review since before it: overdue


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """Which payments in review a listing, its totals or a bulk resolve take. None: any."""

    kind: str | None = None  #: a ReviewKind value
    psp: str | None = None
    currency: str | None = None
    cutoff: datetime | None = None  #: in review since before this (``--older-than``)
    assignee: str | None = None
    unassigned: bool = False  #: only items nobody is assigned to
    severity: str | None = None  #: a Severity value
    overdue: bool = False  #: only items past their due-by


@dataclass(frozen=True, slots=True)
class CurrencyTotal:
    currency: str
    count: int
    amount: int  #: minor units


@dataclass(frozen=True, slots=True)
class QueueTotals:
    """What a filter matches: how many payments, and per currency how many and how much."""

    count: int
    by_currency: list[CurrencyTotal] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReviewComment:
    id: int
    payment_id: int
    at: datetime
    author: str
    kind: CommentKind
    body: str
