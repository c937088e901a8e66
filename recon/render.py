"""Human output for the CLI: rich tables on stdout. Machine output (``--json``) never comes through here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table

from recon.engine.jobs import AttemptRecord, Job


def _console() -> Console:
    console = Console(soft_wrap=False)
    if not console.is_terminal:
        console.width = max(console.width, 140)  # piped output: do not squeeze columns into 80
    return console


def _ts(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def jobs_table(jobs: Sequence[Job]) -> None:
    table = Table(title=f"{len(jobs)} jobs")
    for col in ("id", "queue", "kind", "state", "attempts", "run_after", "last error"):
        table.add_column(col)
    for j in jobs:
        err = f"{j.last_error_kind}: {j.last_error}" if j.last_error_kind else ""
        table.add_row(str(j.id), j.queue, j.kind, str(j.state), f"{j.attempts}/{j.max_attempts}",
                      _ts(j.run_after), err[:80])
    _console().print(table)


def job_detail(job: Job, attempts: Sequence[AttemptRecord]) -> None:
    console = _console()
    table = Table(show_header=False, title=f"job {job.id}")
    for key, value in job.to_dict().items():
        if value is not None:
            table.add_row(key, str(value))
    console.print(table)
    history = Table(title="attempts")
    for col in ("attempt", "worker", "started", "finished", "outcome", "error"):
        history.add_column(col)
    for a in attempts:
        err = f"{a.error_kind}: {a.error}" if a.error_kind else (a.error or "")
        history.add_row(str(a.attempt), a.worker, _ts(a.started_at), _ts(a.finished_at), a.outcome, err[:100])
    console.print(history)


def stats_document(raw: dict[str, Any], *, window: timedelta) -> dict[str, Any]:
    """The `recon stats --json` document, built from JobStore.stats()."""
    now: datetime = raw["now"]
    queues: dict[str, dict[str, Any]] = {}
    for queue, state, count in raw["depth"]:
        queues.setdefault(queue, {"depth": {}, "oldest_runnable_age_seconds": None})["depth"][state] = count
    for queue, oldest in raw["oldest_due"].items():
        entry = queues.setdefault(queue, {"depth": {}, "oldest_runnable_age_seconds": None})
        entry["oldest_runnable_age_seconds"] = round(max((now - oldest).total_seconds(), 0.0), 3)
    outcomes: dict[str, int] = raw["outcomes"]
    finished = sum(outcomes.values())
    return {
        "at": now.isoformat(),
        "queues": queues,
        "window_seconds": window.total_seconds(),
        "attempts": outcomes,
        "lease_expirations": outcomes.get("lease_expired", 0),
        "retry_rate": round(outcomes.get("retried", 0) / finished, 4) if finished else 0.0,
        "dead_rate": round(outcomes.get("dead", 0) / finished, 4) if finished else 0.0,
    }


def stats_table(doc: dict[str, Any]) -> None:
    console = _console()
    states = ["pending", "runnable", "retryable", "leased", "succeeded", "dead", "canceled"]
    table = Table(title=f"queues at {doc['at']}")
    table.add_column("queue")
    for s in states:
        table.add_column(s, justify="right")
    table.add_column("oldest runnable", justify="right")
    for queue, entry in sorted(doc["queues"].items()):
        age = entry["oldest_runnable_age_seconds"]
        table.add_row(queue, *(str(entry["depth"].get(s, 0)) for s in states),
                      f"{age:.1f}s" if age is not None else "-")
    console.print(table)
    window = int(doc["window_seconds"])
    console.print(f"last {window}s: attempts {doc['attempts'] or '{}'}; lease expirations "
                  f"{doc['lease_expirations']}; retry rate {doc['retry_rate']:.2%}; dead rate {doc['dead_rate']:.2%}")
