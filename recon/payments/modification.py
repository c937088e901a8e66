"""The capture and cancel handlers: send one modification of an authorised payment to its PSP and record what
happened, the generic movement job (``recon.payments.movement``: its table of answers, errors and old keys) with
the modification's calls: ``modify_payment`` with its own idempotency key, ``fetch_modification`` before an old
key is sent again (Stripe: the PaymentIntent; done already, its answer is recorded; not yet, or pending, it is
sent), and ``decide.modification_sent``'s table. One class, two job kinds (``capture``, ``cancel``).

A capture that succeeds moves its payment from authorised to succeeded with the captured amount; a cancel that
succeeds moves it to failed ("cancelled: …"): ``recon.db.modification_store``, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from psp_adapters.protocol import (
    CapturingAdapter,
    ModificationRequest,
    NotFound,
    PaymentOutcome,
    Pending,
    Reversed,
)
from recon.clock import Clock
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import CHARGE_QUEUE, PaymentStore
from recon.errors import ConfigError
from recon.modification_rows import MODIFICATION, Modification, ModificationSource, ModificationTransition
from recon.payments.guard import Guard
from recon.payments.movement import AdapterFunc, MovementJob, SentDecision
from recon.reconcile.decide import modification_sent
from recon.rows import Job, Payment, PaymentStatus


def modification_request(mod: Modification, payment: Payment) -> ModificationRequest:
    """What the PSP is asked: the capture or cancel on the payment's PSP reference, in the payment's account."""
    return ModificationRequest(kind=mod.kind, payment_reference=payment.psp_reference or "",
                               modification_reference=mod.modification_reference, amount=mod.amount,
                               currency=mod.currency, merchant_account=payment.merchant_account,
                               modification_id=mod.psp_modification_id)


def capturing_adapter(adapter_func: AdapterFunc, psp: str) -> CapturingAdapter:
    """The PSP's adapter when it captures and cancels; ConfigError otherwise."""
    adapter = adapter_func(psp)
    if not isinstance(adapter, CapturingAdapter):
        raise ConfigError(f"PSP {psp!r}: its adapter does not capture or cancel")
    return adapter


class ModificationHandler(MovementJob[Modification, ModificationTransition]):
    """Job kind ``kind`` (``capture`` or ``cancel``), payload ``{"modification_id": N}``, on ``queue`` (the charge
    jobs' queue). ``ModificationStore.create`` creates these jobs with their modifications."""

    movement = MODIFICATION

    def __init__(self, kind: str, modifications: ModificationStore, payments: PaymentStore, adapter_func: AdapterFunc,
                 *, guard: Guard | None = None, clock: Clock | None = None, queue: str = CHARGE_QUEUE) -> None:
        super().__init__(modifications, payments, adapter_func, guard=guard, clock=clock, queue=queue)
        self.kind = kind

    def _adapter(self, m: Modification) -> CapturingAdapter:
        return capturing_adapter(self.adapter_func, m.psp)

    def _send(self, adapter: CapturingAdapter, m: Modification, payment: Payment) -> Callable[[], PaymentOutcome]:
        request = modification_request(m, payment)
        return lambda: adapter.modify_payment(request, idempotency_key=m.idempotency_key)

    def _look(self, adapter: CapturingAdapter, m: Modification, payment: Payment
              ) -> Callable[[], PaymentOutcome | Reversed]:
        request = modification_request(m, payment)
        return lambda: adapter.fetch_modification(request)

    def _found(self, looked: PaymentOutcome | Reversed) -> PaymentOutcome | None:
        # not found, or pending (Adyen cannot be asked: always pending): sent
        return None if isinstance(looked, NotFound | Pending | Reversed) else looked

    def _decide(self, m: Modification, answer: PaymentOutcome) -> SentDecision:
        return modification_sent(m, answer)  # recon.reconcile.decide's table

    def _transition(self, m: Modification, from_status: PaymentStatus, target: PaymentStatus, job: Job,
                    **fields: Any) -> ModificationTransition:
        return ModificationTransition(m.id, from_status, target, ModificationSource.MODIFICATION, job_id=job.id,
                                      attempt=job.attempts, **fields)

    def _note(self, conn: sa.Connection, m: Modification, job: Job, details: dict[str, Any]) -> bool:
        return self.store.note(conn, m.id, status=m.status, source=ModificationSource.MODIFICATION,
                               details=details, job_id=job.id, attempt=job.attempts)
