"""Adyen's Checkout payment calls as the sandbox answers them: ``/payments``, ``/payments/details`` and
``/paymentMethods`` (docs.adyen.com/api-explorer/Checkout/72; v71 the same).

``/payments`` (PaymentRequest; required: ``amount {value, currency}``, ``merchantAccount``, ``paymentMethod``,
``reference``, ``returnUrl``; 422 with Adyen's error codes when one is missing: 100, 137, 702, 130, 14_030)
answers a PaymentResponse: ``Authorised`` (``additionalData.manualCapture: "true"``: authorised only, waiting for
a ``/captures``), ``Refused`` with ``refusalReason`` and ``refusalReasonCode``, ``Received`` (slow settlement), or
``RedirectShopper`` with a redirect action (3-D Secure: the test card needs authentication). ``captureDelayHours``
is read as immediate capture.

``/payments/details`` completes a ``RedirectShopper``: ``details.redirectResult`` (or ``details.MD``) is what the
shopper's browser brings back; here it is the ``MD`` value of the redirect action's URL (the payment's
pspReference). The authentication then succeeds, and the charge goes through unless the card declines (a
PaymentDetailsResponse, as ``/payments`` answers, and the ``AUTHORISATION`` webhook). A payment that waits for
nothing is answered as it stands.

``/paymentMethods`` (``merchantAccount`` required) lists cards (``scheme``) and, for a ``shopperReference``, the
stored cards that shopper paid with at that merchant account (``storedPaymentMethods``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta

from psp_adapters.protocol import ChargeRequest
from psp_adapters.sandbox.adyen_wire import adyen_error, brand, needs_action, payment_response, psp_reference
from psp_adapters.sandbox.cards import card_of, card_or_visa
from psp_adapters.sandbox.core import Response, Scope, WriteCall, json_response
from psp_adapters.sandbox.records import PaymentRecord, sandbox_fee
from psp_adapters.sandbox.webhook_events import Change
from psp_adapters.sandbox.wire import PaymentStatus, request_digest
from psp_adapters.units import AMOUNT_MAX

FLAVOR = "adyen"
#: ``PaymentRequest.returnUrl.maxLength`` per version (v72 lowered it to 1,024)
RETURN_URL_MAX = {"v71": 8000, "v72": 1024}
_SCHEMES = ["visa", "mc", "amex", "maestro", "discover", "diners", "jcb", "cup"]


def payments(payload: Mapping[str, object], *, version: str, host: str) -> WriteCall | Response:
    problem = validate(payload, version=version)
    if problem is not None:
        code, message = problem
        return adyen_error(422, code, "validation", message, psp_reference=psp_reference())
    amount, method = payload["amount"], payload["paymentMethod"]
    assert isinstance(amount, Mapping) and isinstance(method, Mapping)  # nosec B101  # validate checked them
    method_type = str(method.get("type", "scheme"))
    token = method.get("storedPaymentMethodId") or method.get("recurringDetailReference") or method_type
    metadata, extra = payload.get("metadata"), payload.get("additionalData")
    manual = isinstance(extra, Mapping) and str(extra.get("manualCapture", "")).lower() == "true"
    charge = ChargeRequest(
        merchant_reference=str(payload["reference"]), amount=int(amount["value"]), currency=str(amount["currency"]),
        merchant_account=str(payload["merchantAccount"]), payment_method=token if isinstance(token, str) else None,
        customer_reference=_text(payload.get("shopperReference")),
        description=_text(payload.get("shopperStatement")),
    )  # fmt: skip
    tags = {str(k): str(v) for k, v in metadata.items()} if isinstance(metadata, Mapping) else {}

    def run(scope: Scope) -> Response:
        decision = scope.decide(amount=charge.amount, card=card_of(charge.payment_method))
        status, settle_to = decision.status, decision.settle_to
        if manual:
            status = PaymentStatus.AUTHORIZED if status is PaymentStatus.SUCCEEDED else status
            settle_to = PaymentStatus.AUTHORIZED if settle_to is PaymentStatus.SUCCEEDED else settle_to
        record = PaymentRecord.new(
            charge, idempotency_key=scope.key or "", status=status, reason=decision.reason, settle_to=settle_to,
            settle_after=timedelta(seconds=decision.settle_after_seconds), now=scope.now,
            psp_reference=psp_reference(), flavor=FLAVOR, metadata=tags, capture_method="manual" if manual else
            "automatic",
        )  # fmt: skip
        scope.ledger.insert_payment(record)
        scope.tell(Change("confirmed", record, idempotency_key=scope.key))
        return json_response(200, payment_response(record, method_type=method_type, host=host))

    return WriteCall(fingerprint=request_digest(payload), run=run)


def details(payload: Mapping[str, object]) -> WriteCall | Response:
    found = payload.get("details")
    if not isinstance(found, Mapping):
        return adyen_error(422, "702", "validation", "Required field 'details' is null")
    reference = found.get("redirectResult") or found.get("MD")
    if not isinstance(reference, str) or not reference:
        return adyen_error(422, "702", "validation", "Invalid payload provided: no redirectResult")

    def run(scope: Scope) -> Response:
        record = scope.ledger.get_payment(reference)
        if record is None or record.flavor != FLAVOR:
            return adyen_error(422, "702", "validation", "Invalid payload provided: unknown redirectResult")
        if needs_action(record):
            record = _authenticated(scope, record)
        return json_response(200, payment_response(record))

    return WriteCall(fingerprint=request_digest(payload), run=run)


def _authenticated(scope: Scope, record: PaymentRecord) -> PaymentRecord:
    """The shopper authenticated: the charge goes through, unless the card declines."""
    card, now = card_of(record.payment_method), scope.now
    declined = card.decline if card is not None else None
    status = PaymentStatus.FAILED if declined else (
        PaymentStatus.AUTHORIZED if record.capture_method == "manual" else PaymentStatus.SUCCEEDED)
    record = dataclasses.replace(
        record, status=status, failure_reason=declined, updated_at=now, settled_at=now if status.is_final else None,
        authorized_at=now if status is PaymentStatus.AUTHORIZED else None, fee=sandbox_fee(record.amount),
    )
    scope.ledger.save_payment(record)
    scope.tell(Change("confirmed", record, idempotency_key=scope.key))
    return record


def payment_methods(payload: Mapping[str, object]) -> WriteCall | Response:
    account = payload.get("merchantAccount")
    if not isinstance(account, str) or not account:
        return adyen_error(422, "702", "validation", "Required field 'merchantAccount' is null")
    shopper = _text(payload.get("shopperReference"))

    def run(scope: Scope) -> Response:
        stored: dict[str, PaymentRecord] = {}
        if shopper is not None:
            for record in scope.ledger.account_payments(account, flavor=FLAVOR, before=scope.now + timedelta(days=1)):
                if record.customer_reference == shopper and record.payment_method:
                    stored.setdefault(record.payment_method, record)
        doc = {
            "paymentMethods": [{"brands": _SCHEMES, "name": "Cards", "type": "scheme"}],
            "storedPaymentMethods": [_stored(token, record) for token, record in stored.items()],
        }
        return json_response(200, doc)

    return WriteCall(fingerprint=request_digest(payload), run=run)


def _stored(token: str, record: PaymentRecord) -> dict[str, object]:
    card = card_or_visa(token)
    return {
        "brand": brand(record), "expiryMonth": "12", "expiryYear": "2034", "holderName": "Checkout Shopper",
        "id": token, "lastFour": card.last4, "name": card.brand.title(),
        "supportedRecurringProcessingModels": ["CardOnFile", "Subscription", "UnscheduledCardOnFile"],
        "supportedShopperInteractions": ["Ecommerce", "ContAuth"], "type": "scheme",
    }  # fmt: skip


def validate(payload: Mapping[str, object], *, version: str) -> tuple[str, str] | None:
    """(errorCode, message) of the first problem with a PaymentRequest's required fields, else None."""
    amount = payload.get("amount")
    if not isinstance(amount, Mapping) or "value" not in amount:
        return "100", "No amount specified"
    value, currency = amount.get("value"), amount.get("currency")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= AMOUNT_MAX:  # Adyen: int64
        return "137", "Invalid amount specified"
    if not isinstance(currency, str) or len(currency) != 3 or not currency.isalpha() or not currency.isupper():
        return "137", "Invalid currency specified"
    account = payload.get("merchantAccount")
    if not isinstance(account, str) or not account:
        return "702", "Required field 'merchantAccount' is null"
    method = payload.get("paymentMethod")
    if not isinstance(method, Mapping) or not isinstance(method.get("type", "scheme"), str):
        return "702", "Required field 'paymentMethod' is null"
    reference = payload.get("reference")
    if not isinstance(reference, str) or not reference:
        return "130", "Required field 'reference' is not provided."
    if len(reference) > 80:
        return "702", "Field 'reference' is longer than 80 characters"
    return_url = payload.get("returnUrl")
    if not isinstance(return_url, str) or not return_url:
        return "14_030", "Return URL is missing."
    if len(return_url) > RETURN_URL_MAX[version]:
        return "702", f"Field 'returnUrl' is longer than {RETURN_URL_MAX[version]} characters"
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
