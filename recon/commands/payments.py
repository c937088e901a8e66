"""`recon payments import|show|list`."""

from __future__ import annotations

import json
import sys
from itertools import islice
from typing import Any

import click

from recon.app import App
from recon.errors import UsageError
from recon.params import BATCH_BY_HELP, EXIT_USAGE, LIMIT, by_option, operator_name, say
from recon.payments.importer import ImportRejected, read_payments
from recon.payments.money import format_amount
from recon.render.modifications import modifications_table
from recon.render.payments import payment_detail, payments_table
from recon.render.refunds import disputes_table, refunds_table
from recon.rows import Payment, PaymentStatus


@click.group()
def payments() -> None:
    """Import, show and list payments."""


@payments.command("import")
@click.argument("path", metavar="FILE.csv", type=click.Path(exists=True, dir_okay=False))
@click.option("--merchant-account",
              help="For rows that name no merchant_account (default: the PSP's [psp.NAME] merchant_account).")
@click.option("--no-charge", is_flag=True, help="Record the payments only; queue no charge jobs.")
@by_option(BATCH_BY_HELP)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def payments_import(app: App, path: str, merchant_account: str | None, no_charge: bool, by: str | None,
                    as_json: bool) -> None:
    """Import payments from a CSV file, all or nothing: with any bad row, nothing is imported.

    Columns: merchant_reference, amount (decimal, e.g. 12.34), currency (ISO-4217), psp; optional
    created_at (ISO-8601, no offset means UTC), merchant_account, payment_method (the PSP's token of a stored
    payment method: Stripe pm_..., Adyen storedPaymentMethodId) and customer_reference (Stripe cus_...,
    Adyen shopperReference), capture (automatic or manual: authorise only, then `recon capture` or `recon
    cancel`; empty: the PSP's [psp.NAME] capture). Each row is checked against what its PSP requires. --by
    names the operator who imports (audited); without it the import is the system's (a schedule, a script).
    """
    if merchant_account is not None and not merchant_account.strip():
        raise UsageError("--merchant-account: must not be empty")
    who = app.actions.batch_actor(by, "payments.import")
    try:
        new = read_payments(path, psp_names=app.psp_names(),
                            merchant_account=merchant_account.strip() if merchant_account else None,
                            account_defaults=app.account_defaults(), charge_check=app.check_charge,
                            existing_func=app.payments.existing_references,
                            capture_defaults={n: app.capture_config.for_psp(n).capture for n in app.psp_names()})
    except ImportRejected as exc:
        for line in exc.lines():  # the first problem first, then the others and a count
            say(f"recon: {line}", err=True)
        sys.exit(EXIT_USAGE)  # not ctx.exit: main() runs click with standalone_mode=False
    # the charge jobs respect the queue's max_depth like every enqueue (QueueFull: exit 2, nothing written)
    queue = app.payments_config.queue
    ids = app.payments.create(new, charge=not no_charge, queue=queue,
                              max_depth={queue: app.settings.queue(queue).max_depth})
    queued = 0 if no_charge else len(ids)
    app.actions.batch_done(who, "payments.import", f"{len(ids)} payments", file=path, imported=len(ids),
                           charge_jobs_queued=queued, run_by=operator_name())
    if as_json:
        click.echo(json.dumps({"file": path, "imported": len(ids), "charge_jobs_queued": queued}))
    else:
        say(f"imported {len(ids)} payments ({queued} charge jobs queued)")


@payments.command("show")
@click.argument("reference", metavar="REF")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def payments_show(app: App, reference: str, as_json: bool) -> None:
    """One payment, by merchant reference, with its event history and its movements (refunds, captures and
    cancels, disputes)."""
    payment = app.payments.by_reference(reference)
    if payment is None:
        raise UsageError(f"payment {reference} not found")
    events = app.payments.events(payment.id)
    movements = app.refunds.for_payment(payment.id)
    disputes = app.disputes.for_payment(payment.id)
    modifications = app.modifications.for_payment(payment.id)
    if as_json:
        click.echo(json.dumps({"payment": payment_doc(payment), "events": [e.to_dict() for e in events],
                               "refunds": [r.to_dict() for r in movements],
                               "modifications": [m.to_dict() for m in modifications],
                               "disputes": [d.to_dict() for d in disputes]}))
        return

    payment_detail(payment, events)
    if modifications:
        modifications_table(modifications, title=f"{len(modifications)} captures and cancels of "
                                                 f"{payment.merchant_reference}")
    if movements:
        refunds_table(movements, title=f"{len(movements)} refunds of {payment.merchant_reference}")
    if disputes:
        disputes_table(disputes, title=f"{len(disputes)} disputes of {payment.merchant_reference}")


@payments.command("list")
@click.option("--status", type=click.Choice([s.value for s in PaymentStatus]))
@click.option("--psp")
@click.option("--limit", type=LIMIT, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def payments_list(app: App, status: str | None, psp: str | None, limit: int, as_json: bool) -> None:
    """List payments, oldest first."""
    if psp is not None and psp not in app.psp_names():
        raise UsageError(f"--psp: unknown PSP {psp!r} (known: {', '.join(app.psp_names())})")
    found = list(islice(app.payments.iter_payments(status=status, psp=psp, page=min(limit, 500)), limit))
    if as_json:
        click.echo(json.dumps({"payments": [payment_doc(p) for p in found]}))
        return

    payments_table(found)


def payment_doc(payment: Payment) -> dict[str, Any]:
    """A payment as ``--json`` prints it: its row, and its amount in major units with the currency."""
    return {**payment.to_dict(), "amount_formatted": format_amount(payment.amount, payment.currency)}
