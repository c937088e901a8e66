"""`recon review list|show|resolve|recheck`: what finance ops do with payments in needs_review."""

from __future__ import annotations

import json
from datetime import timedelta

import click

from recon.app import App
from recon.commands.payments import payment_doc
from recon.params import LIMIT, Duration, say
from recon.reconcile.refund import REFUND_RECONCILE_KIND, refund_reconcile_key
from recon.render.payments import payment_detail, review_table
from recon.render.refunds import disputes_table
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
    disputes = app.disputes.for_payment(detail.payment.id)
    if as_json:
        click.echo(json.dumps({
            "payment": payment_doc(detail.payment),
            "events": [e.to_dict() for e in detail.events],
            "jobs": [{"job": j.to_dict(), "attempts": [a.to_dict() for a in attempts]} for j, attempts in detail.jobs],
            "disputes": [d.to_dict() for d in disputes],
        }))
        return

    payment_detail(detail.payment, detail.events, detail.jobs)
    if disputes:  # with their evidence deadlines: what to answer, by when
        disputes_table(disputes, title=f"{len(disputes)} disputes of {detail.payment.merchant_reference}")


@review.command("resolve")
@click.argument("reference", metavar="REF")
@click.option("--as", "to", type=click.Choice(["succeeded", "failed"]), required=True,
              help="The payment's status from now on.")
@click.option("--reason", required=True, help="Why; kept in the audit trail.")
@click.option("--by", "by", required=True, help="Who decides (kept in the audit trail).")
@click.option("--override", is_flag=True,
              help="Resolve even when the PSP's answer contradicts it, or the PSP cannot be asked (recorded).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def review_resolve(app: App, reference: str, to: str, reason: str, by: str, override: bool, as_json: bool) -> None:
    """Move a payment out of needs_review by hand, after asking the PSP once more.

    Refused (exit 2, nothing changed) when the PSP's final answer contradicts the choice or the PSP cannot be
    asked, unless --override. The audit event keeps the operator, the reason, both amounts and the PSP's
    answer."""
    result = app.review.resolve(reference, to=to, reason=reason, by=by, override=override)
    if as_json:
        click.echo(json.dumps({"payment": result.payment.to_dict(), "resolution": result.details}))
        return
    d = result.details
    said = d.get("psp_status") or d.get("psp_outcome") if d["psp_asked"] else f"not asked ({d['psp_not_asked']})"
    say(f"payment {reference} resolved as {to} by {by}; the PSP said {said}"
               + ("; recorded as an OVERRIDE of the PSP's answer" if override else ""))


@review.command("recheck")
@click.argument("reference", metavar="REF")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def review_recheck(app: App, reference: str, as_json: bool) -> None:
    """Queue a reconcile job for the payment (or the refund: REF is then its refund reference) now: a worker on
    the reconcile queue asks the PSP and adds its answer to the audit trail (a payment in review keeps its
    status; a succeeded refund the PSP now calls failed or reversed goes to review)."""
    refund = app.refunds.by_reference(reference) if app.payments.by_reference(reference) is None else None
    if refund is not None:
        queue = app.reconcile_config.queue
        job_id = app.client().enqueue(REFUND_RECONCILE_KIND, {"refund_id": refund.id, "recheck": True}, queue=queue,
                                      unique_key=refund_reconcile_key(refund.id))
        if as_json:
            click.echo(json.dumps({"refund": reference, "job_id": job_id, "queue": queue}))
        else:
            say(f"reconcile job {job_id} queued on {queue} for refund {reference}")
        return
    job_id = app.review.recheck(reference)
    if as_json:
        click.echo(json.dumps({"payment": reference, "job_id": job_id, "queue": app.reconcile_config.queue}))
        return
    say(f"reconcile job {job_id} queued on {app.reconcile_config.queue} for payment {reference}")
