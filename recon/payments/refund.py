"""The refund handler: sends one refund to its PSP under a heartbeating lease and records what happened, as the
charge handler does for a charge (recon.payments.charge), with the refund's own idempotency key.

The refund's key is fixed at its creation and sent with every attempt, so a retry after a lost answer, or a
stale worker's duplicate call, never refunds twice. The PSP's refund id is stored the moment an answer names it
(a pending answer included) and never replaced. Every write is committed with the fenced job finish
(``Outcome.write``): a worker that lost its lease changes nothing.

| answer                                   | refund                           | job                        |
| ---------------------------------------- | -------------------------------- | -------------------------- |
| as ``recon.reconcile.decide.refund_sent``: succeeded, failed, pending, review | its decision | complete  |
| validation error (400/422)               | failed (rejected): its amount freed | dead                    |
| an error the PSP saved under the key     | pending (reconciliation decides) | complete                   |
| unknown outcome, 5xx, busy, protocol     | pending (never failed from these)| retry, same idempotency key|
| connect error, 429, 409, auth, bug       | unchanged                        | retry / dead as classified |
| the PSP's settings are missing, or it does not refund | unchanged           | dead (replay after fixing) |

Before anything changes the PSP guard may snooze the job, no attempt spent. A key older than the PSP's
retention (``idempotency_retention``: Stripe 24 h) is never re-sent blindly: the refund is looked up first
(Stripe lists a PaymentIntent's refunds at once, no search lag); found, its answer is recorded; not found, it
is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

import sqlalchemy as sa

from psp_adapters.errors import PspError, PspRejectedError
from psp_adapters.protocol import NotFound, PaymentOutcome, PspAdapter, RefundingAdapter, RefundRef, RefundRequest
from recon.classify import ErrorKind, classify
from recon.clock import Clock, SystemClock
from recon.db.payment_store import CHARGE_QUEUE, PaymentStore
from recon.db.refund_store import REFUND_KIND, RefundStore
from recon.engine.lease import Lease
from recon.engine.outcome import Cancel, Complete, Dead, Outcome, Retry, Snooze
from recon.errors import ConfigError, LeaseLost
from recon.payments.charge import KEY_RETENTION_MARGIN, config_dead
from recon.payments.guard import Guard, Permit, Unguarded
from recon.reconcile.decide import outcome_details, refund_answer, refund_sent
from recon.refund_rows import Refund, RefundSource, RefundTransition
from recon.rows import Job, Payment, PaymentStatus

AdapterFunc = Callable[[str], PspAdapter]

#: error kinds after which the refund may have reached the PSP: pending until known
_MAYBE_SENT = {ErrorKind.UNKNOWN_OUTCOME, ErrorKind.PSP_UNAVAILABLE, ErrorKind.PSP_BUSY, ErrorKind.PROTOCOL,
               ErrorKind.CONFLICT}


def refund_request(refund: Refund, payment: Payment) -> RefundRequest:
    """What the PSP is asked: the refund on the payment's PSP reference, in the payment's account."""
    return RefundRequest(payment_reference=payment.psp_reference or "", refund_reference=refund.refund_reference,
                         amount=refund.amount, currency=refund.currency, reason=refund.reason,
                         merchant_account=payment.merchant_account)


def refund_ref(refund: Refund, payment: Payment) -> RefundRef:
    return RefundRef(payment_reference=payment.psp_reference or "", refund_reference=refund.refund_reference,
                     psp_refund_id=refund.psp_refund_id, merchant_account=payment.merchant_account)


class RefundHandler:
    """Job kind ``refund``, payload ``{"refund_id": N}``, on ``queue`` (the charge jobs' queue, ``[payments]
    queue``). The refund store creates these jobs with their refunds (``RefundStore.create``)."""

    kind: ClassVar[str] = REFUND_KIND

    def __init__(self, refunds: RefundStore, payments: PaymentStore, adapter_func: AdapterFunc, *,
                 guard: Guard | None = None, clock: Clock | None = None, queue: str = CHARGE_QUEUE) -> None:
        self.queue = queue
        self.refunds = refunds
        self.payments = payments
        self.adapter_func = adapter_func
        self.guard = guard or Unguarded()
        self.clock = clock or SystemClock()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        refund_id = int(job.payload["refund_id"])
        refund = self.refunds.get(refund_id)
        if refund is None:
            return Dead(error_kind="validation", error=f"refund {refund_id} does not exist")
        if refund.status.final:
            return Complete()  # reconciliation, a webhook or an earlier attempt knows the answer already
        payment = self.payments.get(refund.payment_id)
        assert payment is not None  # nosec B101  # a foreign key: type narrowing, not a check
        try:
            adapter = self.adapter_func(refund.psp)
            if not isinstance(adapter, RefundingAdapter):
                raise ConfigError(f"PSP {refund.psp!r}: its adapter does not refund")
        except ConfigError as exc:
            return config_dead(exc)
        permit = self.guard.admit(refund.psp, lease=lease)
        if isinstance(permit, Snooze):
            return permit
        if self._key_may_be_forgotten(refund, adapter):
            looked = self._look(refund, payment, adapter, permit, lease)
            if isinstance(looked, Complete | Retry | Snooze | Dead | Cancel):
                return looked
            if not isinstance(looked, NotFound):
                return Complete(write=self._write_answer(refund, job, looked))
        if not self._claim_send(refund, job, lease):
            return Complete()  # healed since we read it (e.g. "never reached the PSP"): nothing to send
        refund = self.refunds.get(refund.id) or refund
        lease.check()
        request = refund_request(refund, payment)
        try:
            answer = permit.call(lambda: adapter.create_refund(request, idempotency_key=refund.idempotency_key))
        except PspError as exc:
            return self._on_error(refund, job, exc)
        except ConfigError as exc:
            return config_dead(exc)
        return Complete(write=self._write_answer(refund, job, answer))

    def _key_may_be_forgotten(self, refund: Refund, adapter: PspAdapter) -> bool:
        retention: timedelta | None = adapter.idempotency_retention
        if retention is None or refund.sent_at is None:
            return False
        return self.clock.now() - refund.sent_at >= retention - min(KEY_RETENTION_MARGIN, retention / 10)

    def _look(self, refund: Refund, payment: Payment, adapter: RefundingAdapter, permit: Permit,
              lease: Lease) -> PaymentOutcome | Outcome:
        """The key may be forgotten: the PSP's word on the refund (NotFound: send it), or the job's outcome."""
        lease.check()
        try:
            answer = permit.call(lambda: adapter.fetch_refund(refund_ref(refund, payment)))
        except PspError as exc:
            return classify(exc)  # nothing changes; the lookup is tried again
        # reversed after success: the PSP has it, nothing to send; pending, and its reconcile job reviews it
        return refund_answer(answer)[0]

    def _claim_send(self, refund: Refund, job: Job, lease: Lease) -> bool:
        """created -> processing (or, on a retry, the row lock proving it is still unfinished), fenced by the
        lease, before the request goes out: a crash after sending leaves it processing, which reconciliation
        resolves. False when it is no longer unfinished: then nothing may be sent."""
        with self.refunds.db.begin() as conn:
            if not lease.holds(conn):
                raise LeaseLost(f"lease on job {job.id} lost before refunding")
            if refund.status is PaymentStatus.CREATED and not self.refunds.apply(conn, RefundTransition(
                    refund.id, PaymentStatus.CREATED, PaymentStatus.PROCESSING, RefundSource.REFUND,
                    job_id=job.id, attempt=job.attempts)):
                return False
            return self.refunds.mark_sent(conn, refund.id) is not None

    def _write_answer(self, refund: Refund, job: Job, answer: PaymentOutcome) -> Callable[[sa.Connection], Any]:
        details = outcome_details(answer)
        decision = refund_sent(refund, answer)  # recon.reconcile.decide's table of a refund's answers
        if decision.target is PaymentStatus.PENDING:
            return self._pending(refund, job, details, psp_refund_id=decision.psp_refund_id)
        return self._transition(refund, job, decision.target, details, **decision.fields())

    def _on_error(self, refund: Refund, job: Job, exc: PspError) -> Outcome:
        result = classify(exc)
        details: dict[str, Any] = {"error_kind": result.error_kind, "error": result.error}
        if exc.saved and not isinstance(exc, PspRejectedError):
            details.update(saved_answer=True, replayed=exc.replayed)
            return Complete(write=self._pending(refund, job, details))
        if isinstance(result, Dead) and result.error_kind == ErrorKind.VALIDATION:
            return Dead(error_kind=result.error_kind, error=result.error, write=self._transition(
                refund, job, PaymentStatus.FAILED, details, failure_reason=f"rejected: {result.error}"))
        if result.error_kind in _MAYBE_SENT:
            if isinstance(result, Retry):
                return Retry(error_kind=result.error_kind, error=result.error, retry_after=result.retry_after,
                             write=self._pending(refund, job, details))
            return Dead(error_kind=result.error_kind, error=result.error, write=self._pending(refund, job, details))
        return result

    def _pending(self, refund: Refund, job: Job, details: dict[str, Any], *,
                 psp_refund_id: str | None = None) -> Callable[[sa.Connection], Any]:
        """The refund is pending: moved there from processing, or, pending already, the PSP's refund id kept
        the moment it is known and the evidence noted."""
        def write(conn: sa.Connection) -> None:
            current = self.refunds.get(refund.id, conn)
            if current is None or current.status.final:
                return  # a webhook or reconciliation decided meanwhile: its answer stands
            if current.status is PaymentStatus.PENDING:
                if psp_refund_id:
                    self.refunds.remember_psp_id(conn, refund.id, status=PaymentStatus.PENDING,
                                                        psp_id=psp_refund_id)
                self.refunds.note(conn, refund.id, status=PaymentStatus.PENDING, source=RefundSource.REFUND,
                                  details=details, job_id=job.id, attempt=job.attempts)
                return
            self.refunds.apply(conn, RefundTransition(refund.id, current.status, PaymentStatus.PENDING,
                                                      RefundSource.REFUND, details=details, job_id=job.id,
                                                      attempt=job.attempts, psp_refund_id=psp_refund_id))
        return write

    def _transition(self, refund: Refund, job: Job, target: PaymentStatus, details: dict[str, Any],
                    **fields: Any) -> Callable[[sa.Connection], Any]:
        def write(conn: sa.Connection) -> None:
            # compare-and-set from what the refund is now (processing after our claim, or pending after an
            # earlier attempt): if a webhook or reconciliation finished it meanwhile, its answer stands
            current = self.refunds.get(refund.id, conn)
            if current is None or current.status.final:
                return
            self.refunds.apply(conn, RefundTransition(refund.id, current.status, target, RefundSource.REFUND,
                                                      details=details, job_id=job.id, attempt=job.attempts, **fields))
        return write
