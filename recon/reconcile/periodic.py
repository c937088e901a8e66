"""The jobs ``[schedule.*]`` slots queue (recon.scheduler): a sweep, and a daily settlement report (and the
daily close, ``recon.close.job``, whose payload is checked here with the others).

- ``sweep``, payload ``{"older_than": "15m", "psp": null, "limit": null, "mode": "auto"}``: queues reconcile
  jobs for the stale unfinished payments (like ``recon sweep --enqueue-only``; the workers on the reconcile
  queue run them), window jobs for the PSPs that list payments unless ``mode`` is ``single``, and records the
  run in ``sweep_runs`` (operator ``schedule``) and in the audit trail as the system (``SCHEDULE_ACTOR``, action
  ``sweep``, outcome ``done``, or ``failed`` when the enqueue raised: the job is then retried), as ``recon
  sweep`` records its runs.
- ``report``, payload ``{"psp": "stripe", "directory": "reports", "days_back": 1, "format": "csv"}``: the
  settlement report of one UTC day (``days_back`` days before the job runs) into
  ``DIRECTORY/PSP-YYYY-MM-DD.csv``, replaced only when complete (``recon report --output``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, ClassVar

from psp_adapters.errors import PspError
from recon.audit import entry
from recon.classify import classify
from recon.clock import Clock, SystemClock
from recon.close.job import CLOSE_KIND, close_options
from recon.db.audit_store import AuditStore
from recon.db.payment_store import PaymentStore
from recon.db.sweep_store import SweepRunStore
from recon.durations import parse_duration
from recon.engine.client import Client
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome
from recon.errors import ConfigError, ReconError, UsageError
from recon.reconcile import sweep as sw
from recon.reconcile.config import ReconcileConfig
from recon.reconcile.disputes import DISPUTES_KIND
from recon.reconcile.disputes import payload_window as disputes_window
from recon.rows import Job

#: checking a schedule's disputes payload needs a day to compute from; which one does not matter
_ANY_DAY = date(2000, 1, 1)
SWEEP_KEYS = {"older_than", "psp", "limit", "mode"}
REPORT_KEYS = {"psp", "directory", "days_back", "format"}
#: who a scheduled sweep acts as in the audit trail (a worker ran it; no person asked for it)
SCHEDULE_ACTOR = "system:schedule"
#: (psp, since, until, path, fmt) -> how many discrepancies
ReportFunc = Callable[[str, datetime, datetime, str, str], int]


def check_payload(kind: str, payload: Mapping[str, Any], where: str, *, psp_names: tuple[str, ...]) -> None:
    """ConfigError naming ``where`` when a built-in kind's payload is wrong (other kinds are their handlers')."""
    try:
        if kind == SweepJob.kind:
            _sweep_options(payload, psp_names)
        elif kind == ReportJob.kind:
            _report_options(payload, psp_names)
        elif kind == CLOSE_KIND:
            close_options(payload, psp_names)
        elif kind == DISPUTES_KIND:
            disputes_window(payload, psp_names, today=_ANY_DAY)  # the keys checked; the day is the job's
    except UsageError as exc:
        raise ConfigError(f"{where}.payload: {exc}") from None


class SweepJob:
    """Job kind ``sweep``: its jobs are on their schedule's queue; it queues reconcile work on ``reconcile_queue``."""

    kind: ClassVar[str] = "sweep"
    queue: ClassVar[str | None] = None

    def __init__(self, payments: PaymentStore, client: Client, sweeps: SweepRunStore, audit: AuditStore, *,
                 reconcile_queue: str, psp_names: tuple[str, ...], listing_func: Callable[[], set[str]] = set,
                 config: ReconcileConfig | None = None) -> None:
        self.payments, self.client, self.sweeps, self.audit = payments, client, sweeps, audit
        self.reconcile_queue, self.psp_names = reconcile_queue, psp_names
        #: the PSPs whose adapters list payments (their stale payments go into window jobs)
        self.listing_func, self.config = listing_func, config

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        try:
            options = _sweep_options(job.payload, self.psp_names)
        except UsageError as exc:
            return Dead(error_kind="validation", error=str(exc))
        run = self.sweeps.start(operator="schedule", options={**job.payload, "enqueue_only": True})
        try:
            bulk = set() if job.payload.get("mode") == "single" else self.listing_func()
            selection = sw.enqueue(self.payments, self.client, options, queue=self.reconcile_queue, bulk_psps=bulk,
                                   config=self.config)
        except BaseException:
            self._failed(run, job)
            raise
        self.sweeps.finish(run, outcome="finished", exit_code=0,
                           summary={"enqueue_only": True, "enqueued": len(selection)})
        self.audit.record(entry(SCHEDULE_ACTOR, "sweep", f"sweep run {run}", "done", run=run, job=job.id,
                                exit_code=0, enqueued=len(selection), window_jobs=len(selection.window_job_ids)))
        return Complete()

    def _failed(self, run: int, job: Job) -> None:
        """The enqueue raised (the worker retries the job): the run's row and its audit row say so (best effort:
        the database may be why)."""
        try:
            self.sweeps.finish(run, outcome="failed", exit_code=None, summary=None)
            self.audit.record(entry(SCHEDULE_ACTOR, "sweep", f"sweep run {run}", "failed", run=run, job=job.id))
        except ReconError:
            pass


class ReportJob:
    """Job kind ``report``: its jobs are on their schedule's queue."""

    kind: ClassVar[str] = "report"
    queue: ClassVar[str | None] = None

    def __init__(self, report_func: ReportFunc, *, psp_names: tuple[str, ...], clock: Clock | None = None) -> None:
        self.report_func, self.psp_names = report_func, psp_names
        self.clock = clock or SystemClock()

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        try:
            psp, directory, days_back, fmt = _report_options(job.payload, self.psp_names)
        except UsageError as exc:
            return Dead(error_kind="validation", error=str(exc))
        day = self.clock.now().astimezone(UTC).date() - timedelta(days=days_back)
        since = datetime.combine(day, time(), tzinfo=UTC)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{psp}-{day.isoformat()}.{fmt}")
        try:
            self.report_func(psp, since, since + timedelta(days=1), path, fmt)
        except PspError as exc:
            return classify(exc)
        except ConfigError as exc:
            return Dead(error_kind="config", error=f"ConfigError: {exc}")
        return Complete()


def _sweep_options(payload: Mapping[str, Any], psp_names: tuple[str, ...]) -> sw.SweepOptions:
    _known(payload, SWEEP_KEYS)
    older_than = parse_duration(str(payload.get("older_than", "15m")))
    psp = payload.get("psp")
    if psp is not None and psp not in psp_names:
        raise UsageError(f"psp: unknown PSP {psp!r} (known: {', '.join(psp_names)})")
    if payload.get("mode", "auto") not in ("auto", "single"):
        raise UsageError("mode: must be \"auto\" (window jobs where the PSP lists payments) or \"single\"")
    limit = payload.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise UsageError("limit: must be a positive integer")
    return sw.SweepOptions(older_than=older_than, psp=psp, limit=limit)


def _report_options(payload: Mapping[str, Any], psp_names: tuple[str, ...]) -> tuple[str, str, int, str]:
    _known(payload, REPORT_KEYS)
    psp = payload.get("psp")
    if psp not in psp_names:
        raise UsageError(f"psp: required, one of {', '.join(psp_names)} (got {psp!r})")
    directory = payload.get("directory", "reports")
    if not isinstance(directory, str) or not directory.strip():
        raise UsageError("directory: must be a non-empty string")
    days_back = payload.get("days_back", 1)
    if isinstance(days_back, bool) or not isinstance(days_back, int) or not 0 <= days_back <= 366:
        raise UsageError("days_back: must be an integer from 0 to 366")
    fmt = payload.get("format", "csv")
    if fmt not in ("csv", "json"):
        raise UsageError("format: must be \"csv\" or \"json\"")
    return str(psp), directory, days_back, fmt


def _known(payload: Mapping[str, Any], keys: set[str]) -> None:
    for key in payload:
        if key not in keys:
            raise UsageError(f"unknown key {key!r} (known: {', '.join(sorted(keys))})")
