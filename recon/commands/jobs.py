"""`recon jobs list|show|retry|cancel|replay|prune`: inspecting and managing jobs and the dead-letter set."""

from __future__ import annotations

import json
import sys
import threading
from datetime import datetime, timedelta
from typing import Any

import click

from recon.app import App
from recon.engine.pruner import Pruner
from recon.engine.replay import ReplayRun, job_filter, replay
from recon.params import (
    EXIT_REVIEW,
    JOB_ID,
    LIMIT,
    Duration,
    Since,
    by_option,
    install_signal_handlers,
    operator_name,
    pending_approval,
    say,
)
from recon.render.jobs import job_detail, jobs_table, prune_summary, replay_summary
from recon.rows import Job, JobState


@click.group()
def jobs() -> None:
    """Inspect and manage jobs."""


@jobs.command("list")
@click.option("--state", type=click.Choice([s.value for s in JobState]))
@click.option("--queue")
@click.option("--kind")
@click.option("--error-kind", help="Only jobs whose last error is of this kind (e.g. validation, bug).")
@click.option("--since", type=Since(), metavar="DUR|ISO",
              help="Only jobs finished since: a duration back from now (2h) or an ISO date/datetime.")
@click.option("--limit", type=LIMIT, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def jobs_list(app: App, state: str | None, queue: str | None, kind: str | None, error_kind: str | None,
              since: timedelta | datetime | None, limit: int, as_json: bool) -> None:
    """List jobs, oldest first. The dead-letter set: --state dead."""
    filters = job_filter(app.jobs, queue=queue, kind=kind, error_kind=error_kind, since=since)
    found: list[Job] = []
    while len(found) < limit:
        want = min(limit - len(found), 500)
        after = found[-1].id if found else 0
        page = app.jobs.dead_letters.list_jobs_filtered(filters=filters, state=state, after_id=after, limit=want)
        found.extend(page)
        if len(page) < want:
            break
    if as_json:
        click.echo(json.dumps({"jobs": [j.to_dict() for j in found]}))
        return

    jobs_table(found)


@jobs.command("show")
@click.argument("job_id", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def jobs_show(app: App, job_id: int, as_json: bool) -> None:
    """One job with its attempt history."""
    client = app.client()
    job, attempts = client.get(job_id), client.attempts(job_id)
    replays = app.jobs.dead_letters.replays(job_id)  # dead-letter replays, between the attempts they followed
    if as_json:
        click.echo(json.dumps({"job": job.to_dict(), "attempts": [a.to_dict() for a in attempts],
                               "replays": [r.to_dict() for r in replays]}))
        return

    job_detail(job, attempts, replays)


@jobs.command("retry")
@click.argument("job_id", type=JOB_ID)
@by_option()
@click.pass_obj
def jobs_retry(app: App, job_id: int, by: str | None) -> None:
    """Make a dead, canceled or waiting job runnable now."""
    app.actions.retry(job_id, by=by)
    say(f"job {job_id} is runnable")


@jobs.command("cancel")
@click.argument("job_id", type=JOB_ID)
@by_option()
@click.pass_obj
def jobs_cancel(app: App, job_id: int, by: str | None) -> None:
    """Cancel a job: at once if it is not running, else through its next heartbeat."""
    result = app.actions.cancel(job_id, by=by)
    say(f"job {job_id} canceled" if result == "canceled"
               else f"job {job_id} is running: cancel requested, its worker is told at the next heartbeat")


REPLAY_BATCH_DEFAULT = 500


@jobs.command("replay")
@click.option("--queue")
@click.option("--kind")
@click.option("--error-kind", help="Only jobs that died of this error kind (e.g. psp_unavailable, bug).")
@click.option("--since", type=Since(), metavar="DUR|ISO",
              help="Only jobs that died since: a duration back from now (2h) or an ISO date/datetime.")
@click.option("--limit", type=LIMIT, help="At most this many jobs (default: every match).")
@click.option("--attempts", "budget", type=click.IntRange(1, 10_000),
              help="Fresh attempts per job (default: engine.default_max_attempts).")
@click.option("--batch", type=click.IntRange(1, 10_000), default=REPLAY_BATCH_DEFAULT, show_default=True,
              help="Jobs per transaction.")
@click.option("--dry-run", is_flag=True, help="List the jobs that would be replayed; change nothing.")
@by_option("Who replays: an operator (not needed with --dry-run).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def jobs_replay(app: App, queue: str | None, kind: str | None, error_kind: str | None,
                since: timedelta | datetime | None, limit: int | None, budget: int | None, batch: int,
                dry_run: bool, by: str | None, as_json: bool) -> None:
    """Move dead jobs (the dead-letter set) back to runnable now, with fresh attempts.

    Attempts are kept (they are the fencing token): max_attempts becomes attempts + --attempts. Each replay
    is recorded in the job's history (recon jobs show). A job whose unique key an unfinished job holds
    stays dead and is reported as skipped. Batches commit one by one; running it again continues. More than
    [four_eyes] replay_count jobs (default 100), or jobs whose payments and refunds add up to more than
    [four_eyes.replay_amount] in a currency, need four eyes: the replay is requested (exit 1) and runs when
    another operator approves it (recon approvals).
    """
    filters = job_filter(app.jobs, queue=queue, kind=kind, error_kind=error_kind, since=since)
    budget = budget or app.settings.engine.default_max_attempts
    if dry_run:
        run = replay(app.jobs, filters, limit=limit, budget=budget, batch=batch, dry_run=True,
                     operator=operator_name())
    else:
        done = app.actions.replay(filters, budget=budget, by=by, limit=limit, batch=batch)
        if done.approval is not None:
            if as_json:
                click.echo(json.dumps({"approval": done.approval.to_dict()}))
                sys.exit(EXIT_REVIEW)
            pending_approval(done.approval)
        run = done.run or ReplayRun(dry_run=False, budget=budget)
    if as_json:
        doc: dict[str, Any] = {"dry_run": dry_run, "attempts_added": budget, "batches": run.batches,
                               "skipped": run.skipped}
        if dry_run:
            doc |= {"would_replay": len(run.replayed), "jobs": [j.to_dict() for j in run.jobs]}
        else:
            doc |= {"replayed": len(run.replayed), "job_ids": run.replayed}
        click.echo(json.dumps(doc))
        return
    replay_summary(run.jobs, replayed=run.replayed, skipped=run.skipped, budget=budget, dry_run=dry_run)


@jobs.command("prune")
@click.option("--older-than", type=Duration(), required=True,
              help="Delete jobs that finished (succeeded, dead, canceled) longer ago than this (7d; 0: all).")
@click.option("--batch", type=click.IntRange(1, 100_000), default=1000, show_default=True,
              help="Jobs per transaction.")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def jobs_prune(app: App, older_than: timedelta, batch: int, dry_run: bool, as_json: bool) -> None:
    """Delete finished jobs older than --older-than with their attempt history, a batch per transaction.

    Unfinished jobs are never touched; it is safe while workers run. Ctrl-C stops between batches.
    """
    doc: dict[str, Any] = {"dry_run": dry_run, "older_than_seconds": older_than.total_seconds()}
    if dry_run:
        by_state = app.jobs.dead_letters.count_prunable(older_than=older_than.total_seconds())
        doc |= {"would_delete": sum(by_state.values()), "by_state": by_state}
    else:
        stop = threading.Event()
        install_signal_handlers(stop.set)
        result = Pruner(app.jobs, older_than=older_than, batch=batch).run_once(stop)
        doc |= {"deleted": result.jobs, "attempts_deleted": result.attempts, "batches": result.batches,
                "seconds": round(result.seconds, 3), "interrupted": stop.is_set()}
    if as_json:
        click.echo(json.dumps(doc))
    else:
        prune_summary(doc)

