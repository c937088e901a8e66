"""The charge handler: sends a payment to its PSP under a heartbeating lease and records what happened.

The payment's idempotency key is fixed at creation and sent with every attempt, so a retry after an
unknown outcome, or a stale worker's duplicate call, can never charge twice. The payment's new status is
committed with the fenced job finish (``Outcome.write``): a worker that lost its lease changes nothing.

| answer                                   | payment                          | job                        |
| ---------------------------------------- | -------------------------------- | -------------------------- |
| Succeeded, same amount and currency      | succeeded                        | complete                   |
| Succeeded, other amount or currency      | needs_review                     | complete                   |
| Authorised (manual capture)              | authorised (captured by hand)    | complete                   |
| ActionRequired (3-D Secure, redirect)    | needs_review (authentication)    | complete                   |
| Failed (declined)                        | failed (reason)                  | complete                   |
| Pending / Unknown / NotFound             | pending (reconciliation decides) | complete                   |
| any answer naming another PSP reference than the one stored | needs_review (reference_conflict) | complete |
| validation error (400/422)               | failed (rejected)                | dead                       |
| an error the PSP saved under the key     | pending (reconciliation decides) | complete: a retry replays it|
| unknown outcome, 5xx, busy, protocol     | pending (never failed from these)| retry, same idempotency key|
| connect error, 429, 409, auth, bug       | unchanged                        | retry / dead as classified |
| the PSP's settings are missing           | unchanged (never processing)     | dead (replay after fixing)  |

Before anything changes, the PSP guard (``recon.payments.guard``) may snooze the job, no attempt spent:
the PSP is paused, cooling down after a 429, its circuit breaker is open, or its rate limit has no token.
A permit older than the guard's PERMIT_SECONDS when the request is about to go (marking the payment
processing waited for a pooled connection or SQLite's write lock) is admitted again
(``PspGuard.refresh``): the calls a stall held back never reach the PSP in one crowd. If that admission
snoozes, the payment stays processing and the next attempt re-sends under the same key.

**Key generations.** A PSP keeps an idempotency key's saved answer for a limited time
(``PspAdapter.idempotency_retention``: Stripe 24 h). A re-send of a key that old could charge a second time
if the first charge exists, so the handler never re-sends it blindly: it asks the PSP for the payment
first. Found: its answer is recorded like a charge answer. Not found (and the key was last sent longer ago
than the PSP's search can lag): the payment moves to its next key generation (an audit event with
``key_generation``) and the next attempt charges with the new key.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

import sqlalchemy as sa

from psp_adapters.errors import PspError, PspRejectedError
from psp_adapters.protocol import (
    ChargeRequest,
    NotFound,
    PaymentOutcome,
    PspAdapter,
    PspRef,
)
from recon.classify import ErrorKind, classify
from recon.clock import Clock, SystemClock
from recon.db.payment_store import CHARGE_KIND, CHARGE_QUEUE, PaymentStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Retry, Snooze
from recon.errors import ConfigError, LeaseLost
from recon.payments.guard import Guard, Unguarded
from recon.reconcile.decide import charged, outcome_details, reference_conflict
from recon.rows import EventSource, Job, Payment, PaymentStatus, Transition

AdapterFunc = Callable[[str], PspAdapter]
#: a key is treated as forgotten this long before the PSP's retention ends (clocks and queues drift)
KEY_RETENTION_MARGIN = timedelta(hours=1)

#: error kinds after which a send (a charge, a refund, a capture or cancel) may have reached the PSP: what it
#: sent is pending until known
MAYBE_SENT = {ErrorKind.UNKNOWN_OUTCOME, ErrorKind.PSP_UNAVAILABLE, ErrorKind.PSP_BUSY, ErrorKind.PROTOCOL,
              ErrorKind.CONFLICT}

Write = Callable[[sa.Connection], Any]


def config_dead(exc: ConfigError) -> Dead:
    """The outcome of a job whose PSP cannot be called as configured: dead, to replay once fixed."""
    return Dead(error_kind="config", error=f"ConfigError: {exc}")


def after_send_error(exc: PspError, *, pending: Callable[[dict[str, Any]], Write],
                     failed: Callable[[dict[str, Any], str], Write]) -> Outcome:
    """The one table of a send's errors (a charge's and a movement's): ``pending(details)`` writes what was sent
    as pending, ``failed(details, reason)`` as failed.

    - the PSP saved this answer under our key (Stripe: a 500 for 24 h): the same key only replays it, so
      re-sending is futile; it may or may not exist at the PSP, and reconciliation finds out: pending, done;
    - a validation error: failed ("rejected: …"), dead;
    - an error after which it may have reached the PSP (``MAYBE_SENT``): pending, retried as the error table
      says, or dead when the PSP said not to retry (Stripe-Should-Retry: false);
    - anything else: the error table's outcome, nothing written."""
    result = classify(exc)
    details: dict[str, Any] = {"error_kind": result.error_kind, "error": result.error}
    if exc.saved and not isinstance(exc, PspRejectedError):
        details.update(saved_answer=True, replayed=exc.replayed)
        return Complete(write=pending(details))
    if isinstance(result, Dead) and result.error_kind == ErrorKind.VALIDATION:
        return Dead(error_kind=result.error_kind, error=result.error,
                    write=failed(details, f"rejected: {result.error}"))
    if result.error_kind in MAYBE_SENT:
        if isinstance(result, Retry):
            return Retry(error_kind=result.error_kind, error=result.error, retry_after=result.retry_after,
                         write=pending(details))
        return Dead(error_kind=result.error_kind, error=result.error, write=pending(details))
    return result


class ChargeHandler:
    """Job kind ``charge``, payload ``{"payment_id": N}``, on ``queue`` (``[payments] queue``). The payment store
    creates these jobs with their payments (``PaymentStore.create``), hence its constants."""

    kind: ClassVar[str] = CHARGE_KIND

    def __init__(self, ledger: PaymentStore, adapter_func: AdapterFunc, *, guard: Guard | None = None,
                 clock: Clock | None = None, queue: str = CHARGE_QUEUE) -> None:
        self.queue = queue
        self.ledger = ledger
        self.adapter_func = adapter_func
        self.guard = guard or Unguarded()
        self.clock = clock or SystemClock()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        payment_id = int(job.payload["payment_id"])
        payment = self.ledger.get(payment_id)
        if payment is None:
            return Dead(error_kind="validation", error=f"payment {payment_id} does not exist")
        if payment.status.final:
            return Complete()  # reconciliation (or an earlier attempt) already knows the answer
        try:
            adapter = self.adapter_func(payment.psp)  # before anything changes: never processing for a PSP
        except ConfigError as exc:  # that cannot be called as configured
            return config_dead(exc)
        # the PSP guard before anything changes: a paused or cooling PSP leaves the payment as it is
        permit = self.guard.admit(payment.psp, lease=lease)
        if isinstance(permit, Snooze):
            return permit
        if payment.status is PaymentStatus.CREATED:
            marked = self._mark_processing(payment, job, lease)
            if marked is None:
                return Complete()  # reconciliation decided it first (e.g. "never reached the PSP"): never send
            payment = marked
        elif self._key_may_be_forgotten(payment, adapter):
            return self._look_before_resending(payment, job, lease, adapter, permit)
        elif not self._still_unfinished(payment, job, lease):
            return Complete()  # healed by reconciliation since we read it: nothing to send
        # the write above may have waited (a pooled connection, SQLite's write lock): a permit that old is admitted
        # again, so a stall never releases a crowd of calls at once. A snooze here leaves the payment
        # processing: the next attempt re-sends the same key
        permit = self.guard.refresh(permit, lease=lease)
        if isinstance(permit, Snooze):
            return permit
        lease.check()
        request = ChargeRequest(merchant_reference=payment.merchant_reference, amount=payment.amount,
                                currency=payment.currency, merchant_account=payment.merchant_account,
                                payment_method=payment.payment_method,
                                customer_reference=payment.customer_reference,
                                manual_capture=payment.capture_mode == "manual")
        key = payment.charge_key
        try:
            answer = permit.call(lambda: adapter.create_payment(request, idempotency_key=key))
        except PspError as exc:
            return self._on_error(payment, job, exc)
        return Complete(write=self._write_answer(payment, job, answer))

    def _key_may_be_forgotten(self, payment: Payment, adapter: PspAdapter) -> bool:
        retention: timedelta | None = adapter.idempotency_retention
        if retention is None or payment.key_sent_at is None:
            return False
        return self.clock.now() - payment.key_sent_at >= retention - min(KEY_RETENTION_MARGIN, retention / 10)

    def _look_before_resending(self, payment: Payment, job: Job, lease: Lease, adapter: PspAdapter,
                               permit: Any) -> Outcome:
        """The key may be forgotten by the PSP: ask for the payment instead of re-sending the key."""
        lease.check()
        ref = PspRef(psp_reference=payment.psp_reference, merchant_reference=payment.merchant_reference,
                     merchant_account=payment.merchant_account)
        try:
            answer = permit.call(lambda: adapter.fetch_payment(ref))
        except PspError as exc:
            result = classify(exc)
            return result  # nothing changes; the lookup is tried again
        if not isinstance(answer, NotFound):
            return Complete(write=self._write_answer(payment, job, answer))
        if payment.psp_reference:  # the PSP told us about it once and has lost it: a person looks
            return Complete(write=self._transition(
                payment, job, PaymentStatus.NEEDS_REVIEW, outcome_details(answer),
                review_reason=f"missing_at_psp: PSP has no payment {payment.psp_reference}"))
        details = {"reason": "the PSP holds no payment for the previous key and has forgotten it",
                   "previous_key_sent_at": payment.key_sent_at.isoformat() if payment.key_sent_at else None}

        def renew(conn: sa.Connection) -> None:
            self.ledger.next_key_generation(conn, payment, job_id=job.id, attempt=job.attempts, details=details)

        return Snooze(timedelta(0), reason="new idempotency key generation", write=renew)

    def _mark_processing(self, payment: Payment, job: Job, lease: Lease) -> Payment | None:
        """created -> processing before the request goes out, fenced by the lease: a crash after sending
        leaves ``processing``, which reconciliation resolves. None when the compare-and-set lost (the payment
        changed since it was read, e.g. healed to failed): then nothing may be sent."""
        with self.ledger.db.begin() as conn:
            if not lease.holds(conn):
                raise LeaseLost(f"lease on job {job.id} lost before charging")
            moved = self.ledger.apply(conn, Transition(payment.id, PaymentStatus.CREATED, PaymentStatus.PROCESSING,
                                                       EventSource.CHARGE, job_id=job.id, attempt=job.attempts))
            if not moved or self.ledger.touch_unfinished(conn, payment_id=payment.id) is None:  # stamps key_sent_at
                return None
            current = self.ledger.get(payment.id, conn)
        assert current is not None  # nosec B101  # type narrowing, not a check
        return current

    def _still_unfinished(self, payment: Payment, job: Job, lease: Lease) -> bool:
        """Before a re-send: lock the payment row and check it is still unfinished, under the lease. The row
        lock orders this against reconciliation's "never reached the PSP" heal, which re-checks inside its
        own transaction that no charge job is unfinished."""
        with self.ledger.db.begin() as conn:
            if not lease.holds(conn):
                raise LeaseLost(f"lease on job {job.id} lost before charging")
            return self.ledger.touch_unfinished(conn, payment_id=payment.id) is not None

    def _write_answer(self, payment: Payment, job: Job, answer: PaymentOutcome) -> Write:
        details = outcome_details(answer)
        ref = answer.psp_reference
        said = answer.raw_status or type(answer).__name__.lower()
        conflict = reference_conflict(payment, ref, what=f"the PSP's answer to our charge says {said}")
        if conflict and payment.psp_reference and ref:  # one key, two PSP references: never ours replaced
            details["psp_reference_conflict"] = {"ours": payment.psp_reference, "theirs": [ref]}
            return self._transition(payment, job, PaymentStatus.NEEDS_REVIEW, details, review_reason=conflict)
        decision = charged(payment, answer)  # recon.reconcile.decide's table of a charge's answers
        if decision.target is PaymentStatus.PENDING:
            return self._pending(payment, job, details, psp_reference=ref)
        return self._transition(payment, job, decision.target, details, **decision.fields())

    def _on_error(self, payment: Payment, job: Job, exc: PspError) -> Outcome:
        return after_send_error(exc, pending=lambda details: self._pending(payment, job, details),
                                failed=lambda details, reason: self._transition(
                                    payment, job, PaymentStatus.FAILED, details, failure_reason=reason))

    def _pending(self, payment: Payment, job: Job, details: dict[str, Any], *,
                 psp_reference: str | None = None) -> Write:
        if payment.status is PaymentStatus.PENDING:
            def keep_evidence(conn: sa.Connection) -> None:
                if psp_reference:
                    self.ledger.remember_psp_reference(conn, payment_id=payment.id, status=PaymentStatus.PENDING,
                                                       psp_reference=psp_reference)
                if details.get("saved_answer"):  # evidence reconciliation should see: the key's answer is fixed
                    self.ledger.note(conn, payment_id=payment.id, status=PaymentStatus.PENDING,
                                     source=EventSource.CHARGE, details=details, job_id=job.id, attempt=job.attempts)
            return keep_evidence
        return self._transition(payment, job, PaymentStatus.PENDING, details, psp_reference=psp_reference)

    def _transition(self, payment: Payment, job: Job, target: PaymentStatus, details: dict[str, Any],
                    **fields: Any) -> Write:
        transition = Transition(payment.id, payment.status, target, EventSource.CHARGE, details=details,
                                job_id=job.id, attempt=job.attempts, **fields)
        # compare-and-set: if reconciliation changed the payment meanwhile, its answer stands
        return lambda conn: self.ledger.apply(conn, transition)
