"""The reconcile handler: asks the PSP for one payment's truth and heals our record (docs/design.md).

| PSP says                                  | local                  | action                                        |
| ----------------------------------------- | ---------------------- | --------------------------------------------- |
| succeeded, same amount and currency       | unfinished             | heal -> succeeded                             |
| failed / canceled                         | unfinished             | heal -> failed                                |
| succeeded, other amount or currency       | unfinished             | needs_review (never auto-healed)              |
| customer action required (3-D Secure)     | unfinished             | needs_review: authentication required         |
| pending / cannot say (Unknown)            | unfinished             | snooze on the schedule, then needs_review     |
| not found, no PSP reference ever recorded | unfinished             | snooze within the grace period, then failed   |
| not found, but we hold its PSP reference  | unfinished             | needs_review (the PSP lost what it told us)   |
| anything                                  | final                  | nothing (consistent)                          |
| anything (a recheck: ``recon review``)    | needs_review           | the answer joins the audit trail; status stays |
| anything naming another PSP reference     | unfinished             | needs_review (reference_conflict)             |

A payment whose charge job holds a live lease right now is left to that job (snoozed briefly). The PSP
guard (``recon.payments.guard``) may snooze the job before the call: paused, cooling down, breaker open. Every heal
is a payment event carrying the PSP's answer, committed with the fenced job finish.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

import sqlalchemy as sa

from psp_adapters.errors import PspError
from psp_adapters.protocol import NotFound, PaymentOutcome, PspAdapter, PspRef
from recon.classify import classify
from recon.clock import Clock
from recon.db.payment_store import PaymentStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Snooze
from recon.errors import ChargeInFlight, ConfigError
from recon.payments.charge import config_dead
from recon.payments.guard import Guard, Unguarded
from recon.reconcile.config import ReconcileConfig
from recon.reconcile.decide import conflict, heal, late_news, outcome_details
from recon.rows import EnqueueRow, EventSource, Job, Payment, PaymentStatus, Transition

RECONCILE_KIND = "reconcile"


#: how long a reconcile job waits while the payment's charge job holds a live lease (the charge decides first)
CHARGE_BUSY_SNOOZE = timedelta(seconds=30)


#: attempts of a reconcile job queued by another job (a window's fall-back, a webhook's conflict), as the sweep's
FALLBACK_MAX_ATTEMPTS = 10


def reconcile_key(payment_id: int) -> str:
    """The unique key of a payment's reconcile job: overlapping sweeps never duplicate work."""
    return f"reconcile:{payment_id}"


def reconcile_row(payment: Payment, *, queue: str, delay: timedelta = timedelta(0)) -> EnqueueRow:
    """The payment's reconcile job as another job's finish queues it (``PaymentStore.enqueue_reconcile``): unique
    key ``reconcile:<id>``, so one already queued is the one that runs."""
    return EnqueueRow(queue=queue, kind=RECONCILE_KIND, payload_json=json.dumps({"payment_id": payment.id}),
                      priority=0, run_at=None, delay=delay.total_seconds(), max_attempts=FALLBACK_MAX_ATTEMPTS,
                      unique_key=reconcile_key(payment.id), tenant=payment.merchant_account)


class ReconcileHandler:
    """Job kind ``reconcile``, payload ``{"payment_id": N}``; ``job.progress["checks"]`` counts the pending
    answers so far, so the schedule survives crashes and restarts."""

    kind: ClassVar[str] = RECONCILE_KIND

    def __init__(self, ledger: PaymentStore, adapter_func: Callable[[str], PspAdapter], *, config: ReconcileConfig,
                 clock: Clock, guard: Guard | None = None) -> None:
        self.queue = config.queue
        self.ledger = ledger
        self.adapter_func = adapter_func
        self.config = config
        self.clock = clock
        self.guard = guard or Unguarded()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        payment_id = int(job.payload["payment_id"])
        payment, charge_leased = self.ledger.get_with_charge_lease(payment_id)
        if payment is None:
            return Dead(error_kind="validation", error=f"payment {payment_id} does not exist")
        recheck = payment.status is PaymentStatus.NEEDS_REVIEW and bool(job.payload.get("recheck"))
        # the sweep's check of an authorisation past its validity (recon.reconcile.capture_sweep)
        expiry = payment.status is PaymentStatus.AUTHORISED and bool(job.payload.get("expiry"))
        if payment.status.final and not (recheck or expiry):
            return Complete()
        if charge_leased:
            return Snooze(CHARGE_BUSY_SNOOZE, reason="charge job holds a live lease")
        try:
            adapter = self.adapter_func(payment.psp)
        except ConfigError as exc:
            return config_dead(exc)
        permit = self.guard.admit(payment.psp, lease=lease)  # paused, cooling, breaker open, rate limit
        if isinstance(permit, Snooze):
            return permit
        lease.check()
        ref = PspRef(psp_reference=payment.psp_reference, merchant_reference=payment.merchant_reference,
                     merchant_account=payment.merchant_account)
        try:
            answer = permit.call(lambda: adapter.fetch_payment(ref))
        except PspError as exc:
            return classify(exc)
        if recheck:
            return self._evidence(payment, job, answer)
        if expiry:
            return self._expiry(payment, job, answer)
        return self._decide(payment, job, lease, answer)

    def _expiry(self, payment: Payment, job: Job, answer: PaymentOutcome) -> Outcome:
        """An authorisation past its validity: the PSP's word that it ended (``decide.late_news``: canceled,
        expired) ends the payment failed; any other answer joins its audit trail, and the sweep flags it again."""
        details = {**outcome_details(answer), "expiry": True}
        decision = late_news(payment, answer) if conflict(payment, answer) is None else None
        if decision is not None:
            return self._heal(payment, job, decision.target, details, **decision.fields())
        return Complete(write=lambda conn: self.ledger.note(conn, payment_id=payment.id, status=payment.status,
                                                            source=EventSource.RECONCILE, details=details,
                                                            job_id=job.id, attempt=job.attempts))

    def _evidence(self, payment: Payment, job: Job, answer: PaymentOutcome) -> Outcome:
        """A recheck of a payment in review (``recon review recheck``): the PSP's answer joins its audit trail;
        the status stays (only a person moves a payment out of review)."""
        details = {**outcome_details(answer), "recheck": True}
        theirs = conflict(payment, answer)
        if theirs is not None:  # evidence for the person deciding, naming both; never written over ours
            details.update(theirs.details())
        return Complete(write=lambda conn: self.ledger.note(conn, payment_id=payment.id, status=payment.status,
                                                            source=EventSource.RECONCILE, details=details,
                                                            job_id=job.id, attempt=job.attempts))

    def _decide(self, payment: Payment, job: Job, lease: Lease, answer: PaymentOutcome) -> Outcome:
        details = outcome_details(answer)
        theirs = conflict(payment, answer, asked=True)
        if theirs is not None and theirs.review is not None:  # asked about ours, told about another: a person
            return self._heal(payment, job, theirs.review.target, {**details, **theirs.details()},
                              **theirs.review.fields())
        decision = heal(payment, answer)
        if decision is not None:
            return self._heal(payment, job, decision.target, details, **decision.fields())
        if isinstance(answer, NotFound):
            return self._not_found(payment, job, lease, details)
        return self._wait(payment, job, lease, details, why=f"PSP still says {answer.raw_status or 'pending'}")

    def _not_found(self, payment: Payment, job: Job, lease: Lease, details: dict[str, Any]) -> Outcome:
        if payment.psp_reference:
            return self._heal(payment, job, PaymentStatus.NEEDS_REVIEW, details,
                              review_reason=f"missing_at_psp: PSP has no payment {payment.psp_reference}")
        grace = self.config.for_psp(payment.psp).grace_period
        # counted from the payment's last change, which is no earlier than the stamp of its last send
        # (payment_touch_if_unfinished): a request stamped, then held up in a paused worker whose lease the
        # watcher took back, lands within the grace of that stamp (docs/verification.md, finding 2)
        age = self.clock.now() - max(payment.created_at, payment.updated_at)
        if age < grace:
            return Snooze(grace - age, reason="not found at the PSP yet; inside the grace period")
        if self.ledger.charge_unfinished(payment.id):
            # absence of evidence while a charge may still be sent is no evidence: the charge job decides
            return Snooze(self._first_wait(payment), reason="not found at the PSP; its charge job is unfinished")
        transition = Transition(payment.id, payment.status, PaymentStatus.FAILED, EventSource.RECONCILE,
                                details=details, job_id=job.id, attempt=job.attempts,
                                failure_reason="never reached the PSP (not found after the grace period)")

        def write(conn: sa.Connection) -> None:
            # the compare-and-set locks the payment row; the charge handler locks it before every send.
            # Whichever is second sees the other: a send after this commit finds the payment final, and
            # this heal, if a charge job started meanwhile, finds it unfinished and rolls back.
            if self.ledger.apply(conn, transition) and self.ledger.charge_unfinished(payment.id, conn):
                raise ChargeInFlight(f"payment {payment.id}: its charge job started while healing; retrying")

        return Complete(write=write)

    def _first_wait(self, payment: Payment) -> timedelta:
        schedule = self.config.for_psp(payment.psp).schedule
        return schedule[0] if schedule else CHARGE_BUSY_SNOOZE

    def _wait(self, payment: Payment, job: Job, lease: Lease, details: dict[str, Any], *, why: str) -> Outcome:
        schedule = self.config.for_psp(payment.psp).schedule
        checks = int((job.progress or {}).get("checks", 0))
        if checks >= len(schedule):
            return self._heal(payment, job, PaymentStatus.NEEDS_REVIEW, details,
                              review_reason=f"no_final_answer: after {checks} checks: {why}")
        lease.save_progress({"checks": checks + 1})
        write = None
        if details.get("psp_reference") and not payment.psp_reference:
            ref = str(details["psp_reference"])
            write = self._remember(payment, ref)
        return Snooze(schedule[checks], reason=why, write=write)

    def _remember(self, payment: Payment, ref: str) -> Callable[[sa.Connection], Any]:
        return lambda conn: self.ledger.remember_psp_reference(conn, payment_id=payment.id, status=payment.status,
                                                               psp_reference=ref)

    def _heal(self, payment: Payment, job: Job, target: PaymentStatus, details: dict[str, Any],
              **fields: Any) -> Outcome:
        transition = Transition(payment.id, payment.status, target, EventSource.RECONCILE, details=details,
                                job_id=job.id, attempt=job.attempts, **fields)
        return Complete(write=lambda conn: self.ledger.apply(conn, transition))
