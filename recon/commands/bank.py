"""`recon bank import|list|show`: the bank's statements in, and their entries as finance ops look them up."""

from __future__ import annotations

import json
from datetime import date, datetime
from itertools import islice
from typing import Any

import click

from recon.app import App
from recon.bank.importer import read_statement_file
from recon.bank.rows import BankEntry, ImportResult
from recon.errors import UsageError
from recon.params import BATCH_BY_HELP, LIMIT, by_option, operator_name, say
from recon.payments.money import format_amount

FORMATS = ("auto", "camt053", "mt940", "bai2")


@click.group()
def bank() -> None:
    """Import bank statements; list and show their entries."""


@bank.command("import")
@click.argument("path", metavar="FILE", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "format_name", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="The statement format; auto recognises it from the content (never from the file name).")
@by_option(BATCH_BY_HELP)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def bank_import(app: App, path: str, format_name: str, by: str | None, as_json: bool) -> None:
    """Import a bank statement file (camt.053 001.02/001.08, MT940, BAI2), all or nothing.

    Every statement must be for an account of [bank.accounts], in its currency, and add up (opening + entries
    = closing). Entries the account already has (same bank reference, or the same fallback key) are not
    added again, so importing a statement twice, or an overlapping one, adds nothing twice. --by names the
    operator who imports (audited); without it the import is the system's.
    """
    who = app.actions.batch_actor(by, "bank.import")
    config = app.bank_config
    plan = read_statement_file(path, config=config, format_name=format_name)
    try:
        result = app.bank.import_plan(plan, money_func=format_amount)
    finally:
        plan.close()
    app.actions.batch_done(who, "bank.import", f"{len(result.statements)} statements", file=path,
                           format=plan.format, entries_added=result.entries_added,
                           entries_known=result.entries_known, run_by=operator_name())
    if as_json:
        click.echo(json.dumps(_import_doc(path, plan.format, result)))
        return
    for s in result.statements:
        state = "already imported" if s.known else "new"
        say(f"statement {s.statement_ref} ({s.account}, {s.period_start}..{s.period_end}, {state}): "
            f"{s.entries_added} entries added, {s.entries_known} already known")
    say(f"{path} ({plan.format}): {len(result.statements)} statements, {result.entries_added} entries "
        f"added, {result.entries_known} already known")


def _import_doc(path: str, fmt: str, result: ImportResult) -> dict[str, Any]:
    return {"file": path, "format": fmt, "entries_added": result.entries_added,
            "entries_known": result.entries_known,
            "statements": [{"statement": s.statement_ref, "account": s.account,
                            "period_start": s.period_start.isoformat(), "period_end": s.period_end.isoformat(),
                            "known": s.known, "entries_added": s.entries_added, "entries_known": s.entries_known}
                           for s in result.statements]}


@bank.command("list")
@click.option("--account", help="An account's NAME in [bank.accounts], or its IBAN / number.")
@click.option("--since", help="Entries booked on or after this day (YYYY-MM-DD).")
@click.option("--limit", type=LIMIT, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def bank_list(app: App, account: str | None, since: str | None, limit: int, as_json: bool) -> None:
    """List bank entries, in import order."""
    identifier = _account(app, account) if account is not None else None
    day = _day(since) if since is not None else None
    found = list(islice(app.bank.iter_entries(account=identifier, since=day, page=min(limit, 500)), limit))
    if as_json:
        click.echo(json.dumps({"entries": [_entry_doc(e) for e in found]}))
        return
    say(f"{len(found)} entries")
    for e in found:
        say(_entry_line(e))


@bank.command("show")
@click.argument("word", metavar="ENTRY-or-REF")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def bank_show(app: App, word: str, as_json: bool) -> None:
    """The entries an entry id, a bank reference or an end-to-end id names, with their statement."""
    entries = app.bank.lookup(word.strip())
    if not entries:
        raise UsageError(f"no bank entry has the id, bank reference or end-to-end id {word!r}")
    docs = []
    for e in entries:
        statement = app.bank.statement(e.statement_id)
        docs.append({**_entry_doc(e), "statement": None if statement is None else {
            "id": statement.id, "statement_ref": statement.statement_ref, "sequence": statement.sequence,
            "period_start": statement.period_start.isoformat(), "period_end": statement.period_end.isoformat(),
            "format": statement.format, "file_name": statement.file_name, "file_digest": statement.file_digest}})
    if as_json:
        click.echo(json.dumps({"entries": docs}))
        return
    for doc in docs:
        for k, v in doc.items():
            if v is not None:
                say(f"{k}: {_plain(v)}")
        say("")


def _account(app: App, word: str) -> str:
    config = app.bank_config
    if word in config.accounts:
        return config.accounts[word].identifier
    found = config.account_for(word)
    if found is None:
        known = ", ".join(config.accounts) or "none configured"
        raise UsageError(f"--account: {word!r} is not in [bank.accounts] (known: {known})")
    return found.identifier


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--since: {text!r} is not a date (YYYY-MM-DD)") from None


def _entry_doc(e: BankEntry) -> dict[str, Any]:

    return {**e.to_dict(), "amount_formatted": format_amount(e.amount, e.currency)}


def _entry_line(e: BankEntry) -> str:

    sign = "+" if e.direction == "credit" else "-"
    parts = [str(e.id), e.booking_date.isoformat(), e.account, f"{sign}{format_amount(e.amount, e.currency)}",
             e.bank_reference or "-", e.end_to_end_id or "-", e.counterparty or "-", (e.remittance or "-")[:60]]
    return "  ".join(_plain(p) for p in parts)


def _plain(value: Any) -> str:
    """Outside text, printed literally on one line: control characters shown escaped, never interpreted."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    text = str(value)
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
