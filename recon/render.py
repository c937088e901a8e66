"""Human output for the CLI: rich tables on stdout (a single line: ``recon.params.say``). Machine output
(``--json``) never comes through here.

Everything printed here is printed literally: a reference, reason or name that holds ``[/bold]`` or
``[link=…]`` is shown as those characters, never read as rich markup (which made ``payments show`` fail with a
MarkupError, and let ``[red]x[/red]`` restyle what people read), and characters a terminal would act on are
shown as escapes (``recon.terminal.shown``); card numbers and keys are masked (``recon.redact``), a last line of
defence behind the stores', as on the console's pages. All of it holds for every string a ``PlainConsole``
renders (cells, titles, headers, lines), so no call site has to remember it; tests/unit/test_terminal.py checks
that the commands print nothing but through here, ``say`` or as JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from rich.console import Console, HighlighterType, JustifyMethod, OverflowMethod, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from recon.redact import redact
from recon.rows import AttemptRecord, Job, Payment, PaymentEvent, ReplayRecord
from recon.terminal import shown


class PlainConsole(Console):
    """A rich console that renders every string as plain text: no markup, no emoji codes, no highlighting (a
    caller cannot turn them on), control characters escaped (``recon.terminal.shown``), secrets masked."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, **kwargs)

    def render_str(self, text: str, *, style: str | Style = "", justify: JustifyMethod | None = None,
                   overflow: OverflowMethod | None = None, emoji: bool | None = None, markup: bool | None = None,
                   highlight: bool | None = None, highlighter: HighlighterType | None = None) -> Text:
        return super().render_str(shown(redact(text)), style=style, justify=justify, overflow=overflow, emoji=False,
                                  markup=False, highlight=False, highlighter=None)


class _Table(Table):
    """A table whose columns fold what does not fit onto more lines: a reference or a reason is never cut to an
    ellipsis."""

    def add_column(self, header: RenderableType = "", footer: RenderableType = "", *,
                   overflow: OverflowMethod = "fold", justify: JustifyMethod = "left", **kwargs: Any) -> None:
        super().add_column(header, footer, overflow=overflow, justify=justify, **kwargs)


def _console() -> PlainConsole:
    console = PlainConsole(soft_wrap=False)
    if not console.is_terminal:
        console.width = max(console.width, 140)  # piped output: do not squeeze columns into 80
    return console


def _ts(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def jobs_table(jobs: Sequence[Job]) -> None:
    table = _Table(title=f"{len(jobs)} jobs")
    for col in ("id", "queue", "kind", "state", "attempts", "run_after", "last error"):
        table.add_column(col)
    for j in jobs:
        err = f"{j.last_error_kind}: {j.last_error}" if j.last_error_kind else ""
        table.add_row(str(j.id), j.queue, j.kind, str(j.state), f"{j.attempts}/{j.max_attempts}",
                      _ts(j.run_after), err[:80])
    _console().print(table)


def job_detail(job: Job, attempts: Sequence[AttemptRecord], replays: Sequence[ReplayRecord] = ()) -> None:
    console = _console()
    table = _Table("", "", show_header=False, title=f"job {job.id}")
    for key, value in job.to_dict().items():
        if value is not None:
            table.add_row(key, str(value))
    console.print(table)
    history = _Table(title="attempts")
    for col in ("attempt", "worker", "started", "finished", "outcome", "error"):
        history.add_column(col)
    pending = sorted(replays, key=lambda r: r.attempt)  # a replay follows the attempt it is keyed by
    for a in attempts:
        err = f"{a.error_kind}: {a.error}" if a.error_kind else (a.error or "")
        history.add_row(str(a.attempt), a.worker, _ts(a.started_at), _ts(a.finished_at), a.outcome, err[:100])
        while pending and pending[0].attempt <= a.attempt:
            _replay_row(history, pending.pop(0))
    for r in pending:
        _replay_row(history, r)
    console.print(history)


def _replay_row(history: Table, r: ReplayRecord) -> None:
    note = f"max_attempts {r.max_attempts_before} -> {r.max_attempts_after}"
    history.add_row(f"after {r.attempt}", r.replayed_by or "", "", _ts(r.replayed_at), "replayed",
                    f"{note} (was {r.error_kind})" if r.error_kind else note)


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
    table = _Table(title=f"queues at {doc['at']}")
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


def progress_while(run: Callable[[], Any], done_func: Callable[[], int], *, total: int, label: str,
                   enabled: bool = True, console: Console | None = None) -> Any:
    """Run ``run()`` with a progress bar on stderr when stderr is a terminal (none when piped).

    While the bar is up, recon's log lines (any thread's: the in-process worker's) go through the bar's
    console, which prints them above the bar and redraws it, instead of tearing its line (``recon.logs.
    lines_through``).
    """
    import sys
    import threading

    from rich.file_proxy import FileProxy
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from recon.logs import lines_through

    console = console or PlainConsole(stderr=True)
    if not enabled or not console.is_terminal:
        return run()
    stop = threading.Event()
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as progress, \
            lines_through(FileProxy(progress.console, sys.stderr)):
        task = progress.add_task(shown(label), total=total)

        def update() -> None:
            while not stop.wait(0.2):
                progress.update(task, completed=min(done_func(), total))

        t = threading.Thread(target=update, daemon=True)
        t.start()
        try:
            return run()
        finally:
            stop.set()
            t.join()
            progress.update(task, completed=min(done_func(), total))


def sweep_dry_run(payments: Sequence[Any], *, modes: dict[str, str] | None = None) -> None:
    from recon.payments.money import format_amount

    how = ", ".join(f"{psp} {mode}" for psp, mode in sorted((modes or {}).items()))
    table = _Table(title=f"dry run: would check {len(payments)} payments" + (f" (mode: {how})" if how else ""))
    for col in ("id", "reference", "psp", "amount", "status", "updated"):
        table.add_column(col)
    for p in payments[:50]:
        table.add_row(str(p.id), p.merchant_reference, p.psp, format_amount(p.amount, p.currency), str(p.status),
                      _ts(p.updated_at))
    console = _console()
    console.print(table)
    if len(payments) > 50:
        console.print(f"... and {len(payments) - 50} more")


def sweep_summary(doc: dict[str, Any]) -> None:
    from recon.payments.money import format_amount

    console = _console()
    console.print(f"checked {doc['checked']}: healed->succeeded {doc['healed_succeeded']}, "
                  f"healed->failed {doc['healed_failed']}, still pending {doc['still_pending']}, "
                  f"needs review {doc['needs_review']}, errors {doc['errors']}, dead {doc['dead']}")
    if "psp_calls" in doc:
        how = ", ".join(f"{psp} {mode}" for psp, mode in sorted(doc.get("mode", {}).items())) or "nothing to ask"
        by_psp = ", ".join(f"{psp} {n}" for psp, n in sorted(doc.get("psp_calls_by_psp", {}).items()))
        console.print(f"PSP calls {doc['psp_calls']}" + (f" ({by_psp})" if by_psp else "")
                      + f", 429s {doc.get('http_429', 0)}; mode: {how}; window jobs {doc.get('window_jobs', 0)}")
    if doc["money_at_risk"]:
        table = _Table(title="money at risk (unfinished payments)")
        for col in ("currency", "age", "payments", "amount"):
            table.add_column(col)
        for row in doc["money_at_risk"]:
            table.add_row(row["currency"], row["age"], str(row["count"]), format_amount(row["amount"], row["currency"]))
        console.print(table)


# --- payments -----------------------------------------------------------------------------------------------


def payments_table(payments: Sequence[Payment]) -> None:
    from recon.payments.money import format_amount

    table = _Table(title=f"{len(payments)} payments")
    for col in ("id", "reference", "account", "psp", "amount", "status", "created", "updated"):
        table.add_column(col, justify="right" if col in ("id", "amount") else "left")
    for p in payments:
        table.add_row(str(p.id), p.merchant_reference, p.merchant_account, p.psp,
                      format_amount(p.amount, p.currency), str(p.status), _ts(p.created_at),
                      _ts(p.updated_at))
    _console().print(table)


def payment_detail(payment: Payment, events: Sequence[PaymentEvent],
                   jobs: Sequence[tuple[Job, Sequence[AttemptRecord]]] = ()) -> None:
    from recon.payments.money import format_amount

    console = _console()
    table = _Table("", "", show_header=False, title=f"payment {payment.merchant_reference}")
    for key, value in payment.to_dict().items():
        if key == "amount":
            value = f"{format_amount(payment.amount, payment.currency)} ({payment.amount} minor units)"
        if value is not None:
            table.add_row(key, str(value))
    console.print(table)
    history = _Table(title="events")
    for col in ("at", "from", "to", "source", "job", "attempt", "details"):
        history.add_column(col)
    for e in events:
        history.add_row(_ts(e.at), e.from_status or "", e.to_status, e.source,
                        str(e.job_id) if e.job_id is not None else "",
                        str(e.attempt) if e.attempt is not None else "", event_summary(e, width=160))
    console.print(history)
    for job, attempts in jobs:
        console.print(f"job {job.id}: {job.kind} on {job.queue}, {job.state}, attempt {job.attempts}/"
                      f"{job.max_attempts}" + (f", last error {job.last_error_kind}: {job.last_error}"[:160]
                                                if job.last_error_kind else ""))
        for a in attempts:
            err = f" {a.error_kind}: {a.error}" if a.error_kind else ""
            console.print(f"  attempt {a.attempt} by {a.worker} at {_ts(a.finished_at)}: {a.outcome}{err}"[:180])


def event_summary(event: PaymentEvent, *, width: int = 100) -> str:
    """One line for an audit event: a manual resolution in words (who, what, why, the PSP's answer, an
    override), other events' details as sorted JSON; at most ``width`` characters."""
    import json

    from recon.payments.money import format_amount

    d = event.details or {}
    if event.source == "manual" and "operator" in d:
        ours = d.get("ours") or {}
        psp = d.get("psp") or {}
        text = f"resolved {event.to_status} by {d['operator']}: {d.get('reason', '')}"
        if psp.get("amount") is not None and psp.get("currency") and ours:
            text += (f" (ours {format_amount(ours['amount'], ours['currency'])}, PSP "
                     f"{format_amount(psp['amount'], str(psp['currency']))})")
        text += f"; PSP said {d['psp_status'] or d.get('psp_outcome')}" if d.get("psp_outcome") else \
            f"; PSP not asked ({d.get('psp_not_asked')})"
        if d.get("override"):
            text += "; OVERRIDE"
        return text[:width]
    return json.dumps(d, sort_keys=True)[:width] if d else ""


def review_table(items: Sequence[Any]) -> None:
    """``recon review list``: recon.review.ReviewItem rows."""
    from recon.payments.money import format_amount

    table = _Table(title=f"{len(items)} payments in review")
    for col in ("reference", "psp", "amount", "why", "in review", "PSP's latest answer", "reason"):
        table.add_column(col, justify="right" if col in ("amount", "in review") else "left")
    for item in items:
        p = item.payment
        answer = item.psp_answer or {}
        said = answer.get("psp_status") or answer.get("psp_outcome") or "-"
        if answer.get("psp_amount") is not None and answer.get("psp_currency"):
            said += f" {format_amount(answer['psp_amount'], str(answer['psp_currency']))}"
        table.add_row(p.merchant_reference, p.psp, format_amount(p.amount, p.currency), str(item.kind),
                      age_text(item.age_seconds), said, (p.review_reason or "")[:60])
    _console().print(table)


def age_text(seconds: float) -> str:
    """3725.0 -> "1h 2m"; 93600 -> "1d 2h"."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


# --- dead letters and pruning -------------------------------------------------------------------------------

#: a dry run lists at most this many jobs on a terminal (--json lists them all)
DRY_RUN_ROWS = 200


def replay_summary(jobs: Sequence[Job], *, replayed: Sequence[int], skipped: Sequence[int], budget: int,
                   dry_run: bool) -> None:
    console = _console()
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
    age = _duration(doc["older_than_seconds"])
    if doc["dry_run"]:
        states = ", ".join(f"{state} {n}" for state, n in doc["by_state"].items()) or "none"
        _console().print(f"would prune {doc['would_delete']} jobs finished more than {age} ago ({states}); "
                         "nothing changed (dry run)")
        return
    _console().print(f"pruned {doc['deleted']} jobs finished more than {age} ago and "
                     f"{doc['attempts_deleted']} attempt rows, in {doc['batches']} batches "
                     f"({doc['seconds']:.1f}s)"
                     + ("; interrupted" if doc["interrupted"] else ""))

def _duration(seconds: float) -> str:
    """7d, 12h, 90m, 30s: the largest unit that divides ``seconds``, as people type durations."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"



# --- stats: the pool (recon.metrics.stats_extension) --------------------------------------------------------


def pool_tables(doc: dict[str, Any]) -> None:
    """The parts of `recon stats` beyond queue depth: kinds, depth detail, workers, PSPs, money at risk."""
    from recon.payments.money import format_amount

    console = _console()
    kinds = _Table(title=f"job kinds, last {int(doc['window_seconds'])}s")
    for col in ("kind", "attempts", "retry rate", "dead rate", "attempts/success", "p50 s", "p95 s", "max s"):
        kinds.add_column(col, justify="left" if col == "kind" else "right")
    for kind, e in sorted(doc["kinds"].items()):
        d = e["duration_seconds"] or {}
        kinds.add_row(kind, str(sum(e["attempts"].values())), f"{e['retry_rate']:.2%}",
                      f"{e['dead_rate']:.2%}", _num(e["attempts_per_success"]), _num(d.get("p50")),
                      _num(d.get("p95")), _num(d.get("max")))
    console.print(kinds)
    if doc["depth_detail"]:
        depth = _Table(title="unfinished jobs by queue, kind, tenant, priority")
        for col in ("queue", "kind", "tenant", "priority", "state", "jobs"):
            depth.add_column(col, justify="right" if col in ("priority", "jobs") else "left")
        for row in doc["depth_detail"][:50]:
            depth.add_row(row["queue"], row["kind"], row["tenant"] or "-", str(row["priority"]), row["state"],
                          str(row["jobs"]))
        console.print(depth)
    w = doc["workers"]
    console.print(f"workers: {w['live']} live, utilisation {w['utilisation']:.0%} "
                  f"({w['busy_slots']}/{w['slots']} slots); stale finishes {doc['stale_finishes']}, "
                  f"leases lost {doc['leases_lost']}")
    if w["list"]:
        workers = _Table(title="workers")
        for col in ("id", "status", "queues", "busy/slots", "last seen", "claimed", "stale finishes"):
            workers.add_column(col)
        for r in w["list"]:
            workers.add_row(r["id"], r["status"], ",".join(r["queues"]), f"{r['busy_slots']}/{r['slots']}",
                            f"{r['last_seen_seconds_ago']:.0f}s ago", str(r["claimed"]),
                            str(r["stale_finishes"]))
        console.print(workers)
    for psp, p in sorted(doc["psp"].items()):
        lat = p["latency_seconds"]
        console.print(f"PSP {psp}: {p['requests']} requests, {p['throttles']} throttled (429); latency p50 "
                      f"{_num(lat['p50'])}s p95 {_num(lat['p95'])}s")
    pay = doc["payments"]
    if pay["unfinished"]:
        by_age = ", ".join(f"{k} {v}" for k, v in pay["unfinished_by_age"].items())
        at_risk = ", ".join(format_amount(v, k) for k, v in pay["money_at_risk"].items())
        console.print(f"unfinished payments by age: {by_age}; money at risk: {at_risk}")


def review_lines(doc: dict[str, Any]) -> None:
    """`recon stats`: payments in review, manual resolutions per day and operator, the last sweeps."""
    console = _console()
    r = doc["review"]
    oldest = f", the oldest for {age_text(r['oldest_age_seconds'])}" if r["oldest_since"] else ""
    console.print(f"needs_review: {r['needs_review']} payments{oldest}")
    rows = doc["resolutions"]["by_day"]
    if rows:
        table = _Table(title=f"manual resolutions since {doc['resolutions']['since'][:10]}")
        for col in ("day", "operator", "resolved as", "payments", "overrides"):
            table.add_column(col, justify="right" if col in ("payments", "overrides") else "left")
        for row in rows:
            table.add_row(row["day"], row["operator"] or "-", row["status"], str(row["count"]), str(row["overrides"]))
        console.print(table)
    if doc.get("webhooks"):
        per_psp: dict[str, list[str]] = {}
        for row in doc["webhooks"]:
            per_psp.setdefault(row["psp"], []).append(f"{row['state']} {row['events']}")
        console.print(f"webhook events, last {int(doc['window_seconds'])}s: "
                      + "; ".join(f"{psp}: {', '.join(parts)}" for psp, parts in sorted(per_psp.items())))
    if doc["sweeps"]:
        table = _Table(title="last sweeps")
        for col in ("started", "by", "outcome", "exit", "checked", "healed", "needs_review"):
            table.add_column(col)
        for sweep in doc["sweeps"]:
            summary = sweep["summary"] or {}
            healed = sum(int(summary.get(k) or 0) for k in ("healed_succeeded", "healed_failed"))
            table.add_row((sweep["started_at"] or "")[:19], sweep["operator"], sweep["outcome"],
                          "-" if sweep["exit_code"] is None else str(sweep["exit_code"]),
                          str(summary.get("checked", "-")), str(healed) if summary else "-",
                          str(summary.get("needs_review", "-")))
        console.print(table)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


# --- `recon psp status`, and the PSP controls part of `recon stats` ------------------


def psp_controls_table(psps: Sequence[dict[str, Any]], *, at: str | None = None) -> None:
    table = _Table(title=f"PSP controls at {at}" if at else "PSP controls")
    for col in ("psp", "traffic", "cool-down", "breaker", "failures", "next probe", "rate limit", "why"):
        table.add_column(col)
    for p in psps:
        traffic = f"paused by {p['paused_by']} since {p['paused_at'][:19]}" if p["paused"] else "flowing"
        cooling = f"{p['cooldown_seconds_left']:.1f}s left" if p["cooling_down"] else "-"
        probe = (p["next_probe_at"] or "")[:19] or "-"
        rate = f"{p['rate_limit']:g}/s" if p["rate_limit"] else "none"
        why = p["pause_reason"] if p["paused"] else (p["breaker_reason"] if p["breaker_state"] != "closed" else "")
        table.add_row(p["psp"], traffic, cooling, p["breaker_state"], str(p["consecutive_failures"]), probe, rate,
                      (why or "")[:60])
    _console().print(table)



def schedule_table(rows: Sequence[dict[str, Any]]) -> None:
    """``recon schedule list``."""
    table = _Table(title=f"{len(rows)} schedules")
    for col in ("name", "kind", "when", "catch up", "last slot", "lag", "last outcome", "next slot"):
        table.add_column(col)
    for r in rows:
        when = f"every {_duration(r['every_seconds'])}" if r["every_seconds"] else f"{r['cron']} ({r['timezone']})"
        lag = f"{r['last_lag_seconds']:.1f}s" if r["last_lag_seconds"] is not None else "-"
        outcome = r["last_outcome"] or "-"
        if r["last_error"]:
            outcome += f": {r['last_error']}"[:60]
        table.add_row(r["name"], r["kind"], when, r["catch_up"], (r["last_slot"] or "-")[:19], lag, outcome,
                      r["next_slot"][:19])
    _console().print(table)
