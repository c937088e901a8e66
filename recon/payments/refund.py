"""The refund handler: sends one refund to its PSP and records what happened, the generic movement job
(``recon.payments.movement``: its table of answers, errors and old keys) with the refund's calls:
``create_refund`` with the refund's own idempotency key, ``fetch_refund`` before an old key is sent again
(Stripe lists a PaymentIntent's refunds at once, no search lag: found, its answer is recorded; a reversed refund
is read as pending, its reconcile job reviews it; not found, it is sent), and ``decide.refund_sent``'s table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from psp_adapters.protocol import NotFound, PaymentOutcome, RefundingAdapter, RefundRef, RefundRequest, Reversed
from recon.db.refund_store import REFUND_KIND
from recon.errors import ConfigError
from recon.payments.movement import MovementJob, SentDecision
from recon.reconcile.decide import refund_answer, refund_sent
from recon.refund_rows import REFUND, Refund, RefundSource, RefundTransition
from recon.rows import Job, Payment, PaymentStatus


def refund_request(refund: Refund, payment: Payment) -> RefundRequest:
    """What the PSP is asked: the refund on the payment's PSP reference, in the payment's account."""
    return RefundRequest(payment_reference=payment.psp_reference or "", refund_reference=refund.refund_reference,
                         amount=refund.amount, currency=refund.currency, reason=refund.reason,
                         merchant_account=payment.merchant_account)


def refund_ref(refund: Refund, payment: Payment) -> RefundRef:
    return RefundRef(payment_reference=payment.psp_reference or "", refund_reference=refund.refund_reference,
                     psp_refund_id=refund.psp_refund_id, merchant_account=payment.merchant_account)


class RefundHandler(MovementJob[Refund, RefundTransition]):
    """Job kind ``refund``, payload ``{"refund_id": N}``, on ``queue`` (the charge jobs' queue, ``[payments]
    queue``). The refund store creates these jobs with their refunds (``RefundStore.create``)."""

    movement = REFUND
    kind = REFUND_KIND

    def _adapter(self, m: Refund) -> RefundingAdapter:
        adapter = self.adapter_func(m.psp)
        if not isinstance(adapter, RefundingAdapter):
            raise ConfigError(f"PSP {m.psp!r}: its adapter does not refund")
        return adapter

    def _send(self, adapter: RefundingAdapter, m: Refund, payment: Payment) -> Callable[[], PaymentOutcome]:
        request = refund_request(m, payment)
        return lambda: adapter.create_refund(request, idempotency_key=m.idempotency_key)

    def _look(self, adapter: RefundingAdapter, m: Refund, payment: Payment
              ) -> Callable[[], PaymentOutcome | Reversed]:
        ref = refund_ref(m, payment)
        return lambda: adapter.fetch_refund(ref)

    def _found(self, looked: PaymentOutcome | Reversed) -> PaymentOutcome | None:
        # reversed after success: the PSP has it, nothing to send; pending, and its reconcile job reviews it
        answer = refund_answer(looked)[0]
        return None if isinstance(answer, NotFound) else answer

    def _decide(self, m: Refund, answer: PaymentOutcome) -> SentDecision:
        return refund_sent(m, answer)  # recon.reconcile.decide's table of a refund's answers

    def _transition(self, m: Refund, from_status: PaymentStatus, target: PaymentStatus, job: Job,
                    **fields: Any) -> RefundTransition:
        return RefundTransition(m.id, from_status, target, RefundSource.REFUND, job_id=job.id, attempt=job.attempts,
                                **fields)

    def _note(self, conn: sa.Connection, m: Refund, job: Job, details: dict[str, Any]) -> bool:
        return self.store.note(conn, m.id, status=m.status, source=RefundSource.REFUND, details=details,
                               job_id=job.id, attempt=job.attempts)
