"""`recon close` and `recon payouts list|show|fetch|exceptions|resolve`: closing a day on money."""

from __future__ import annotations

import json
import sys
from datetime import UTC, date
from itertools import islice
from typing import Any

import click

from psp_adapters.errors import PspError
from recon.app import App
from recon.clock import SystemClock
from recon.close import close as closing
from recon.errors import UsageError
from recon.params import EXIT_FAILED, EXIT_OK, EXIT_REVIEW, LIMIT, by_option, check_output_path, say
from recon.payout_rows import ExceptionKind, PayoutStatus
from recon.redact import identifier
from recon.review import REASON_MAX


def _day(text: str, option: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option} {text!r}: must be a day, YYYY-MM-DD") from None


def _window(since: str, until: str) -> tuple[date, date]:
    start, end = _day(since, "--since"), _day(until, "--until")
    if start >= end:
        raise UsageError(f"--since {since!r} must be before --until {until!r}")
    return start, end


@click.command("close")
@click.option("--psp", required=True, help="The PSP whose payouts are closed.")
@click.option("--since", required=True, help="First arrival day, inclusive (YYYY-MM-DD).")
@click.option("--until", required=True, help="Last arrival day, exclusive (YYYY-MM-DD).")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="json", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False),
              help="Write the report here (replaced only when complete), not stdout; the summary goes to stderr.")
@click.option("--fetch/--no-fetch", default=False, show_default=True,
              help="Fetch the PSP's payouts of the window first (as `recon payouts fetch`).")
@click.pass_obj
def close(app: App, psp: str, since: str, until: str, fmt: str, output: str | None, fetch: bool) -> None:
    """Close [SINCE, UNTIL): every payout arriving then, its lines, the bank credit it matched, every exception.

    Matching follows [close] (docs/design.md, "Matching payouts"); new matches and exceptions are stored once,
    so running it twice gives the same answer. Exit 0: every payout explained (matched or resolved); 1: items
    remain (exceptions, or payouts still inside their bank window); 2: bad usage or configuration; 3: failure.
    """
    start, end = _window(since, until)
    if output:
        check_output_path(output, option="--output")
    if fetch:
        _fetch(app, psp, start, end)
    report = app.close_day(psp, start, end, as_of=SystemClock().now().astimezone(UTC).date())
    if output:
        closing.write_file(report, app.payouts, path=output, fmt=fmt)
    elif fmt == "json":
        closing.write_json(report, app.payouts, sys.stdout)
    else:
        closing.write_csv(report, app.payouts, sys.stdout)
    for line in _summary(report):
        say(line, err=True)
    sys.exit(EXIT_OK if report.closed else EXIT_REVIEW)


def _summary(report: closing.CloseReport) -> list[str]:
    counts = ", ".join(f"{n} {k}" for k, n in report.categories().items()) or "no payouts"
    lines = [f"close {report.psp} {report.since}..{report.until}: {len(report.payouts)} payouts ({counts}); "
             + ("closed" if report.closed else f"{report.open_items} open")]
    for currency, t in report.totals.items():
        lines.append(f"  {currency} (minor units): gross {t['gross']}, fees {t['fees']}, refunds {t['refunds']}, "
                     f"disputes {t['disputes']}, net {t['net']}, paid out {t['paid_out']}, received {t['received']}")
    return lines


def _fetch(app: App, psp: str, since: date, until: date) -> None:
    try:
        result = app.fetch_payouts(psp, since, until)
    except PspError as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        say(f"recon: the {psp} payouts listing failed: {type(exc).__name__}: {first}", err=True)
        sys.exit(EXIT_FAILED)
    say(f"{psp} payouts {since}..{until}: {result.new} new, {result.changed} changed, {result.same} unchanged, "
        f"{result.lines} lines" + (f"; lines differ: {', '.join(result.lines_differ)}" if result.lines_differ else ""),
        err=True)
    for change in result.changes:
        say(f"  changed: {change}", err=True)


@click.group()
def payouts() -> None:
    """The PSPs' payouts: fetch them, list them, look at one, and resolve the close's exceptions."""


@payouts.command("fetch")
@click.option("--psp", required=True)
@click.option("--since", required=True, help="First arrival day, inclusive (YYYY-MM-DD).")
@click.option("--until", required=True, help="Last arrival day, exclusive (YYYY-MM-DD).")
@click.pass_obj
def payouts_fetch(app: App, psp: str, since: str, until: str) -> None:
    """Fetch the PSP's payouts arriving in [SINCE, UNTIL), each stored once with its lines (a changed one is
    updated visibly and reopens its close). Exit 1 when a payout's lines do not add up to its amount."""
    start, end = _window(since, until)
    if (end - start).days > 93:
        raise UsageError("--since/--until: at most 93 days at a time")
    result = app.fetch_payouts(psp, start, end)
    say(f"{psp} payouts {start}..{end}: {result.new} new, {result.changed} changed, {result.same} unchanged, "
        f"{result.lines} lines")
    for change in result.changes:
        say(f"  changed: {change}")
    for ref in result.lines_differ:
        say(f"  lines differ: {ref}")
    sys.exit(EXIT_REVIEW if result.lines_differ else EXIT_OK)


@payouts.command("list")
@click.option("--psp")
@click.option("--status", type=click.Choice([s.value for s in PayoutStatus]))
@click.option("--since", help="Arriving on or after this day (YYYY-MM-DD).")
@click.option("--limit", type=LIMIT, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def payouts_list(app: App, psp: str | None, status: str | None, since: str | None, limit: int,
                 as_json: bool) -> None:
    """Payouts, oldest stored first."""
    day = _day(since, "--since") if since else None
    found = list(islice(app.payouts.iter_payouts(psp=psp, status=status, since=day, page=min(limit, 500)), limit))
    if as_json:
        click.echo(json.dumps({"payouts": [p.to_dict() for p in found]}))
        return
    say(f"{len(found)} payouts")
    for p in found:
        check = "" if p.lines_add_up or not p.line_count else f"  LINES NET {p.lines_net}"
        say(f"{p.id:>8}  {p.psp:<8} {p.payout_ref:<32} {p.amount:>14} {p.currency}  {p.status.value:<10} "
            f"{p.arrival_date}  {p.line_count} lines{check}")


@payouts.command("show")
@click.argument("word", metavar="ID")
@click.option("--psp", help="When ID is the PSP's payout id and several PSPs could have it.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def payouts_show(app: App, word: str, psp: str | None, as_json: bool) -> None:
    """One payout (recon's id or the PSP's): its lines, the bank entries it matched, its exceptions and history."""
    found = app.payouts.find(word, psp=psp)
    if not found:
        raise UsageError(f"no payout {word!r}")
    if len(found) > 1:
        raise UsageError(f"{word!r} names {len(found)} payouts ({', '.join(f'{p.psp} {p.id}' for p in found)}); "
                         "give --psp or recon's id")
    doc = payout_doc(app, found[0].id)
    if as_json:
        click.echo(json.dumps(doc))
        return
    p = doc["payout"]
    say(f"payout {p['id']} {p['psp']} {p['payout_id']}: {p['amount']} {p['currency']} (minor units), {p['status']}, "
        f"arriving {p['arrival_date']}, trace {p['trace_ref'] or '-'}")
    say(f"  lines: {p['line_count']}, netting {p['lines_net']} ({'adds up' if p['lines_add_up'] else 'DIFFERS'})")
    for c in doc["bank_entries"]:
        say(f"  bank entry {c['id']}: {c['amount']} {c['currency']} booked {c['booking_date']} on {c['account']}, "
            f"ref {c['bank_reference'] or '-'}")
    for e in doc["exceptions"]:
        say(f"  exception {e['id']} {e['kind']} ({e['state']}): {e['detail']}")
    for line in doc["lines"]:
        moved = f" {line['movement_reference']}" if line["movement_reference"] else ""
        moved += f" (our refund {line['refund']})" if line.get("refund") else ""
        moved += f" (our dispute {line['dispute']})" if line.get("dispute") else ""
        ref = line["psp_reference"]  # the PSP's own reference, shown exactly (recon.redact.identifier)
        say(f"  {line['kind']:<16} ", identifier(ref) if ref else "-", " " * max(0, 28 - len(ref or "-")),
            f" {line['merchant_reference'] or '-':<24} gross {line['gross']} fee {line['fee']} net {line['net']} "
            f"{line['currency']} {line['category']}{moved}")
    for ev in doc["events"]:
        say(f"  {ev['at']} {ev['kind']}: {ev['detail']}")


def payout_doc(app: App, payout_id: int, *, line_limit: int = 10_000) -> dict[str, Any]:
    """A payout with its lines (at most ``line_limit``), matched bank entries, exceptions and history."""
    payout = app.payouts.get(payout_id)
    if payout is None:
        raise UsageError(f"no payout {payout_id}")
    return {"payout": payout.to_dict(),
            "lines": [_linked(app, line.to_dict()) for line in islice(app.payouts.lines(payout_id), line_limit)],
            "bank_entries": [c.to_dict() for c in app.closes.matched_entries(payout_id)],
            "exceptions": [e.to_dict() for e in app.closes.exceptions_of(payout_id)],
            "events": [e.to_dict() for e in app.payouts.events(payout_id)]}


def _linked(app: App, line: dict[str, Any]) -> dict[str, Any]:
    """A line with the refund reference or the PSP dispute id of the movement it carries, when we know it."""
    if line["refund_id"] is not None:
        refund = app.refunds.get(line["refund_id"])
        line["refund"] = refund.refund_reference if refund else None
    if line["dispute_id"] is not None:
        dispute = app.disputes.get(line["dispute_id"])
        line["dispute"] = dispute.psp_dispute_id if dispute else None
    return line


@payouts.command("exceptions")
@click.option("--kind", type=click.Choice([k.value for k in ExceptionKind]))
@click.option("--state", type=click.Choice(["open", "resolved", "cleared", "all"]), default="open", show_default=True)
@click.option("--limit", type=LIMIT, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def payouts_exceptions(app: App, kind: str | None, state: str, limit: int, as_json: bool) -> None:
    """The close's exceptions (the review desk's payout kinds), oldest first."""
    found = list(islice(app.closes.iter_exceptions(state=None if state == "all" else state, kind=kind), limit))
    if as_json:
        click.echo(json.dumps({"exceptions": [e.to_dict() for e in found]}))
        return
    say(f"{len(found)} exceptions")
    for e in found:
        say(f"{e.id:>8}  {e.kind.value:<18} {e.state.value:<9} payout {e.payout_id or '-'} entry "
            f"{e.entry_id or '-'}: {e.detail}")


@payouts.command("resolve")
@click.argument("exception_id", type=click.IntRange(1, 2**63 - 1))
@click.option("--reason", required=True, help="Why this is explained (recorded).")
@by_option("Who resolves it: an operator (role operator or above); kept in the audit trail.")
@click.pass_obj
def payouts_resolve(app: App, exception_id: int, reason: str, by: str | None) -> None:
    """Resolve an open exception by hand, with a reason and the operator; the payout's history and the audit
    trail record it."""
    reason = reason.strip()
    if not reason or len(reason) > REASON_MAX:
        raise UsageError(f"--reason: must be 1 to {REASON_MAX} characters")
    done = app.actions.resolve_payout_exception(exception_id, reason=reason, by=by)
    say(f"exception {done.id} ({done.kind.value}) resolved by {done.resolved_by}: {reason}")
