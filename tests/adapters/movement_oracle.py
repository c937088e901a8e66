"""What the adapter tests of refunds (test_refunds.py) and of captures and cancels (test_captures.py) share: the
hosts and fake keys the adapters are built with, Stripe's documented PaymentIntent id, and Adyen's own examples of
its Checkout OpenAPI documents (``adyen_example``), which are the oracles of every Adyen modification request and
answer (tests/adapters/test_movements.py)."""

from __future__ import annotations

import json
from typing import Any

from psp_adapters.adyen.adapter import AdyenAdapter
from psp_adapters.protocol import Secret
from psp_adapters.stripe.adapter import StripeAdapter
from tests.adapters import adyen_schema

STRIPE_KEY = "sk_test_51NotARealKeyButLooksLikeOne0000"
STRIPE = "https://stripe.test"
ADYEN_KEY = "AQEyhmfxNotARealKeyButLooksLikeOne0000qwerty"
ADYEN = "https://checkout.adyen.test"
PI = "pi_1PgafyB7WZ01zgkWSjxsAJo3"


def stripe_adapter() -> StripeAdapter:
    """The Stripe adapter on the mocked host (``tests/adapters/conftest.py``'s ``stripe`` fixture closes it)."""
    return StripeAdapter(STRIPE, api_key=Secret(STRIPE_KEY))


def adyen_example(name: str) -> Any:
    """One of the examples of Adyen's Checkout OpenAPI document, a copy."""
    value = adyen_schema.checkout_document()["components"]["examples"][name]["value"]
    return json.loads(json.dumps(value))


def adyen(version: str) -> AdyenAdapter:
    """The Adyen adapter on the mocked host for API ``version``, in the merchant account Adyen's examples name."""
    return AdyenAdapter(ADYEN, api_key=Secret(ADYEN_KEY), merchant_account="YOUR_MERCHANT_ACCOUNT",
                        api_version=version, report_api_key=Secret("AQEreport"))
