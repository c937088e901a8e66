"""The refund's reconcile job (``recon.reconcile.movement``, every movement's): asks the PSP for one refund's truth
by ``fetch_refund`` (Stripe: ``GET /v1/refunds/{id}`` or by metadata; Adyen: the reports) and heals our record
by ``recon.reconcile.decide``'s refund table (``refund_heal``: succeeded, failed, reversed, another id).

A recheck (``recon review recheck REFUND_REF``) asks about a final refund: a succeeded refund the PSP now calls
failed or reversed goes to review (``refund_heal``); any other answer joins the audit trail. A refund failed here
gives its amount back to the payment's captured amount in the same transaction (``RefundStore.apply``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from psp_adapters.protocol import PaymentOutcome, RefundingAdapter, Reversed
from recon.errors import ConfigError
from recon.payments.refund import refund_ref
from recon.reconcile.decide import refund_answer, refund_heal
from recon.reconcile.movement import Decision, MovementReconcileHandler, reconcile_row
from recon.refund_rows import REFUND, Refund, RefundSource, RefundTransition
from recon.rows import EnqueueRow, Job, Payment, PaymentStatus

REFUND_RECONCILE_KIND = REFUND.reconcile_kind


def refund_reconcile_key(refund_id: int) -> str:
    """The unique key of a refund's reconcile job: overlapping sweeps and rechecks share it."""
    return REFUND.reconcile_key(refund_id)


def refund_reconcile_row(refund_id: int, *, queue: str, recheck: bool = False) -> EnqueueRow:
    return reconcile_row(REFUND, refund_id, queue=queue, recheck=recheck)


class RefundReconcileHandler(MovementReconcileHandler[Refund, RefundTransition]):
    """Job kind ``reconcile_refund``, payload ``{"refund_id": N}`` (``"recheck": true`` for a final refund)."""

    movement = REFUND
    kind = REFUND_RECONCILE_KIND

    def _label(self, m: Refund) -> str:
        return "refund"

    def _fetch(self, m: Refund, payment: Payment) -> Callable[[], PaymentOutcome | Reversed]:
        adapter = self.adapter_func(m.psp)
        if not isinstance(adapter, RefundingAdapter):
            raise ConfigError(f"PSP {m.psp!r}: its adapter does not refund")
        ref = refund_ref(m, payment)
        return lambda: adapter.fetch_refund(ref)

    def _decision(self, m: Refund, payment: Payment, answer: PaymentOutcome | Reversed
                  ) -> tuple[Decision | None, PaymentOutcome]:
        read, reversed_ = refund_answer(answer)  # Reversed: after success (Adyen's RefundedReversed)
        return refund_heal(m, read, reversed_=reversed_), read

    def _transition(self, m: Refund, target: PaymentStatus, job: Job, details: dict[str, Any],
                    **fields: Any) -> RefundTransition:
        return RefundTransition(m.id, m.status, target, RefundSource.RECONCILE, details=details, job_id=job.id,
                                attempt=job.attempts, **fields)

    def _note(self, conn: sa.Connection, m: Refund, job: Job, details: dict[str, Any]) -> bool:
        return self.store.note(conn, m.id, status=m.status, source=RefundSource.RECONCILE, details=details,
                               job_id=job.id, attempt=job.attempts)
