"""Stripe's wire format, mirrored exactly, and its mapping to protocol outcomes.

The only place where a Stripe JSON document becomes a ``PaymentOutcome`` or a ``SettlementLine``, and where
amounts cross between Stripe units and ISO-4217 minor units.

Shapes (API reference, "Payment Intents", "Charges", "Errors"):

- PaymentIntent: ``{"id": "pi_…", "object": "payment_intent", "amount": 2000, "amount_received": 2000,
  "currency": "usd", "status": "succeeded", "metadata": {"merchant_reference": "…"},
  "last_payment_error": {…} | null, "cancellation_reason": null, "created": 1680800504, …}``
- Charge (an item of ``GET /v1/charges``): ``{"id": "ch_…", "object": "charge", "amount": 2000,
  "amount_refunded": 0, "currency": "usd", "status": "succeeded", "refunded": false,
  "payment_intent": "pi_…", "metadata": {…}, "created": 1680800504, …}`` (Stripe copies the PaymentIntent's
  metadata onto the charge it creates when the intent is confirmed)
- List: ``{"object": "list", "url": "/v1/charges", "has_more": true, "data": […]}``; search:
  ``{"object": "search_result", "has_more": false, "next_page": null, "data": […]}``
- Error: ``{"error": {"type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds",
  "message": "…", "param": null, "payment_intent": {…}}}``
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar, assert_never

from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import (
    ChargeRequest,
    Failed,
    PaymentOutcome,
    Pending,
    SettlementLine,
    Succeeded,
    Unknown,
)
from psp_adapters.units import from_psp_units, to_psp_units

PSP_NAME = "stripe"
#: the metadata key under which we store our merchant reference on every PaymentIntent
REFERENCE_KEY = "merchant_reference"

_T = TypeVar("_T")

# Stripe amounts are in "the smallest currency unit" of Stripe's own table, which equals ISO-4217's minor
# unit except for a few currencies (docs.stripe.com/currencies, "Zero-decimal" and "Special cases"):
# ISK is ISO zero-decimal but stays two-decimal in Stripe's API ("an ISK amount of 100 represents 1 króna",
# whole krónur only); MGA is two-decimal in ISO 4217 but zero-decimal at Stripe. JPY, KRW, CLP, VND, …
# are zero-decimal on both sides and pass through unchanged. Value: Stripe exponent minus ISO exponent.
_EXPONENT_SHIFT: Mapping[str, int] = {"ISK": 2, "MGA": -2}


class PaymentIntentStatus(enum.Enum):
    """``payment_intent.status``."""

    REQUIRES_PAYMENT_METHOD = "requires_payment_method"  #: new, or the last attempt failed
    REQUIRES_CONFIRMATION = "requires_confirmation"  #: has a method, not confirmed yet
    REQUIRES_ACTION = "requires_action"  #: customer action (3DS, redirect) pending
    PROCESSING = "processing"  #: asynchronous method, result later
    REQUIRES_CAPTURE = "requires_capture"  #: authorised, not captured
    CANCELED = "canceled"  #: final: canceled
    SUCCEEDED = "succeeded"  #: final: the money was taken


class ChargeStatus(enum.Enum):
    """``charge.status``."""

    SUCCEEDED = "succeeded"  #: captured (check ``refunded`` / ``amount_refunded``)
    PENDING = "pending"  #: asynchronous method in flight
    FAILED = "failed"  #: declined or failed


@dataclass(frozen=True, slots=True)
class StripeError:
    """The ``error`` object of a Stripe error body (every field may be absent)."""

    type: str | None
    code: str | None
    decline_code: str | None
    message: str | None
    payment_intent: Mapping[str, object] | None


def to_stripe_amount(amount: int, currency: str) -> int:
    """ISO minor units -> Stripe units. Raises PspRejectedError when Stripe cannot represent the amount."""
    return to_psp_units(amount, currency, shifts=_EXPONENT_SHIFT, psp=PSP_NAME, label="Stripe")


def from_stripe_amount(amount: int, currency: str) -> int:
    """Stripe units -> ISO minor units. Raises PspProtocolError when the amount is not whole minor units."""
    return from_psp_units(amount, currency, shifts=_EXPONENT_SHIFT, psp=PSP_NAME)


def create_form(request: ChargeRequest) -> dict[str, str]:
    """The form body of ``POST /v1/payment_intents`` creating and confirming ``request`` in one call.

    ``automatic_payment_methods[allow_redirects]=never``: a server-side charge has no customer to redirect,
    and without it Stripe refuses a confirm without ``return_url`` when redirect methods are enabled.
    """
    form = {
        "amount": str(to_stripe_amount(request.amount, request.currency)),
        "currency": request.currency.lower(),
        "confirm": "true",
        "automatic_payment_methods[enabled]": "true",
        "automatic_payment_methods[allow_redirects]": "never",
        f"metadata[{REFERENCE_KEY}]": request.merchant_reference,
    }
    if request.payment_method is not None:
        form["payment_method"] = request.payment_method
    if request.description is not None:
        form["description"] = request.description
    return form


def search_query(merchant_reference: str) -> str:
    """Stripe Search Query Language for our reference (quotes and backslashes escaped)."""
    escaped = merchant_reference.replace("\\", "\\\\").replace("'", "\\'")
    return f"metadata['{REFERENCE_KEY}']:'{escaped}'"


def to_outcome(payload: object) -> PaymentOutcome:
    """Map a PaymentIntent document to an outcome.

    ``requires_payment_method`` with a ``last_payment_error`` is a failed attempt (Stripe returns a
    declined intent to that status); without one the intent was never tried, so it is Pending.
    ``requires_capture`` is Pending: we create with automatic capture, and an uncaptured authorisation
    is not money yet. An unrecognised status is ``Unknown(raw_status=…)``, never a guess.
    Raises PspProtocolError when the document misses a required field.
    """
    doc = _object(payload, "payment_intent")
    raw_status = _require(doc, "status", str)
    currency = _require(doc, "currency", str).upper()
    received = _optional(doc, "amount_received", int)
    common = {
        "psp_reference": _require(doc, "id", str),
        "amount": from_stripe_amount(_require_amount(doc, "amount"), currency),
        "currency": currency,
        "raw_status": raw_status,
        "merchant_reference": _reference(doc),
    }
    try:
        status = PaymentIntentStatus(raw_status)
    except ValueError:
        return Unknown(**common)  # type: ignore[arg-type]
    match status:
        case PaymentIntentStatus.SUCCEEDED:
            if received:
                common["amount"] = from_stripe_amount(received, currency)
            return Succeeded(**common)  # type: ignore[arg-type]
        case PaymentIntentStatus.CANCELED:
            return Failed(**common, reason=_optional(doc, "cancellation_reason", str) or "canceled")  # type: ignore[arg-type]
        case PaymentIntentStatus.REQUIRES_PAYMENT_METHOD:
            error = doc.get("last_payment_error")
            if isinstance(error, Mapping):
                return Failed(**common, reason=_decline_reason(error))  # type: ignore[arg-type]
            return Pending(**common)  # type: ignore[arg-type]
        case (
            PaymentIntentStatus.REQUIRES_CONFIRMATION
            | PaymentIntentStatus.REQUIRES_ACTION
            | PaymentIntentStatus.PROCESSING
            | PaymentIntentStatus.REQUIRES_CAPTURE
        ):
            return Pending(**common)  # type: ignore[arg-type]
        case _:
            assert_never(status)


def decline_to_outcome(error: StripeError) -> Failed:
    """A ``card_error`` (HTTP 402) is a business answer, not an exception: Failed with the decline code."""
    reason = error.decline_code or error.code or "card_declined"
    intent = error.payment_intent
    if intent is None:
        return Failed(reason=reason, raw_status=error.type)
    outcome = to_outcome(intent)
    return Failed(
        psp_reference=outcome.psp_reference,
        amount=outcome.amount,
        currency=outcome.currency,
        raw_status=outcome.raw_status,
        merchant_reference=outcome.merchant_reference,
        reason=reason,
    )


def parse_error(payload: object) -> StripeError:
    """The ``error`` object of an error body; raises PspProtocolError when there is none."""
    error = _object(_object(payload, "error body").get("error"), "error")
    intent = error.get("payment_intent")
    return StripeError(
        type=_optional(error, "type", str),
        code=_optional(error, "code", str),
        decline_code=_optional(error, "decline_code", str),
        message=_optional(error, "message", str),
        payment_intent=intent if isinstance(intent, Mapping) else None,
    )


def list_page(payload: object) -> tuple[list[Mapping[str, object]], bool]:
    """``(data, has_more)`` of a list or search_result page; raises PspProtocolError on a bad page."""
    doc = _object(payload, "list")
    data = doc.get("data")
    has_more = doc.get("has_more")
    if not isinstance(data, list) or not isinstance(has_more, bool):
        raise PspProtocolError(f"{PSP_NAME}: list page without data/has_more", psp=PSP_NAME)
    return [_object(item, "list item") for item in data], has_more


def to_settlement_line(payload: object) -> SettlementLine:
    """Map one Charge to a SettlementLine. ``psp_reference`` is the PaymentIntent id (what recon stores)."""
    doc = _object(payload, "charge")
    currency = _require(doc, "currency", str).upper()
    intent = doc.get("payment_intent")
    created = _require(doc, "created", int)
    return SettlementLine(
        psp_reference=intent if isinstance(intent, str) else _require(doc, "id", str),
        merchant_reference=_reference(doc),
        amount=from_stripe_amount(_require_amount(doc, "amount"), currency),
        currency=currency,
        status=_charge_status(doc),
        settled_at=datetime.fromtimestamp(created, UTC),
        raw=dict(doc),
    )


def _charge_status(doc: Mapping[str, object]) -> str:
    raw = _require(doc, "status", str)
    try:
        status = ChargeStatus(raw)
    except ValueError:
        return f"unknown:{raw}"
    match status:
        case ChargeStatus.SUCCEEDED:
            if doc.get("refunded") is True:
                return "refunded"
            refunded = doc.get("amount_refunded")
            return "partially_refunded" if isinstance(refunded, int) and refunded > 0 else "succeeded"
        case ChargeStatus.PENDING:
            return "pending"
        case ChargeStatus.FAILED:
            return "failed"
        case _:
            assert_never(status)


def _decline_reason(error: Mapping[str, object]) -> str:
    for name in ("decline_code", "code", "type"):
        value = error.get(name)
        if isinstance(value, str) and value:
            return value
    return "payment_failed"


def _reference(doc: Mapping[str, object]) -> str | None:
    metadata = doc.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    value = metadata.get(REFERENCE_KEY)
    return value if isinstance(value, str) else None


def _object(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise PspProtocolError(f"{PSP_NAME}: {what} is not a JSON object", psp=PSP_NAME)
    return value


def _require(doc: Mapping[str, object], name: str, kind: type[_T]) -> _T:
    value = doc.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise PspProtocolError(f"{PSP_NAME}: field {name!r} missing or not {kind.__name__}", psp=PSP_NAME)
    return value


def _optional(doc: Mapping[str, object], name: str, kind: type[_T]) -> _T | None:
    value = doc.get(name)
    return None if value is None else _require(doc, name, kind)


def _require_amount(doc: Mapping[str, object], name: str) -> int:
    # a float amount is schema drift, never rounded
    return _require(doc, name, int)
