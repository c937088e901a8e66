"""`recon refunds import|show` and `recon refund`."""

from __future__ import annotations

import json
import sys

import click

from recon.app import App
from recon.errors import UsageError
from recon.params import BATCH_BY_HELP, EXIT_USAGE, by_option, operator_name, say
from recon.payments.importer import ImportRejected
from recon.payments.money import format_amount
from recon.payments.refund_import import RefundProblem, read_refunds
from recon.refund_rows import REFUND
from recon.render.refunds import refund_detail

#: the option that names each field of ``recon refund``, for its one-line errors
_OPTIONS = {"merchant_reference": "REF", "refund_reference": "--reference", "amount": "--amount",
            "reason": "--reason"}


@click.group()
def refunds() -> None:
    """Import, show and resolve refunds."""


@refunds.command("import")
@click.argument("path", metavar="FILE.csv", type=click.Path(exists=True, dir_okay=False))
@by_option(BATCH_BY_HELP)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def refunds_import(app: App, path: str, by: str | None, as_json: bool) -> None:
    """Import refunds from a CSV file, all or nothing: with any bad row, nothing is imported.

    Columns: merchant_reference (the payment's), refund_reference (the refund's own, unique), amount (major
    units of the payment's currency, e.g. 12.34), reason (the PSP's reason code, or empty). A payment is
    refunded only once it succeeded, and never beyond what it captured. Each refund is a job of its own. --by
    names the operator who asks for them (stored as each refund's requester, audited); without it the import
    is the system's, and each refund's requester is the user@host that ran it.
    """
    who = app.actions.batch_actor(by, "refunds.import")
    operator = who if by is not None else _operator(operator_name())
    try:
        new = read_refunds(path, payment_func=app.payments.by_reference, existing_func=app.refunds.existing_references,
                           reasons_func=app.refund_reasons, requested_by=operator)
    except ImportRejected as exc:
        for line in exc.lines():
            say(f"recon: {line}", err=True)
        sys.exit(EXIT_USAGE)
    queue = app.payments_config.queue
    ids = app.refunds.create(new, queue=queue, max_depth={queue: app.settings.queue(queue).max_depth})
    app.actions.batch_done(who, "refunds.import", f"{len(ids)} refunds", file=path, imported=len(ids),
                           run_by=operator_name())
    if as_json:
        click.echo(json.dumps({"file": path, "imported": len(ids), "refund_jobs_queued": len(ids)}))
    else:
        say(f"imported {len(ids)} refunds ({len(ids)} refund jobs queued)")


@refunds.command("show")
@click.argument("reference", metavar="REFUND_REF")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def refunds_show(app: App, reference: str, as_json: bool) -> None:
    """One refund, by its refund reference, with its event history."""
    found = app.refunds.by_reference(reference)
    if found is None:
        raise UsageError(f"refund {reference} not found")
    payment = app.payments.get(found.payment_id)
    events = app.refunds.events(found.id)
    payment_ref = payment.merchant_reference if payment else str(found.payment_id)
    if as_json:
        click.echo(json.dumps({"refund": {**found.to_dict(), "payment": payment_ref},
                               "events": [e.to_dict(REFUND) for e in events]}))
        return
    refund_detail(found, events, payment_reference=payment_ref)


@refunds.command("resolve")
@click.argument("reference", metavar="REFUND_REF")
@click.option("--as", "to", required=True, type=click.Choice(["succeeded", "failed"]),
              help="The refund's status from now on (failed gives its amount back to the payment).")
@click.option("--reason", required=True, help="Why; kept in the audit trail.")
@click.option("--by", "by", required=True, help="Who decides (kept in the audit trail).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def refunds_resolve(app: App, reference: str, to: str, reason: str, by: str, as_json: bool) -> None:
    """Move a refund out of needs_review by hand (after looking at the PSP's dashboard): a compare-and-set with
    the operator and the reason in its audit event. Refused (exit 2, nothing changed) unless it is in review.
    --by names an enabled operator with the operator role (or above); the decision joins the audit trail."""
    app.actions.resolve_refund(reference, to=to, reason=reason, by=by)
    operator = by.strip()
    if as_json:
        click.echo(json.dumps({"refund": reference, "status": to, "by": operator}))
    else:
        say(f"refund {reference} resolved as {to} by {operator}")


@click.command("refund")
@click.argument("reference", metavar="REF")
@click.option("--amount", required=True, help="In major units of the payment's currency, e.g. 12.34.")
@click.option("--reason", default="", help="The PSP's reason code (Stripe: requested_by_customer, duplicate, "
                                           "fraudulent; Adyen: CUSTOMER REQUEST, RETURN, DUPLICATE, FRAUD, OTHER).")
@click.option("--by", "by", required=True, help="The operator who asks for the refund (recon operators: the "
                                                "operator role or above; kept in the audit trail).")
@click.option("--reference", "refund_reference", help="The refund's own unique reference (default: REF-r<N>).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def refund(app: App, reference: str, amount: str, reason: str, by: str, refund_reference: str | None,
           as_json: bool) -> None:
    """Refund payment REF (its merchant reference), fully or in part: one refund job, never beyond what the
    payment captured. --by names an enabled operator with the operator role (or above); the request, or its
    refusal, joins the audit trail."""
    try:
        made = app.actions.refund(reference, amount=amount, reason=reason, by=by, refund_reference=refund_reference)
    except RefundProblem as exc:
        raise UsageError(f"{_OPTIONS[exc.field_name]}: {exc}") from None
    if as_json:
        click.echo(json.dumps({"refund": made.to_dict()}))
    else:
        say(f"refund {made.refund_reference} of {format_amount(made.amount, made.currency)} queued (refund job)")


def _operator(by: str) -> str:
    name = by.strip()
    if not name or len(name) > 200 or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise UsageError("--by: a name of 1 to 200 printable characters")
    return name
