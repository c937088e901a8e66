"""`recon capture`, `recon cancel` and `recon captures resolve`: the modifications of a payment authorised for a
manual capture."""

from __future__ import annotations

import json

import click

from recon.app import App
from recon.modification_rows import Modification
from recon.params import say
from recon.payments.money import format_amount


@click.command("capture")
@click.argument("reference", metavar="REF")
@click.option("--amount", help="In major units of the payment's currency, e.g. 12.34; at most what is authorised "
                               "(less: a partial capture, the rest released). Default: the whole authorisation.")
@click.option("--by", "by", required=True, help="The operator asking (an enabled operator with the operator role).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def capture(app: App, reference: str, amount: str | None, by: str, as_json: bool) -> None:
    """Capture payment REF (its merchant reference), authorised for a manual capture: one capture job under a
    lease, its own idempotency key. Refused (exit 2, nothing written) unless the payment is authorised and has
    that much left uncaptured and uncancelled."""
    _done(app.actions.capture(reference, amount=amount, by=by), as_json=as_json)


@click.command("cancel")
@click.argument("reference", metavar="REF")
@click.option("--by", "by", required=True, help="The operator asking (an enabled operator with the operator role).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def cancel(app: App, reference: str, by: str, as_json: bool) -> None:
    """Cancel payment REF's authorisation (a manual-capture payment not captured): the amount is released; one
    cancel job. Refused (exit 2, nothing written) unless it is authorised and no capture or cancel is under
    way or done."""
    _done(app.actions.cancel_authorisation(reference, by=by), as_json=as_json)


@click.group()
def captures() -> None:
    """Resolve captures and cancels in review."""


@captures.command("resolve")
@click.argument("reference", metavar="MOD_REF")
@click.option("--as", "to", required=True, type=click.Choice(["succeeded", "failed"]),
              help="Its status from now on: succeeded moves its payment (a capture: succeeded, with the capture's "
                   "amount; a cancel: failed); failed gives its claim back.")
@click.option("--reason", required=True, help="Why; kept in the audit trail.")
@click.option("--by", "by", required=True, help="The operator deciding (an enabled operator with the operator role).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def captures_resolve(app: App, reference: str, to: str, reason: str, by: str, as_json: bool) -> None:
    """Move a capture or cancel out of needs_review by hand (after looking at the PSP's dashboard): a
    compare-and-set with the operator and the reason in its audit event. Refused (exit 2, nothing changed) unless
    it is in review."""
    done = app.actions.resolve_modification(reference, to=to, reason=reason, by=by)
    if as_json:
        click.echo(json.dumps({"modification": done.to_dict()}))
    else:
        say(f"{done.kind} {done.modification_reference} resolved as {done.status}")


def _done(made: Modification, *, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"modification": made.to_dict()}))
    else:
        say(f"{made.kind} {made.modification_reference} of {format_amount(made.amount, made.currency)} queued "
            f"({made.kind} job)")
