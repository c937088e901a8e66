"""``recon sweep``: find stale unfinished payments, enqueue one reconcile job each, run them, summarise.

Selection reads the partial index ``payments_stale`` (cost grows with the unfinished set, not with the
table). Each payment's job has the unique key ``reconcile:<id>``, so overlapping cron runs share jobs
instead of duplicating them. Everything is durable: a sweep killed at any moment leaves jobs that the next
run (or any worker) finishes, and leases that the stuck watcher recovers.

Memory stays flat: the sweep keeps two integer arrays (payment ids, job ids), not payments.
"""

from __future__ import annotations

import contextlib
import json
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.engine.client import Client
from recon.engine.jobs import JobSpec
from recon.reconcile.handler import RECONCILE_KIND, reconcile_key
from recon.rows import Job, JobState, Payment, PaymentStatus
from recon.spreadsheet import safe_cell

PAGE = 1000
MAX_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class SweepOptions:
    older_than: timedelta
    psp: str | None = None
    limit: int | None = None


@dataclass(slots=True)
class Selection:
    payment_ids: array[int] = field(default_factory=lambda: array("q"))
    job_ids: array[int] = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.payment_ids)


def iter_candidates(ledger: PaymentStore, options: SweepOptions) -> Iterator[Payment]:
    """Stale unfinished payments, oldest id first, at most ``options.limit``."""
    for n, payment in enumerate(ledger.iter_stale(older_than=options.older_than, psp=options.psp), start=1):
        yield payment
        if options.limit is not None and n >= options.limit:
            return


def enqueue(ledger: PaymentStore, client: Client, options: SweepOptions, *, queue: str) -> Selection:
    """One reconcile job per candidate, a page per transaction; returns what was selected."""
    selection = Selection()
    page: list[Payment] = []

    def flush() -> None:
        specs = [JobSpec(RECONCILE_KIND, {"payment_id": p.id}, queue=queue, unique_key=reconcile_key(p.id),
                         max_attempts=MAX_ATTEMPTS, tenant=p.merchant_account) for p in page]
        selection.job_ids.extend(client.enqueue_many(specs))
        selection.payment_ids.extend(p.id for p in page)
        page.clear()

    for payment in iter_candidates(ledger, options):
        page.append(payment)
        if len(page) >= PAGE:
            flush()
    if page:
        flush()
    return selection


CATEGORIES = ("healed_succeeded", "healed_failed", "needs_review", "still_pending", "errors", "dead", "consistent")


def categorise(payment: Payment, job: Job | None) -> str:
    """What the sweep did for one payment, judged after the run."""
    if payment.status is PaymentStatus.SUCCEEDED:
        return "healed_succeeded"
    if payment.status is PaymentStatus.FAILED:
        return "healed_failed"
    if payment.status is PaymentStatus.NEEDS_REVIEW:
        return "needs_review"
    if job is not None and job.state is JobState.DEAD:
        return "dead"
    if job is not None and job.state is JobState.RETRYABLE:
        return "errors"
    return "still_pending"


@dataclass(slots=True)
class SweepSummary:
    counts: Counter[str] = field(default_factory=Counter)
    money_at_risk: list[dict[str, Any]] = field(default_factory=list)

    @property
    def checked(self) -> int:
        return sum(self.counts.values())

    @property
    def exit_code(self) -> int:
        """0 done and consistent (or still waiting on the PSP); 1 items need review, died or failed."""
        return 1 if any(self.counts[c] for c in ("needs_review", "dead", "errors")) else 0

    def to_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, **{c: self.counts[c] for c in CATEGORIES if c != "consistent"},
                "money_at_risk": self.money_at_risk}


def summarise(ledger: PaymentStore, jobs: JobStore, selection: Selection,
              *, on_item: Callable[[Payment, Job | None, str], None] | None = None) -> SweepSummary:
    """Read back every selected payment and its job, a page at a time."""
    summary = SweepSummary()
    for start in range(0, len(selection), PAGE):
        ids = list(selection.payment_ids[start:start + PAGE])
        job_ids = list(selection.job_ids[start:start + PAGE])
        payments = {p.id: p for p in ledger.get_many(ids)}
        by_job = {j.id: j for j in jobs.get_many(job_ids)}
        for payment_id, job_id in zip(ids, job_ids, strict=True):
            payment = payments[payment_id]
            job = by_job.get(job_id)
            category = categorise(payment, job)
            summary.counts[category] += 1
            if on_item is not None:
                on_item(payment, job, category)
    summary.money_at_risk = ledger.money_at_risk()
    return summary


class ReportWriter:
    """``--report FILE``: every checked payment with its outcome; JSON when FILE ends in .json, else CSV.
    Written to FILE.tmp and renamed at the end, so a killed sweep never leaves half a report."""

    FIELDS = ("merchant_reference", "psp", "amount", "currency", "status", "outcome", "psp_reference",
              "job_id", "job_state", "last_error")

    def __init__(self, path: str) -> None:
        import csv

        self.path = path
        self.tmp = f"{path}.tmp"
        self.json = path.endswith(".json")
        self.fh = open(self.tmp, "w", newline="", encoding="utf-8")
        self.first = True
        if self.json:
            self.fh.write('{"items": [\n')
        else:
            self.csv = csv.writer(self.fh)
            self.csv.writerow(self.FIELDS)

    def item(self, payment: Payment, job: Job | None, category: str) -> None:
        row = [payment.merchant_reference, payment.psp, payment.amount, payment.currency, str(payment.status),
               category, payment.psp_reference, job.id if job else None, str(job.state) if job else None,
               (job.last_error if job and job.last_error else payment.review_reason or payment.failure_reason)]
        if self.json:
            self.fh.write(("" if self.first else ",\n") + json.dumps(dict(zip(self.FIELDS, row, strict=True))))
            self.first = False
        else:
            self.csv.writerow([safe_cell(v) for v in row])  # never a formula (recon.spreadsheet)

    def abort(self) -> None:
        """The sweep failed: no report, and no temporary file left behind."""
        import os

        self.fh.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)

    def close(self, summary: SweepSummary) -> None:
        import os

        if self.json:
            self.fh.write(f'\n], "summary": {json.dumps(summary.to_dict())}}}\n')
        self.fh.close()
        os.replace(self.tmp, self.path)
