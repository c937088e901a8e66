"""The capture and cancel handlers: send one modification of an authorised payment to its PSP under a
heartbeating lease and record what happened, as the refund handler does for a refund (recon.payments.refund),
with the modification's own idempotency key.

The key is fixed at the modification's creation and sent with every attempt, so a retry after a lost answer,
or a stale worker's duplicate call, never captures twice. The PSP's id of the modification is stored the moment
an answer names it (a pending answer included) and never replaced. Every write is committed with the fenced job
finish (``Outcome.write``): a worker that lost its lease changes nothing.

| answer                                   | modification                     | job                        |
| ---------------------------------------- | -------------------------------- | -------------------------- |
| as ``recon.reconcile.decide.modification_sent``: succeeded, failed, pending, review | its decision | complete |
| validation error (400/422)               | failed (rejected): its claim freed | dead                     |
| an error the PSP saved under the key     | pending (reconciliation decides) | complete                   |
| unknown outcome, 5xx, busy, protocol     | pending (never failed from these)| retry, same idempotency key|
| connect error, 429, 409, auth, bug       | unchanged                        | retry / dead as classified |
| the PSP's settings are missing, or it does not capture | unchanged          | dead (replay after fixing) |

A capture that succeeds moves its payment from authorised to succeeded with the captured amount; a cancel that
succeeds moves it to failed ("cancelled: …"): ``recon.db.modification_store``, in the same transaction. Before
anything changes the PSP guard may snooze the job, no attempt spent. A key older than the PSP's retention
(Stripe 24 h) is never re-sent blindly: the PSP is asked first (Stripe: the PaymentIntent); done already, its
answer is recorded; not yet, it is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from psp_adapters.errors import PspError, PspRejectedError
from psp_adapters.protocol import (
    CapturingAdapter,
    ModificationRequest,
    NotFound,
    PaymentOutcome,
    Pending,
    PspAdapter,
)
from recon.classify import ErrorKind, classify
from recon.clock import Clock, SystemClock
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import CHARGE_QUEUE, PaymentStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Retry, Snooze
from recon.errors import ConfigError, LeaseLost
from recon.modification_rows import Modification, ModificationSource, ModificationTransition
from recon.payments.charge import KEY_RETENTION_MARGIN, config_dead
from recon.payments.guard import Guard, Unguarded
from recon.reconcile.decide import modification_sent, outcome_details
from recon.rows import Job, Payment, PaymentStatus

AdapterFunc = Callable[[str], PspAdapter]

#: error kinds after which the modification may have reached the PSP: pending until known
_MAYBE_SENT = {ErrorKind.UNKNOWN_OUTCOME, ErrorKind.PSP_UNAVAILABLE, ErrorKind.PSP_BUSY, ErrorKind.PROTOCOL,
               ErrorKind.CONFLICT}


def modification_request(mod: Modification, payment: Payment) -> ModificationRequest:
    """What the PSP is asked: the capture or cancel on the payment's PSP reference, in the payment's account."""
    return ModificationRequest(kind=mod.kind, payment_reference=payment.psp_reference or "",
                               modification_reference=mod.modification_reference, amount=mod.amount,
                               currency=mod.currency, merchant_account=payment.merchant_account)


def capturing_adapter(adapter_func: AdapterFunc, psp: str) -> CapturingAdapter:
    """The PSP's adapter when it captures and cancels; ConfigError otherwise."""
    adapter = adapter_func(psp)
    if not isinstance(adapter, CapturingAdapter):
        raise ConfigError(f"PSP {psp!r}: its adapter does not capture or cancel")
    return adapter


class ModificationHandler:
    """Job kind ``kind`` (``capture`` or ``cancel``), payload ``{"modification_id": N}``, on ``queue`` (the charge
    jobs' queue). ``ModificationStore.create`` creates these jobs with their modifications."""

    def __init__(self, kind: str, modifications: ModificationStore, payments: PaymentStore, adapter_func: AdapterFunc,
                 *, guard: Guard | None = None, clock: Clock | None = None, queue: str = CHARGE_QUEUE) -> None:
        self.kind = kind
        self.queue = queue
        self.modifications = modifications
        self.payments = payments
        self.adapter_func = adapter_func
        self.guard = guard or Unguarded()
        self.clock = clock or SystemClock()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        mid = int(job.payload["modification_id"])
        mod = self.modifications.get(mid)
        if mod is None:
            return Dead(error_kind="validation", error=f"modification {mid} does not exist")
        if mod.status.final:
            return Complete()  # reconciliation, a webhook or an earlier attempt knows the answer already
        payment = self.payments.get(mod.payment_id)
        assert payment is not None  # nosec B101  # a foreign key: type narrowing, not a check
        try:
            adapter = capturing_adapter(self.adapter_func, mod.psp)
        except ConfigError as exc:
            return config_dead(exc)
        permit = self.guard.admit(mod.psp, lease=lease)
        if isinstance(permit, Snooze):
            return permit
        request = modification_request(mod, payment)
        if self._key_may_be_forgotten(mod, adapter):
            lease.check()
            try:
                looked = permit.call(lambda: adapter.fetch_modification(request))
            except PspError as exc:
                return classify(exc)  # nothing changes; the lookup is tried again
            if not isinstance(looked, NotFound | Pending):
                return Complete(write=self._write_answer(mod, job, looked))
        if not self._claim_send(mod, job, lease):
            return Complete()  # healed since we read it (e.g. "never reached the PSP"): nothing to send
        lease.check()
        try:
            answer = permit.call(lambda: adapter.modify_payment(request, idempotency_key=mod.idempotency_key))
        except PspError as exc:
            return self._on_error(mod, job, exc)
        except ConfigError as exc:
            return config_dead(exc)
        return Complete(write=self._write_answer(mod, job, answer))

    def _key_may_be_forgotten(self, mod: Modification, adapter: Any) -> bool:
        retention: timedelta | None = getattr(adapter, "idempotency_retention", None)
        if retention is None or mod.sent_at is None:
            return False
        return self.clock.now() - mod.sent_at >= retention - min(KEY_RETENTION_MARGIN, retention / 10)

    def _claim_send(self, mod: Modification, job: Job, lease: Lease) -> bool:
        """created -> processing (or, on a retry, the row lock proving it is still unfinished), fenced by the
        lease, before the request goes out; False when it is no longer unfinished: then nothing may be sent."""
        with self.modifications.db.begin() as conn:
            if not lease.holds(conn):
                raise LeaseLost(f"lease on job {job.id} lost before sending the {mod.kind}")
            if mod.status is PaymentStatus.CREATED and not self.modifications.apply(conn, ModificationTransition(
                    mod.id, PaymentStatus.CREATED, PaymentStatus.PROCESSING, ModificationSource.MODIFICATION,
                    job_id=job.id, attempt=job.attempts)):
                return False
            return self.modifications.mark_sent(conn, mod.id) is not None

    def _write_answer(self, mod: Modification, job: Job, answer: PaymentOutcome) -> Callable[[sa.Connection], Any]:
        details = outcome_details(answer)
        decision = modification_sent(mod, answer)  # recon.reconcile.decide's table
        if decision.target is PaymentStatus.PENDING:
            return self._pending(mod, job, details, psp_id=decision.psp_modification_id)
        return self._transition(mod, job, decision.target, details, **decision.fields())

    def _on_error(self, mod: Modification, job: Job, exc: PspError) -> Outcome:
        result = classify(exc)
        details: dict[str, Any] = {"error_kind": result.error_kind, "error": result.error}
        if exc.saved and not isinstance(exc, PspRejectedError):
            details.update(saved_answer=True, replayed=exc.replayed)
            return Complete(write=self._pending(mod, job, details))
        if isinstance(result, Dead) and result.error_kind == ErrorKind.VALIDATION:
            return Dead(error_kind=result.error_kind, error=result.error, write=self._transition(
                mod, job, PaymentStatus.FAILED, details, failure_reason=f"rejected: {result.error}"))
        if result.error_kind in _MAYBE_SENT:
            if isinstance(result, Retry):
                return Retry(error_kind=result.error_kind, error=result.error, retry_after=result.retry_after,
                             write=self._pending(mod, job, details))
            return Dead(error_kind=result.error_kind, error=result.error, write=self._pending(mod, job, details))
        return result

    def _pending(self, mod: Modification, job: Job, details: dict[str, Any], *,
                 psp_id: str | None = None) -> Callable[[sa.Connection], Any]:
        """Pending: moved there from processing, or, pending already, its PSP id kept the moment it is known and
        the evidence noted."""
        def write(conn: sa.Connection) -> None:
            current = self.modifications.get(mod.id, conn)
            if current is None or current.status.final:
                return  # a webhook or reconciliation decided meanwhile: its answer stands
            if current.status is PaymentStatus.PENDING:
                if psp_id:
                    self.modifications.remember_psp_id(conn, mod.id, status=PaymentStatus.PENDING,
                                                       psp_id=psp_id)
                self.modifications.note(conn, mod.id, status=PaymentStatus.PENDING,
                                        source=ModificationSource.MODIFICATION, details=details, job_id=job.id,
                                        attempt=job.attempts)
                return
            self.modifications.apply(conn, ModificationTransition(
                mod.id, current.status, PaymentStatus.PENDING, ModificationSource.MODIFICATION, details=details,
                job_id=job.id, attempt=job.attempts, psp_modification_id=psp_id))
        return write

    def _transition(self, mod: Modification, job: Job, target: PaymentStatus, details: dict[str, Any],
                    **fields: Any) -> Callable[[sa.Connection], Any]:
        def write(conn: sa.Connection) -> None:
            # compare-and-set from what it is now: if a webhook or reconciliation finished it, its answer stands
            current = self.modifications.get(mod.id, conn)
            if current is None or current.status.final:
                return
            self.modifications.apply(conn, ModificationTransition(
                mod.id, current.status, target, ModificationSource.MODIFICATION, details=details, job_id=job.id,
                attempt=job.attempts, **fields))
        return write
