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
| replay dead jobs       | operator | more than ``[four_eyes] replay_count`` jobs  | jobs.replay         |
| retry or cancel a job  | operator |                                              | jobs.retry, .cancel |
| approve or reject      | approver | never one's own                              | the request's       |

A write that needs four eyes returns the pending ``Approval`` instead of its result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from recon import review_bulk
from recon.audit import entry
from recon.db.audit_store import AuditStore
from recon.engine.client import Client
from recon.engine.replay import ReplayRun, replay
from recon.errors import ReviewRefused, UsageError
from recon.four_eyes import FourEyes, replay_payload
from recon.operator_rows import Approval, Role
from recon.operators import Operators
from recon.payments import guard
from recon.payout_rows import PayoutException
from recon.review import Resolution
from recon.review_bulk import BulkPreview
from recon.review_rows import QueueFilter
from recon.rows import JobFilter, Payment, PaymentStatus

BULK_RESOLVE = "review.bulk_resolve"


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

    # --- the close's exceptions --------------------------------------------------------------------------------

    def resolve_payout_exception(self, exception_id: int, *, reason: str, by: str | None) -> PayoutException:
        """Resolve an open payout exception (``PayoutStore.resolve``: the payout's history records it too)."""
        who = self._who(by, Role.OPERATOR, "payouts resolve")
        subject = f"payout exception {exception_id}"
        try:
            done = self.app.payouts.resolve(exception_id, by=who, reason=reason)
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
        was_paused, woken = guard.resume(self.app.controls, psp)
        self.audit.record(entry(who, "psp.resume", psp, "done" if was_paused else "unchanged", woken=woken))
        return was_paused, woken

    # --- jobs ----------------------------------------------------------------------------------------------------

    def replay(self, filters: JobFilter, *, budget: int, by: str | None, limit: int | None = None,
               batch: int = 500) -> Replayed:
        """Replay the dead jobs ``filters`` match, or ask for an approval when more than ``replay_count`` do."""
        who = self._who(by, Role.OPERATOR, "jobs replay")
        threshold = self.four_eyes.config.replay_count
        cap = threshold + 1 if limit is None else min(limit, threshold + 1)
        preview = replay(self.app.jobs, filters, budget=budget, operator=who, limit=cap, dry_run=True)
        if len(preview.replayed) > threshold:
            payload = replay_payload(filters, budget=budget, limit=limit)
            subject = f"more than {threshold} dead jobs" if limit is None else f"up to {limit} dead jobs"
            approval = self.four_eyes.request("jobs.replay", subject, payload, by=who)
            return Replayed(run=None, approval=approval, matched=len(preview.replayed))
        run = replay(self.app.jobs, filters, budget=budget, operator=who, limit=limit, batch=batch)
        self.audit.record(entry(who, "jobs.replay", f"{len(run.replayed)} dead jobs", job_ids=run.replayed[:1000],
                                skipped=run.skipped[:1000], budget=budget))
        return Replayed(run=run, approval=None, matched=len(run.replayed))

    def retry(self, job_id: int, *, by: str | None) -> None:
        who = self._who(by, Role.OPERATOR, "jobs retry")
        Client(self.app.jobs, self.app.settings).retry(job_id)
        self.audit.record(entry(who, "jobs.retry", f"job {job_id}"))

    def cancel(self, job_id: int, *, by: str | None) -> str:
        who = self._who(by, Role.OPERATOR, "jobs cancel")
        result = Client(self.app.jobs, self.app.settings).cancel(job_id)
        self.audit.record(entry(who, "jobs.cancel", f"job {job_id}", result))
        return result

    # --- four eyes --------------------------------------------------------------------------------------------

    def approve(self, approval_id: int, *, by: str | None) -> Approval:
        who = self._who(by, Role.APPROVER, "approvals approve")
        return self.four_eyes.approve(approval_id, by=who)

    def reject(self, approval_id: int, *, by: str | None) -> Approval:
        who = self._who(by, Role.APPROVER, "approvals reject")
        return self.four_eyes.reject(approval_id, by=who)


class _Requested(Exception):
    """A bulk resolve above the threshold became a four-eyes request: nothing written."""


def _filter_doc(where: QueueFilter) -> dict[str, Any]:
    doc = asdict(where)
    doc["cutoff"] = where.cutoff.isoformat() if where.cutoff else None
    return doc


def _filter_of(doc: dict[str, Any]) -> QueueFilter:
    cutoff = datetime.fromisoformat(doc["cutoff"]) if doc.get("cutoff") else None
    return QueueFilter(**{**doc, "cutoff": cutoff})
