"""The capture's and cancel's reconcile job: asks the PSP what became of one modification and heals our record,
as the refund's reconcile job does (recon.reconcile.refund), by ``recon.reconcile.decide``'s modification table.

| PSP says                                  | ours         | action                                            |
| ----------------------------------------- | ------------ | ------------------------------------------------- |
| succeeded, failed, another id             | unfinished   | ``decide.modification_heal``'s decision           |
| pending / cannot say (Adyen: always)      | unfinished   | snooze on the schedule, then needs_review         |
| not found, no PSP id ever recorded        | unfinished   | grace period, then failed: "never reached the PSP" |
| not found, but we hold its PSP id         | unfinished   | needs_review (the PSP lost what it told us)       |
| anything                                  | final        | nothing; on a recheck, ``decide.modification_recheck`` |

A recheck (``recon review recheck MOD_REF``, payload ``"recheck": true``) asks about a final capture or cancel:
a succeeded one the PSP now contradicts (Stripe: the PaymentIntent canceled after our capture, captured after our
cancel, or another amount captured) goes to review, and so does its payment (to needs_review, the same reason):
money recon counted may not be there. So does a failed capture the PSP says succeeded (``decide.late_capture``:
money moved that we think did not). Any other answer joins its audit trail.

Stripe's capture and cancel are read back from the PaymentIntent (``requires_capture``: neither happened yet);
Adyen's only by its CAPTURE / CAPTURE_FAILED / CANCELLATION webhooks and its reports, so an Adyen modification
no webhook settled ends in review after the schedule. While the modification's own job is unfinished (it may
still send), the modification is left to it. A failure gives its claim on the authorisation back, in the same
transaction (``ModificationStore.apply``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from psp_adapters.errors import PspError
from psp_adapters.protocol import NotFound, PaymentOutcome, PspAdapter
from recon.classify import classify
from recon.clock import Clock
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Snooze
from recon.errors import ChargeInFlight, ConfigError
from recon.modification_rows import Modification, ModificationSource, ModificationTransition
from recon.payments.charge import config_dead
from recon.payments.guard import Guard, Unguarded
from recon.payments.modification import capturing_adapter, modification_request
from recon.reconcile.config import ReconcileConfig
from recon.reconcile.decide import modification_heal, modification_recheck, outcome_details
from recon.rows import EnqueueRow, Job, Payment, PaymentStatus

MODIFICATION_RECONCILE_KIND = "reconcile_modification"
#: how long the reconcile job waits while the modification's own job is unfinished (it decides first)
BUSY_SNOOZE = timedelta(seconds=30)
MAX_ATTEMPTS = 10


def modification_reconcile_key(modification_id: int) -> str:
    """The unique key of a modification's reconcile job: overlapping sweeps share it."""
    return f"reconcile_modification:{modification_id}"


def modification_reconcile_row(modification_id: int, *, queue: str, recheck: bool = False) -> EnqueueRow:
    payload: dict[str, Any] = {"modification_id": modification_id, **({"recheck": True} if recheck else {})}
    return EnqueueRow(queue=queue, kind=MODIFICATION_RECONCILE_KIND, payload_json=json.dumps(payload), priority=0,
                      run_at=None,
                      delay=0.0, max_attempts=MAX_ATTEMPTS, unique_key=modification_reconcile_key(modification_id),
                      tenant=None)


class ModificationReconcileHandler:
    """Job kind ``reconcile_modification``, payload ``{"modification_id": N}`` (``"recheck": true`` for a final
    one); ``job.progress["checks"]`` counts the pending answers so far, so the schedule survives restarts."""

    kind = MODIFICATION_RECONCILE_KIND

    def __init__(self, modifications: ModificationStore, payments: PaymentStore,
                 adapter_func: Callable[[str], PspAdapter], *, config: ReconcileConfig, clock: Clock,
                 guard: Guard | None = None) -> None:
        self.queue = config.queue
        self.modifications = modifications
        self.payments = payments
        self.adapter_func = adapter_func
        self.config = config
        self.clock = clock
        self.guard = guard or Unguarded()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        mid = int(job.payload["modification_id"])
        mod = self.modifications.get(mid)
        if mod is None:
            return Dead(error_kind="validation", error=f"modification {mid} does not exist")
        recheck = bool(job.payload.get("recheck"))
        if mod.status.final and not recheck:
            return Complete()
        if not mod.status.final:
            with self.modifications.db.begin() as conn:
                if self.modifications.job_unfinished(mod.id, conn):
                    return Snooze(BUSY_SNOOZE, reason=f"the {mod.kind}'s own job is unfinished")
        payment = self.payments.get(mod.payment_id)
        assert payment is not None  # nosec B101  # a foreign key: type narrowing
        try:
            adapter = capturing_adapter(self.adapter_func, mod.psp)
        except ConfigError as exc:
            return config_dead(exc)
        permit = self.guard.admit(mod.psp, lease=lease)
        if isinstance(permit, Snooze):
            return permit
        lease.check()
        request = modification_request(mod, payment)
        try:
            answer = permit.call(lambda: adapter.fetch_modification(request))
        except PspError as exc:
            return classify(exc)
        if mod.status.final:
            return self._recheck(mod, payment, job, answer)
        return self._decide(mod, job, lease, answer)

    def _recheck(self, mod: Modification, payment: Payment, job: Job, answer: PaymentOutcome) -> Outcome:
        """A final modification asked about again: review (it and its payment) when the PSP contradicts it, else
        the answer noted."""
        details = {**outcome_details(answer), "recheck": True}
        decision = modification_recheck(mod, answer, captured=payment.captured_amount)
        if decision is None:
            return Complete(write=lambda conn: self.modifications.note(
                conn, modification_id=mod.id, status=mod.status, source=ModificationSource.RECONCILE,
                details=details, job_id=job.id, attempt=job.attempts))
        # its payment follows it to review in the same transaction (ModificationStore.apply); changed since we
        # read it: nothing written, the next recheck asks again
        return self._move(mod, job, decision.target, details, **decision.fields())

    def _decide(self, mod: Modification, job: Job, lease: Lease, answer: PaymentOutcome) -> Outcome:
        details = outcome_details(answer)
        decision = modification_heal(mod, answer)
        if decision is not None:
            return self._move(mod, job, decision.target, details, **decision.fields())
        if isinstance(answer, NotFound):
            return self._not_found(mod, job, details)
        return self._wait(mod, job, lease, details, why=f"PSP still says {answer.raw_status or 'pending'}")

    def _not_found(self, mod: Modification, job: Job, details: dict[str, Any]) -> Outcome:
        if mod.psp_modification_id:
            return self._move(mod, job, PaymentStatus.NEEDS_REVIEW, details,
                              review_reason=f"missing_at_psp: PSP has no {mod.kind} {mod.psp_modification_id}")
        grace = self.config.for_psp(mod.psp).grace_period
        age = self.clock.now() - max(mod.created_at, mod.updated_at)
        if age < grace:
            return Snooze(grace - age, reason="not found at the PSP yet; inside the grace period")
        transition = ModificationTransition(mod.id, mod.status, PaymentStatus.FAILED, ModificationSource.RECONCILE,
                                            details=details, job_id=job.id, attempt=job.attempts,
                                            failure_reason="never reached the PSP (not found after the grace period)")

        def write(conn: sa.Connection) -> None:
            # sent again since it was read (a replayed job whose attempt then ended): the grace starts again
            current = self.modifications.get(mod.id, conn)
            if current is not None and current.updated_at != mod.updated_at:
                raise ChargeInFlight(f"modification {mod.id}: sent again while healing; retrying")
            # the compare-and-set locks the row; the modification's job locks it before every send
            if self.modifications.apply(conn, transition) and self.modifications.job_unfinished(mod.id, conn):
                raise ChargeInFlight(f"modification {mod.id}: its job started while healing; retrying")

        return Complete(write=write)

    def _wait(self, mod: Modification, job: Job, lease: Lease, details: dict[str, Any], *, why: str) -> Outcome:
        schedule = self.config.for_psp(mod.psp).schedule
        checks = int((job.progress or {}).get("checks", 0))
        if checks >= len(schedule):
            return self._move(mod, job, PaymentStatus.NEEDS_REVIEW, details,
                              review_reason=f"no_final_answer: after {checks} checks: {why}")
        lease.save_progress({"checks": checks + 1})
        return Snooze(schedule[checks], reason=why)

    def _move(self, mod: Modification, job: Job, target: PaymentStatus, details: dict[str, Any],
              **fields: Any) -> Outcome:
        transition = ModificationTransition(mod.id, mod.status, target, ModificationSource.RECONCILE,
                                            details=details, job_id=job.id, attempt=job.attempts, **fields)
        return Complete(write=lambda conn: self.modifications.apply(conn, transition))
