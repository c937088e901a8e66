"""The review desk: what a person does with payments in ``needs_review`` (``recon review``, the console).

A payment in review leaves it only by hand. ``resolve`` first asks the PSP once more, through the guard like
every call, and refuses a decision the PSP's final answer contradicts (it says succeeded and the operator
chose failed; it says failed, or has no such payment, and the operator chose succeeded) unless the operator
overrides, which is recorded. The resolution is one compare-and-set transition with its audit event (source
``manual``): the operator, their reason, our amount and currency, the PSP's answer it was decided on, and
whether it overrode that answer. ``recheck`` queues a reconcile job now; for a payment in review it asks the
PSP and keeps the answer as evidence (recon.reconcile.handler), never changing the status.

Review reasons start with their kind (``amount_mismatch: ours 1000 EUR, PSP 900``); ``review_kind`` reads it.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from psp_adapters.errors import PspError
from psp_adapters.protocol import Failed, NotFound, PaymentOutcome, PspAdapter, PspRef, Succeeded
from recon.clock import Clock, SystemClock
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore, charge_key
from recon.engine.client import Client
from recon.engine.outcome import Snooze
from recon.errors import ConfigError, ReviewRefused, UsageError
from recon.payments.guard import Guard
from recon.payments.money import check_currency, format_amount
from recon.reconcile.decide import outcome_details
from recon.reconcile.handler import RECONCILE_KIND, reconcile_key
from recon.rows import AttemptRecord, EventSource, Job, Payment, PaymentEvent, PaymentStatus, Transition

#: bounds of what a person types
REASON_MAX = 500
OPERATOR_MAX = 100
LIST_MAX = 10_000


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


def review_kind(reason: str | None) -> ReviewKind:
    head = (reason or "").split(":", 1)[0].strip()
    if head.startswith("no final answer"):  # reasons written before the kind prefix
        return ReviewKind.NO_FINAL_ANSWER
    try:
        return ReviewKind(head)
    except ValueError:
        return ReviewKind.OTHER


@dataclass(frozen=True, slots=True)
class ReviewItem:
    payment: Payment
    kind: ReviewKind
    since: datetime  #: when it entered needs_review
    age_seconds: float
    psp_answer: dict[str, Any] | None  #: the latest PSP evidence in its audit trail

    def to_dict(self) -> dict[str, Any]:
        p = self.payment
        return {"merchant_reference": p.merchant_reference, "psp": p.psp, "psp_reference": p.psp_reference,
                "merchant_account": p.merchant_account, "amount": p.amount, "currency": p.currency,
                "amount_formatted": format_amount(p.amount, p.currency), "kind": str(self.kind),
                "review_reason": p.review_reason, "since": self.since.isoformat(),
                "age_seconds": round(self.age_seconds, 3), "psp_answer": self.psp_answer}


@dataclass(frozen=True, slots=True)
class PaymentDetail:
    payment: Payment
    events: list[PaymentEvent]
    jobs: list[tuple[Job, list[AttemptRecord]]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Resolution:
    payment: Payment  #: after the resolution
    details: dict[str, Any]  #: the audit event's details


class ReviewDesk:
    """One per App (``App.review``); thread-safe like the stores it uses."""

    def __init__(self, payments: PaymentStore, jobs: JobStore, client: Client,
                 adapter_func: Callable[[str], PspAdapter], guard: Guard, *, reconcile_queue: str,
                 psp_names: Sequence[str], clock: Clock | None = None) -> None:
        self.payments = payments
        self.jobs = jobs
        self.client = client
        self.adapter_func = adapter_func
        self.guard = guard
        self.reconcile_queue = reconcile_queue
        self.psp_names = tuple(psp_names)
        self.clock = clock or SystemClock()

    # --- reading --------------------------------------------------------------------------------------

    def list(self, *, kind: ReviewKind | str | None = None, psp: str | None = None,
             older_than: timedelta | None = None, currency: str | None = None,
             limit: int = 100) -> builtins.list[ReviewItem]:
        """Payments in review, longest in review first, with why and the PSP's latest answer."""
        wanted = self._kind(kind)
        if psp is not None and psp not in self.psp_names:
            raise UsageError(f"--psp: unknown PSP {psp!r} (known: {', '.join(self.psp_names)})")
        if currency is not None:
            currency = check_currency(currency)
        if not 1 <= limit <= LIST_MAX:
            raise UsageError(f"--limit: must be between 1 and {LIST_MAX}")
        now = self.clock.now()
        cutoff = now - (older_than or timedelta(0)) if older_than else now + timedelta(days=1)
        # a known kind filters in SQL by its prefix; "other" is what no known prefix matches, so it pages
        prefix = f"{wanted}:" if wanted is not None and wanted is not ReviewKind.OTHER else None
        found: list[Payment] = []
        after: tuple[datetime, int] | None = None
        while len(found) < limit:
            page = self.payments.review_page(after=after, cutoff=cutoff, psp=psp, currency=currency,
                                             reason_prefix=prefix, limit=min(500, max(limit, 50)))
            found.extend(p for p in page if wanted is None or review_kind(p.review_reason) is wanted)
            if len(page) < min(500, max(limit, 50)):
                break
            last = page[-1]
            after = (last.review_since or last.updated_at, last.id)
        found = found[:limit]
        evidence = self.payments.latest_evidence([p.id for p in found])
        items = []
        for p in found:
            since = p.review_since or p.updated_at
            items.append(ReviewItem(payment=p, kind=review_kind(p.review_reason), since=since,
                                    age_seconds=max((now - since).total_seconds(), 0.0),
                                    psp_answer=evidence.get(p.id)))
        return items

    def find(self, text: str) -> builtins.list[Payment]:
        """Payments by merchant reference or PSP reference, exactly."""
        text = text.strip()
        if not text:
            return []
        return self.payments.search(text, psps=self.psp_names)

    def get(self, reference: str) -> Payment:
        payment = self.payments.by_reference(reference)
        if payment is None:
            raise UsageError(f"payment {reference} not found")
        return payment

    def detail(self, reference: str) -> PaymentDetail:
        """The payment, its whole audit trail, and its jobs with their attempts."""
        payment = self.get(reference)
        events = self.payments.events(payment.id)
        jobs = []
        for job_id in self.payments.job_ids(payment.id, keys=[charge_key(payment.id), reconcile_key(payment.id)]):
            job = self.jobs.get(job_id)
            if job is not None:  # pruned since its event was written
                jobs.append((job, self.jobs.attempts(job_id)))
        return PaymentDetail(payment=payment, events=events, jobs=jobs)

    # --- acting ---------------------------------------------------------------------------------------

    def resolve(self, reference: str, *, to: str, reason: str, by: str, override: bool = False,
                approved_by: str | None = None) -> Resolution:
        """Move a payment out of review to ``to`` (succeeded or failed), as decided by ``by`` for ``reason``.

        Asks the PSP first; raises ReviewRefused when its final answer contradicts ``to``, or when it could
        not be asked, unless ``override``. UsageError for bad input, a payment not in review, or one that
        changed meanwhile (nothing written then)."""
        target = _target(to)
        reason, by = _text(reason, "--reason", REASON_MAX), _text(by, "--by", OPERATOR_MAX)
        payment = self.get(reference)
        if payment.status is not PaymentStatus.NEEDS_REVIEW:
            raise UsageError(f"payment {reference} is {payment.status}, not needs_review: only a payment in review "
                             f"is resolved by hand")
        answer, not_asked = self._ask(payment)
        contradiction = _contradiction(answer, target) if answer is not None else None
        if not override:
            if contradiction:
                raise ReviewRefused(f"payment {reference}: {contradiction}; resolving it as {target} contradicts "
                                    f"the PSP (--override records a decision against the PSP's answer)")
            if not_asked:
                raise ReviewRefused(f"payment {reference}: the PSP could not be asked ({not_asked}); nothing "
                                    f"changed (--override decides without its answer, and records that)")
        details: dict[str, Any] = {
            "operator": by, "reason": reason, "override": override, "review_kind": str(review_kind(
                payment.review_reason)), "review_reason": payment.review_reason,
            "ours": {"amount": payment.amount, "currency": payment.currency},
            "psp_asked": answer is not None, "psp_not_asked": not_asked, "contradicts_psp": contradiction,
        }
        if approved_by is not None:  # a four-eyes override (recon.four_eyes): who approved it
            details["approved_by"] = approved_by
        if answer is not None:
            details.update(outcome_details(answer))
            details["psp"] = {"amount": answer.amount, "currency": answer.currency}
        transition = Transition(payment.id, PaymentStatus.NEEDS_REVIEW, target, EventSource.MANUAL, details=details,
                                failure_reason=f"resolved by {by}: {reason}" if target is PaymentStatus.FAILED
                                else None)
        with self.payments.db.begin() as conn:
            if not self.payments.apply(conn, transition):
                raise UsageError(f"payment {reference} changed while it was being resolved; nothing written "
                                 f"(look again: recon review show {reference})")
        return Resolution(payment=self.get(reference), details=details)

    def recheck(self, reference: str) -> int:
        """Queue a reconcile job for the payment now (the id of the one already queued, if any)."""
        payment = self.get(reference)
        return self.client.enqueue(RECONCILE_KIND, {"payment_id": payment.id, "recheck": True},
                                   queue=self.reconcile_queue, unique_key=reconcile_key(payment.id))

    # --- plumbing -------------------------------------------------------------------------------------

    def _ask(self, payment: Payment) -> tuple[PaymentOutcome | None, str | None]:
        """The PSP's answer now, through the guard; or None and why it could not be asked."""
        try:
            adapter = self.adapter_func(payment.psp)
        except ConfigError as exc:
            return None, f"{payment.psp} cannot be called as configured: {exc}"
        permit = self.guard.admit(payment.psp)
        if isinstance(permit, Snooze):
            return None, permit.reason
        ref = PspRef(psp_reference=payment.psp_reference, merchant_reference=payment.merchant_reference,
                     merchant_account=payment.merchant_account)
        try:
            return permit.call(lambda: adapter.fetch_payment(ref)), None
        except PspError as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            return None, f"{type(exc).__name__}: {first}"[:200]

    def _kind(self, kind: ReviewKind | str | None) -> ReviewKind | None:
        if kind is None or isinstance(kind, ReviewKind):
            return kind
        try:
            return ReviewKind(kind)
        except ValueError:
            raise UsageError(f"--reason: unknown kind {kind!r} (known: {', '.join(k.value for k in ReviewKind)})") \
                from None


def _target(to: str) -> PaymentStatus:
    if to not in (PaymentStatus.SUCCEEDED, PaymentStatus.FAILED):
        raise UsageError(f"--as: {to!r} is not succeeded or failed")
    return PaymentStatus(to)


def _text(value: str | None, option: str, limit: int) -> str:
    text = " ".join((value or "").split())
    if not text:
        raise UsageError(f"{option}: is required and must not be blank")
    if len(text) > limit:
        raise UsageError(f"{option}: at most {limit} characters (got {len(text)})")
    return text


def _contradiction(answer: PaymentOutcome, target: PaymentStatus) -> str | None:
    """What the PSP's final answer says against ``target``, or None when it does not contradict it."""
    status = answer.raw_status or type(answer).__name__.lower()
    if isinstance(answer, Succeeded) and target is PaymentStatus.FAILED:
        taken = format_amount(answer.amount, answer.currency.upper()) if answer.amount is not None and \
            answer.currency else "the money"
        return f"the PSP says it succeeded (status {status}, {taken} taken)"
    if isinstance(answer, Failed) and target is PaymentStatus.SUCCEEDED:
        return f"the PSP says it failed (status {status}{': ' + answer.reason if answer.reason else ''})"
    if isinstance(answer, NotFound) and target is PaymentStatus.SUCCEEDED:
        return "the PSP has no such payment"
    return None
