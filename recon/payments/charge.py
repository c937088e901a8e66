"""The charge handler: sends a payment to its PSP under a heartbeating lease and records what happened.

The payment's idempotency key is fixed at creation and sent with every attempt, so a retry after an
unknown outcome, or a stale worker's duplicate call, can never charge twice. The payment's new status is
committed with the fenced job finish (``Outcome.write``): a worker that lost its lease changes nothing.

| answer                                   | payment                          | job                        |
| ---------------------------------------- | -------------------------------- | -------------------------- |
| Succeeded, same amount and currency      | succeeded                        | complete                   |
| Succeeded, other amount or currency      | needs_review                     | complete                   |
| Failed (declined)                        | failed (reason)                  | complete                   |
| Pending / Unknown / NotFound             | pending (reconciliation decides) | complete                   |
| validation error (400/422)               | failed (rejected)                | dead                       |
| unknown outcome, 5xx, busy, protocol     | pending (never failed from these)| retry, same idempotency key|
| connect error, 429, 409, auth, bug       | unchanged                        | retry / dead as classified |

Before anything changes, the PSP guard (``recon.payments.guard``) may snooze the job, no attempt spent:
the PSP is paused, cooling down after a 429, its circuit breaker is open, or its rate limit has no token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from psp_adapters.errors import PspError
from psp_adapters.protocol import (
    ChargeRequest,
    Failed,
    NotFound,
    PaymentOutcome,
    Pending,
    PspAdapter,
    Succeeded,
    Unknown,
)
from recon.classify import ErrorKind, classify
from recon.db.ledger import LedgerStore, Transition
from recon.engine.jobs import Job
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Retry, Snooze
from recon.errors import LeaseLost
from recon.payments.guard import Guard, Unguarded
from recon.payments.model import EventSource, Payment, PaymentStatus

AdapterFunc = Callable[[str], PspAdapter]

#: error kinds after which the charge may have reached the PSP: the payment is pending until known
_MAYBE_CHARGED = {ErrorKind.UNKNOWN_OUTCOME, ErrorKind.PSP_UNAVAILABLE, ErrorKind.PSP_BUSY, ErrorKind.PROTOCOL,
                  ErrorKind.CONFLICT}


def outcome_details(outcome: PaymentOutcome) -> dict[str, Any]:
    """A snapshot of the PSP's answer for the audit trail (no card data ever reaches us)."""
    details: dict[str, Any] = {"psp_outcome": type(outcome).__name__.lower(), "psp_status": outcome.raw_status,
                               "psp_reference": outcome.psp_reference, "psp_amount": outcome.amount,
                               "psp_currency": outcome.currency}
    if isinstance(outcome, Failed):
        details["reason"] = outcome.reason
    return details


def mismatch(payment: Payment, outcome: PaymentOutcome) -> str | None:
    """Why the PSP's amount or currency differs from ours, or None when they agree (or it did not say)."""
    if outcome.currency is not None and outcome.currency.upper() != payment.currency:
        return f"currency_mismatch: ours {payment.currency}, PSP {outcome.currency.upper()}"
    if outcome.amount is not None and outcome.amount != payment.amount:
        return f"amount_mismatch: ours {payment.amount} {payment.currency}, PSP {outcome.amount}"
    return None


class ChargeHandler:
    """Job kind ``charge``, payload ``{"payment_id": N}``."""

    def __init__(self, ledger: LedgerStore, adapter_func: AdapterFunc, *, guard: Guard | None = None) -> None:
        self.ledger = ledger
        self.adapter_func = adapter_func
        self.guard = guard or Unguarded()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        payment_id = int(job.payload["payment_id"])
        payment = self.ledger.get(payment_id)
        if payment is None:
            return Dead(error_kind="validation", error=f"payment {payment_id} does not exist")
        if payment.status.final:
            return Complete()  # reconciliation (or an earlier attempt) already knows the answer
        # the PSP guard before anything changes: a paused or cooling PSP leaves the payment as it is
        permit = self.guard.admit(payment.psp, lease=lease)
        if isinstance(permit, Snooze):
            return permit
        if payment.status is PaymentStatus.CREATED:
            payment = self._mark_processing(payment, job, lease)
        elif not self._still_unfinished(payment, job, lease):
            return Complete()  # healed by reconciliation since we read it: nothing to send
        lease.check()
        request = ChargeRequest(merchant_reference=payment.merchant_reference, amount=payment.amount,
                                currency=payment.currency, merchant_account=payment.merchant_account)
        try:
            adapter, key = self.adapter_func(payment.psp), payment.idempotency_key
            answer = permit.call(lambda: adapter.create_payment(request, idempotency_key=key))
        except PspError as exc:
            return self._on_error(payment, job, exc)
        return Complete(write=self._write_answer(payment, job, answer))

    def _mark_processing(self, payment: Payment, job: Job, lease: Lease) -> Payment:
        """created -> processing before the request goes out, fenced by the lease: a crash after sending
        leaves ``processing``, which reconciliation resolves."""
        with self.ledger.db.begin() as conn:
            if not lease.holds(conn):
                raise LeaseLost(f"lease on job {job.id} lost before charging")
            self.ledger.apply(conn, Transition(payment.id, PaymentStatus.CREATED, PaymentStatus.PROCESSING,
                                               EventSource.CHARGE, job_id=job.id, attempt=job.attempts))
            current = self.ledger.get(payment.id, conn)
        assert current is not None
        return current

    def _still_unfinished(self, payment: Payment, job: Job, lease: Lease) -> bool:
        """Before a re-send: lock the payment row and check it is still unfinished, under the lease. The row
        lock orders this against reconciliation's "never reached the PSP" heal, which re-checks inside its
        own transaction that no charge job is unfinished."""
        with self.ledger.db.begin() as conn:
            if not lease.holds(conn):
                raise LeaseLost(f"lease on job {job.id} lost before charging")
            return self.ledger.touch_unfinished(conn, payment_id=payment.id) is not None

    def _write_answer(self, payment: Payment, job: Job, answer: PaymentOutcome) -> Callable[[sa.Connection], Any]:
        details = outcome_details(answer)
        ref = answer.psp_reference
        match answer:
            case Succeeded():
                problem = mismatch(payment, answer)
                target = PaymentStatus.NEEDS_REVIEW if problem else PaymentStatus.SUCCEEDED
                return self._transition(payment, job, target, details, psp_reference=ref, review_reason=problem)
            case Failed(reason=reason):
                return self._transition(payment, job, PaymentStatus.FAILED, details, psp_reference=ref,
                                        failure_reason=f"declined: {reason or answer.raw_status or 'no reason'}")
            case Pending() | Unknown() | NotFound():
                return self._pending(payment, job, details, psp_reference=ref)

    def _on_error(self, payment: Payment, job: Job, exc: PspError) -> Outcome:
        result = classify(exc)
        details = {"error_kind": result.error_kind, "error": result.error}
        if isinstance(result, Dead) and result.error_kind == ErrorKind.VALIDATION:
            return Dead(error_kind=result.error_kind, error=result.error, write=self._transition(
                payment, job, PaymentStatus.FAILED, details, failure_reason=f"rejected: {result.error}"))
        if isinstance(result, Retry) and result.error_kind in _MAYBE_CHARGED:
            return Retry(error_kind=result.error_kind, error=result.error, retry_after=result.retry_after,
                         write=self._pending(payment, job, details))
        return result

    def _pending(self, payment: Payment, job: Job, details: dict[str, Any], *,
                 psp_reference: str | None = None) -> Callable[[sa.Connection], Any]:
        if payment.status is PaymentStatus.PENDING:
            def keep_reference(conn: sa.Connection) -> None:
                if psp_reference:
                    self.ledger.remember_psp_reference(conn, payment_id=payment.id, status=PaymentStatus.PENDING,
                                                       psp_reference=psp_reference)
            return keep_reference
        return self._transition(payment, job, PaymentStatus.PENDING, details, psp_reference=psp_reference)

    def _transition(self, payment: Payment, job: Job, target: PaymentStatus, details: dict[str, Any],
                    **fields: Any) -> Callable[[sa.Connection], Any]:
        transition = Transition(payment.id, payment.status, target, EventSource.CHARGE, details=details,
                                job_id=job.id, attempt=job.attempts, **fields)
        # compare-and-set: if reconciliation changed the payment meanwhile, its answer stands
        return lambda conn: self.ledger.apply(conn, transition)
