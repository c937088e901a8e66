"""``recon sweep``: find stale unfinished payments, enqueue reconcile work for them, run it, summarise.

Two modes, per PSP: **single**, one ``reconcile`` job per payment (one PSP call each, at least); **bulk**,
for PSPs whose adapter lists payments (``PspAdapter.lists_payments``), one ``reconcile_window`` job
(``recon.reconcile.window``) per PSP and window of send time (``key_sent_at``, else ``created_at``: the PSP
books a payment when it is sent, not when we stored it), each window cut at ``[reconcile] window`` boundaries
and at ``window_max_payments`` payments. ``auto`` is bulk where the adapter lists, single elsewhere.

Selection reads the partial index ``payments_stale`` (cost grows with the unfinished set, not with the
table). Each payment's job has the unique key ``reconcile:<id>``, so overlapping cron runs share jobs
instead of duplicating them. Everything is durable: a sweep killed at any moment leaves jobs that the next
run (or any worker) finishes, and leases that the stuck watcher recovers.

Memory stays flat: the sweep keeps integer arrays (payment ids, job ids; for bulk PSPs the send times and
ids until their windows are cut), not payments.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from array import array
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.engine.client import Client
from recon.engine.jobs import JobSpec
from recon.reconcile.config import ReconcileConfig
from recon.reconcile.handler import RECONCILE_KIND, reconcile_key
from recon.reconcile.window import WINDOW_KIND, Window
from recon.rows import Job, JobState, Payment, PaymentStatus
from recon.spreadsheet import safe_cell

PAGE = 1000
MAX_ATTEMPTS = 10
MODES = ("auto", "bulk", "single")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class SweepOptions:
    older_than: timedelta
    psp: str | None = None
    limit: int | None = None


@dataclass(slots=True)
class Selection:
    """What a sweep selected: each payment with the job that reconciles it (a window job in bulk mode)."""

    payment_ids: array[int] = field(default_factory=lambda: array("q"))
    job_ids: array[int] = field(default_factory=lambda: array("q"))
    window_job_ids: array[int] = field(default_factory=lambda: array("q"))
    single_jobs: int = 0

    def __len__(self) -> int:
        return len(self.payment_ids)

    @property
    def jobs(self) -> int:
        """Jobs enqueued: window jobs and per-payment jobs."""
        return len(self.window_job_ids) + self.single_jobs


@dataclass(slots=True)
class _WindowPlan:
    """One bulk PSP's selected payments until their windows are cut: send times (µs) and ids, accounts."""

    times: array[int] = field(default_factory=lambda: array("q"))
    ids: array[int] = field(default_factory=lambda: array("q"))
    accounts: array[int] = field(default_factory=lambda: array("l"))
    account_names: dict[str, int] = field(default_factory=dict)

    def add(self, payment: Payment) -> None:
        sent = payment.key_sent_at or payment.created_at
        self.times.append((sent - _EPOCH) // timedelta(microseconds=1))
        self.ids.append(payment.id)
        self.accounts.append(self.account_names.setdefault(payment.merchant_account, len(self.account_names)))

    def windows(self, psp: str, *, size: timedelta, most: int) -> Iterator[Window]:
        """Consecutive payments in send-time order, cut at each multiple of ``size`` and every ``most``."""
        names = {i: name for name, i in self.account_names.items()}
        order = sorted(range(len(self.ids)), key=lambda n: (self.times[n], self.ids[n]))
        step = size // timedelta(microseconds=1)
        chunk: list[int] = []
        for n in order:
            if chunk and (len(chunk) >= most or self.times[n] // step != self.times[chunk[0]] // step):
                yield self._window(psp, chunk, names)
                chunk = []
            chunk.append(n)
        if chunk:
            yield self._window(psp, chunk, names)

    def _window(self, psp: str, chunk: list[int], names: dict[int, str]) -> Window:
        since = _EPOCH + timedelta(microseconds=self.times[chunk[0]])
        until = _EPOCH + timedelta(microseconds=self.times[chunk[-1]] + 1)
        accounts = sorted({names[self.accounts[n]] for n in chunk} - {""})
        return Window(psp, since, until, tuple(self.ids[n] for n in chunk), tuple(accounts))


def window_key(window: Window) -> str:
    """A window job's unique key: the same selection from an overlapping sweep shares the job."""
    return f"{WINDOW_KIND}:{window.psp}:{window.since.isoformat()}:{window.ids[0]}:{len(window.ids)}"


def iter_candidates(ledger: PaymentStore, options: SweepOptions) -> Iterator[Payment]:
    """Stale unfinished payments, oldest id first, at most ``options.limit``."""
    for n, payment in enumerate(ledger.iter_stale(older_than=options.older_than, psp=options.psp), start=1):
        yield payment
        if options.limit is not None and n >= options.limit:
            return


def enqueue(ledger: PaymentStore, client: Client, options: SweepOptions, *, queue: str,
            bulk_psps: Collection[str] = (), config: ReconcileConfig | None = None) -> Selection:
    """Reconcile work for every candidate, a page per transaction; returns what was selected. Payments of
    ``bulk_psps`` go into window jobs (``config`` sizes them), the others get one reconcile job each."""
    selection = Selection()
    page: list[Payment] = []
    plans: dict[str, _WindowPlan] = {}

    def flush() -> None:
        specs = [JobSpec(RECONCILE_KIND, {"payment_id": p.id}, queue=queue, unique_key=reconcile_key(p.id),
                         max_attempts=MAX_ATTEMPTS, tenant=p.merchant_account) for p in page]
        selection.job_ids.extend(client.enqueue_many(specs))
        selection.payment_ids.extend(p.id for p in page)
        selection.single_jobs += len(page)
        page.clear()

    for payment in iter_candidates(ledger, options):
        if payment.psp in bulk_psps:
            plans.setdefault(payment.psp, _WindowPlan()).add(payment)
            continue
        page.append(payment)
        if len(page) >= PAGE:
            flush()
    if page:
        flush()
    for psp, plan in sorted(plans.items()):
        _enqueue_windows(client, selection, psp, plan, queue=queue, config=config)
    return selection


def _enqueue_windows(client: Client, selection: Selection, psp: str, plan: _WindowPlan, *, queue: str,
                     config: ReconcileConfig | None) -> None:
    size = config.for_psp(psp).window if config else timedelta(hours=1)
    most = config.window_max_payments if config else 2000
    batch: list[Window] = []

    def flush() -> None:
        specs = [JobSpec(WINDOW_KIND, w.payload(), queue=queue, unique_key=window_key(w), max_attempts=MAX_ATTEMPTS)
                 for w in batch]
        for window, job_id in zip(batch, client.enqueue_many(specs), strict=True):
            selection.payment_ids.extend(window.ids)
            selection.job_ids.extend([job_id] * len(window.ids))
            selection.window_job_ids.append(job_id)
        batch.clear()

    for window in plan.windows(psp, size=size, most=most):
        batch.append(window)
        if len(batch) >= 50:
            flush()
    if batch:
        flush()


CATEGORIES = ("healed_succeeded", "healed_failed", "needs_review", "still_pending", "errors", "dead", "consistent")


def categorise(status: PaymentStatus, job: Job | None) -> str:
    """What the sweep did for one payment or movement (refund, capture, cancel) in ``status`` after the run,
    its reconcile job ``job``."""
    if status is PaymentStatus.SUCCEEDED:
        return "healed_succeeded"
    if status is PaymentStatus.FAILED:
        return "healed_failed"
    if status is PaymentStatus.NEEDS_REVIEW:
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
    """Read back every selected payment and its job, a page at a time. A payment a window job left unfinished
    is judged by its fall-back reconcile job, when it has one."""
    summary = SweepSummary()
    windows = set(selection.window_job_ids)
    first_window = min(windows, default=0)
    for start in range(0, len(selection), PAGE):
        ids = list(selection.payment_ids[start:start + PAGE])
        job_ids = list(selection.job_ids[start:start + PAGE])
        payments = {p.id: p for p in ledger.get_many(ids)}
        if windows:
            open_ids = [i for i, j in zip(ids, job_ids, strict=True) if j in windows and not payments[i].status.final]
            fallbacks = ledger.reconcile_jobs(open_ids, after_job_id=first_window)
            job_ids = [fallbacks.get(i, j) for i, j in zip(ids, job_ids, strict=True)]
        by_job = {j.id: j for j in jobs.get_many(sorted(set(job_ids)))}
        for payment_id, job_id in zip(ids, job_ids, strict=True):
            payment = payments[payment_id]
            job = by_job.get(job_id)
            category = categorise(payment.status, job)
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
        self.fh.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)

    def close(self, summary: SweepSummary) -> None:
        if self.json:
            self.fh.write(f'\n], "summary": {json.dumps(summary.to_dict())}}}\n')
        self.fh.close()
        os.replace(self.tmp, self.path)
