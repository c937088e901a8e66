"""`recon disputes fetch|list|show`: disputes (chargebacks), objects of their own, from the PSPs' webhooks and
listings."""

from __future__ import annotations

import json
import sys
from datetime import date

import click

from recon.app import App
from recon.dispute_rows import DisputeStatus
from recon.errors import UsageError
from recon.params import EXIT_OK, EXIT_REVIEW, LIMIT, say
from recon.reconcile.disputes import window
from recon.render.refunds import dispute_events_table, disputes_table


@click.group()
def disputes() -> None:
    """Disputes: read them from the PSP's listing, list them, look at one."""


@disputes.command("fetch")
@click.option("--psp", required=True)
@click.option("--since", required=True, help="First day, inclusive (YYYY-MM-DD, UTC).")
@click.option("--until", required=True, help="Last day, exclusive (YYYY-MM-DD, UTC).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def disputes_fetch(app: App, psp: str, since: str, until: str, as_json: bool) -> None:
    """Read the PSP's disputes of [SINCE, UNTIL) (Stripe: opened in it; Adyen: its reports' chargeback rows) and
    record each as its webhook would: a new one opened (its payment to review), a known one moved by its state
    machine, never back. At most 120 days. Exit 1 when some dispute names a payment we do not know
    or another PSP reference than our payment's."""
    start, end = window(_day(since, "--since"), _day(until, "--until"))
    result = app.fetch_disputes(psp, start, end)
    if as_json:
        click.echo(json.dumps({"psp": psp, "since": since, "until": until, **result.to_dict()}))
    else:
        say(f"{psp} disputes {since}..{until}: {result.new} new, {result.moved} moved, {result.same} unchanged")
        for name in result.unknown:
            say(f"  of a payment we do not know: {name}")
        for name in result.conflicts:
            say(f"  under another PSP reference than our payment's: {name}")
    sys.exit(EXIT_REVIEW if result.unknown or result.conflicts else EXIT_OK)


@disputes.command("list")
@click.option("--psp")
@click.option("--status", type=click.Choice([s.value for s in DisputeStatus]))
@click.option("--limit", type=LIMIT, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def disputes_list(app: App, psp: str | None, status: str | None, limit: int, as_json: bool) -> None:
    """Disputes, oldest first, with their evidence deadline."""
    found = app.disputes.page(limit=limit, psp=psp, status=DisputeStatus(status) if status else None)
    refs = {p.id: p.merchant_reference for p in (app.payments.get(i) for i in {d.payment_id for d in found}) if p}
    if as_json:
        click.echo(json.dumps({"disputes": [{**d.to_dict(), "payment": refs.get(d.payment_id)} for d in found]}))
        return
    disputes_table(found, title=f"{len(found)} disputes", payments=refs)


@disputes.command("show")
@click.argument("dispute_id", metavar="DISPUTE_ID")
@click.option("--psp", help="When several PSPs have a dispute of that id.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def disputes_show(app: App, dispute_id: str, psp: str | None, as_json: bool) -> None:
    """One dispute, by the PSP's id (Stripe's dp_…; Adyen's: the payment's pspReference), with its history."""
    found = app.disputes.by_psp_id(dispute_id, psp=psp)
    if not found:
        raise UsageError(f"dispute {dispute_id} not found")
    if len(found) > 1:
        raise UsageError(f"dispute {dispute_id} is known at {', '.join(d.psp for d in found)}: give --psp")
    [dispute] = found
    payment = app.payments.get(dispute.payment_id)
    ref = payment.merchant_reference if payment else str(dispute.payment_id)
    events = app.disputes.events(dispute.id)
    if as_json:
        click.echo(
            json.dumps({"dispute": {**dispute.to_dict(), "payment": ref}, "events": [e.to_dict() for e in events]})
        )
        return
    disputes_table([dispute], title=f"dispute {dispute.psp_dispute_id} of {ref} ({dispute.psp})")
    dispute_events_table(events)


def _day(text: str, option: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option} {text!r}: must be a day, YYYY-MM-DD") from None
