"""`recon audit verify|seal|export|prune`: the tamper-evident audit trail (recon.audit)."""

from __future__ import annotations

import csv
import json
import os
import sys
import tempfile
from datetime import datetime, timedelta
from typing import IO, Any

import click

from recon.app import App
from recon.audit import RETENTION_MIN, Sealer, entry, verify
from recon.errors import UsageError
from recon.operator_rows import Role
from recon.params import EXIT_REVIEW, Duration, Since, by_option, check_output_path, say
from recon.redact import grouped
from recon.spreadsheet import safe_cell

EXPORT_PAGE = 5000


@click.group()
def audit() -> None:
    """The audit trail: who did what, when, with what outcome; chained so that an edit shows."""


def _instant(app: App, value: timedelta | datetime) -> datetime:
    return app.db.clock.now() - value if isinstance(value, timedelta) else value


@audit.command("seal")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def audit_seal(app: App, as_json: bool) -> None:
    """Chain the rows not yet sealed now (every worker does it every [audit] seal_interval)."""
    result = Sealer(app.audit, gap_grace=app.audit_config.gap_grace).run_once()
    if as_json:
        click.echo(json.dumps({"sealed": result.sealed, "gaps": result.gaps, "waiting_for": result.waiting}))
        return
    for stream, n in result.sealed.items():
        waiting = result.waiting[stream]
        say(f"{stream}: {n} rows sealed, {result.gaps[stream]} gaps"
            + (f"; waiting for id {waiting} (not committed yet, or a gap once the grace is over)" if waiting else ""))


@audit.command("verify")
@click.option("--since", type=Since(), metavar="DUR|ISO", help="Start at the rows of this time (a duration back "
              "from now, or an ISO date or datetime); default: from the start.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def audit_verify(app: App, since: timedelta | datetime | None, as_json: bool) -> None:
    """Walk the chain against the rows: exit 1 naming the first row that does not match (edited, deleted or
    inserted); print each stream's head hash, to be recorded elsewhere."""
    checks = verify(app.audit, since=_instant(app, since) if since is not None else None)
    bad = [c for c in checks if c.mismatch]
    if as_json:
        click.echo(json.dumps({"ok": not bad, "streams": [c.to_dict() for c in checks]}))
    else:
        for c in checks:  # hashes dotted (recon.redact.grouped): say() would mask a Luhn-valid run of a plain one
            start = "from the start" if c.from_start else f"from anchor {grouped(c.anchor)}"
            say(f"{c.stream}: {c.checked} sealed rows checked {start}; "
                + (f"MISMATCH: {c.mismatch}" if c.mismatch else
                   f"head {grouped(c.head) if c.head else '-'} (row {c.head_row}); {c.unsealed} rows not sealed yet"))
    if bad:
        sys.exit(EXIT_REVIEW)


@audit.command("export")
@click.option("--since", type=Since(), metavar="DUR|ISO", required=True)
@click.option("--until", type=Since(), metavar="DUR|ISO", help="Exclusive; default: now.")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False), help="A file (written whole, then renamed); default: "
              "stdout.")
@click.pass_obj
def audit_export(app: App, since: timedelta | datetime, until: timedelta | datetime | None, fmt: str,
                 output: str | None) -> None:
    """The audit rows of [--since, --until), in id order: id, at, actor, action, subject, outcome, evidence."""
    if output:
        check_output_path(output, option="--output")
    start = _instant(app, since)
    end = _instant(app, until) if until is not None else app.db.clock.now()
    if start >= end:
        raise UsageError("--since must be before --until")
    if output is None:
        _export(app, start, end, fmt, sys.stdout)
        return
    directory = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".recon-audit-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            n = _export(app, start, end, fmt, f)
        os.replace(tmp, output)
    except BaseException:
        os.unlink(tmp)
        raise
    say(f"{n} audit rows written to {output}", err=True)


def _export(app: App, start: datetime, end: datetime, fmt: str, out: IO[str]) -> int:
    after, n = 0, 0
    writer = csv.writer(out) if fmt == "csv" else None
    if writer:
        writer.writerow(["id", "at", "actor", "action", "subject", "outcome", "evidence"])
    else:
        out.write('{"audit": [')
    while True:
        page = app.audit.between(start, end, after=after, n=EXPORT_PAGE)
        for record in page:
            f: dict[str, Any] = dict(record.fields)
            f["at"] = f["at"].isoformat()
            if writer:
                evidence = json.dumps(f["evidence"], sort_keys=True) if f["evidence"] is not None else ""
                writer.writerow([safe_cell(str(f[k])) for k in ("id", "at", "actor", "action", "subject", "outcome")]
                                + [safe_cell(evidence)])
            else:
                out.write(("," if n else "") + json.dumps(f, sort_keys=True))
            n += 1
        if len(page) < EXPORT_PAGE:
            break
        after = page[-1].id
    if not writer:
        out.write("]}\n")
    return n


@audit.command("prune")
@click.option("--older-than", type=Duration(), required=True,
              help="Delete sealed audit rows older than this; never less than [audit] retention (default 400d).")
@by_option("The admin who prunes.")
@click.pass_obj
def audit_prune(app: App, older_than: timedelta, by: str | None) -> None:
    """Delete sealed audit rows (and their seals) older than --older-than, never younger than [audit] retention
    (at least 365 days). On PostgreSQL this needs a role with DELETE on audit_log (docs/operations.md)."""
    who = app.authorize(by, Role.ADMIN, action="audit prune")
    keep = max(app.audit_config.retention, RETENTION_MIN)
    if older_than < keep:
        raise UsageError(f"--older-than {older_than.days}d: audit rows are kept at least [audit] retention "
                         f"({keep.days}d)")
    cutoff = app.db.clock.now() - older_than
    last = app.audit.prune(cutoff)
    app.audit.record(entry(who, "audit.prune", f"rows up to {last}", older_than_days=older_than.days))
    say(f"audit rows up to id {last} pruned (older than {cutoff:%Y-%m-%d})" if last else "no audit row to prune")
