"""``recon sweep``'s refunds: every stale unfinished refund gets its reconcile job (``reconcile_refund:<id>``,
recon.reconcile.refund), run with the payments' jobs, and the sweep's summary counts them apart
(``"refunds"``), with the same categories and the same exit rule: a refund in review, dead or still failing
makes the sweep exit 1."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from recon.db.jobs_store import JobStore
from recon.db.refund_store import RefundStore
from recon.engine.client import Client
from recon.engine.jobs import JobSpec
from recon.reconcile.refund import MAX_ATTEMPTS, REFUND_RECONCILE_KIND, refund_reconcile_key
from recon.reconcile.sweep import CATEGORIES, SweepOptions
from recon.refund_rows import Refund
from recon.rows import Job, JobState, PaymentStatus

PAGE = 1000


@dataclass(slots=True)
class RefundSelection:
    refund_ids: list[int] = field(default_factory=list)
    job_ids: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.refund_ids)


def enqueue_refunds(refunds: RefundStore, client: Client, options: SweepOptions, *, queue: str) -> RefundSelection:
    """A reconcile job for every stale unfinished refund (of ``options.psp``; at most ``options.limit``)."""
    selection = RefundSelection()
    page: list[Refund] = []

    def flush() -> None:
        specs = [JobSpec(REFUND_RECONCILE_KIND, {"refund_id": r.id}, queue=queue, unique_key=refund_reconcile_key(r.id),
                         max_attempts=MAX_ATTEMPTS) for r in page]
        selection.job_ids.extend(client.enqueue_many(specs))
        selection.refund_ids.extend(r.id for r in page)
        page.clear()

    for n, refund in enumerate(refunds.iter_stale(older_than=options.older_than, psp=options.psp), start=1):
        page.append(refund)
        if len(page) >= PAGE:
            flush()
        if options.limit is not None and n >= options.limit:
            break
    if page:
        flush()
    return selection


def categorise(refund: Refund, job: Job | None) -> str:
    """What the sweep did for one refund, judged after the run (the payments' categories)."""
    if refund.status is PaymentStatus.SUCCEEDED:
        return "healed_succeeded"
    if refund.status is PaymentStatus.FAILED:
        return "healed_failed"
    if refund.status is PaymentStatus.NEEDS_REVIEW:
        return "needs_review"
    if job is not None and job.state is JobState.DEAD:
        return "dead"
    if job is not None and job.state is JobState.RETRYABLE:
        return "errors"
    return "still_pending"


def summarise_refunds(refunds: RefundStore, jobs: JobStore, selection: RefundSelection) -> dict[str, Any]:
    """The refunds' part of the sweep's summary: how many were checked, and each category's count."""
    counts: Counter[str] = Counter()
    by_job = {j.id: j for j in jobs.get_many(sorted(set(selection.job_ids)))}
    for refund_id, job_id in zip(selection.refund_ids, selection.job_ids, strict=True):
        refund = refunds.get(refund_id)
        if refund is not None:
            counts[categorise(refund, by_job.get(job_id))] += 1
    return {"checked": sum(counts.values()), **{c: counts[c] for c in CATEGORIES if c != "consistent"}}


def refunds_exit_code(summary: dict[str, Any]) -> int:
    return 1 if any(summary.get(c) for c in ("needs_review", "dead", "errors")) else 0
