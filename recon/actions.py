"""What people do, in one place for the command line and the console: each write checks its operator's role
(``recon.operators``), asks for four eyes where it needs them (``recon.four_eyes``), and leaves its audit row
(``recon.audit``), refusals included.

| action                 | role     | four eyes                                    | audit action        |
| ---------------------- | -------- | -------------------------------------------- | ------------------- |
| resolve a payment      | operator | with override                                | review.resolve      |
| recheck a payment      | operator |                                              | review.recheck      |
| assign a payment       | operator |                                              | review.assign       |
| comment on a payment   | operator |                                              | review.comment      |
| bulk resolve           | operator | more than ``[four_eyes] bulk_resolve_count``  | review.bulk_resolve |
| resolve a payout exc.  | operator |                                              | payouts.resolve     |
| pause a PSP            | operator | always                                       | psp.pause           |
| resume a PSP           | operator |                                              | psp.resume          |
| replay dead jobs       | operator | more than ``replay_count`` jobs or, in a     | jobs.replay         |
|                        |          | currency, ``[four_eyes.replay_amount]``      |                     |
| retry or cancel a job  | operator |                                              | jobs.retry, .cancel |
| capture a payment      | operator |                                              | payment.capture     |
| cancel an authorisation| operator |                                              | payment.cancel      |
| resolve a capture/cancel | operator |                                            | modification.resolve |
| recheck a capture/cancel | operator |                                            | modification.recheck |
| refund a payment       | operator |                                              | refund.create       |
| resolve a refund       | operator |                                              | refund.resolve      |
| recheck a refund       | operator |                                              | refund.recheck      |
| approve or reject      | approver | never one's own                              | the request's       |
| import payments, bank  | operator |                                              | payments.import,    |
| statements, refunds;   | or the   |                                              | bank.import,        |
| sweep                  | system   |                                              | refunds.import,     |
|                        |          |                                              | sweep               |

A write that needs four eyes returns the pending ``Approval`` instead of its result. The batch commands (the
last row) name an operator with ``--by`` when a person runs them; without it they act as the system
(``SYSTEM_CLI``), as schedules and scripts run them, and are audited as such.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from recon import review_bulk
from recon.audit import entry
from recon.db.audit_store import AuditStore
from recon.db.modification_store import ModificationStore
from recon.engine.client import Client
from recon.engine.replay import ReplayRun, replay
from recon.errors import ReviewRefused, UsageError
from recon.four_eyes import FourEyes, replay_payload
from recon.modification_rows import (
    CANCEL,
    CAPTURE,
    Modification,
    ModificationSource,
    ModificationTransition,
    NewModification,
)
from recon.operator_rows import Approval, Role
from recon.operators import Operators
from recon.payments import guard
from recon.payments.money import parse_amount
from recon.payments.refund_import import RefundChecker, RefundProblem
from recon.payout_rows import PayoutException
from recon.reconcile.modification import MODIFICATION_RECONCILE_KIND, modification_reconcile_key
from recon.reconcile.refund import REFUND_RECONCILE_KIND, refund_reconcile_key
from recon.refund_rows import Refund, RefundSource, RefundTransition
from recon.review import Resolution
from recon.review_bulk import BulkPreview
from recon.review_rows import QueueFilter
from recon.rows import Job, JobFilter, Payment, PaymentStatus

BULK_RESOLVE = "review.bulk_resolve"
#: who an import or a sweep acts as without ``--by``: the system (a schedule, a script), audited as such
SYSTEM_CLI = "system:cli"


@dataclass(frozen=True, slots=True)
class Replayed:
    """A replay that ran (``run``) or, above the threshold, waits for an approver (``approval``)."""

    run: ReplayRun | None
    approval: Approval | None
    matched: int  #: the dead jobs the filters matched when it was asked


class Actions:
    """One per App (``App.actions``)."""

    def __init__(self, app: Any) -> None:  # recon.app.App (it imports this module)
        self.app = app

    @property
    def operators(self) -> Operators:
        return self.app.operators  # type: ignore[no-any-return]

    @property
    def four_eyes(self) -> FourEyes:
        four_eyes: FourEyes = self.app.four_eyes
        four_eyes.register(BULK_RESOLVE, self._bulk_resolve_approved)
        return four_eyes

    @property
    def audit(self) -> AuditStore:
        return self.app.audit  # type: ignore[no-any-return]

    def _who(self, by: str | None, needs: Role, action: str) -> str:
        return self.operators.authorize(by, needs, action=action).name

    # --- the review desk -----------------------------------------------------------------------------------

    def resolve(self, reference: str, *, to: str, reason: str, by: str | None, override: bool = False,
                difference: str | None = None) -> Resolution | Approval:
        who = self._who(by, Role.OPERATOR, "review resolve")
        if override:
            payment = self.app.review.get(reference)
            if payment.status is not PaymentStatus.NEEDS_REVIEW:
                raise UsageError(f"payment {reference} is {payment.status}, not needs_review: only a payment in "
                                 "review is resolved by hand")
            if to not in ("succeeded", "failed"):
                raise UsageError(f"resolve as: {to!r} is neither succeeded nor failed")
            return self.four_eyes.request("review.resolve", reference, {
                "reference": reference, "to": to, "reason": reason, "difference": difference}, by=who)
        try:
            done: Resolution = self.app.review.resolve(reference, to=to, reason=reason, by=who,
                                                       difference=difference)
        except ReviewRefused as exc:
            self.audit.record(entry(who, "review.resolve", reference, "refused", to=to, reason=reason,
                                    why=str(exc)))
            raise
        self.audit.record(entry(who, "review.resolve", reference, to=to, reason=reason,
                                psp_status=done.details.get("psp_status"), psp_asked=done.details.get("psp_asked")))
        return done

    def recheck(self, reference: str, *, by: str | None) -> int:
        who = self._who(by, Role.OPERATOR, "review recheck")
        job_id: int = self.app.review.recheck(reference)
        self.audit.record(entry(who, "review.recheck", reference, job=job_id))
        return job_id

    def assign(self, reference: str, *, to: str | None, by: str | None) -> Payment:
        who = self._who(by, Role.OPERATOR, "review assign")
        payment: Payment = self.app.review.assign(reference, to=to, by=who)
        self.audit.record(entry(who, "review.assign", reference, to=payment.review_assignee))
        return payment

    def comment(self, reference: str, *, text: str, by: str | None) -> None:
        who = self._who(by, Role.OPERATOR, "review comment")
        self.app.review.comment(reference, text=text, by=who)
        self.audit.record(entry(who, "review.comment", reference, text=text))

    def bulk_resolve(self, where: QueueFilter, *, to: str, reason: str, by: str | None,
                     expect: str) -> BulkPreview | Approval:
        """Resolve what a preview showed (its digest ``expect``), all or nothing (``recon.review_bulk``); more
        than ``[four_eyes] bulk_resolve_count`` payments: a pending request instead, run when approved."""
        who = self._who(by, Role.OPERATOR, "review bulk-resolve")
        threshold = self.four_eyes.config.bulk_resolve_count
        requested: list[Approval] = []

        def four_eyes(shown: BulkPreview, by: str) -> None:  # review_bulk's approval_func
            if shown.count > threshold:
                payload = {"where": _filter_doc(where), "to": str(shown.to), "reason": reason,
                           "digest": shown.digest, "count": shown.count}
                requested.append(self.four_eyes.request(BULK_RESOLVE, f"{shown.count} payments in review",
                                                        payload, by=by))
                raise _Requested

        try:
            done = review_bulk.apply(self.app.review, where, to=to, reason=reason, by=who, expect=expect,
                                     approval_func=four_eyes)
        except _Requested:
            return requested[0]
        except ReviewRefused as exc:
            self.audit.record(entry(who, BULK_RESOLVE, "payments in review", "refused", to=to, reason=reason,
                                    why=str(exc)))
            raise
        self.audit.record(entry(who, BULK_RESOLVE, f"{done.count} payments in review", to=to, reason=reason,
                                digest=done.digest, payments=[p.merchant_reference for p in done.payments]))
        return done

    def _bulk_resolve_approved(self, approval: Approval, approver: str) -> str:
        """The four-eyes executor of a bulk resolve: exactly the previewed set, or nothing (its digest)."""
        p = approval.payload
        done = review_bulk.apply(self.app.review, _filter_of(p["where"]), to=p["to"], reason=p["reason"],
                                 by=approval.requested_by, expect=p["digest"])
        return f"resolved {done.count} payments as {done.to} (approved by {approver})"

    # --- refunds ------------------------------------------------------------------------------------------------

    def refund(self, reference: str, *, amount: str, reason: str, by: str | None,
               refund_reference: str | None = None) -> Refund:
        """Refund payment ``reference`` (its merchant reference) by ``amount`` (major units of its currency): one
        refund job, never beyond its capture. RefundProblem names the field that is wrong (audited as refused)."""
        who = self._who(by, Role.OPERATOR, "refund")
        refunds, payments = self.app.refunds, self.app.payments
        payment = payments.by_reference(reference.strip())
        ref = refund_reference if refund_reference is not None else _next_refund_reference(
            refunds, reference.strip(), payment)
        try:
            new = RefundChecker(payments.by_reference, self.app.refund_reasons, who).check(reference, ref, amount,
                                                                                          reason)
            if refunds.existing_references([new.refund_reference]):
                raise RefundProblem(f"refund_reference {new.refund_reference!r} already exists", "refund_reference")
        except RefundProblem as exc:
            self.audit.record(entry(who, "refund.create", reference, "refused", amount=amount, reason=reason,
                                    why=f"{exc.field_name}: {exc}"))
            raise
        queue = self.app.payments_config.queue
        [rid] = refunds.create([new], queue=queue, max_depth={queue: self.app.settings.queue(queue).max_depth})
        made: Refund = refunds.get(rid)
        self.audit.record(entry(who, "refund.create", reference, refund=made.refund_reference, amount=made.amount,
                                currency=made.currency, reason=made.reason))
        return made

    def resolve_refund(self, reference: str, *, to: str, reason: str, by: str | None) -> Refund:
        """Move refund ``reference`` out of needs_review by hand (compare-and-set); UsageError when it is not in
        review or changed meanwhile."""
        who = self._who(by, Role.OPERATOR, "refunds resolve")
        found = self.app.refunds.by_reference(reference)
        if found is None:
            raise UsageError(f"refund {reference} not found")
        if found.status is not PaymentStatus.NEEDS_REVIEW:
            raise UsageError(f"refund {reference} is {found.status}, not in needs_review: nothing to resolve")
        target = PaymentStatus(to)
        transition = RefundTransition(found.id, PaymentStatus.NEEDS_REVIEW, target, RefundSource.MANUAL,
                                      details={"operator": who, "reason": reason},
                                      failure_reason=f"resolved by hand: {reason}" if target is PaymentStatus.FAILED
                                      else None)
        with self.app.db.begin() as conn:
            moved = self.app.refunds.apply(conn, transition)
        if not moved:
            raise UsageError(f"refund {reference} changed meanwhile: nothing resolved")
        self.audit.record(entry(who, "refund.resolve", reference, to=to, reason=reason))
        resolved: Refund = self.app.refunds.get(found.id)
        return resolved
    # --- the close's exceptions --------------------------------------------------------------------------------

    def resolve_payout_exception(self, exception_id: int, *, reason: str, by: str | None) -> PayoutException:
        """Resolve an open payout exception (``CloseStore.resolve``: the payout's history records it too)."""
        who = self._who(by, Role.OPERATOR, "payouts resolve")
        subject = f"payout exception {exception_id}"
        try:
            done = self.app.closes.resolve(exception_id, by=who, reason=reason)
        except ReviewRefused as exc:
            self.audit.record(entry(who, "payouts.resolve", subject, "refused", reason=reason, why=str(exc)))
            raise
        self.audit.record(entry(who, "payouts.resolve", subject, kind=done.kind.value, payout=done.payout_id,
                                bank_entry=done.entry_id, reason=reason))
        return done  # type: ignore[no-any-return]

    # --- PSP controls ----------------------------------------------------------------------------------------

    def pause(self, psp: str, *, reason: str | None, by: str | None) -> Approval:
        who = self._who(by, Role.OPERATOR, "psp pause")
        return self.four_eyes.request("psp.pause", psp, {"psp": psp, "reason": reason}, by=who)

    def resume(self, psp: str, *, by: str | None) -> tuple[bool, int]:
        who = self._who(by, Role.OPERATOR, "psp resume")
        was_paused, woken = guard.resume(self.app.controls, psp, by=who)
        self.audit.record(entry(who, "psp.resume", psp, "done" if was_paused else "unchanged", woken=woken))
        return was_paused, woken

    # --- jobs ----------------------------------------------------------------------------------------------------

    def replay(self, filters: JobFilter, *, budget: int, by: str | None, limit: int | None = None,
               batch: int = 500) -> Replayed:
        """Replay the dead jobs ``filters`` match, or ask for an approval when more than ``replay_count`` do or
        their payments and refunds add up to more than ``replay_amount`` in a currency (``amount_at_stake``).

        Hazard: the replay reads the filters again when it runs; a job that dies between the check and the run
        is replayed too (run it with ``limit`` to bound that)."""
        who = self._who(by, Role.OPERATOR, "jobs replay")
        config = self.four_eyes.config
        threshold = config.replay_count
        cap = threshold + 1 if limit is None else min(limit, threshold + 1)
        preview = replay(self.app.jobs, filters, budget=budget, operator=who, limit=cap, dry_run=True)
        # within the count, the preview holds every job the replay would move: their amounts are all known
        over = None if len(preview.replayed) > threshold else config.amount_over(self.amount_at_stake(preview.jobs))
        if len(preview.replayed) > threshold or over is not None:
            payload = replay_payload(filters, budget=budget, limit=limit)
            subject = (f"{len(preview.replayed)} dead jobs worth {over}" if over is not None
                       else f"more than {threshold} dead jobs" if limit is None else f"up to {limit} dead jobs")
            approval = self.four_eyes.request("jobs.replay", subject, payload, by=who)
            return Replayed(run=None, approval=approval, matched=len(preview.replayed))
        run = replay(self.app.jobs, filters, budget=budget, operator=who, limit=limit, batch=batch)
        self.audit.record(entry(who, "jobs.replay", f"{len(run.replayed)} dead jobs", job_ids=run.replayed[:1000],
                                skipped=run.skipped[:1000], budget=budget))
        return Replayed(run=run, approval=None, matched=len(run.replayed))

    def amount_at_stake(self, jobs: list[Job]) -> dict[str, int]:
        """Currency -> minor units of the payments (charge and reconcile jobs: ``payment_id``) and refunds
        (``refund_id``) the jobs act on, each payment or refund counted once; other jobs move no money."""
        payment_ids = sorted({i for j in jobs if isinstance(i := j.payload.get("payment_id"), int)})
        refund_ids = sorted({i for j in jobs if isinstance(i := j.payload.get("refund_id"), int)})
        moved = [(p.currency, p.amount) for p in self.app.payments.get_many(payment_ids)] if payment_ids else []
        moved += [(r.currency, r.amount) for i in refund_ids if (r := self.app.refunds.get(i)) is not None]
        totals: dict[str, int] = {}
        for currency, amount in moved:
            totals[currency] = totals.get(currency, 0) + amount
        return totals

    def retry(self, job_id: int, *, by: str | None) -> None:
        who = self._who(by, Role.OPERATOR, "jobs retry")
        Client(self.app.jobs, self.app.settings).retry(job_id)
        self.audit.record(entry(who, "jobs.retry", f"job {job_id}"))

    def cancel(self, job_id: int, *, by: str | None) -> str:
        who = self._who(by, Role.OPERATOR, "jobs cancel")
        result = Client(self.app.jobs, self.app.settings).cancel(job_id)
        self.audit.record(entry(who, "jobs.cancel", f"job {job_id}", result))
        return result

    # --- batch commands: imports and the sweep ------------------------------------------------------------------

    def batch_actor(self, by: str | None, action: str) -> str:
        """Who an import or a sweep acts as: the operator ``by`` (enabled, role operator or above; NotAllowed and
        nothing done otherwise) or, without it, the system (``SYSTEM_CLI``). Asked before any work."""
        return SYSTEM_CLI if by is None else self._who(by, Role.OPERATOR, action.replace(".", " "))

    def batch_done(self, who: str, action: str, subject: str, outcome: str = "done", **evidence: Any) -> None:
        """The audit row of an import or a sweep, once its write is done."""
        self.audit.record(entry(who, action, subject, outcome, **evidence))

    # --- captures and cancels of authorised payments -------------------------------------------------------------

    def capture(self, reference: str, *, amount: str | None, by: str | None) -> Modification:
        """Capture authorised payment ``reference`` (its merchant reference): ``amount`` in major units of its
        currency, at most what the authorisation has left (None: all of it); one capture job. Raises
        UsageError (nothing written, the refusal audited) when the payment cannot take it."""
        return self._modify(CAPTURE, reference, amount=amount, by=by)

    def cancel_authorisation(self, reference: str, *, by: str | None) -> Modification:
        """Cancel authorised payment ``reference``: its whole authorisation released; one cancel job."""
        return self._modify(CANCEL, reference, amount=None, by=by)

    def resolve_modification(self, reference: str, *, to: str, reason: str, by: str | None) -> Modification:
        """Move capture or cancel ``reference`` out of needs_review by hand (after looking at the PSP's
        dashboard): succeeded (a capture's payment then succeeded with the capture's amount; a cancel's failed) or
        failed (its claim given back). Raises UsageError (audited) unless it is in review."""
        who = self._who(by, Role.OPERATOR, "captures resolve")
        store: ModificationStore = self.app.modifications
        try:
            found = store.by_reference(reference)
            if found is None:
                raise UsageError(f"capture or cancel {reference} not found")
            if found.status is not PaymentStatus.NEEDS_REVIEW:
                raise UsageError(f"{found.kind} {reference} is {found.status}, not in needs_review: nothing to "
                                 "resolve")
            if to not in ("succeeded", "failed"):
                raise UsageError(f"--as: {to!r} is neither succeeded nor failed")
            target = PaymentStatus(to)
            with self.app.db.begin() as conn:
                moved = store.apply(conn, ModificationTransition(
                    found.id, PaymentStatus.NEEDS_REVIEW, target, ModificationSource.MANUAL,
                    details={"operator": who, "reason": reason},
                    failure_reason=f"resolved by hand: {reason}" if target is PaymentStatus.FAILED else None))
            if not moved:
                raise UsageError(f"{found.kind} {reference} changed meanwhile: nothing resolved")
        except UsageError as exc:
            self.audit.record(entry(who, "modification.resolve", reference, "refused", to=to, reason=reason,
                                    why=str(exc)))
            raise
        self.audit.record(entry(who, "modification.resolve", reference, to=to, reason=reason))
        done = store.by_reference(reference)
        assert done is not None  # nosec B101  # just moved: type narrowing
        return done

    def recheck_modification(self, reference: str, *, by: str | None) -> tuple[Modification, int]:
        """Queue capture or cancel ``reference``'s reconcile job with ``recheck``: the PSP is asked again and a
        final one it contradicts goes to review (recon.reconcile.modification). UsageError when there is none."""
        who = self._who(by, Role.OPERATOR, "review recheck")
        found = self.app.modifications.by_reference(reference)
        if found is None:
            raise UsageError(f"capture or cancel {reference} not found")
        queue = self.app.reconcile_config.queue
        job_id: int = self.app.client().enqueue(
            MODIFICATION_RECONCILE_KIND, {"modification_id": found.id, "recheck": True}, queue=queue,
            unique_key=modification_reconcile_key(found.id))
        self.audit.record(entry(who, "modification.recheck", reference, job=job_id, kind=found.kind))
        return found, job_id

    def recheck_refund(self, reference: str, *, by: str | None) -> tuple[Refund, int]:
        """Queue refund ``reference``'s reconcile job with ``recheck``: the PSP is asked again and a succeeded
        refund it now calls failed or reversed goes to review (recon.reconcile.refund). UsageError when there is
        none."""
        who = self._who(by, Role.OPERATOR, "review recheck")
        found = self.app.refunds.by_reference(reference)
        if found is None:
            raise UsageError(f"refund {reference} not found")
        job_id: int = self.app.client().enqueue(
            REFUND_RECONCILE_KIND, {"refund_id": found.id, "recheck": True}, queue=self.app.reconcile_config.queue,
            unique_key=refund_reconcile_key(found.id))
        self.audit.record(entry(who, "refund.recheck", reference, job=job_id, status=str(found.status)))
        return found, job_id

    def _modify(self, kind: str, reference: str, *, amount: str | None, by: str | None) -> Modification:
        action = f"payment.{kind}"
        who = self._who(by, Role.OPERATOR, kind)
        try:
            payment = self.app.payments.by_reference(reference.strip())
            if payment is None:
                raise UsageError(f"payment {reference} not found")
            minor = parse_amount(amount, payment.currency) if amount is not None else None
            store: ModificationStore = self.app.modifications
            n = len(store.for_payment(payment.id)) + 1
            while store.existing_references([f"{payment.merchant_reference}-{kind}{n}"]):
                n += 1
            queue = self.app.payments_config.queue
            mid = store.create(NewModification(payment_id=payment.id, kind=kind, amount=minor, requested_by=who,
                                               modification_reference=f"{payment.merchant_reference}-{kind}{n}"),
                               queue=queue, max_depth={queue: self.app.settings.queue(queue).max_depth})
        except UsageError as exc:
            self.audit.record(entry(who, action, reference, "refused", amount=amount, why=str(exc)))
            raise
        made = store.get(mid)
        assert made is not None  # nosec B101  # just written: type narrowing
        self.audit.record(entry(who, action, reference, modification=made.modification_reference,
                                amount=made.amount, currency=made.currency))
        return made

    # --- four eyes --------------------------------------------------------------------------------------------

    def approve(self, approval_id: int, *, by: str | None) -> Approval:
        who = self._who(by, Role.APPROVER, "approvals approve")
        return self.four_eyes.approve(approval_id, by=who)

    def reject(self, approval_id: int, *, by: str | None) -> Approval:
        who = self._who(by, Role.APPROVER, "approvals reject")
        return self.four_eyes.reject(approval_id, by=who)


class _Requested(Exception):
    """A bulk resolve above the threshold became a four-eyes request: nothing written."""


def _next_refund_reference(refunds: Any, reference: str, payment: Payment | None) -> str:
    """``REF-r1``, ``REF-r2``, …: the first free one for the payment (``refunds``: the RefundStore)."""
    n = len(refunds.for_payment(payment.id)) + 1 if payment is not None else 1
    while refunds.existing_references([f"{reference}-r{n}"]):
        n += 1
    return f"{reference}-r{n}"


def _filter_doc(where: QueueFilter) -> dict[str, Any]:
    doc = asdict(where)
    doc["cutoff"] = where.cutoff.isoformat() if where.cutoff else None
    return doc


def _filter_of(doc: dict[str, Any]) -> QueueFilter:
    cutoff = datetime.fromisoformat(doc["cutoff"]) if doc.get("cutoff") else None
    return QueueFilter(**{**doc, "cutoff": cutoff})
