"""What people do, in one place for the command line and the console: each write checks its operator's role
(``recon.operators``), asks for four eyes where it needs them (``recon.four_eyes``), and leaves its audit row
(``recon.audit``), refusals included.

| action                 | role     | four eyes                                    | audit action        |
| ---------------------- | -------- | -------------------------------------------- | ------------------- |
| resolve a payment      | operator | with override                                | review.resolve      |
| recheck a payment      | operator |                                              | review.recheck      |
| pause a PSP            | operator | always                                       | psp.pause           |
| resume a PSP           | operator |                                              | psp.resume          |
| replay dead jobs       | operator | more than ``[four_eyes] replay_count`` jobs  | jobs.replay         |
| retry or cancel a job  | operator |                                              | jobs.retry, .cancel |
| approve or reject      | approver | never one's own                              | the request's       |

A write that needs four eyes returns the pending ``Approval`` instead of its result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from recon.audit import entry
from recon.db.audit_store import AuditStore
from recon.engine.client import Client
from recon.engine.replay import ReplayRun, replay
from recon.errors import ReviewRefused, UsageError
from recon.four_eyes import FourEyes, replay_payload
from recon.operator_rows import Approval, Role
from recon.operators import Operators
from recon.payments import guard
from recon.review import Resolution
from recon.rows import JobFilter, PaymentStatus


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
        return self.app.four_eyes  # type: ignore[no-any-return]

    @property
    def audit(self) -> AuditStore:
        return self.app.audit  # type: ignore[no-any-return]

    def _who(self, by: str | None, needs: Role, action: str) -> str:
        return self.operators.authorize(by, needs, action=action).name

    # --- the review desk -----------------------------------------------------------------------------------

    def resolve(self, reference: str, *, to: str, reason: str, by: str | None,
                override: bool = False) -> Resolution | Approval:
        who = self._who(by, Role.OPERATOR, "review resolve")
        if override:
            payment = self.app.review.get(reference)
            if payment.status is not PaymentStatus.NEEDS_REVIEW:
                raise UsageError(f"payment {reference} is {payment.status}, not needs_review: only a payment in "
                                 "review is resolved by hand")
            if to not in ("succeeded", "failed"):
                raise UsageError(f"resolve as: {to!r} is neither succeeded nor failed")
            return self.four_eyes.request("review.resolve", reference, {
                "reference": reference, "to": to, "reason": reason}, by=who)
        try:
            done: Resolution = self.app.review.resolve(reference, to=to, reason=reason, by=who)
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
