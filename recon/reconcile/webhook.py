"""The webhook job: applies one stored event to its payment through the payment store's transitions.

Job kind ``webhook``, payload ``{"webhook_id": N}`` (``"report": true`` for a REPORT_AVAILABLE event), one job
per stored event (recon.db.webhook_store). The handler never calls the PSP: the event is the PSP's word.
Everything happens in the job's fenced finish: the event and its payment are read in that transaction, the
decision (recon.reconcile.decide, the table reconciliation uses) is a compare-and-set transition with the
event as evidence (source ``webhook``), and the event is marked with how it ended, once.

The write is a ``BatchWrite``: the finisher applies the events of every webhook job it finishes at once in
one transaction (``apply_events``: the events, their payments, the transitions, the notes and the marks, a
few statements for the whole batch). An event whose compare-and-set loses to a concurrent change, and a
second event for a payment the batch already moves, go the one-at-a-time way (``_apply``) after the others,
in the same transaction: it reads the payment again and decides again, ``DECIDE_ROUNDS`` times at most.
Events arrive out of order and more than once: older news about a final payment changes nothing
(``stale``); an event for a payment we do not know, or naming our merchant reference under another merchant
account (``decide.accounts_agree``: not ours), is kept as ``unknown_payment`` (``recon report`` lists it as
missing_locally). An event naming another PSP reference than the one the payment holds (``decide.conflict``)
never heals it: it is kept as a note naming both references and, for an unfinished payment, queues its
reconcile job now (``reconcile:<id>``, in the same finish), which asks the PSP about ours; a final payment
that hears of money moved under the other reference goes to review. ``REPORT_AVAILABLE`` queues reconcile
work for the PSP's unfinished payments (window jobs where its adapter lists payments: ``report_sweep``), so
the new report is read now rather than at the next sweep.

News about one refund (``RefundNews``: Stripe's refund.*, Adyen's REFUND, REFUND_FAILED, REFUNDED_REVERSED) is
applied one event at a time after the batch (``_apply_refund``): to our refund it names (by the PSP's refund
id, else by our refund reference) through ``decide.refund_heal``, as a compare-and-set on the refund with the
event as evidence; a refund of ours that did not move gets the event as a note (its PSP refund id remembered
when it lacked it). A succeeded refund that is not ours (made at the PSP's dashboard) is, for its payment, a
reversal like any other (``decide.late_news``: review); any other news of a refund not ours is stale.

News about a dispute (``DisputeNews``: Stripe's charge.dispute.*, Adyen's NOTIFICATION_OF_CHARGEBACK, CHARGEBACK,
CHARGEBACK_REVERSED, SECOND_CHARGEBACK) is recorded on the dispute, an object of its own (``DisputeStore.record``:
created once, moved by the dispute state machine, else noted, with its evidence deadline and fee); a dispute
opened is also, for its payment, a reversal like any other (needs_review: psp_reversed, or a note for one in
review), so the review desk shows it with its deadline. A dispute of a payment we do not know is kept as
``unknown_payment``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

import sqlalchemy as sa

from psp_adapters.protocol import (
    DisputeNews,
    Failed,
    ModificationNews,
    PaymentOutcome,
    PayoutNews,
    RefundNews,
    Reversed,
    Succeeded,
    news_from,
)
from recon.db.dispute_store import DisputeStore
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.db.webhook_store import WEBHOOK_KIND, WEBHOOK_QUEUE, WebhookStore
from recon.dispute_rows import DisputeStatus, DisputeWord
from recon.engine.client import Client
from recon.engine.lease import Lease
from recon.engine.outcome import BatchWrite, Complete, Dead, Outcome
from recon.errors import PaymentKeptMoving
from recon.reconcile import sweep as sw
from recon.reconcile.config import QUEUE_DEFAULT, ReconcileConfig
from recon.reconcile.decide import (
    Heal,
    accounts_agree,
    conflict,
    heal,
    late_news,
    outcome_details,
    refund_heal,
    refund_news_outcome,
    reversal,
)
from recon.reconcile.handler import reconcile_row
from recon.reconcile.modification_webhook import ModificationNewsApplier
from recon.reconcile.movement_webhook import find_ours, write_news
from recon.refund_rows import Refund, RefundSource, RefundTransition
from recon.rows import EventSource, Job, Note, Payment, PaymentStatus, Transition
from recon.webhook_rows import WebhookRecord, WebhookState

#: compare-and-set attempts within one finish before the job retries as a whole
DECIDE_ROUNDS = 3

log = logging.getLogger("recon.webhooks")

News = PaymentOutcome | Reversed
AnyNews = PaymentOutcome | Reversed | RefundNews | DisputeNews | ModificationNews


@dataclass(frozen=True, slots=True)
class Plan:
    """What one event does to its payment as read: the state the event ends in once the write holds, and the
    write (a transition, or a note, with the PSP's reference to remember first; neither for stale news)."""

    state: WebhookState
    transition: Transition | None = None
    note: Note | None = None
    remember: str | None = None
    reconcile: bool = False  #: with the note, the payment's reconcile job now (evidence naming another reference)


class WebhookHandler:
    """Job kind ``webhook``, on ``queue`` (``[webhooks] queue``): the webhook store creates these jobs with the
    events (``WebhookStore.intake``), hence its constants."""

    kind: ClassVar[str] = WEBHOOK_KIND

    def __init__(self, payments: PaymentStore, webhooks: WebhookStore, *,
                 sweep_func: Callable[[str], int] | None = None, reconcile_queue: str = QUEUE_DEFAULT,
                 queue: str = WEBHOOK_QUEUE, payout_func: Callable[[WebhookRecord], int] | None = None,
                 refunds: RefundStore | None = None, disputes: DisputeStore | None = None,
                 modifications: ModificationNewsApplier | None = None) -> None:
        self.queue = queue
        self.payments = payments
        #: our refunds, which refund news is about first (None: refund news reads as a payment's reversal)
        self.refunds = refunds
        #: the disputes dispute news is recorded on (None: dispute news reads as a payment's reversal alone)
        self.disputes = disputes
        #: captures' and cancels' news (None: a cancel's reads as its payment's Failed, the rest is ignored)
        self.modifications = modifications
        self.webhooks = webhooks
        #: where a payment's reconcile job goes when an event names another PSP reference than ours
        self.reconcile_queue = reconcile_queue
        #: REPORT_AVAILABLE: queue reconcile work for a PSP's unfinished payments; returns for how many
        self.sweep_func = sweep_func
        #: news of a payout: queue the payouts job that fetches it again (recon.close.payouts); returns its id
        self.payout_func = payout_func

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        webhook_id = int(job.payload["webhook_id"])
        if job.payload.get("payout"):
            record = self.webhooks.get(webhook_id)
            if record is None:
                return Dead(error_kind="validation", error=f"webhook event {webhook_id} does not exist")
            if record.state is WebhookState.RECEIVED and self.payout_func is not None:
                self.payout_func(record)
            return Complete(write=BatchWrite(self.apply_events, (job, webhook_id)))
        if not job.payload.get("report"):
            return Complete(write=BatchWrite(self.apply_events, (job, webhook_id)))
        record = self.webhooks.get(webhook_id)
        if record is None:
            return Dead(error_kind="validation", error=f"webhook event {webhook_id} does not exist")
        if record.state is WebhookState.RECEIVED and self.sweep_func is not None:
            self.sweep_func(record.psp)
        return Complete(write=BatchWrite(self.apply_events, (job, webhook_id)))

    def apply_events(self, conn: sa.Connection, items: list[tuple[Job, int]]) -> None:
        """Apply the events of ``items`` (each a job and its event's id) inside the finish's transaction."""
        records = self.webhooks.get_many_to_apply(conn, [i for _, i in items])
        marks: list[tuple[int, WebhookState, int | None]] = []
        todo: list[tuple[WebhookRecord, News, Job]] = []
        refund_news: list[tuple[WebhookRecord, RefundNews | DisputeNews | ModificationNews, Job]] = []
        for job, webhook_id in items:
            record = records.get(webhook_id)
            if record is None:
                log.warning("webhook job %s: its event %s does not exist; nothing to apply", job.id, webhook_id)
            elif record.state is WebhookState.RECEIVED:  # else applied by an attempt whose finish committed
                news = news_of(record)
                if news is None:
                    marks.append((record.id, WebhookState.IGNORED, None))
                elif isinstance(news, PayoutNews):  # its payouts job was queued before this finish
                    marks.append((record.id, WebhookState.APPLIED, None))
                elif isinstance(news, RefundNews | DisputeNews | ModificationNews):
                    refund_news.append((record, news, job))
                else:
                    todo.append((record, news, job))
        found = self.payments.for_psp_events(conn, [(r.psp, r.psp_reference, r.merchant_reference)
                                                    for r, _, _ in todo]) if todo else []
        later: list[tuple[int, WebhookRecord, News, Job]] = []  # by their place in the batch
        planned: list[tuple[int, WebhookRecord, News, Job, Payment, Plan]] = []
        seen: set[int] = set()
        for at, ((record, news, job), payment) in enumerate(zip(todo, found, strict=True)):
            if payment is None or not accounts_agree(payment.merchant_account, record.merchant_account):
                marks.append((record.id, WebhookState.UNKNOWN_PAYMENT, None))
            elif payment.id in seen or self._about_a_modification(payment, news):
                # a second event for one payment (after the first has moved it), or news of an authorised
                # payment that may be about its capture or cancel: one at a time (_apply)
                later.append((at, record, news, job))
            else:
                seen.add(payment.id)
                plan = self._plan(payment, news, _details(record, news), job)
                if plan.remember:
                    later.append((at, record, news, job))  # rare (pending news naming the PSP's reference)
                else:
                    planned.append((at, record, news, job, payment, plan))
        planned.sort(key=lambda item: item[4].id)  # one payment each: rows locked in id order, as any batch does
        moved = self.payments.apply_many(conn, [p.transition for *_, p in planned if p.transition])
        noted = self.payments.note_many(conn, [p.note for *_, p in planned if p.note])
        conflicted = [reconcile_row(payment, queue=self.reconcile_queue)
                      for *_, payment, p in planned if p.reconcile and payment.id in noted]
        if conflicted:  # their reconcile jobs, now, in this finish (evidence naming another PSP reference)
            self.payments.enqueue_reconcile(conn, conflicted)
        for at, record, news, job, payment, plan in planned:
            if plan.transition is not None:
                held = payment.id in moved
            elif plan.note is not None:
                held = payment.id in noted
            else:
                held = True  # stale news: nothing to write
            if held:
                marks.append((record.id, plan.state, payment.id))
            else:  # the payment changed since it was read: read it again and decide again
                later.append((at, record, news, job))
        self.webhooks.mark_many(conn, marks)
        for _, record, news, job in sorted(later, key=lambda item: item[0]):  # a payment's events in their order
            self._apply(conn, record, news, job)
        for record, said, job in refund_news:  # refunds', disputes', captures' and cancels' news, one at a time
            if isinstance(said, RefundNews):
                self._apply_refund(conn, record, said, job)
            elif isinstance(said, ModificationNews):
                self._apply_modification(conn, record, said, job)
            else:
                self._apply_dispute(conn, record, said, job)

    def _apply_modification(self, conn: sa.Connection, record: WebhookRecord, news: ModificationNews,
                            job: Job) -> None:
        """A capture's or cancel's news (recon.reconcile.modification_webhook)."""
        if self.modifications is not None:
            self.modifications.apply(conn, record, news, job, _details(record, news), apply_func=self._apply)
            return
        if news.kind == "cancel" and news.state == "succeeded":
            self._apply(conn, record, Failed(psp_reference=news.psp_reference, amount=news.amount,
                                             currency=news.currency, raw_status=news.raw_status, reason="cancelled"),
                        job)
            return
        self.webhooks.mark(conn, record.id, WebhookState.IGNORED, payment_id=None)

    def _apply_dispute(self, conn: sa.Connection, record: WebhookRecord, news: DisputeNews, job: Job) -> None:
        """A dispute's news: recorded on the dispute; an opened one also reverses its payment (module docstring)."""
        payment = self.payments.for_psp_event(conn, psp=record.psp, psp_reference=news.psp_reference,
                                              merchant_reference=news.merchant_reference)
        if payment is None or not accounts_agree(payment.merchant_account, record.merchant_account):
            self.webhooks.mark(conn, record.id, WebhookState.UNKNOWN_PAYMENT, payment_id=None)
            return
        if self.disputes is not None:
            word = DisputeWord(payment_id=payment.id, psp=record.psp,
                               psp_dispute_id=news.dispute_id or payment.psp_reference or str(payment.id),
                               status=DisputeStatus(news.state), amount=news.amount, currency=news.currency,
                               fee=news.fee, reason=news.reason, psp_status=news.raw_status,
                               evidence_due_by=news.due_by)
            self.disputes.record(conn, word, details=_details(record, news), job_id=job.id, attempt=job.attempts)
        if news.state == "opened":
            taken = Reversed(psp_reference=news.psp_reference, amount=news.amount, currency=news.currency,
                             raw_status=news.raw_status, kind="dispute", reason=news.reason,
                             merchant_reference=news.merchant_reference)
            self._apply(conn, record, taken, job)
            return
        self.webhooks.mark(conn, record.id, WebhookState.APPLIED, payment_id=payment.id)

    def _apply_refund(self, conn: sa.Connection, record: WebhookRecord, news: RefundNews, job: Job) -> None:
        """One refund's news: to our refund it names, reading it and deciding until a compare-and-set holds;
        else, for its payment, a reversal (succeeded) or nothing (module docstring)."""
        details = {**outcome_details(news), "refund_news": news.state, "refund_id": news.refund_id,
                   **_details(record, news)}
        for _ in range(DECIDE_ROUNDS):
            refund = self._our_refund(conn, record, news)
            if refund is None:
                self._not_our_refund(conn, record, news, job)
                return
            if self._write_refund(conn, record, refund, news, details, job):
                return
        raise PaymentKeptMoving(f"webhook event {record.event_id}: its refund changed under {DECIDE_ROUNDS} "
                                "decisions; retrying")

    def _our_refund(self, conn: sa.Connection, record: WebhookRecord, news: RefundNews) -> Refund | None:
        if self.refunds is None:
            return None
        return find_ours(self.refunds, conn, record, psp_id=news.refund_id, reference=news.merchant_reference)

    def _write_refund(self, conn: sa.Connection, record: WebhookRecord, refund: Refund, news: RefundNews,
                      details: dict[str, Any], job: Job) -> bool:
        """The decision for our refund as read, written (recon.reconcile.movement_webhook); False when the refund
        changed meanwhile."""
        refunds = self.refunds
        assert refunds is not None  # nosec B101  # _our_refund found it: type narrowing
        answer, reversed_ = refund_news_outcome(news)
        return write_news(
            refunds, self.webhooks, conn, record, refund, refund_heal(refund, answer, reversed_=reversed_),
            transition_func=lambda d: RefundTransition(refund.id, refund.status, d.target, RefundSource.WEBHOOK,
                                                       details=details, job_id=job.id, attempt=job.attempts,
                                                       **d.fields()),
            note_func=lambda: refunds.note(conn, refund.id, status=refund.status, source=RefundSource.WEBHOOK,
                                           details=details, job_id=job.id, attempt=job.attempts),
            psp_id=news.refund_id)

    def _not_our_refund(self, conn: sa.Connection, record: WebhookRecord, news: RefundNews, job: Job) -> None:
        """A refund we did not ask for: for its payment, a succeeded one is a reversal; the rest is stale."""
        payment = self.payments.for_psp_event(conn, psp=record.psp, psp_reference=news.psp_reference,
                                              merchant_reference=None)
        if payment is None or not accounts_agree(payment.merchant_account, record.merchant_account):
            self.webhooks.mark(conn, record.id, WebhookState.UNKNOWN_PAYMENT, payment_id=None)
            return
        if news.state != "succeeded":
            self.webhooks.mark(conn, record.id, WebhookState.STALE, payment_id=payment.id)
            return
        taken = Reversed(psp_reference=news.psp_reference, amount=news.amount, currency=news.currency,
                         raw_status=news.raw_status, kind="refund", reason=news.reason)
        self._apply(conn, record, taken, job)

    def _apply(self, conn: sa.Connection, record: WebhookRecord, news: News, job: Job) -> None:
        """One event, reading its payment and deciding until a compare-and-set holds."""
        details = _details(record, news)
        for _ in range(DECIDE_ROUNDS):
            payment = self.payments.for_psp_event(conn, psp=record.psp, psp_reference=record.psp_reference,
                                                  merchant_reference=record.merchant_reference)
            if payment is None or not accounts_agree(payment.merchant_account, record.merchant_account):
                self.webhooks.mark(conn, record.id, WebhookState.UNKNOWN_PAYMENT, payment_id=None)
                return
            if (self._about_a_modification(payment, news) and self.modifications is not None
                    and isinstance(news, Succeeded | Failed)
                    and self.modifications.apply_payment_news(conn, record, payment, news, job, details)):
                return  # our capture's or cancel's news (Stripe's payment_intent.succeeded / .canceled)
            plan = self._plan(payment, news, details, job)
            if self._write(conn, payment, plan):
                self.webhooks.mark(conn, record.id, plan.state, payment_id=payment.id)
                return
        raise PaymentKeptMoving(f"webhook event {record.event_id}: its payment changed under {DECIDE_ROUNDS} "
                                "decisions; retrying")

    def _about_a_modification(self, payment: Payment, news: News) -> bool:
        """News of an authorised payment that may be the end of its capture or cancel."""
        return (self.modifications is not None and payment.status is PaymentStatus.AUTHORISED
                and isinstance(news, Succeeded | Failed))

    def _write(self, conn: sa.Connection, payment: Payment, plan: Plan) -> bool:
        """One plan's write; False when the payment changed meanwhile (nothing written)."""
        if plan.remember and not self.payments.remember_psp_reference(
                conn, payment_id=payment.id, status=payment.status, psp_reference=plan.remember):
            return False
        if plan.transition is not None:
            return self.payments.apply(conn, plan.transition)
        if plan.note is not None:
            if not self.payments.note_many(conn, [plan.note]):
                return False
            if plan.reconcile:
                self.payments.enqueue_reconcile(conn, [reconcile_row(payment, queue=self.reconcile_queue)])
        return True

    @staticmethod
    def _plan(payment: Payment, news: News, details: dict[str, Any], job: Job) -> Plan:
        """What ``news`` means for ``payment`` as read."""
        decision: Heal | None
        theirs = conflict(payment, news)
        if theirs is not None:  # never a heal: evidence naming both, resolved by its reconcile job or a person
            details = {**details, **theirs.details()}
            if theirs.review is not None:
                return _moved(payment, theirs.review, details, job)
            return _noted(payment, details, job, reconcile=not payment.status.final)
        if payment.status is PaymentStatus.NEEDS_REVIEW:
            return _noted(payment, details, job)  # the person deciding sees the PSP's latest word
        if payment.status.final:
            decision = late_news(payment, news)
            if decision is None:
                return Plan(WebhookState.STALE)
        elif isinstance(news, Reversed):
            decision = reversal(payment, news)
        else:
            decision = heal(payment, news)
            if decision is None:  # pending or unknown: evidence, and the PSP's reference if we lacked it
                remember = news.psp_reference if news.psp_reference and not payment.psp_reference else None
                return _noted(payment, details, job, remember=remember)
        return _moved(payment, decision, details, job)


def _moved(payment: Payment, decision: Heal, details: dict[str, Any], job: Job) -> Plan:
    return Plan(WebhookState.APPLIED, transition=Transition(
        payment.id, payment.status, decision.target, EventSource.WEBHOOK, details=details, job_id=job.id,
        attempt=job.attempts, **decision.fields()))


def _noted(payment: Payment, details: dict[str, Any], job: Job, *, remember: str | None = None,
           reconcile: bool = False) -> Plan:
    return Plan(WebhookState.APPLIED, note=Note(payment.id, payment.status, EventSource.WEBHOOK, details=details,
                                                job_id=job.id, attempt=job.attempts),
                remember=remember, reconcile=reconcile)


def news_of(record: WebhookRecord) -> AnyNews | PayoutNews | None:
    """What a stored event says about its payment (or payout, refund, dispute), as the PSP's webhook module parsed
    it (None: no news)."""
    if record.news is None:
        return None
    return news_from(record.news, psp_reference=record.psp_reference, merchant_reference=record.merchant_reference,
                     amount=record.amount, currency=record.currency, raw_status=record.psp_status,
                     reason=record.reason, refund_id=record.movement_reference, due_by=record.due_by,
                     fee=record.fee)


def _details(record: WebhookRecord, news: AnyNews) -> dict[str, Any]:
    details = {**outcome_details(news), "webhook": {"event_id": record.event_id, "event_type": record.event_type,
                                                    "occurred_at": record.occurred_at.isoformat()
                                                    if record.occurred_at else None}}
    if isinstance(news, Reversed):
        details.update(reversal=news.kind, reason=news.reason)
    if record.due_by is not None:  # a dispute's evidence deadline: the review desk shows it
        details["evidence_due_by"] = record.due_by.isoformat()
    return details


def report_sweep(payments: PaymentStore, client: Client, *, queue: str,
                 listing_func: Callable[[], set[str]] = set, config: ReconcileConfig | None = None
                 ) -> Callable[[str], int]:
    """REPORT_AVAILABLE's action: reconcile work for every unfinished payment of the PSP, now, as ``recon
    sweep --mode auto`` queues it: window jobs (one report download per account-day for each window) when the
    PSP's adapter lists payments (``listing_func``, App._listing_psps), else one reconcile job per payment
    (each of which would download the day's report again). Returns how many payments it queued work for."""
    def run(psp: str) -> int:
        bulk = {psp} & listing_func()
        return len(sw.enqueue(payments, client, sw.SweepOptions(older_than=timedelta(0), psp=psp), queue=queue,
                              bulk_psps=bulk, config=config))

    return run
