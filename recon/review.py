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
from recon.db.review_store import Cursor, ReviewStore
from recon.engine.client import Client
from recon.engine.outcome import Snooze
from recon.errors import ConfigError, ReviewRefused, UsageError
from recon.payments.guard import Guard
from recon.payments.money import check_currency, format_amount
from recon.reconcile.decide import outcome_details
from recon.reconcile.handler import RECONCILE_KIND, reconcile_key
from recon.review_config import ReviewConfig
from recon.review_rows import QueueFilter, QueueTotals, ReviewComment, ReviewKind, Severity
from recon.rows import AttemptRecord, EventSource, Job, Payment, PaymentEvent, PaymentStatus, Transition

#: bounds of what a person types
REASON_MAX = 500
OPERATOR_MAX = 100
COMMENT_MAX = 2000
LIST_MAX = 10_000


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
    severity: Severity = Severity.LOW  #: from the amount and the age (``[review]``)
    due_at: datetime | None = None  #: since + the SLA of its kind (``[review.sla]``)
    overdue: bool = False

    @property
    def difference(self) -> int | None:
        """Ours minus what the PSP's latest answer says it took (minor units), when it names an amount in our
        currency: what is left to settle. None when it names none."""
        answer = self.psp_answer or {}
        amount, currency = answer.get("psp_amount"), answer.get("psp_currency")
        if not isinstance(amount, int) or isinstance(amount, bool) or not isinstance(currency, str) or \
                currency.upper() != self.payment.currency:
            return None
        return self.payment.amount - amount

    def to_dict(self) -> dict[str, Any]:
        p = self.payment
        return {"merchant_reference": p.merchant_reference, "psp": p.psp, "psp_reference": p.psp_reference,
                "merchant_account": p.merchant_account, "amount": p.amount, "currency": p.currency,
                "amount_formatted": format_amount(p.amount, p.currency), "kind": str(self.kind),
                "review_reason": p.review_reason, "since": self.since.isoformat(),
                "age_seconds": round(self.age_seconds, 3), "psp_answer": self.psp_answer,
                "severity": str(self.severity), "due_at": self.due_at.isoformat() if self.due_at else None,
                "overdue": self.overdue, "assignee": p.review_assignee, "difference": self.difference,
                "evidence_due_by": (self.psp_answer or {}).get("evidence_due_by")}


@dataclass(frozen=True, slots=True)
class QueuePage:
    """One page of the filtered queue: its items, the filter's totals, and the cursors of the pages around it
    (None: there is none)."""

    items: list[ReviewItem]
    totals: QueueTotals
    next_cursor: Cursor | None
    previous_cursor: Cursor | None


@dataclass(frozen=True, slots=True)
class PaymentDetail:
    payment: Payment
    events: list[PaymentEvent]
    jobs: list[tuple[Job, list[AttemptRecord]]] = field(default_factory=list)
    comments: list[ReviewComment] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Resolution:
    payment: Payment  #: after the resolution
    details: dict[str, Any]  #: the audit event's details


class ReviewDesk:
    """One per App (``App.review``); thread-safe like the stores it uses."""

    def __init__(self, payments: PaymentStore, jobs: JobStore, client: Client,
                 adapter_func: Callable[[str], PspAdapter], guard: Guard, *, reconcile_queue: str,
                 psp_names: Sequence[str], clock: Clock | None = None, config: ReviewConfig | None = None) -> None:
        self.payments = payments
        self.queue_store = ReviewStore(payments.db, payments)
        self.jobs = jobs
        self.client = client
        self.adapter_func = adapter_func
        self.guard = guard
        self.reconcile_queue = reconcile_queue
        self.psp_names = tuple(psp_names)
        self.clock = clock or SystemClock()
        self.config = config or ReviewConfig()

    # --- reading --------------------------------------------------------------------------------------

    def where(self, *, kind: ReviewKind | str | None = None, psp: str | None = None,
              older_than: timedelta | None = None, currency: str | None = None, assignee: str | None = None,
              unassigned: bool = False, severity: Severity | str | None = None,
              overdue: bool = False) -> QueueFilter:
        """The queue's filter from what a person typed; UsageError names a bad value (by its option)."""
        wanted = self._kind(kind)
        if psp is not None and psp not in self.psp_names:
            raise UsageError(f"--psp: unknown PSP {psp!r} (known: {', '.join(self.psp_names)})")
        if currency is not None:
            currency = check_currency(currency)
        if severity is not None and severity not in {s.value for s in Severity}:
            raise UsageError(f"--severity: {severity!r} is not one of {', '.join(s.value for s in Severity)}")
        if assignee is not None:
            assignee = typed_text(assignee, "--assignee", OPERATOR_MAX)
        cutoff = self.clock.now() - older_than if older_than else None
        return QueueFilter(kind=wanted.value if wanted else None, psp=psp, currency=currency, cutoff=cutoff,
                           assignee=assignee, unassigned=unassigned, severity=str(severity) if severity else None,
                           overdue=overdue)

    def list(self, *, kind: ReviewKind | str | None = None, psp: str | None = None,
             older_than: timedelta | None = None, currency: str | None = None, assignee: str | None = None,
             unassigned: bool = False, severity: str | None = None, overdue: bool = False,
             limit: int = 100) -> builtins.list[ReviewItem]:
        """Payments in review, longest in review first, with why and the PSP's latest answer."""
        where = self.where(kind=kind, psp=psp, older_than=older_than, currency=currency, assignee=assignee,
                           unassigned=unassigned, severity=severity, overdue=overdue)
        if not 1 <= limit <= LIST_MAX:
            raise UsageError(f"--limit: must be between 1 and {LIST_MAX}")
        now = self.clock.now()
        return self.items(self.queue_store.page(where, self.config.rules(now), limit=limit), now=now)

    def queue(self, where: QueueFilter, *, after: Cursor | None = None, before: Cursor | None = None,
              limit: int = 100, totals: QueueTotals | None = None) -> QueuePage:
        """One page of the filtered queue (keyset: after a cursor, or before one), with the filter's totals
        (``totals`` when the caller has them already: the console keeps them a few seconds, recon.console.totals)."""
        now = self.clock.now()
        rules = self.config.rules(now)
        found = self.queue_store.page(where, rules, after=after, before=before, limit=limit + 1)
        if before is not None:
            more_before, found = len(found) > limit, found[-limit:]
            more_after = True
        else:
            more_after, found = len(found) > limit, found[:limit]
            more_before = after is not None
        items = self.items(found, now=now)
        return QueuePage(items=items, totals=totals if totals is not None else self.queue_store.totals(where, rules),
                         next_cursor=_cursor(found[-1]) if more_after and found else None,
                         previous_cursor=_cursor(found[0]) if more_before and found else None)

    def totals(self, where: QueueFilter) -> QueueTotals:
        return self.queue_store.totals(where, self.config.rules(self.clock.now()))

    def items(self, payments: Sequence[Payment], *, now: datetime) -> builtins.list[ReviewItem]:
        """Queue items for ``payments``: kind, age, severity, due-by and the PSP's latest answer."""
        evidence = self.payments.latest_evidence([p.id for p in payments])
        items = []
        for p in payments:
            since = p.review_since or p.updated_at
            kind = review_kind(p.review_reason)
            due = self.config.due(kind, since)
            items.append(ReviewItem(payment=p, kind=kind, since=since,
                                    age_seconds=max((now - since).total_seconds(), 0.0),
                                    psp_answer=evidence.get(p.id),
                                    severity=self.config.severity(p.amount, p.currency, since, now),
                                    due_at=due, overdue=due < now))
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
        return PaymentDetail(payment=payment, events=events, jobs=jobs,
                             comments=self.queue_store.comments(payment.id))

    # --- acting ---------------------------------------------------------------------------------------

    def resolve(self, reference: str, *, to: str, reason: str, by: str, override: bool = False,
                difference: str | None = None, approved_by: str | None = None) -> Resolution:
        """Move a payment out of review to ``to`` (succeeded or failed), as decided by ``by`` for ``reason``.

        Asks the PSP first; raises ReviewRefused when its final answer contradicts ``to``, or when it could
        not be asked, unless ``override``. Resolved as succeeded while the PSP took another amount, the
        difference is recorded with what happens to it (``difference``, a ``Difference``; written off by
        default). UsageError for bad input, a payment not in review, or one that changed meanwhile (nothing
        written then)."""
        target = target_status(to)
        reason, by = typed_text(reason, "--reason", REASON_MAX), typed_text(by, "--by", OPERATOR_MAX)
        treatment = _difference(difference)
        extra = {"approved_by": approved_by} if approved_by is not None else None  # a four-eyes override
        transition = self.decide(self.get(reference), target, reason=reason, by=by, override=override,
                                 difference=treatment, extra=extra)
        with self.payments.db.begin() as conn:
            if not self.payments.apply(conn, transition):
                raise UsageError(f"payment {reference} changed while it was being resolved; nothing written "
                                 f"(look again: recon review show {reference})")
        return Resolution(payment=self.get(reference), details=transition.details or {})

    def decide(self, payment: Payment, target: PaymentStatus, *, reason: str, by: str, override: bool,
               difference: Difference | None = None, extra: dict[str, Any] | None = None) -> Transition:
        """The resolution of one payment as a transition, after asking the PSP: what ``resolve`` and a bulk
        resolve write. Raises ReviewRefused (the PSP contradicts or could not be asked, without ``override``)
        or UsageError (not in review); writes nothing."""
        reference = payment.merchant_reference
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
            **(extra or {}),
        }
        if answer is not None:
            details.update(outcome_details(answer))
            details["psp"] = {"amount": answer.amount, "currency": answer.currency}
            if target is PaymentStatus.SUCCEEDED and answer.amount is not None and answer.currency and \
                    answer.currency.upper() == payment.currency and answer.amount != payment.amount:
                details["difference"] = _settled(payment.amount - answer.amount, payment.currency,
                                                 difference or Difference.WRITTEN_OFF)
        return Transition(payment.id, PaymentStatus.NEEDS_REVIEW, target, EventSource.MANUAL, details=details,
                          failure_reason=f"resolved by {by}: {reason}" if target is PaymentStatus.FAILED else None)

    def assign(self, reference: str, *, to: str | None, by: str) -> Payment:
        """Assign a payment in review to ``to`` (None: nobody), as ``by`` decided; recorded with its comments.
        UsageError when it is not in review."""
        by = typed_text(by, "--by", OPERATOR_MAX)
        assignee = typed_text(to, "--to", OPERATOR_MAX) if to is not None else None
        payment = self.get(reference)
        if not self.queue_store.assign(payment.id, assignee=assignee, by=by):
            raise UsageError(f"payment {reference} is {payment.status}, not needs_review: only a payment in review "
                             f"is assigned")
        return self.get(reference)

    def comment(self, reference: str, *, text: str, by: str) -> ReviewComment:
        """Add a comment to a payment (in review or not: a note on a resolved one is history too)."""
        body, by = typed_text(text, "--text", COMMENT_MAX), typed_text(by, "--by", OPERATOR_MAX)
        payment = self.get(reference)
        self.queue_store.comment(payment.id, author=by, body=body)
        return self.queue_store.comments(payment.id)[-1]

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


class Difference(StrEnum):
    """What happens to the difference when a payment is resolved as succeeded at the PSP's other amount."""

    WRITTEN_OFF = "written_off"  #: the PSP's amount stands; the difference is written off
    TO_COLLECT = "to_collect"  #: the difference is to be collected from the customer
    TO_REFUND = "to_refund"  #: the difference is to be refunded to the customer


DIFFERENCE_WORDS = {Difference.WRITTEN_OFF: "is written off (the PSP's amount stands)",
                    Difference.TO_COLLECT: "is to be collected from the customer",
                    Difference.TO_REFUND: "is to be refunded to the customer"}


def _difference(value: str | None) -> Difference | None:
    if value is None or value == "":
        return None
    try:
        return Difference(value)
    except ValueError:
        raise UsageError(f"--difference: {value!r} is not one of {', '.join(d.value for d in Difference)}") \
            from None


def _settled(amount: int, currency: str, treatment: Difference) -> dict[str, Any]:
    """The audit event's record of the difference (ours minus the PSP's, minor units) and its fate."""
    direction = "ours is more" if amount > 0 else "the PSP took more"
    return {"amount": amount, "currency": currency, "treatment": treatment.value,
            "sentence": f"the difference of {format_amount(abs(amount), currency)} ({direction}) "
                        f"{DIFFERENCE_WORDS[treatment]}"}


def _cursor(payment: Payment) -> Cursor:
    return (payment.review_since or payment.updated_at, payment.id)


def target_status(to: str) -> PaymentStatus:
    if to not in (PaymentStatus.SUCCEEDED, PaymentStatus.FAILED):
        raise UsageError(f"--as: {to!r} is not succeeded or failed")
    return PaymentStatus(to)


def typed_text(value: str | None, option: str, limit: int) -> str:
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
