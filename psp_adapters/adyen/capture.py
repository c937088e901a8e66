"""Adyen's captures and cancels (Checkout v71/v72 ``POST /payments/{paymentPspReference}/captures`` and
``/cancels``; docs.adyen.com/online-payments/capture, /online-payments/cancel) and their mapping.

A payment authorised with ``additionalData.manualCapture: "true"`` waits for a capture. The capture request
(``PaymentCaptureRequest``): ``amount`` {value in Adyen's units, currency} (less than authorised: a partial
capture), ``merchantAccount``, ``reference`` (ours). The cancel request (``PaymentCancelRequest``):
``merchantAccount``, ``reference``. Both answers are asynchronous: ``status`` "will always have the value
**received**", with the modification's own ``pspReference`` (and the payment's as ``paymentPspReference``); the
outcome comes by the ``CAPTURE`` / ``CAPTURE_FAILED`` and ``CANCELLATION`` webhooks and the reports. So an
accepted modification is Pending here, carrying its pspReference, which recon stores at once.
"""

from __future__ import annotations

from psp_adapters._wire import JsonFields
from psp_adapters.adyen.wire import PSP_NAME, from_adyen_amount, to_adyen_amount
from psp_adapters.protocol import ModificationRequest, PaymentOutcome, Pending, Unknown

_json = JsonFields(PSP_NAME)

#: the only ``status`` of PaymentCaptureResponse and PaymentCancelResponse
RECEIVED = "received"
#: the path segment of each kind
PATHS = {"capture": "captures", "cancel": "cancels"}


def modification_body(request: ModificationRequest, *, merchant_account: str) -> dict[str, object]:
    """The JSON body of ``POST /payments/{paymentPspReference}/captures`` or ``/cancels``."""
    body: dict[str, object] = {"merchantAccount": merchant_account, "reference": request.modification_reference}
    if request.kind == "capture":
        body["amount"] = {"value": to_adyen_amount(request.amount, request.currency), "currency": request.currency}
    return body


def modification_to_outcome(payload: object) -> PaymentOutcome:
    """``[received]`` with the modification's pspReference is Pending (the webhook tells the end); any other
    status is Unknown, never a guess. A capture's answer carries its amount; a cancel's has none."""
    doc = _json.as_object(payload, "modification response")
    ref = _json.require(doc, "pspReference", str)
    status = _json.require(doc, "status", str)
    amount, currency = None, None
    if doc.get("amount") is not None:
        money = _json.as_object(doc.get("amount"), "amount")
        currency = _json.require(money, "currency", str).upper()
        amount = from_adyen_amount(_json.amount(money, "value"), currency)
    reference = doc.get("reference")
    common = {"psp_reference": ref, "amount": amount, "currency": currency, "raw_status": status,
              "merchant_reference": reference if isinstance(reference, str) else None}
    if status == RECEIVED:
        return Pending(**common)  # type: ignore[arg-type]
    return Unknown(**common)  # type: ignore[arg-type]
