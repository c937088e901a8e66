"""Adyen's shapes, built from the sandbox's records: PaymentResponse, ServiceError, refusal reasons, pspReferences.

Shared by the Adyen flavour's endpoints (``adyen_api``, ``adyen_modifications``) and its webhooks
(``adyen_events``). Field names and enums are the Checkout v71/v72 OpenAPI documents' (the same for these shapes).
"""

from __future__ import annotations

import string
from collections.abc import Mapping

from psp_adapters.sandbox.cards import AUTHENTICATION_REQUIRED, card_or_visa
from psp_adapters.sandbox.core import Response, json_response
from psp_adapters.sandbox.records import PaymentRecord, random_id
from psp_adapters.sandbox.wire import PENDING_FAILURE_REASON, PaymentStatus

_PSP_ALPHABET = string.ascii_uppercase + string.digits
#: a declined payment's reason (``cards.DECLINES``) -> (refusalReasonCode, refusalReason)
#: (docs.adyen.com/development-resources/refusal-reasons)
REFUSALS: Mapping[str, tuple[str, str]] = {
    "card_declined": ("2", "Refused"),
    "insufficient_funds": ("12", "Not enough balance"),
    "lost_card": ("5", "Blocked Card"),
    "stolen_card": ("5", "Blocked Card"),
    "expired_card": ("6", "Expired Card"),
    "incorrect_cvc": ("24", "CVC Declined"),
    "processing_error": ("4", "Acquirer Error"),
    "card_velocity_exceeded": ("29", "Withdrawal count exceeded"),
    "fraudulent": ("20", "FRAUD"),
    PENDING_FAILURE_REASON: ("2", "Refused"),
}
_RESULT_CODES = {
    PaymentStatus.SUCCEEDED: "Authorised",
    PaymentStatus.AUTHORIZED: "Authorised",
    PaymentStatus.PENDING: "Received",
    PaymentStatus.FAILED: "Refused",
    PaymentStatus.CANCELED: "Cancelled",
    PaymentStatus.OPEN: "Received",
}
#: Adyen's brand names for Stripe's (``cards``)
_BRANDS = {"mastercard": "mc", "diners": "diners", "unionpay": "cup"}


def psp_reference() -> str:
    """A 16-character Adyen pspReference."""
    return random_id("", 16, alphabet=_PSP_ALPHABET)


def adyen_error(
    status: int, code: str, kind: str, message: str, *headers: tuple[str, str], psp_reference: str | None = None
) -> Response:
    """Adyen's ServiceError body."""
    body: dict[str, object] = {"status": status, "errorCode": code, "message": message, "errorType": kind}
    if psp_reference is not None:
        body["pspReference"] = psp_reference
    return json_response(status, body, *headers)


def refusal(record: PaymentRecord) -> tuple[str, str]:
    """(refusalReasonCode, refusalReason) of a refused payment (also a refused AUTHORISATION webhook's reason)."""
    return REFUSALS.get(record.failure_reason or "", ("2", "Refused"))


def needs_action(record: PaymentRecord) -> bool:
    """A payment waiting for the shopper to authenticate (booked as a failed attempt with that reason)."""
    return record.status is PaymentStatus.FAILED and record.failure_reason == AUTHENTICATION_REQUIRED


def brand(record: PaymentRecord) -> str:
    """The card brand as Adyen names it (``visa``, ``mc``, ``amex``, …)."""
    name = card_or_visa(record.payment_method).brand
    return _BRANDS.get(name, name)


def amount_of(value: int, currency: str) -> dict[str, object]:
    return {"currency": currency, "value": value}


def payment_response(
    record: PaymentRecord, *, method_type: str = "scheme", host: str = "127.0.0.1"
) -> dict[str, object]:
    """A PaymentResponse (and PaymentDetailsResponse: the same fields) for the payment as it is now."""
    action = needs_action(record)
    doc: dict[str, object] = {
        "pspReference": record.psp_reference,
        "resultCode": "RedirectShopper" if action else _RESULT_CODES[record.status],
        "merchantReference": record.merchant_reference,
        "amount": amount_of(record.amount, record.currency),
    }
    if record.status in (PaymentStatus.SUCCEEDED, PaymentStatus.AUTHORIZED):
        doc["paymentMethod"] = {"type": method_type, "brand": brand(record)}
    elif action:
        doc["action"] = {
            "paymentMethodType": method_type,
            "method": "GET",
            "type": "redirect",
            "url": f"http://{host}/checkoutshopper/threeDS/redirect?MD={record.psp_reference}",
        }
    elif record.status is PaymentStatus.FAILED:
        code, reason = refusal(record)
        doc["refusalReason"], doc["refusalReasonCode"] = reason, code
    return doc
