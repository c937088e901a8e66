"""`recon sweep` and `recon report`: reconciliation from the command line."""

from __future__ import annotations

import json
import sys
from datetime import UTC, timedelta
from typing import Any

import click

from psp_adapters.errors import PspError
from recon.app import App
from recon.errors import ConfigError, ReconError, UsageError
from recon.overview import EVIDENCE_SOON, disputes_section
from recon.params import (
    BATCH_BY_HELP,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REVIEW,
    LIMIT,
    Duration,
    by_option,
    check_output_path,
    install_signal_handlers,
    operator_name,
    say,
)
from recon.reconcile import settlement as st
from recon.reconcile import sweep as sw
from recon.reconcile.capture_sweep import captures_exit_code, check_authorisations
from recon.reconcile.disputes import WINDOW_MAX_DAYS, dispute_source
from recon.reconcile.movement_sweep import enqueue_movements, movements_exit_code, summarise_movements
from recon.reconcile.sweep import ReportWriter, Selection
from recon.reconcile.window import WindowHandler
from recon.render.output import progress_while
from recon.render.payments import sweep_dry_run, sweep_summary


@click.command()
@click.option("--older-than", type=Duration(), default="15m", show_default=True,
              help="Payments not updated for this long are stale.")
@click.option("--psp", help="Only this PSP.")
@click.option("--limit", type=LIMIT, help="At most this many payments.")
@click.option("--dry-run", is_flag=True, help="Show what would be checked; enqueue nothing.")
@click.option("--enqueue-only", is_flag=True, help="Enqueue the reconcile jobs and leave them to the workers.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write every checked payment with its outcome (CSV, or JSON for *.json).")
@click.option("--concurrency", type=click.IntRange(1, 512), help="Reconcile jobs in flight (default: config).")
@click.option("--mode", type=click.Choice(["auto", "bulk", "single"]), default="auto", show_default=True,
              help="bulk: one window job per PSP listing window; single: one job per payment; auto: bulk where "
                   "the PSP's adapter lists payments.")
@by_option(BATCH_BY_HELP)
@click.option("--disputes", "dispute_days", type=click.IntRange(0, WINDOW_MAX_DAYS), default=0, show_default=True,
              help="Also read the disputes of the last DAYS days from each PSP's listing (as `recon disputes "
                   "fetch`); 0: only count the open ones.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def sweep(ctx: click.Context, older_than: timedelta, psp: str | None, limit: int | None, dry_run: bool,
          enqueue_only: bool, report_path: str | None, concurrency: int | None, mode: str, by: str | None,
          dispute_days: int, as_json: bool) -> None:
    """Reconcile stale unfinished payments with their PSP and print what happened; with --disputes, read the
    PSPs' dispute listings too. The open disputes are counted either way.

    --by names the operator who runs it (audited, and the sweep's operator); without it the sweep is the
    system's (a schedule, a script). A --dry-run changes nothing and needs no one."""
    app: App = ctx.obj
    if psp is not None and psp not in app.psp_names():
        raise UsageError(f"--psp: unknown PSP {psp!r} (known: {', '.join(app.psp_names())})")
    options = sw.SweepOptions(older_than=older_than, psp=psp, limit=limit)
    psps = {psp} if psp else set(app.psp_names()) & app.payments.psps_unfinished()
    if dry_run:
        modes = _modes(app, psps, mode, strict=False)
        candidates = list(sw.iter_candidates(app.payments, options))
        if as_json:
            click.echo(json.dumps({"dry_run": True, "would_check": len(candidates), "mode": modes,
                                   "payments": [p.to_dict() for p in candidates]}))
        else:
            sweep_dry_run(candidates, modes=modes)
        return
    who = app.actions.batch_actor(by, "sweep")  # before any work, as the checks below
    if not enqueue_only:  # before any work: every PSP the sweep will call can be called as configured
        app.require_psps(psps)
    modes = _modes(app, psps, mode, strict=not enqueue_only)
    writer = _open_report(report_path) if report_path else None  # before any work: the report can be written
    rc = app.reconcile_config
    run_id = app.sweeps.start(operator=who if by is not None else operator_name(), options={
        "older_than_seconds": older_than.total_seconds(), "psp": psp, "limit": limit, "enqueue_only": enqueue_only,
        "mode": mode})
    calls_before = app.metrics.psp_totals()
    try:
        selection = sw.enqueue(app.payments, app.client(), options, queue=rc.queue,
                               bulk_psps={name for name, m in modes.items() if m == "bulk"}, config=rc)
        refund_selection = enqueue_movements(app.refunds, app.client(), options, queue=rc.queue)
        mod_selection = enqueue_movements(app.modifications, app.client(), options, queue=rc.queue)
        authorisations = check_authorisations(app.modifications, app.client(), app.capture_config,
                                              {psp} if psp else set(app.psp_names()), now=app.db.clock.now(),
                                              queue=rc.queue)
        extra = len(refund_selection) + len(mod_selection) + len(authorisations["job_ids"])
        if not enqueue_only and (len(selection) or extra):
            _run_reconcile_worker(app, selection, concurrency=concurrency, show_progress=not as_json, extra=extra)
        summary = sw.summarise(app.payments, app.jobs, selection, on_item=writer.item if writer else None)
        refund_summary = summarise_movements(app.refunds, app.jobs, refund_selection)
        capture_summary = summarise_movements(app.modifications, app.jobs, mod_selection)
        dispute_summary = _sweep_disputes(app, psp, dispute_days if not enqueue_only else 0)
    except BaseException:
        if writer:
            writer.abort()
        _record_failure(app, run_id, who)
        raise
    if writer:
        writer.close(summary)
    calls = _calls_since(calls_before, app.metrics.psp_totals())
    doc = {"enqueue_only": enqueue_only, **summary.to_dict(), "mode": modes,
           "window_jobs": len(selection.window_job_ids), "psp_calls": sum(n for n, _ in calls.values()),
           "psp_calls_by_psp": {name: n for name, (n, _) in calls.items()},
           "http_429": sum(t for _, t in calls.values()), "refunds": refund_summary, "captures": capture_summary,
           "authorisations": {k: v for k, v in authorisations.items() if k != "job_ids"},
           "disputes": dispute_summary}
    disputes_off = any(r["unknown"] or r["conflicts"] for r in dispute_summary["fetched"].values())
    exit_code = max(summary.exit_code, movements_exit_code(refund_summary),
                    captures_exit_code(capture_summary, authorisations), EXIT_REVIEW if disputes_off else 0)
    app.sweeps.finish(run_id, outcome="finished", exit_code=exit_code, summary=doc)
    app.actions.batch_done(who, "sweep", f"sweep run {run_id}", "done" if exit_code == EXIT_OK else "review",
                           run=run_id, exit_code=exit_code, checked=doc.get("checked"), run_by=operator_name())
    if as_json:
        click.echo(json.dumps(doc))
    else:
        sweep_summary(doc)
    ctx.exit(exit_code)


def _sweep_disputes(app: App, psp: str | None, days: int) -> dict[str, Any]:
    """The open disputes (and those due soon), after reading the last ``days`` days of each PSP's dispute listing
    (``psp``, else every PSP that can be called as configured and lists disputes) when ``days`` > 0."""
    fetched: dict[str, Any] = {}
    windows: dict[str, list[str]] = {}
    if days:
        until = app.db.clock.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        since, until = until - timedelta(days=days - 1), until + timedelta(days=1)
        for name in [psp] if psp else app.psp_names():
            try:
                if psp is None and dispute_source(app.adapter(name)) is None:
                    continue
            except ConfigError:
                continue
            result = app.fetch_disputes(name, since, until, rolling=True)  # reaches back: reach_back
            fetched[name] = result.to_dict()
            read = result.window or (since, until)
            windows[name] = [read[0].date().isoformat(), read[1].date().isoformat()]
    doc = disputes_section(app.disputes.open_totals(soon=app.db.clock.now() + EVIDENCE_SOON), {})
    return {"fetched": fetched, "windows": windows, "open": doc["open"], "due_soon": doc["due_soon"],
            "due_soon_days": doc["due_soon_days"], "withdrawn": doc["withdrawn"]}


def _record_failure(app: App, run_id: int, who: str) -> None:
    """The sweep ended by an error or an interrupt: its row and its audit row say so (best effort: the
    database may be why)."""
    try:
        app.sweeps.finish(run_id, outcome="failed", exit_code=None, summary=None)
        app.actions.batch_done(who, "sweep", f"sweep run {run_id}", "failed", run=run_id, run_by=operator_name())
    except ReconError:
        pass


def _open_report(path: str) -> ReportWriter:
    check_output_path(path, option="--report")
    try:
        return sw.ReportWriter(path)
    except OSError as exc:
        raise UsageError(f"--report {path!r}: cannot be written ({exc.strerror})") from None


def _modes(app: App, psps: set[str], mode: str, *, strict: bool) -> dict[str, str]:
    """Each PSP's sweep mode: bulk where its adapter lists payments (``auto``, ``bulk``), single otherwise.
    ``bulk`` for a PSP that cannot list is a usage error. A PSP whose settings are missing cannot be asked: it
    is single, unless ``strict`` (a sweep that will call it), where its ConfigError says what is missing."""
    modes = {}
    for name in sorted(psps):
        if mode == "single":
            modes[name] = "single"
            continue
        try:
            lists = bool(getattr(app.adapter(name), "lists_payments", False))
        except ConfigError:
            if strict:
                raise
            lists = False
        if mode == "bulk" and not lists:
            raise UsageError(f"--mode bulk: PSP {name!r} does not list payments (or is not configured); "
                             "use --mode auto or single")
        modes[name] = "bulk" if lists else "single"
    return modes


def _calls_since(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """PSP -> (calls, 429s) this process made between the two readings of ``App.metrics.psp_totals()``."""
    out = {}
    for name, (calls, throttled) in after.items():
        was_calls, was_throttled = before.get(name, (0, 0))
        if calls - was_calls:
            out[name] = (calls - was_calls, throttled - was_throttled)
    return out


def _run_reconcile_worker(app: App, selection: Selection, *, concurrency: int | None, show_progress: bool,
                          extra: int = 0) -> None:
    """A worker on the reconcile queue alone, in this process, until the sweep's jobs are done. The progress
    bar counts payments: those window jobs healed, then each finished per-payment job."""
    handlers = app.handlers(queues=(app.reconcile_config.queue,))
    worker = app.worker([app.reconcile_config.queue], handlers=handlers,
                        engine=app.engine_config(concurrency=concurrency))
    install_signal_handlers(worker.request_stop)

    window = handlers.get(WindowHandler.kind)
    windows = len(selection.window_job_ids)

    def done() -> int:
        finished = sum(worker.stats.outcomes.values())
        if not isinstance(window, WindowHandler) or not windows:
            return finished
        return window.healed + max(0, finished - windows)

    progress_while(lambda: worker.run(burst=True), done, total=len(selection) + extra, label="reconciling",
                   enabled=show_progress)


@click.command()
@click.option("--psp", required=True, help="The PSP whose settlement listing is matched.")
@click.option("--since", required=True,
              help="Period start, inclusive: 2026-11-01 or an ISO datetime (UTC if no offset).")
@click.option("--until", required=True, help="Period end, exclusive; same forms as --since.")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False),
              help="Write the report here (replaced only when complete), not stdout; totals go to stderr.")
@click.pass_context
def report(ctx: click.Context, psp: str, since: str, until: str, fmt: str, output: str | None) -> None:
    """Match the PSP's settlement listing for [SINCE, UNTIL) against our payments. Never heals.

    One row per item: matched, expected, missing_locally, missing_at_psp, amount_mismatch, currency_mismatch,
    status_mismatch, duplicate_at_psp (amounts in minor units). Failed payments the PSP does not list are
    consistent and not itemised. Exit 0: all matched or expected; 1: discrepancies; 2: bad usage; 3: the PSP
    listing (or the database) failed.
    """
    app: App = ctx.obj
    start, end = st.parse_bound(since, option="--since"), st.parse_bound(until, option="--until")
    if start >= end:
        raise UsageError(f"--since {since!r} must be before --until {until!r}")
    if output:
        check_output_path(output, option="--output")
    adapter = app.adapter(psp)
    try:
        result = st.write_report(app.reports, adapter, psp=psp, since=start, until=end, fmt=fmt, output=output,
                                 settlement_window=app.reconcile_config.settlement_window,
                                 unknown_events=app.webhooks.unknown_between(psp=psp, since=start, until=end))
    except PspError as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        say(f"recon: report: the {psp} settlement listing failed: {type(exc).__name__}: {first}",
                   err=True)
        # sys.exit, not ctx.exit: main() runs click with standalone_mode=False, where ctx.exit's code is
        # returned by cli.main() and dropped (main then exits 0)
        sys.exit(EXIT_FAILED)
    if output:
        for line in st.summary_lines(result, psp=psp, since=start, until=end):
            say(line, err=True)
    sys.exit(EXIT_OK if result.consistent else EXIT_REVIEW)
