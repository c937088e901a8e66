"""`recon review list|show|resolve|recheck|assign|comment|bulk-resolve`: what finance ops do with payments in
needs_review."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from itertools import islice
from typing import Any, NoReturn

import click

from recon import review_bulk
from recon.app import App
from recon.commands.payments import payment_doc
from recon.errors import UsageError
from recon.operator_rows import Approval
from recon.params import EXIT_REVIEW, LIMIT, Duration, by_option, pending_approval, say
from recon.payments.money import format_amount
from recon.payout_rows import ExceptionKind
from recon.render.payments import payment_detail, payout_exceptions_table, review_table
from recon.render.refunds import disputes_table
from recon.review import Difference
from recon.review_rows import QueueFilter, ReviewKind, Severity


@click.group()
def review() -> None:
    """Payments in needs_review: list them, look at one, resolve it by hand, or ask the PSP again."""


def queue_filters(*kind_flags: str, payout_kinds: bool = False) -> Callable[[Callable[..., None]], Any]:
    """The queue's filters, shared by ``list`` (the kind as ``--reason`` or ``--kind``; ``payout_kinds``: the
    close's exception kinds too) and ``bulk-resolve`` (``--kind``: its ``--reason`` is the resolution's, as for
    ``resolve``)."""
    return lambda func: _with_filters(func, kind_flags, payout_kinds)


def _with_filters(func: Callable[..., None], kind_flags: tuple[str, ...], payout_kinds: bool) -> Any:
    kinds = [k.value for k in ReviewKind] + ([k.value for k in ExceptionKind] if payout_kinds else [])
    options = [
        click.option(*kind_flags, "kind", type=click.Choice(kinds),
                     help="Only this kind of reason" + (" (or of payout exception)." if payout_kinds else ".")),
        click.option("--psp"),
        click.option("--older-than", type=Duration(), help="Only payments in review for longer than this (e.g. 2d)."),
        click.option("--currency", help="Only this ISO-4217 currency."),
        click.option("--assignee", help="Only payments assigned to this person."),
        click.option("--unassigned", is_flag=True, help="Only payments nobody is assigned to."),
        click.option("--severity", type=click.Choice([s.value for s in Severity]),
                     help="Only this severity (from amount and age, [review])."),
        click.option("--overdue", is_flag=True, help="Only payments past their due-by ([review.sla])."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _where(app: App, kw: dict[str, Any]) -> QueueFilter:
    return app.review.where(kind=kw["kind"], psp=kw["psp"], older_than=kw["older_than"], currency=kw["currency"],
                            assignee=kw["assignee"], unassigned=kw["unassigned"], severity=kw["severity"],
                            overdue=kw["overdue"])


@review.command("list")
@queue_filters("--reason", "--kind", payout_kinds=True)
@click.option("--limit", type=LIMIT, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def review_list(app: App, /, limit: int, as_json: bool, **filters: Any) -> None:
    """Payments in needs_review, longest in review first: why, for how long, severity, due-by, assignee, the
    PSP's latest answer; then the close's open payout exceptions, oldest first (recon payouts show / resolve).

    A payout exception kind (--kind bank_missing, ...) lists only those; a payment kind only payments. --psp
    keeps the exceptions of that PSP's payouts; the filters only payments have (age, currency, assignee,
    severity, overdue) leave the payout exceptions out."""
    payout_kind = filters["kind"] if filters["kind"] in PAYOUT_KINDS else None
    with_payments = payout_kind is None
    with_payouts = filters["kind"] is None or payout_kind is not None
    with_payouts = with_payouts and not any(filters[k] for k in PAYMENT_ONLY)
    items = app.review.list(**filters, limit=min(limit, 10_000)) if with_payments else []
    exceptions = (list(islice(app.closes.iter_exceptions(state="open", kind=payout_kind, psp=filters["psp"]),
                              limit)) if with_payouts else [])
    if as_json:
        totals = app.review.totals(_where(app, filters)) if with_payments else None
        click.echo(json.dumps({"payments": [i.to_dict() for i in items], "total": totals.count if totals else 0,
                               "by_currency": [vars_of(t) for t in totals.by_currency] if totals else [],
                               "payout_exceptions": [e.to_dict() for e in exceptions],
                               "payout_exceptions_by_kind": app.closes.open_by_kind() if with_payouts else {}}))
        return
    if with_payments:
        review_table(items, now=app.review.clock.now())
    if with_payouts:
        payout_exceptions_table(exceptions)


#: the close's exception kinds (``--kind`` of ``review list`` takes them too)
PAYOUT_KINDS = frozenset(k.value for k in ExceptionKind)
#: the filters that only payments have: with one of them, ``review list`` leaves payout exceptions out
PAYMENT_ONLY = ("older_than", "currency", "assignee", "unassigned", "severity", "overdue")


def vars_of(total: Any) -> dict[str, Any]:
    return {"currency": total.currency, "count": total.count, "amount": total.amount}


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
            "comments": [{"at": c.at.isoformat(), "author": c.author, "kind": c.kind.value, "body": c.body}
                         for c in detail.comments],
            "disputes": [d.to_dict() for d in disputes],
        }))
        return

    payment_detail(detail.payment, detail.events, detail.jobs)
    for c in detail.comments:
        say(f"{c.at:%Y-%m-%d %H:%M:%S} UTC {c.author} " + (f"assigned it to {c.body}" if c.kind == "assigned"
                                                           else f"wrote: {c.body}"))
    if disputes:  # with their evidence deadlines: what to answer, by when
        disputes_table(disputes, title=f"{len(disputes)} disputes of {detail.payment.merchant_reference}")


@review.command("resolve")
@click.argument("reference", metavar="REF")
@click.option("--as", "to", type=click.Choice(["succeeded", "failed"]), required=True,
              help="The payment's status from now on.")
@click.option("--reason", required=True, help="Why; kept in the audit trail.")
@by_option("Who decides: an operator (role operator or above); kept in the audit trail.")
@click.option("--override", is_flag=True,
              help="Resolve even when the PSP's answer contradicts it, or the PSP cannot be asked (recorded).")
@click.option("--difference", type=click.Choice([d.value for d in Difference]),
              help="Resolved as succeeded at the PSP's other amount: what happens to the difference (recorded; "
                   "default written_off).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def review_resolve(app: App, reference: str, to: str, reason: str, by: str | None, override: bool,
                   difference: str | None,
                   as_json: bool) -> None:
    """Move a payment out of needs_review by hand, after asking the PSP once more.

    Refused (exit 2, nothing changed) when the PSP's final answer contradicts the choice or the PSP cannot be
    asked, unless --override. An override needs four eyes: it is requested (exit 1) and runs when another
    operator approves it (recon approvals). The audit event keeps the operator, the reason, both amounts and
    the PSP's answer."""
    result = app.actions.resolve(reference, to=to, reason=reason, by=by, override=override, difference=difference)
    if isinstance(result, Approval):
        _pending(result, as_json=as_json)
    if as_json:
        click.echo(json.dumps({"payment": result.payment.to_dict(), "resolution": result.details}))
        return
    d = result.details
    said = d.get("psp_status") or d.get("psp_outcome") if d["psp_asked"] else f"not asked ({d['psp_not_asked']})"
    say(f"payment {reference} resolved as {to} by {d['operator']}; the PSP said {said}"
        + (f"; {d['difference']['sentence']}" if d.get("difference") else ""))


def _pending(approval: Approval, *, as_json: bool) -> NoReturn:
    """A four-eyes request instead of the action: its line (or document), exit 1."""
    if as_json:
        click.echo(json.dumps({"approval": approval.to_dict()}))
        sys.exit(EXIT_REVIEW)
    pending_approval(approval)


@review.command("recheck")
@click.argument("reference", metavar="REF")
@by_option()
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def review_recheck(app: App, reference: str, by: str | None, as_json: bool) -> None:
    """Queue a reconcile job for the payment (or the refund, the capture or the cancel: REF is then its own
    reference) now: a worker on the reconcile queue asks the PSP and adds its answer to the audit trail (a
    payment in review keeps its status; a succeeded refund the PSP now calls failed or reversed goes to review;
    so does a succeeded capture or cancel the PSP now contradicts, with its payment)."""
    payment = app.payments.by_reference(reference)
    refund = app.refunds.by_reference(reference) if payment is None else None
    if payment is None and refund is None and app.modifications.by_reference(reference) is not None:
        mod, job_id = app.actions.recheck_modification(reference, by=by)
        queue = app.reconcile_config.queue
        if as_json:
            click.echo(json.dumps({mod.kind: reference, "job_id": job_id, "queue": queue}))
        else:
            say(f"reconcile job {job_id} queued on {queue} for {mod.kind} {reference}")
        return
    if refund is not None:
        _, job_id = app.actions.recheck_refund(reference, by=by)
        queue = app.reconcile_config.queue
        if as_json:
            click.echo(json.dumps({"refund": reference, "job_id": job_id, "queue": queue}))
        else:
            say(f"reconcile job {job_id} queued on {queue} for refund {reference}")
        return
    job_id = app.actions.recheck(reference, by=by)
    if as_json:
        click.echo(json.dumps({"payment": reference, "job_id": job_id, "queue": app.reconcile_config.queue}))
        return
    say(f"reconcile job {job_id} queued on {app.reconcile_config.queue} for payment {reference}")


@review.command("assign")
@click.argument("reference", metavar="REF")
@click.option("--to", "to", help="Who works on it from now on.")
@click.option("--nobody", is_flag=True, help="Unassign it.")
@by_option("Who assigns: an operator (role operator or above); kept with the payment's comments.")
@click.pass_obj
def review_assign(app: App, reference: str, to: str | None, nobody: bool, by: str | None) -> None:
    """Assign a payment in review to a person (or, with --nobody, to no one); recorded with its comments."""
    if (to is None) == (not nobody):
        raise UsageError("--to NAME or --nobody: exactly one")
    payment = app.actions.assign(reference, to=to, by=by)
    say(f"payment {reference} assigned to {payment.review_assignee}" if payment.review_assignee
        else f"payment {reference} unassigned")


@review.command("comment")
@click.argument("reference", metavar="REF")
@click.option("--text", required=True, help="The comment (at most 2000 characters).")
@by_option("Who writes it: an operator (role operator or above).")
@click.pass_obj
def review_comment(app: App, reference: str, text: str, by: str | None) -> None:
    """Add a comment to a payment; `recon review show` lists them with the assignments."""
    app.actions.comment(reference, text=text, by=by)
    say(f"comment added to payment {reference} by {by}")


@review.command("bulk-resolve")
@queue_filters("--kind")
@click.option("--as", "to", type=click.Choice(["succeeded", "failed"]), required=True,
              help="The status every matched payment takes.")
@click.option("--reason", help="Why; kept in each payment's audit trail (with --apply).")
@by_option("Who decides (with --apply): an operator (role operator or above).")
@click.option("--apply", "expect", metavar="DIGEST",
              help="Resolve exactly the set a preview printed (its digest); without it: only the preview.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def review_bulk_resolve(app: App, /, to: str, reason: str | None, by: str | None, expect: str | None, as_json: bool,
                        **filters: Any) -> None:
    """Resolve every payment the filters match, all or nothing. First a preview (nothing changes): how many,
    how much per currency, and a digest; then the same command with --apply DIGEST --reason --by resolves
    exactly that set, after asking the PSP about each (refused, nothing changed, if the set changed or a PSP
    contradicts). At most [review] bulk_max payments. More than [four_eyes] bulk_resolve_count: a four-eyes
    request (exit 1), run when another operator approves it (recon approvals)."""
    where = _where(app, filters)
    if expect is None:
        shown = review_bulk.preview(app.review, where, to=to)
        _bulk_out(shown, applied=False, as_json=as_json)
        return
    if not reason or not by:
        raise UsageError("--apply needs --reason and --by")
    done = app.actions.bulk_resolve(where, to=to, reason=reason, by=by, expect=expect)
    if isinstance(done, Approval):
        _pending(done, as_json=as_json)
    _bulk_out(done, applied=True, as_json=as_json)


def _bulk_out(shown: review_bulk.BulkPreview, *, applied: bool, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"applied": applied, "to": shown.to.value, "count": shown.count,
                               "by_currency": [vars_of(t) for t in shown.by_currency], "digest": shown.digest,
                               "too_many": shown.too_many,
                               "payments": [p.merchant_reference for p in shown.payments]}))
        return
    money = ", ".join(f"{t.count} x {format_amount(t.amount, t.currency)}" for t in shown.by_currency) or "nothing"
    if applied:
        say(f"resolved {shown.count} payments as {shown.to}: {money}")
        return
    say(f"would resolve {shown.count} payments as {shown.to}: {money}"
        + (" (more match: narrow the filters)" if shown.too_many else ""))
    for p in shown.payments[:20]:
        say(f"  {p.merchant_reference}  {format_amount(p.amount, p.currency)}  {p.psp}")
    if shown.count > 20:
        say(f"  ... and {shown.count - 20} more")
    say(f"digest {shown.digest}: add --apply {shown.digest} --reason WHY --by NAME to resolve exactly these")
