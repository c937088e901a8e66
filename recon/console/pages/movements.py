"""``POST /payments/{ref}/refund``: the payment page's refund form, through the App's audited refund
(``recon.actions.Actions.refund``), as ``recon refund`` is: the signed-in operator (operator role), the amount in
major units of the payment's currency, the PSP's reason code; one refund job, never beyond what was captured. A
refusal (nothing written) answers with a redirect to the payment page, which shows it next to the form, or where
the form would be when the payment cannot be refunded at all (``web.action``'s ``at``, ``web.refused``: POST ->
redirect -> GET, so a reload never sends the refund again); a refund queued answers with a redirect to the
payment (``web.done``). The payment page lists its refunds, captures, cancels and disputes (``review.payment_page``).

``POST /payments/{ref}/capture`` and ``/cancel``: an authorised payment's capture form (the amount in major units,
by default the whole authorisation left) and its cancel button, as ``recon capture`` and ``recon cancel`` are
(``Actions.capture``, ``Actions.cancel_authorisation``): one job each, under the signed-in operator. A cancel
releases the whole authorisation for good, so it asks for a confirmation first (its box ticked; unticked: refused
next to the form, nothing written). Every refusal of these forms answers with a redirect to the payment page,
which shows it next to its form."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.console.pages.review import payment_form, payment_reference, payment_url
from recon.console.web import Fields, acting, action, done, recon_app
from recon.errors import UsageError
from recon.operator_rows import Role
from recon.payments.money import format_amount
from recon.payments.refund_import import RefundProblem

log = logging.getLogger("recon.console")

#: what each refund field is called on the form, for its refusals
LABELS = {"merchant_reference": "payment", "refund_reference": "reference", "amount": "amount", "reason": "reason"}


def refund(request: Request, fields: Fields) -> Response:
    reference = payment_reference(request)
    operator = acting(request, Role.OPERATOR)
    try:
        made = recon_app(request).actions.refund(
            reference,
            amount=fields.required("amount", max_length=40),
            reason=fields.text("reason", max_length=100) or "",
            by=operator,
        )
    except RefundProblem as exc:  # named by the form's field
        raise UsageError(f"{LABELS[exc.field_name]}: {exc}") from None
    log.info("console: refund %s of payment %s by %s", made.refund_reference, reference, operator)
    return done(
        request,
        payment_url(reference) + "#refunds",
        f"refund {made.refund_reference} of {format_amount(made.amount, made.currency)} queued by {operator}",
    )


def capture(request: Request, fields: Fields) -> Response:
    reference = payment_reference(request)
    operator = acting(request, Role.OPERATOR)
    amount = fields.text("amount", max_length=40)  # empty: the whole authorisation left
    made = recon_app(request).actions.capture(reference, amount=amount, by=operator)
    log.info("console: capture %s of payment %s by %s", made.modification_reference, reference, operator)
    return done(request, payment_url(reference) + "#captures", f"capture {made.modification_reference} of "
                f"{format_amount(made.amount, made.currency)} queued by {operator}")


def cancel(request: Request, fields: Fields) -> Response:
    reference = payment_reference(request)
    operator = acting(request, Role.OPERATOR)
    if not fields.flag("confirm"):
        raise UsageError('tick "Yes, release the whole authorisation" to confirm')
    made = recon_app(request).actions.cancel_authorisation(reference, by=operator)
    log.info("console: cancel %s of payment %s by %s", made.modification_reference, reference, operator)
    return done(request, payment_url(reference) + "#captures", f"cancel {made.modification_reference} of "
                f"{format_amount(made.amount, made.currency)} queued by {operator}")


ROUTES = [
    Route("/payments/{ref:path}/refund", action(refund, at=payment_form(
        "refund", "#refunds", "not refunded", "amount", "refund_reason=reason")), methods=["POST"]),
    Route("/payments/{ref:path}/capture", action(capture, at=payment_form(
        "capture", "#captures", "not captured", "capture_amount=amount")), methods=["POST"]),
    Route("/payments/{ref:path}/cancel", action(cancel, at=payment_form("cancel", "#captures", "not cancelled")),
          methods=["POST"]),
]
