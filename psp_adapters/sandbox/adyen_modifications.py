"""Adyen's modifications (docs.adyen.com/online-payments/modify-payments): captures, cancels, refunds and
reversals, answered ``received`` at once and done later, each told by its webhook.

    POST /{v71|v72}/payments/{pspReference}/captures    {merchantAccount, amount, reference?}      201 received
    POST /{v71|v72}/payments/{pspReference}/cancels     {merchantAccount, reference?}              201 received
    POST /{v71|v72}/payments/{pspReference}/refunds     {merchantAccount, amount, reference?,      201 received
                                                          merchantRefundReason?}
    POST /{v71|v72}/payments/{pspReference}/reversals   {merchantAccount, reference?}              201 received

The answer (``PaymentCaptureResponse`` and its siblings) carries the modification's own ``pspReference``, the
payment's (``paymentPspReference``), ``status: received`` and, for captures and refunds, the ``amount``. An
unknown payment is 422 (167, "Original pspReference required for this operation"); another merchant account than
the payment's, 422 (901, "Invalid Merchant Account"); a missing field, 422 (702, 100, 137). Everything else is
decided when the modification is processed, ``Faults.modification_delay_seconds`` later (at once by default, after
the answer), and told by its webhook (``adyen_events``): ``CAPTURE``, ``CANCELLATION``, ``REFUND`` or
``CANCEL_OR_REFUND`` with ``success: false`` and a ``reason`` when Adyen could not do it (a capture of what is not
authorised or of more than was, a cancel of a captured payment, a refund of what was not captured or of more than
is left, a currency other than the payment's). A reversal cancels an authorisation and refunds a capture (all that
is left). A refund may still fail after it succeeded (``Faults.refund_fail_fraction``, the card
``pm_card_refundFail``): ``REFUND_FAILED``, ``settle_after_seconds`` later.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta

from psp_adapters.sandbox.adyen_wire import adyen_error, amount_of, psp_reference
from psp_adapters.sandbox.cards import card_of
from psp_adapters.sandbox.core import Response, Scope, WriteCall, json_response
from psp_adapters.sandbox.movements import REFUND_SUCCEEDED, Adjustment, Modification
from psp_adapters.sandbox.records import PaymentRecord, sandbox_fee
from psp_adapters.sandbox.webhook_events import Change
from psp_adapters.sandbox.wire import PaymentStatus, request_digest
from psp_adapters.units import AMOUNT_MAX

FLAVOR = "adyen"
#: the path's last segment -> the modification's kind
KINDS = {"captures": "capture", "cancels": "cancel", "refunds": "refund", "reversals": "reversal"}
_REFUSED = {
    "amount_too_large": "Insufficient balance on payment",
    "charge_already_refunded": "Insufficient balance on payment",
    "charge_disputed": "Transaction is under dispute",
    "payment_not_succeeded": "Transaction has not been captured",
}


def receive(payload: Mapping[str, object], *, kind: str, payment: str) -> WriteCall | Response:
    """Validate a modification request; its ``run`` books it ``received`` and answers 201."""
    account = payload.get("merchantAccount")
    if not isinstance(account, str) or not account:
        return adyen_error(422, "702", "validation", "Required field 'merchantAccount' is null")
    value = currency = None
    if kind in ("capture", "refund"):
        amount = payload.get("amount")
        if not isinstance(amount, Mapping) or "value" not in amount:
            return adyen_error(422, "100", "validation", "No amount specified")
        value, currency = amount.get("value"), amount.get("currency")
        if (isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= AMOUNT_MAX
                or not isinstance(currency, str)):
            return adyen_error(422, "137", "validation", "Invalid amount specified")
    reference, reason = _text(payload.get("reference")), _text(payload.get("merchantRefundReason"))

    def run(scope: Scope) -> Response:
        record = scope.ledger.get_payment(payment)
        if record is None or record.flavor != FLAVOR:
            return adyen_error(422, "167", "validation", "Original pspReference required for this operation")
        if record.merchant_account != account:
            return adyen_error(422, "901", "security", "Invalid Merchant Account")
        delay = timedelta(seconds=scope.faults.modification_delay_seconds)
        modification = Modification(
            id=psp_reference(), kind=kind, psp_reference=payment, merchant_account=account, amount=value,
            currency=currency, reference=reference, reason=reason, created_at=scope.now, due_at=scope.now + delay,
        )  # fmt: skip
        scope.ledger.add_modification(modification)
        doc: dict[str, object] = {"merchantAccount": account, "paymentPspReference": payment,
                                  "pspReference": modification.id, "status": "received"}
        if value is not None and currency is not None:
            doc["amount"] = amount_of(value, currency)
        if reference is not None:
            doc["reference"] = reference
        if reason is not None:
            doc["merchantRefundReason"] = reason
        return json_response(201, doc)

    return WriteCall(fingerprint=request_digest({"path": [payment, kind], **payload}), run=run)


def process_due(scope: Scope) -> None:
    """Do every modification due by now, in the order received; each is told (success or refusal)."""
    for modification in scope.ledger.due_modifications(scope.now):
        record = scope.ledger.get_payment(modification.psp_reference)
        assert record is not None  # nosec B101  # receive checked it exists; payments are never deleted
        refusal = _refusal(modification, record)
        if refusal is None:
            outcome = _apply(scope, modification, record)
            status = "processed" if outcome in ("capture", "cancel", "refund") else "refused"
            done = dataclasses.replace(modification, status=status, outcome=outcome)
        else:
            done = dataclasses.replace(modification, status="refused", outcome=refusal)
            scope.tell(Change("modification_refused", record, modification=done))
        scope.ledger.finish_modification(done.id, status=done.status, outcome=done.outcome)


def _refusal(modification: Modification, record: PaymentRecord) -> str | None:
    """Why Adyen could not do ``modification`` (its webhook's ``reason``), else None."""
    if modification.currency is not None and modification.currency != record.currency:
        return "Modification in different currency than authorisation"
    kind, status = modification.kind, record.status
    if kind == "capture" and status is not PaymentStatus.AUTHORIZED:
        return "Transaction is not authorised for capture" if status is not PaymentStatus.SUCCEEDED else \
            "Transaction has already been captured"
    if kind == "capture" and (modification.amount or 0) > record.amount:
        return "Capture amount exceeds the authorised amount"
    if kind == "cancel" and status is not PaymentStatus.AUTHORIZED:
        return "Transaction has already been captured" if status is PaymentStatus.SUCCEEDED else \
            "Transaction is not cancellable"
    if kind in ("refund", "reversal") and status not in (PaymentStatus.SUCCEEDED, PaymentStatus.AUTHORIZED):
        return "Transaction has not been captured"
    if kind == "refund" and status is not PaymentStatus.SUCCEEDED:
        return "Transaction has not been captured"
    return None


def _apply(scope: Scope, modification: Modification, record: PaymentRecord) -> str:
    """Do it: returns what was done ("capture", "cancel", "refund"), or why a refund could not be booked."""
    at = modification.due_at
    if modification.kind == "capture":
        amount = modification.amount or record.amount
        record = dataclasses.replace(record, status=PaymentStatus.SUCCEEDED, amount_captured=amount, settled_at=at,
                                     updated_at=at, fee=sandbox_fee(amount))
        scope.ledger.save_payment(record)
        scope.tell(Change("captured", record, modification=modification))
        return "capture"
    if modification.kind == "cancel" or record.status is PaymentStatus.AUTHORIZED:  # a reversal of an authorisation
        record = dataclasses.replace(record, status=PaymentStatus.CANCELED, failure_reason=None, settled_at=at,
                                     updated_at=at)
        scope.ledger.save_payment(record)
        scope.tell(Change("canceled", record, modification=modification))
        return "cancel"
    return _refund(scope, modification, record)


def _refund(scope: Scope, modification: Modification, record: PaymentRecord) -> str:
    amount = modification.amount if modification.kind == "refund" else scope.ledger.refundable(record)
    fails = scope.refund_fate(card=card_of(record.payment_method)) == "fail"
    refund = Adjustment(
        id=modification.id, kind="refund", psp_reference=record.psp_reference, amount=amount or 0,
        currency=record.currency, fee=0, reason=modification.reason, created_at=modification.due_at,
        status=REFUND_SUCCEEDED, settle_to="failed" if fails else None, updated_at=modification.due_at,
        settle_at=modification.due_at + timedelta(seconds=scope.faults.settle_after_seconds) if fails else None,
        reference=modification.reference,
    )  # fmt: skip
    booked = scope.ledger.add_adjustment(refund)
    if isinstance(booked, str):
        why = _REFUSED.get(booked, booked)
        scope.tell(Change("modification_refused", record, modification=dataclasses.replace(
            modification, status="refused", outcome=why)))
        return why
    scope.tell(Change("refund", record, refund, modification=modification))
    return "refund"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
