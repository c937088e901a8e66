"""The capture's and cancel's reconcile job (``recon.reconcile.movement``, every movement's): asks the PSP what
became of one modification by ``fetch_modification`` and heals our record by ``recon.reconcile.decide``'s
modification tables (``modification_heal``; on a recheck, ``modification_recheck``).

A recheck (``recon review recheck MOD_REF``, payload ``"recheck": true``) asks about a final capture or cancel:
a succeeded one the PSP now contradicts (Stripe: the PaymentIntent canceled after our capture, captured after our
cancel, or another amount captured) goes to review, and so does its payment (to needs_review, the same reason):
money recon counted may not be there. So does a failed capture the PSP says succeeded (``decide.late_capture``:
money moved that we think did not). Any other answer joins its audit trail.

Stripe's capture and cancel are read back from the PaymentIntent (``requires_capture``: neither happened yet);
Adyen's by its CAPTURE / CAPTURE_FAILED / CANCELLATION webhooks and its Payment accounting reports' rows of it
(``fetch_modification``), so an Adyen modification neither settled ends in review after the schedule. A failure
gives its claim on the authorisation back, in the same transaction (``ModificationStore.apply``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from psp_adapters.protocol import PaymentOutcome, Reversed
from recon.modification_rows import MODIFICATION, Modification, ModificationSource, ModificationTransition
from recon.payments.modification import capturing_adapter, modification_request
from recon.reconcile.decide import modification_heal, modification_recheck
from recon.reconcile.movement import Decision, MovementReconcileHandler, reconcile_row
from recon.rows import EnqueueRow, Job, Payment, PaymentStatus

MODIFICATION_RECONCILE_KIND = MODIFICATION.reconcile_kind


def modification_reconcile_key(modification_id: int) -> str:
    """The unique key of a modification's reconcile job: overlapping sweeps and rechecks share it."""
    return MODIFICATION.reconcile_key(modification_id)


def modification_reconcile_row(modification_id: int, *, queue: str, recheck: bool = False) -> EnqueueRow:
    return reconcile_row(MODIFICATION, modification_id, queue=queue, recheck=recheck)


class ModificationReconcileHandler(MovementReconcileHandler[Modification, ModificationTransition]):
    """Job kind ``reconcile_modification``, payload ``{"modification_id": N}`` (``"recheck": true`` for a final
    one)."""

    movement = MODIFICATION
    kind = MODIFICATION_RECONCILE_KIND

    def _label(self, m: Modification) -> str:
        return m.kind

    def _fetch(self, m: Modification, payment: Payment) -> Callable[[], PaymentOutcome | Reversed]:
        adapter = capturing_adapter(self.adapter_func, m.psp)
        request = modification_request(m, payment)
        return lambda: adapter.fetch_modification(request)

    def _decision(self, m: Modification, payment: Payment, answer: PaymentOutcome | Reversed
                  ) -> tuple[Decision | None, PaymentOutcome]:
        assert not isinstance(answer, Reversed)  # nosec B101  # fetch_modification answers a PaymentOutcome
        if m.status.final:  # a recheck: the amount a capture is compared with is what its payment holds
            return modification_recheck(m, answer, captured=payment.captured_amount), answer
        return modification_heal(m, answer), answer

    def _transition(self, m: Modification, target: PaymentStatus, job: Job, details: dict[str, Any],
                    **fields: Any) -> ModificationTransition:
        return ModificationTransition(m.id, m.status, target, ModificationSource.RECONCILE, details=details,
                                      job_id=job.id, attempt=job.attempts, **fields)

    def _note(self, conn: sa.Connection, m: Modification, job: Job, details: dict[str, Any]) -> bool:
        return self.store.note(conn, m.id, status=m.status, source=ModificationSource.RECONCILE, details=details,
                               job_id=job.id, attempt=job.attempts)
