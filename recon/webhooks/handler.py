"""The webhook job: applies one stored event to its payment through the payment store's transitions.

Job kind ``webhook``, payload ``{"webhook_id": N}``, one job per stored event (recon.db.webhook_store). The
handler never calls the PSP: the event is the PSP's word. Everything happens in the job's fenced finish:
the payment is read in that transaction, the decision (recon.reconcile.decide, the table reconciliation
uses) is a compare-and-set transition with the event as evidence (source ``webhook``), and the event is
marked with how it ended, once. A compare-and-set that loses to a concurrent change reads again and decides
again. Events arrive out of order and more than once: older news about a final payment changes nothing
(``stale``); an event for a payment we do not know is kept as ``unknown_payment`` (``recon report`` lists it
as missing_locally). ``REPORT_AVAILABLE`` (Adyen) queues reconcile jobs for the PSP's unfinished payments, so
the new report is read now rather than at the next sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from psp_adapters.protocol import PaymentOutcome, Reversed
from recon.db.payment_store import PaymentStore, Transition
from recon.db.webhook_store import WebhookStore, news_of
from recon.engine.client import Client
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome
from recon.errors import ReconError
from recon.payments.charge import outcome_details
from recon.reconcile.decide import Heal, heal, late_news, reversal
from recon.rows import EventSource, Job, Payment, PaymentStatus, WebhookRecord, WebhookState

WEBHOOK_QUEUE = "webhooks"
#: compare-and-set attempts within one finish before the job retries as a whole
DECIDE_ROUNDS = 3


class PaymentKeptMoving(ReconError):
    """The payment changed under every decision of one finish; the job retries."""


class WebhookHandler:
    def __init__(self, payments: PaymentStore, webhooks: WebhookStore, *,
                 sweep_func: Callable[[str], int] | None = None) -> None:
        self.payments = payments
        self.webhooks = webhooks
        #: REPORT_AVAILABLE: queue reconcile jobs for a PSP's unfinished payments; returns how many
        self.sweep_func = sweep_func

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        record = self.webhooks.get(int(job.payload["webhook_id"]))
        if record is None:
            return Dead(error_kind="validation", error=f"webhook event {job.payload['webhook_id']} does not exist")
        if record.state is not WebhookState.RECEIVED:
            return Complete()  # applied by an earlier attempt whose finish committed
        news = news_of(record)
        if news is None:
            if record.report and self.sweep_func is not None:
                self.sweep_func(record.psp)
            return Complete(write=lambda conn: self.webhooks.mark(conn, record.id, WebhookState.IGNORED,
                                                                  payment_id=None))
        return Complete(write=lambda conn: self._apply(conn, record, news, job))

    def _apply(self, conn: sa.Connection, record: WebhookRecord, news: PaymentOutcome | Reversed, job: Job) -> None:
        details = {**outcome_details(news), "webhook": {"event_id": record.event_id, "event_type": record.event_type,
                                                        "occurred_at": record.occurred_at.isoformat()
                                                        if record.occurred_at else None}}
        if isinstance(news, Reversed):
            details.update(reversal=news.kind, reason=news.reason)
        for _ in range(DECIDE_ROUNDS):
            payment = self.payments.for_psp_event(conn, psp=record.psp, psp_reference=record.psp_reference,
                                                  merchant_reference=record.merchant_reference)
            if payment is None:
                self.webhooks.mark(conn, record.id, WebhookState.UNKNOWN_PAYMENT, payment_id=None)
                return
            done = self._decide(conn, payment, news, details, job)
            if done is not None:
                self.webhooks.mark(conn, record.id, done, payment_id=payment.id)
                return
        raise PaymentKeptMoving(f"webhook event {record.event_id}: its payment changed under {DECIDE_ROUNDS} "
                                "decisions; retrying")

    def _decide(self, conn: sa.Connection, payment: Payment, news: PaymentOutcome | Reversed,
                details: dict[str, Any], job: Job) -> WebhookState | None:
        """Apply what ``news`` means for ``payment``: the state the event ends in, or None when the payment
        changed meanwhile (decide again)."""
        decision: Heal | None
        if payment.status is PaymentStatus.NEEDS_REVIEW:
            return self._note(conn, payment, details, job)  # the person deciding sees the PSP's latest word
        if payment.status.final:
            decision = late_news(payment, news)
            if decision is None:
                return WebhookState.STALE
        elif isinstance(news, Reversed):
            decision = reversal(payment, news)
        else:
            decision = heal(payment, news)
            if decision is None:  # pending or unknown: evidence, and the PSP's reference if we lacked it
                if news.psp_reference and not payment.psp_reference:
                    self.payments.remember_psp_reference(conn, payment_id=payment.id, status=payment.status,
                                                         psp_reference=news.psp_reference)
                return self._note(conn, payment, details, job)
        transition = Transition(payment.id, payment.status, decision.target, EventSource.WEBHOOK, details=details,
                                job_id=job.id, attempt=job.attempts, **decision.fields())
        return WebhookState.APPLIED if self.payments.apply(conn, transition) else None

    def _note(self, conn: sa.Connection, payment: Payment, details: dict[str, Any], job: Job) -> WebhookState | None:
        ok = self.payments.note(conn, payment_id=payment.id, status=payment.status, source=EventSource.WEBHOOK,
                                details=details, job_id=job.id, attempt=job.attempts)
        return WebhookState.APPLIED if ok else None


def report_sweep(payments: PaymentStore, client: Client, *, queue: str) -> Callable[[str], int]:
    """REPORT_AVAILABLE's action: reconcile jobs for every unfinished payment of the PSP, now."""
    from recon.reconcile import sweep as sw

    def run(psp: str) -> int:
        return len(sw.enqueue(payments, client, sw.SweepOptions(older_than=timedelta(0), psp=psp), queue=queue))

    return run
