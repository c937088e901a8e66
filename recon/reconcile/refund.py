"""The refund's reconcile job: asks the PSP for one refund's truth and heals our record, as the payment's
reconcile job does for a charge (recon.reconcile.handler), by ``recon.reconcile.decide``'s refund table.

| PSP says                                  | our refund   | action                                            |
| ----------------------------------------- | ------------ | ------------------------------------------------- |
| succeeded, failed, reversed, another id   | any          | ``decide.refund_heal``'s decision                 |
| pending / cannot say (Adyen: no report    | unfinished   | snooze on the schedule, then needs_review         |
| row of it yet)                            |              |                                                   |
| not found, no PSP refund id ever recorded | unfinished   | grace period, then failed: "never reached the PSP" |
| not found, but we hold its PSP refund id  | unfinished   | needs_review (the PSP lost what it told us)       |
| anything else                             | final        | nothing; on a recheck, the answer is noted        |

A recheck (``recon review recheck REFUND_REF``) asks about a final refund: a succeeded refund the PSP now calls
failed or reversed goes to review (``refund_heal``); any other answer joins the audit trail.

While the refund's own job is unfinished (it may still send), the refund is left to it. A refund failed here
gives its amount back to the payment's captured amount in the same transaction (``RefundStore.apply``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

import sqlalchemy as sa

from psp_adapters.errors import PspError
from psp_adapters.protocol import NotFound, PaymentOutcome, PspAdapter, RefundingAdapter, Reversed
from recon.classify import classify
from recon.clock import Clock
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Snooze
from recon.errors import ChargeInFlight, ConfigError
from recon.payments.charge import config_dead
from recon.payments.guard import Guard, Unguarded
from recon.payments.refund import refund_ref
from recon.reconcile.config import ReconcileConfig
from recon.reconcile.decide import outcome_details, refund_answer, refund_heal
from recon.refund_rows import Refund, RefundSource, RefundTransition
from recon.rows import EnqueueRow, Job, PaymentStatus

REFUND_RECONCILE_KIND = "reconcile_refund"
#: how long the reconcile job waits while the refund's own job is unfinished (it decides first)
REFUND_BUSY_SNOOZE = timedelta(seconds=30)
MAX_ATTEMPTS = 10


def refund_reconcile_key(refund_id: int) -> str:
    """The unique key of a refund's reconcile job: overlapping sweeps and rechecks share it."""
    return f"reconcile_refund:{refund_id}"


def refund_reconcile_row(refund_id: int, *, queue: str, recheck: bool = False) -> EnqueueRow:
    payload: dict[str, Any] = {"refund_id": refund_id}
    if recheck:
        payload["recheck"] = True
    return EnqueueRow(queue=queue, kind=REFUND_RECONCILE_KIND, payload_json=json.dumps(payload), priority=0,
                      run_at=None, delay=0.0, max_attempts=MAX_ATTEMPTS, unique_key=refund_reconcile_key(refund_id),
                      tenant=None)


class RefundReconcileHandler:
    """Job kind ``reconcile_refund``, payload ``{"refund_id": N}`` (``"recheck": true`` for a final refund);
    ``job.progress["checks"]`` counts the pending answers so far, so the schedule survives restarts."""

    kind: ClassVar[str] = REFUND_RECONCILE_KIND

    def __init__(self, refunds: RefundStore, payments: PaymentStore, adapter_func: Callable[[str], PspAdapter], *,
                 config: ReconcileConfig, clock: Clock, guard: Guard | None = None) -> None:
        self.queue = config.queue
        self.refunds = refunds
        self.payments = payments
        self.adapter_func = adapter_func
        self.config = config
        self.clock = clock
        self.guard = guard or Unguarded()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        refund_id = int(job.payload["refund_id"])
        refund = self.refunds.get(refund_id)
        if refund is None:
            return Dead(error_kind="validation", error=f"refund {refund_id} does not exist")
        recheck = bool(job.payload.get("recheck"))
        if refund.status.final and not recheck:
            return Complete()
        if not refund.status.final and self._refund_job_unfinished(refund):
            return Snooze(REFUND_BUSY_SNOOZE, reason="the refund's own job is unfinished")
        payment = self.payments.get(refund.payment_id)
        assert payment is not None  # nosec B101  # a foreign key: type narrowing
        try:
            adapter = self.adapter_func(refund.psp)
            if not isinstance(adapter, RefundingAdapter):
                raise ConfigError(f"PSP {refund.psp!r}: its adapter does not refund")
        except ConfigError as exc:
            return config_dead(exc)
        permit = self.guard.admit(refund.psp, lease=lease)
        if isinstance(permit, Snooze):
            return permit
        lease.check()
        ref = refund_ref(refund, payment)
        try:
            answer = permit.call(lambda: adapter.fetch_refund(ref))
        except PspError as exc:
            return classify(exc)
        except ConfigError as exc:
            return config_dead(exc)
        return self._decide(refund, job, lease, answer, recheck=recheck)

    def _decide(self, refund: Refund, job: Job, lease: Lease, answer: PaymentOutcome | Reversed, *,
                recheck: bool) -> Outcome:
        details = {**outcome_details(answer), **({"recheck": True} if recheck else {})}
        answer, reversed_ = refund_answer(answer)  # Reversed: after success (Adyen's RefundedReversed)
        decision = refund_heal(refund, answer, reversed_=reversed_)
        if decision is not None:
            return self._move(refund, job, decision.target, details, **decision.fields())
        if refund.status.final:  # a recheck that changes nothing: the answer joins the audit trail
            return Complete(write=lambda conn: self.refunds.note(
                conn, refund_id=refund.id, status=refund.status, source=RefundSource.RECONCILE, details=details,
                job_id=job.id, attempt=job.attempts))
        if isinstance(answer, NotFound):
            return self._not_found(refund, job, details)
        return self._wait(refund, job, lease, details, why=f"PSP still says {answer.raw_status or 'pending'}",
                          psp_refund_id=answer.psp_reference)

    def _not_found(self, refund: Refund, job: Job, details: dict[str, Any]) -> Outcome:
        if refund.psp_refund_id:
            return self._move(refund, job, PaymentStatus.NEEDS_REVIEW, details,
                              review_reason=f"missing_at_psp: PSP has no refund {refund.psp_refund_id}")
        grace = self.config.for_psp(refund.psp).grace_period
        age = self.clock.now() - max(refund.created_at, refund.updated_at)  # no earlier than its last send's stamp
        if age < grace:
            return Snooze(grace - age, reason="not found at the PSP yet; inside the grace period")
        transition = RefundTransition(refund.id, refund.status, PaymentStatus.FAILED, RefundSource.RECONCILE,
                                      details=details, job_id=job.id, attempt=job.attempts,
                                      failure_reason="never reached the PSP (not found after the grace period)")

        def write(conn: sa.Connection) -> None:
            # sent again since it was read (a replayed job whose attempt then ended): the grace starts again
            current = self.refunds.get(refund.id, conn)
            if current is not None and current.updated_at != refund.updated_at:
                raise ChargeInFlight(f"refund {refund.id}: sent again while healing; retrying")
            # the compare-and-set locks the refund row; the refund job locks it before every send
            # (refund_mark_sent_if_unfinished): whichever is second sees the other
            if self.refunds.apply(conn, transition) and self.refunds.refund_job_unfinished(refund.id, conn):
                raise ChargeInFlight(f"refund {refund.id}: its refund job started while healing; retrying")

        return Complete(write=write)

    def _wait(self, refund: Refund, job: Job, lease: Lease, details: dict[str, Any], *, why: str,
              psp_refund_id: str | None) -> Outcome:
        schedule = self.config.for_psp(refund.psp).schedule
        checks = int((job.progress or {}).get("checks", 0))
        if checks >= len(schedule):
            return self._move(refund, job, PaymentStatus.NEEDS_REVIEW, details,
                              review_reason=f"no_final_answer: after {checks} checks: {why}")
        lease.save_progress({"checks": checks + 1})
        write = None
        if psp_refund_id and not refund.psp_refund_id:
            def write(conn: sa.Connection) -> None:
                self.refunds.remember_psp_refund_id(conn, refund_id=refund.id, status=refund.status,
                                                    psp_refund_id=psp_refund_id)
        return Snooze(schedule[checks], reason=why, write=write)

    def _move(self, refund: Refund, job: Job, target: PaymentStatus, details: dict[str, Any],
              **fields: Any) -> Outcome:
        transition = RefundTransition(refund.id, refund.status, target, RefundSource.RECONCILE, details=details,
                                      job_id=job.id, attempt=job.attempts, **fields)
        return Complete(write=lambda conn: self.refunds.apply(conn, transition))

    def _refund_job_unfinished(self, refund: Refund) -> bool:
        with self.refunds.db.begin() as conn:
            return self.refunds.refund_job_unfinished(refund.id, conn)
