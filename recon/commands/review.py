"""`recon review list|show|resolve|recheck`: what finance ops do with payments in needs_review."""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import click

from recon.app import App
from recon.commands.payments import payment_doc
from recon.operator_rows import Approval
from recon.params import EXIT_REVIEW, LIMIT, Duration, by_option, pending_approval, say
from recon.render.payments import payment_detail, review_table
from recon.review import ReviewKind


@click.group()
def review() -> None:
    """Payments in needs_review: list them, look at one, resolve it by hand, or ask the PSP again."""


@review.command("list")
@click.option("--reason", "kind", type=click.Choice([k.value for k in ReviewKind]), help="Only this kind of reason.")
@click.option("--psp")
@click.option("--older-than", type=Duration(), help="Only payments in review for longer than this (e.g. 2d).")
@click.option("--currency", help="Only this ISO-4217 currency.")
@click.option("--limit", type=LIMIT, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def review_list(app: App, kind: str | None, psp: str | None, older_than: timedelta | None, currency: str | None,
                limit: int, as_json: bool) -> None:
    """Payments in needs_review, longest in review first: why, for how long, the PSP's latest answer."""
    items = app.review.list(kind=kind, psp=psp, older_than=older_than, currency=currency, limit=min(limit, 10_000))
    if as_json:
        click.echo(json.dumps({"payments": [i.to_dict() for i in items]}))
        return

    review_table(items)


@review.command("show")
@click.argument("reference", metavar="REF")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def review_show(app: App, reference: str, as_json: bool) -> None:
    """A payment with its whole audit trail (the PSP's evidence at each step), its jobs and their attempts."""
    detail = app.review.detail(reference)
    if as_json:
        click.echo(json.dumps({
            "payment": payment_doc(detail.payment),
            "events": [e.to_dict() for e in detail.events],
            "jobs": [{"job": j.to_dict(), "attempts": [a.to_dict() for a in attempts]} for j, attempts in detail.jobs],
        }))
        return

    payment_detail(detail.payment, detail.events, detail.jobs)


@review.command("resolve")
@click.argument("reference", metavar="REF")
@click.option("--as", "to", type=click.Choice(["succeeded", "failed"]), required=True,
              help="The payment's status from now on.")
@click.option("--reason", required=True, help="Why; kept in the audit trail.")
@by_option("Who decides: an operator (role operator or above); kept in the audit trail.")
@click.option("--override", is_flag=True,
              help="Resolve even when the PSP's answer contradicts it, or the PSP cannot be asked (recorded).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def review_resolve(app: App, reference: str, to: str, reason: str, by: str | None, override: bool,
                   as_json: bool) -> None:
    """Move a payment out of needs_review by hand, after asking the PSP once more.

    Refused (exit 2, nothing changed) when the PSP's final answer contradicts the choice or the PSP cannot be
    asked, unless --override. An override needs four eyes: it is requested (exit 1) and runs when another
    operator approves it (recon approvals). The audit event keeps the operator, the reason, both amounts and
    the PSP's answer."""
    result = app.actions.resolve(reference, to=to, reason=reason, by=by, override=override)
    if isinstance(result, Approval):
        if as_json:
            click.echo(json.dumps({"approval": result.to_dict()}))
            sys.exit(EXIT_REVIEW)
        pending_approval(result)
    if as_json:
        click.echo(json.dumps({"payment": result.payment.to_dict(), "resolution": result.details}))
        return
    d = result.details
    said = d.get("psp_status") or d.get("psp_outcome") if d["psp_asked"] else f"not asked ({d['psp_not_asked']})"
    say(f"payment {reference} resolved as {to} by {d['operator']}; the PSP said {said}")


@review.command("recheck")
@click.argument("reference", metavar="REF")
@by_option()
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def review_recheck(app: App, reference: str, by: str | None, as_json: bool) -> None:
    """Queue a reconcile job for the payment now: a worker on the reconcile queue asks the PSP and adds its
    answer to the audit trail (a payment in review keeps its status)."""
    job_id = app.actions.recheck(reference, by=by)
    if as_json:
        click.echo(json.dumps({"payment": reference, "job_id": job_id, "queue": app.reconcile_config.queue}))
        return
    say(f"reconcile job {job_id} queued on {app.reconcile_config.queue} for payment {reference}")
