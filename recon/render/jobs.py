"""`recon jobs …` and `recon schedule list` for people: jobs, a job's attempts and replays, replay and prune
summaries, the schedules (printed through ``recon.render.output``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from recon.render.output import FoldTable, duration_text, stdout_console, timestamp
from recon.rows import AttemptRecord, Job, ReplayRecord


def jobs_table(jobs: Sequence[Job]) -> None:
    table = FoldTable(title=f"{len(jobs)} jobs")
    for col in ("id", "queue", "kind", "state", "attempts", "run_after", "last error"):
        table.add_column(col)
    for j in jobs:
        err = f"{j.last_error_kind}: {j.last_error}" if j.last_error_kind else ""
        table.add_row(str(j.id), j.queue, j.kind, str(j.state), f"{j.attempts}/{j.max_attempts}",
                      timestamp(j.run_after), err[:80])
    stdout_console().print(table)


def job_detail(job: Job, attempts: Sequence[AttemptRecord], replays: Sequence[ReplayRecord] = ()) -> None:
    console = stdout_console()
    table = FoldTable("", "", show_header=False, title=f"job {job.id}")
    for key, value in job.to_dict().items():
        if value is not None:
            table.add_row(key, str(value))
    console.print(table)
    history = FoldTable(title="attempts")
    for col in ("attempt", "worker", "started", "finished", "outcome", "error"):
        history.add_column(col)
    pending = sorted(replays, key=lambda r: r.attempt)  # a replay follows the attempt it is keyed by
    for a in attempts:
        err = f"{a.error_kind}: {a.error}" if a.error_kind else (a.error or "")
        history.add_row(str(a.attempt), a.worker, timestamp(a.started_at), timestamp(a.finished_at), a.outcome,
                        err[:100])
        while pending and pending[0].attempt <= a.attempt:
            _replay_row(history, pending.pop(0))
    for r in pending:
        _replay_row(history, r)
    console.print(history)


def _replay_row(history: Table, r: ReplayRecord) -> None:
    note = f"max_attempts {r.max_attempts_before} -> {r.max_attempts_after}"
    history.add_row(f"after {r.attempt}", r.replayed_by or "", "", timestamp(r.replayed_at), "replayed",
                    f"{note} (was {r.error_kind})" if r.error_kind else note)


#: a dry run lists at most this many jobs on a terminal (--json lists them all)
DRY_RUN_ROWS = 200


def replay_summary(jobs: Sequence[Job], *, replayed: Sequence[int], skipped: Sequence[int], budget: int,
                   dry_run: bool) -> None:
    console = stdout_console()
    if dry_run and jobs:
        jobs_table(jobs[:DRY_RUN_ROWS])
        if len(jobs) > DRY_RUN_ROWS:
            console.print(f"... and {len(jobs) - DRY_RUN_ROWS} more (--json lists them all)")
    verb = "would replay" if dry_run else "replayed"
    console.print(f"{verb} {len(replayed)} dead jobs with {budget} fresh attempts each"
                  + ("; nothing changed (dry run)" if dry_run else ""))
    if skipped:
        shown = ", ".join(str(i) for i in skipped[:20]) + (" ..." if len(skipped) > 20 else "")
        console.print(f"{len(skipped)} left dead: an unfinished job holds their unique key (ids {shown})")


def prune_summary(doc: dict[str, Any]) -> None:
    age = duration_text(doc["older_than_seconds"])
    if doc["dry_run"]:
        states = ", ".join(f"{state} {n}" for state, n in doc["by_state"].items()) or "none"
        stdout_console().print(f"would prune {doc['would_delete']} jobs finished more than {age} ago ({states}); "
                         "nothing changed (dry run)")
        return
    stdout_console().print(f"pruned {doc['deleted']} jobs finished more than {age} ago and "
                     f"{doc['attempts_deleted']} attempt rows, in {doc['batches']} batches "
                     f"({doc['seconds']:.1f}s)"
                     + ("; interrupted" if doc["interrupted"] else ""))


def schedule_table(rows: Sequence[dict[str, Any]]) -> None:
    """``recon schedule list``."""
    table = FoldTable(title=f"{len(rows)} schedules")
    for col in ("name", "kind", "when", "catch up", "last slot", "lag", "last outcome", "next slot"):
        table.add_column(col)
    for r in rows:
        when = f"every {duration_text(r['every_seconds'])}" if r["every_seconds"] else f"{r['cron']} ({r['timezone']})"
        lag = f"{r['last_lag_seconds']:.1f}s" if r["last_lag_seconds"] is not None else "-"
        outcome = r["last_outcome"] or "-"
        if r["last_error"]:
            outcome += f": {r['last_error']}"[:60]
        table.add_row(r["name"], r["kind"], when, r["catch_up"], (r["last_slot"] or "-")[:19], lag, outcome,
                      r["next_slot"][:19])
    stdout_console().print(table)
