"""Stripe's documented test cards against the Stripe flavour, through Stripe's SDK.

The expected values are Stripe's, not the sandbox's: docs.stripe.com/testing, "Declined payments" (the
PaymentMethods tab: each ``pm_…`` with the error code it declines with and, for card_declined, the decline
code; an error code of its own, such as expired_card, is also the decline_code the API sends), "Cards by brand"
(brand and last four digits), "Fraud prevention" (``pm_card_radarBlock``: blocked, ``fraudulent``) and
"Authentication and setup" (an off-session charge of a card that needs 3-D Secure is declined
``authentication_required``; docs.stripe.com/payments/save-and-reuse).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import stripe

from psp_adapters.sandbox import SandboxServer
from tests.adapters.sandbox.stripe_checks import checked_sdk

KEY = "sk_test_cards_0000"

#: docs.stripe.com/testing#declined-payments: PaymentMethod -> (error code, decline code)
DECLINED = {
    "pm_card_visa_chargeDeclined": ("card_declined", "generic_decline"),
    "pm_card_chargeDeclined": ("card_declined", "generic_decline"),
    "pm_card_visa_chargeDeclinedInsufficientFunds": ("card_declined", "insufficient_funds"),
    "pm_card_chargeDeclinedInsufficientFunds": ("card_declined", "insufficient_funds"),
    "pm_card_visa_chargeDeclinedLostCard": ("card_declined", "lost_card"),
    "pm_card_visa_chargeDeclinedStolenCard": ("card_declined", "stolen_card"),
    "pm_card_chargeDeclinedExpiredCard": ("expired_card", "expired_card"),
    "pm_card_chargeDeclinedIncorrectCvc": ("incorrect_cvc", "incorrect_cvc"),
    "pm_card_chargeDeclinedProcessingError": ("processing_error", "processing_error"),
    "pm_card_visa_chargeDeclinedVelocityLimitExceeded": ("card_declined", "card_velocity_exceeded"),
    "pm_card_chargeCustomerFail": ("card_declined", "generic_decline"),  # 0341: attaches, every charge fails
    "pm_card_radarBlock": ("card_declined", "fraudulent"),  # "Fraud prevention": always blocked
    "pm_card_authenticationRequired": ("authentication_required", "authentication_required"),
    "pm_card_threeDSecure2Required": ("authentication_required", "authentication_required"),
}
#: docs.stripe.com/testing#cards: PaymentMethod -> (brand, last4, funding)
BRANDS = {
    "pm_card_visa": ("visa", "4242", "credit"),
    "pm_card_visa_debit": ("visa", "5556", "debit"),
    "pm_card_mastercard": ("mastercard", "4444", "credit"),
    "pm_card_mastercard_debit": ("mastercard", "8210", "debit"),
    "pm_card_mastercard_prepaid": ("mastercard", "5100", "prepaid"),
    "pm_card_amex": ("amex", "0005", "credit"),
    "pm_card_discover": ("discover", "1117", "credit"),
    "pm_card_jcb": ("jcb", "0505", "credit"),
}


@pytest.fixture(scope="module")
def client() -> Iterator[stripe.StripeClient]:
    with SandboxServer(flavor="stripe", api_key=KEY) as server, checked_sdk(server.url, KEY) as checked:
        yield checked


def charge(client: stripe.StripeClient, method: str) -> stripe.PaymentIntent:
    return client.v1.payment_intents.create(params={
        "amount": 2000, "currency": "usd", "payment_method": method, "customer": "cus_cards", "confirm": True,
        "off_session": True})


@pytest.mark.parametrize(("method", "expected"), sorted(DECLINED.items()))
def test_test_cards__each_declining_card_declines_as_stripe_documents(
    client: stripe.StripeClient, method: str, expected: tuple[str, str]
) -> None:
    with pytest.raises(stripe.CardError) as caught:
        charge(client, method)

    error = caught.value
    assert (error.http_status, error.code, error.error.decline_code) == (402, *expected)  # type: ignore[union-attr]
    intent = error.error.payment_intent  # type: ignore[union-attr]
    assert (intent.status, intent.amount_received) == ("requires_payment_method", 0)
    assert intent.last_payment_error.code == expected[0]
    charge_id = intent.latest_charge
    failed = client.v1.charges.retrieve(str(charge_id))
    assert (failed.status, failed.paid, failed.failure_code) == ("failed", False, expected[0])
    assert charge_id not in {t.source for t in client.v1.balance_transactions.list(params={"limit": 100}).data}


@pytest.mark.parametrize(("method", "expected"), sorted(BRANDS.items()))
def test_test_cards__each_brand_succeeds_with_its_card_details(
    client: stripe.StripeClient, method: str, expected: tuple[str, str, str]
) -> None:
    intent = charge(client, method)

    assert (intent.status, intent.amount_received) == ("succeeded", 2000)
    card = client.v1.charges.retrieve(str(intent.latest_charge)).payment_method_details.card  # type: ignore[union-attr]
    assert (card.brand, card.last4, card.funding) == expected  # type: ignore[union-attr]
    token = client.v1.payment_methods.retrieve(method).card
    assert (token.brand, token.last4, token.funding) == expected  # type: ignore[union-attr]


def test_test_cards__no_amount_declines_by_default(client: stripe.StripeClient) -> None:
    for amount in (1402, 402, 999402):  # the sandbox's old magic suffix: off unless --decline-suffix says so
        intent = client.v1.payment_intents.create(params={
            "amount": amount, "currency": "usd", "payment_method": "pm_card_visa", "confirm": True})
        assert intent.status == "succeeded"


def test_test_cards__an_unknown_payment_method_charges_like_a_visa(client: stripe.StripeClient) -> None:
    """A payment method the sandbox never saw (recon's CSV may name any ``pm_…``) is taken as a plain Visa."""
    intent = charge(client, "pm_1NoSuchMethodInTheSandbox")
    assert intent.status == "succeeded"
