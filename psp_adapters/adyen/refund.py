"""Adyen's refunds (Checkout v71/v72 ``POST /payments/{paymentPspReference}/refunds``) and their mapping.

The request (``PaymentRefundRequest``): ``amount`` {value in Adyen's units, currency}, ``merchantAccount``,
``reference`` (ours, "Maximum length: 80 characters"), ``merchantRefundReason`` (one of Adyen's five codes).
The answer (``PaymentRefundResponse``) is asynchronous: ``status`` "will always have the value **received**",
with the refund's own ``pspReference``; the outcome comes later, by the ``REFUND`` webhook (``success`` true or
false), ``REFUND_FAILED`` or ``REFUNDED_REVERSED``, and by the reports. So an accepted refund is Pending here,
carrying its ``pspReference``, which recon stores at once.
"""

from __future__ import annotations

from psp_adapters._wire import JsonFields
from psp_adapters.adyen.wire import PSP_NAME, from_adyen_amount, to_adyen_amount
from psp_adapters.protocol import PaymentOutcome, Pending, RefundRequest, Unknown

_json = JsonFields(PSP_NAME)

#: ``merchantRefundReason``'s values (CheckoutService-v72.json, PaymentRefundRequest)
REASONS = ("FRAUD", "CUSTOMER REQUEST", "RETURN", "DUPLICATE", "OTHER")
#: the only ``status`` of PaymentRefundResponse
RECEIVED = "received"


def refund_body(request: RefundRequest, *, merchant_account: str) -> dict[str, object]:
    """The JSON body of ``POST /payments/{paymentPspReference}/refunds``."""
    body: dict[str, object] = {
        "amount": {"value": to_adyen_amount(request.amount, request.currency), "currency": request.currency},
        "merchantAccount": merchant_account,
        "reference": request.refund_reference,
    }
    if request.reason:
        body["merchantRefundReason"] = request.reason
    return body


def refund_to_outcome(payload: object) -> PaymentOutcome:
    """``[received]`` with the refund's pspReference is Pending (the webhook tells the end); any other status
    is Unknown, never a guess."""
    doc = _json.as_object(payload, "refund response")
    ref = _json.require(doc, "pspReference", str)
    status = _json.require(doc, "status", str)
    money = _json.as_object(doc.get("amount"), "amount")
    currency = _json.require(money, "currency", str).upper()
    common = {"psp_reference": ref, "amount": from_adyen_amount(_json.amount(money, "value"), currency),
              "currency": currency, "raw_status": status,
              "merchant_reference": doc.get("reference") if isinstance(doc.get("reference"), str) else None}
    if status == RECEIVED:
        return Pending(**common)  # type: ignore[arg-type]
    return Unknown(**common)  # type: ignore[arg-type]
