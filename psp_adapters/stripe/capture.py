"""Stripe's captures and cancels of a PaymentIntent made with ``capture_method=manual``, and their mapping.

- ``POST /v1/payment_intents/{id}/capture`` with ``amount_to_capture`` (Stripe's units; less than the amount is a
  partial capture: "any remaining amount is released", docs.stripe.com/payments/place-a-hold-on-a-payment-method)
  and ``metadata[capture_reference]`` (ours), with the ``Idempotency-Key`` header. Stripe captures once: a
  PaymentIntent in ``requires_capture`` becomes ``succeeded`` with ``amount_received`` the captured amount.
- ``POST /v1/payment_intents/{id}/cancel`` with the ``Idempotency-Key`` header: ``canceled``. An authorisation
  never captured is canceled by Stripe itself after its validity (7 days for most cards online):
  ``cancellation_reason: automatic``.

Both answer with the PaymentIntent, so the modification's PSP id is the PaymentIntent's id and its truth is read
back with ``GET /v1/payment_intents/{id}``: what the intent's status means for the capture or cancel asked is
``modification_outcome``'s table.
"""

from __future__ import annotations

from typing import Any

from psp_adapters.protocol import (
    ActionRequired,
    Authorised,
    Failed,
    ModificationRequest,
    NotFound,
    PaymentOutcome,
    Pending,
    Succeeded,
    Unknown,
)
from psp_adapters.stripe.wire import to_stripe_amount

#: the metadata key that carries our capture reference
REFERENCE_KEY = "capture_reference"


def capture_form(request: ModificationRequest) -> dict[str, str]:
    """The form of ``POST /v1/payment_intents/{id}/capture``."""
    return {"amount_to_capture": str(to_stripe_amount(request.amount, request.currency)),
            f"metadata[{REFERENCE_KEY}]": request.modification_reference}


def modification_outcome(kind: str, intent: PaymentOutcome) -> PaymentOutcome:
    """The PaymentIntent's outcome (``wire.to_outcome``) as the answer about a capture or a cancel of it:

    | the intent              | capture                                   | cancel                        |
    | ----------------------- | ----------------------------------------- | ----------------------------- |
    | succeeded               | Succeeded (amount: ``amount_received``)    | Failed (captured: not canceled) |
    | canceled                | Failed (the cancellation reason)          | Succeeded                     |
    | requires_capture        | Pending (not captured yet)                | Pending (not canceled yet)    |
    | anything else, unknown  | as the intent says (Pending, Unknown, …)  | as the intent says            |
    """
    common: dict[str, Any] = {"psp_reference": intent.psp_reference, "amount": intent.amount,
                              "currency": intent.currency, "raw_status": intent.raw_status,
                              "merchant_reference": intent.merchant_reference}
    match intent:
        case Succeeded():
            return Succeeded(**common) if kind == "capture" else Failed(**common, reason="already captured")
        case Failed(reason=reason) if intent.raw_status == "canceled":
            return Failed(**common, reason=reason or "canceled") if kind == "capture" else Succeeded(**common)
        case Authorised():
            return Pending(**common)
        case Failed() | Pending() | ActionRequired() | NotFound() | Unknown():
            return intent
    return Unknown(**common)
