"""Stripe's wire format, mirrored exactly, and its mapping to protocol outcomes.

With ``balance.py`` (the settlement listing), the only place where a Stripe JSON document becomes a
``PaymentOutcome`` or a ``SettlementLine``, and where amounts cross between Stripe units and ISO-4217 minor
units. Every request is made against ``API_VERSION`` (the ``Stripe-Version`` header), so the shapes below are
that version's.

Shapes (API reference https://docs.stripe.com/api, "Payment Intents", "Errors"):

- PaymentIntent: ``{"id": "pi_…", "object": "payment_intent", "amount": 2000, "amount_received": 2000,
  "currency": "usd", "status": "succeeded", "metadata": {"merchant_reference": "…"},
  "last_payment_error": {…} | null, "cancellation_reason": null, "created": 1680800504, …}``
- List: ``{"object": "list", "url": "/v1/…", "has_more": true, "data": […]}``; search:
  ``{"object": "search_result", "has_more": false, "next_page": null, "data": […]}``
- Error (https://docs.stripe.com/api/errors): ``{"error": {"type": "card_error", "code": "card_declined",
  "decline_code": "insufficient_funds", "message": "…", "param": null, "payment_intent": {…}}}``; ``type``
  is one of ``api_error``, ``card_error``, ``idempotency_error``, ``invalid_request_error``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import assert_never

from psp_adapters._wire import JsonFields
from psp_adapters.errors import PspRejectedError
from psp_adapters.protocol import (
    ActionRequired,
    Authorised,
    ChargeRequest,
    Failed,
    FieldProblem,
    ListedPayment,
    PaymentOutcome,
    Pending,
    Succeeded,
    Unknown,
)
from psp_adapters.units import from_psp_units, to_psp_units

PSP_NAME = "stripe"
#: the ``Stripe-Version`` every request is made with: the version stripe-python 16 pins
#: (``stripe.api_version``; a test keeps the two equal). Stripe picks a request's version from this header
#: first, the SDK's pinned version second, the account's default last (https://docs.stripe.com/api-versions),
#: so sending it keeps the shapes this module reads independent of the Dashboard setting.
API_VERSION = "2026-10-28.endive"
#: the metadata key under which we store our merchant reference on every PaymentIntent
REFERENCE_KEY = "merchant_reference"
#: a metadata value holds at most 500 characters (https://docs.stripe.com/metadata, "Data")
METADATA_VALUE_LIMIT = 500
#: the error code (and issuer decline code) of a payment that needs the customer to authenticate
#: (https://docs.stripe.com/error-codes#authentication-required, https://docs.stripe.com/declines/codes)
AUTHENTICATION_REQUIRED = "authentication_required"

#: the JSON validators (psp_adapters._wire), naming Stripe in their errors
_json = JsonFields(PSP_NAME)

# Stripe amounts are in "the smallest currency unit" of Stripe's own table, which equals ISO-4217's minor
# unit except for a few currencies (https://docs.stripe.com/currencies, "Zero-decimal" and "Special cases"):
# ISK is ISO zero-decimal but stays two-decimal in Stripe's API ("an ISK amount of 100 represents 1 króna",
# whole krónur only); MGA is two-decimal in ISO 4217 but zero-decimal at Stripe. JPY, KRW, CLP, VND, …
# are zero-decimal on both sides and pass through unchanged. Value: Stripe exponent minus ISO exponent.
_EXPONENT_SHIFT: Mapping[str, int] = {"ISK": 2, "MGA": -2}
# Three-decimal currencies (https://docs.stripe.com/currencies#three-decimal): Stripe takes three decimals
# but a card payment's amount must end in 0 (5.124 KWD is sent as 5120, never 5124).
_THREE_DECIMAL = frozenset({"BHD", "JOD", "KWD", "OMR", "TND"})
# PaymentMethod ids (``pm_…``; Stripe's test tokens such as ``pm_card_visa`` included) and Customer ids
_PAYMENT_METHOD_ID = re.compile(r"pm_[A-Za-z0-9_]+")
_CUSTOMER_ID = re.compile(r"cus_[A-Za-z0-9_]+")


class PaymentIntentStatus(enum.Enum):
    """``payment_intent.status`` (https://docs.stripe.com/payments/paymentintents/lifecycle)."""

    REQUIRES_PAYMENT_METHOD = "requires_payment_method"  #: new, or the last attempt failed
    REQUIRES_CONFIRMATION = "requires_confirmation"  #: has a method, not confirmed yet
    REQUIRES_ACTION = "requires_action"  #: customer action (3DS, redirect) pending
    PROCESSING = "processing"  #: asynchronous method, result later
    REQUIRES_CAPTURE = "requires_capture"  #: authorised, not captured
    CANCELED = "canceled"  #: final: canceled
    SUCCEEDED = "succeeded"  #: final: the money was taken


@dataclass(frozen=True, slots=True)
class StripeError:
    """The ``error`` object of a Stripe error body (every field may be absent)."""

    type: str | None
    code: str | None
    decline_code: str | None
    message: str | None
    payment_intent: Mapping[str, object] | None

    @property
    def needs_authentication(self) -> bool:
        """The customer must authenticate (3-D Secure): an off-session charge cannot finish by itself."""
        return AUTHENTICATION_REQUIRED in (self.code, self.decline_code)


def to_stripe_amount(amount: int, currency: str) -> int:
    """ISO minor units -> Stripe units. Raises PspRejectedError when Stripe cannot take the amount: a zero-
    decimal MGA amount that is not whole ariary, or a three-decimal amount whose last digit is not 0."""
    if currency.upper() in _THREE_DECIMAL and amount % 10:
        raise PspRejectedError(
            f"{PSP_NAME}: {currency.upper()} amounts must end in 0 at Stripe (three-decimal currency)",
            psp=PSP_NAME,
        )
    return to_psp_units(amount, currency, shifts=_EXPONENT_SHIFT, psp=PSP_NAME, label="Stripe")


def from_stripe_amount(amount: int, currency: str) -> int:
    """Stripe units -> ISO minor units. Raises PspProtocolError when the amount is not whole minor units."""
    return from_psp_units(amount, currency, shifts=_EXPONENT_SHIFT, psp=PSP_NAME)


def check_charge(request: ChargeRequest) -> list[FieldProblem]:
    """What Stripe would refuse about ``request`` as a merchant-initiated charge; empty when nothing.

    Pure (no call, no settings): run at import time, and by ``create_form`` before anything is sent.

    - ``payment_method``: required, a PaymentMethod id ``pm_…``. Legacy ``card_…``/``src_…`` ids are refused:
      at API_VERSION the create parameter is "The ID of a PaymentMethod to attach to this PaymentIntent"
      (API reference; older versions also named Card and Source objects), the Sources API is deprecated
      (https://docs.stripe.com/api/sources) and Stripe asks integrations to move cards and sources to
      PaymentMethods (https://docs.stripe.com/payments/payment-methods/transitioning).
    - ``customer_reference``: required, a Customer id ``cus_…``: an off-session charge names the Customer the
      method is attached to ("Set customer to the ID of the Customer and payment_method to the ID of the
      PaymentMethod", https://docs.stripe.com/payments/save-and-reuse, "Charge the saved payment method
      later"); a method attached to another Customer cannot be used.
    - ``merchant_reference``: at most METADATA_VALUE_LIMIT characters (it is a metadata value).
    - ``amount``: positive, and representable in Stripe's units (see ``to_stripe_amount``).

    Minimum charge amounts (https://docs.stripe.com/currencies#minimum-and-maximum-charge-amounts) are not
    checked: the table is per settlement currency and applies after conversion, which we cannot know here.
    """
    problems = [*_method_problems(request.payment_method), *_customer_problems(request.customer_reference)]
    if len(request.merchant_reference) > METADATA_VALUE_LIMIT:
        problems.append(FieldProblem("merchant_reference", f"longer than {METADATA_VALUE_LIMIT} characters, "
                                                           "Stripe's limit for a metadata value"))
    problems.extend(_amount_problems(request.amount, request.currency))
    return problems


def _method_problems(payment_method: str | None) -> list[FieldProblem]:
    if not payment_method:
        return [FieldProblem("payment_method", "required: the Stripe PaymentMethod (pm_…) to charge")]
    if _PAYMENT_METHOD_ID.fullmatch(payment_method) is None:
        # the value is not quoted: a wrongly filled column may hold a card number
        return [FieldProblem("payment_method", "not a Stripe PaymentMethod id (pm_…); legacy card_/src_ ids "
                                               "are not accepted")]
    return []


def _customer_problems(customer: str | None) -> list[FieldProblem]:
    if not customer:
        return [FieldProblem("customer_reference",
                             "required: the Stripe Customer (cus_…) the payment method is attached to")]
    if _CUSTOMER_ID.fullmatch(customer) is None:
        return [FieldProblem("customer_reference", "not a Stripe Customer id (cus_…)")]
    return []


def _amount_problems(amount: int, currency: str) -> list[FieldProblem]:
    if amount <= 0:
        return [FieldProblem("amount", "must be positive")]
    try:
        to_stripe_amount(amount, currency)
    except PspRejectedError as exc:
        return [FieldProblem("amount", str(exc).removeprefix(f"{PSP_NAME}: "))]
    return []


def create_form(request: ChargeRequest) -> dict[str, str]:
    """The form body of ``POST /v1/payment_intents`` creating and confirming ``request`` in one call.

    A merchant-initiated charge of a stored method (https://docs.stripe.com/payments/save-and-reuse,
    "Charge the saved payment method later"): ``customer`` and ``payment_method``, ``confirm=true`` and
    ``off_session=true`` (the customer is not in a checkout flow and cannot authenticate; only valid with
    ``confirm=true``). Raises PspRejectedError, before anything is sent, when ``check_charge`` finds problems.

    ``automatic_payment_methods[enabled]=true`` with ``[allow_redirects]=never`` and no ``return_url``: a
    redirect-based method may require a ``return_url`` to confirm (API reference, ``automatic_payment_methods.
    allow_redirects``), and an off-session charge has no customer to send back anywhere; ``never`` keeps
    every non-redirect method (cards, debits) and removes the need for one. No ``payment_method_types``:
    from API version 2026-09-30.endive Stripe refuses it (400 ``payment_method_types_no_longer_supported``,
    https://docs.stripe.com/changelog/endive/2026-09-30/removes-the-payment-method-types-parameter-from-
    payment-intents-and-setup-intents), and the ``payment_method`` given fixes the type anyway.
    """
    problems = check_charge(request)
    if problems:
        details = "; ".join(f"{p.field}: {p.message}" for p in problems)
        raise PspRejectedError(f"{PSP_NAME}: charge refused before sending: {details}", psp=PSP_NAME)
    assert request.payment_method is not None and request.customer_reference is not None  # checked above  # nosec B101
    form = {
        "amount": str(to_stripe_amount(request.amount, request.currency)),
        "currency": request.currency.lower(),
        "payment_method": request.payment_method,
        "customer": request.customer_reference,
        "confirm": "true",
        "off_session": "true",
        "automatic_payment_methods[enabled]": "true",
        "automatic_payment_methods[allow_redirects]": "never",
        f"metadata[{REFERENCE_KEY}]": request.merchant_reference,
    }
    if request.description is not None:
        form["description"] = request.description
    if request.manual_capture:  # authorise only: the intent stops at requires_capture until captured or canceled
        form["capture_method"] = "manual"
    return form


def search_query(merchant_reference: str) -> str:
    """Stripe Search Query Language for our reference (quotes and backslashes escaped;
    https://docs.stripe.com/search#search-query-language)."""
    escaped = merchant_reference.replace("\\", "\\\\").replace("'", "\\'")
    return f"metadata['{REFERENCE_KEY}']:'{escaped}'"


def to_outcome(payload: object) -> PaymentOutcome:
    """Map a PaymentIntent document to an outcome.

    ``requires_action`` is ActionRequired: the customer must act (3-D Secure, a redirect), which an
    off-session charge cannot do, so it is neither a success nor something to wait for.
    ``requires_payment_method`` with a ``last_payment_error`` is a failed attempt (Stripe returns a declined
    intent to that status): Failed, or ActionRequired when the error is ``authentication_required`` (the
    intent an off-session charge leaves behind when the issuer wants authentication); without one the
    intent was never tried, so it is Pending. ``requires_capture`` is Authorised: the amount is held for a
    capture (``capture_method=manual``), not money yet (recon reads it as pending for an automatic payment).
    An unrecognised status is ``Unknown(raw_status=…)``, never a guess. Raises PspProtocolError when the
    document misses a required field.
    """
    doc = _json.as_object(payload, "payment_intent")
    raw_status = _json.require(doc, "status", str)
    currency = _json.require(doc, "currency", str).upper()
    received = _json.optional_amount(doc, "amount_received")
    common = {
        "psp_reference": _json.require(doc, "id", str),
        "amount": from_stripe_amount(_json.amount(doc, "amount"), currency),
        "currency": currency,
        "raw_status": raw_status,
        "merchant_reference": reference(doc),
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
            return Failed(**common, reason=_json.optional(doc, "cancellation_reason", str) or "canceled")  # type: ignore[arg-type]
        case PaymentIntentStatus.REQUIRES_PAYMENT_METHOD:
            error = doc.get("last_payment_error")
            if not isinstance(error, Mapping):
                return Pending(**common)  # type: ignore[arg-type]
            if AUTHENTICATION_REQUIRED in (error.get("code"), error.get("decline_code")):
                return ActionRequired(**common)  # type: ignore[arg-type]
            return Failed(**common, reason=_decline_reason(error))  # type: ignore[arg-type]
        case PaymentIntentStatus.REQUIRES_ACTION:
            return ActionRequired(**common)  # type: ignore[arg-type]
        case PaymentIntentStatus.REQUIRES_CAPTURE:
            return Authorised(**common)  # type: ignore[arg-type]
        case PaymentIntentStatus.REQUIRES_CONFIRMATION | PaymentIntentStatus.PROCESSING:
            return Pending(**common)  # type: ignore[arg-type]
        case _:
            assert_never(status)


def to_listed(payload: object) -> ListedPayment:
    """A PaymentIntent of a list page (``GET /v1/payment_intents``): its outcome (``to_outcome``) and its
    ``created`` (unix seconds, https://docs.stripe.com/api/payment_intents/object#payment_intent_object-created).
    Raises PspProtocolError when ``created`` is missing, not an integer or outside 1970..9999."""
    doc = _json.as_object(payload, "payment_intent")
    return ListedPayment(to_outcome(doc), created_at=_json.unix_time(doc, "created"))


def card_error_outcome(error: StripeError) -> Failed | ActionRequired:
    """A ``card_error`` (HTTP 402) is a business answer, not an exception.

    ``authentication_required`` (as ``code``, or as the issuer's ``decline_code``) is ActionRequired: an
    off-session charge that needs authentication fails this way, leaving its intent in
    ``requires_payment_method`` (https://docs.stripe.com/payments/save-and-reuse, "Charge the saved payment
    method later"). Every other card error is Failed with the decline code (else the code). The intent's
    id, amount and currency are carried when the error includes ``payment_intent``; without one,
    ``raw_status`` is the error's code (ActionRequired) or type (Failed).
    """
    intent = error.payment_intent
    fields: dict[str, object] = {}
    if intent is not None:
        outcome = to_outcome(intent)
        fields = {"psp_reference": outcome.psp_reference, "amount": outcome.amount, "currency": outcome.currency,
                  "raw_status": outcome.raw_status, "merchant_reference": outcome.merchant_reference}
    if error.needs_authentication:
        return ActionRequired(**{"raw_status": AUTHENTICATION_REQUIRED, **fields})  # type: ignore[arg-type]
    reason = error.decline_code or error.code or "card_declined"
    return Failed(**{"raw_status": error.type, **fields}, reason=reason)  # type: ignore[arg-type]


def parse_error(payload: object) -> StripeError:
    """The ``error`` object of an error body; raises PspProtocolError when there is none."""
    error = _json.as_object(_json.as_object(payload, "error body").get("error"), "error")
    intent = error.get("payment_intent")
    return StripeError(
        type=_json.optional(error, "type", str),
        code=_json.optional(error, "code", str),
        decline_code=_json.optional(error, "decline_code", str),
        message=_json.optional(error, "message", str),
        payment_intent=intent if isinstance(intent, Mapping) else None,
    )


def list_page(payload: object) -> tuple[list[Mapping[str, object]], bool]:
    """``(data, has_more)`` of a list or search_result page; raises PspProtocolError on a bad page."""
    doc = _json.as_object(payload, "list")
    data = doc.get("data")
    has_more = doc.get("has_more")
    if not isinstance(data, list) or not isinstance(has_more, bool):
        raise _json.error("list page without data/has_more")
    return [_json.as_object(item, "list item") for item in data], has_more


def reference(doc: Mapping[str, object]) -> str | None:
    """Our merchant reference from a document's metadata, or None."""
    metadata = doc.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    value = metadata.get(REFERENCE_KEY)
    return value if isinstance(value, str) else None


def _decline_reason(error: Mapping[str, object]) -> str:
    for name in ("decline_code", "code", "type"):
        value = error.get(name)
        if isinstance(value, str) and value:
            return value
    return "payment_failed"
