"""The test cards every flavour knows by their payment method id, and what each does to a charge.

Stripe's documented test PaymentMethods (docs.stripe.com/testing: "Cards by brand", "Declined payments",
"Fraud prevention", "Authentication and setup", "Refunds", "Disputes", "Available balance") behave as Stripe
documents them; the sandbox's own older names (``pm_card_declined``, ``pm_pending``, …) keep working in every
flavour (Adyen takes them as a ``storedPaymentMethodId``). Any other payment method is a plain Visa card whose
outcome the fault dice decide.

A decline is stored on the payment as its reason key (``DECLINES``): the error ``code``, the ``decline_code`` and
Stripe's message, which each flavour renders in its PSP's words (Stripe's card_error, Adyen's refusal reason, the
native ``decline_code``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from psp_adapters.sandbox.wire import PaymentStatus

#: the failure reason of a payment that needed the customer to authenticate (each flavour answers it as its
#: PSP does: native and Stripe as a decline, Adyen as ``RedirectShopper``)
AUTHENTICATION_REQUIRED = "authentication_required"


class Decline(NamedTuple):
    """A decline as Stripe reports it (docs.stripe.com/declines/codes, docs.stripe.com/error-codes)."""

    code: str  #: the error's ``code``
    decline_code: str  #: its ``decline_code``
    message: str
    param: str | None = None  #: the card field it blames, when one


#: decline reason (what a payment's ``failure_reason`` holds) -> how Stripe reports it. Codes and decline codes
#: are docs.stripe.com/testing's "Declined payments" table (an error code of its own, such as expired_card, is
#: also the decline_code, as the API sends it).
DECLINES: Mapping[str, Decline] = {
    "card_declined": Decline("card_declined", "generic_decline", "Your card was declined."),
    "insufficient_funds": Decline("card_declined", "insufficient_funds", "Your card has insufficient funds."),
    "lost_card": Decline("card_declined", "lost_card", "Your card was declined."),
    "stolen_card": Decline("card_declined", "stolen_card", "Your card was declined."),
    "expired_card": Decline("expired_card", "expired_card", "Your card has expired.", "exp_month"),
    "incorrect_cvc": Decline("incorrect_cvc", "incorrect_cvc", "Your card's security code is incorrect.", "cvc"),
    "processing_error": Decline(
        "processing_error", "processing_error", "An error occurred while processing your card. Try again in a "
        "little bit."
    ),
    "card_velocity_exceeded": Decline(
        "card_declined", "card_velocity_exceeded", "Your card was declined for making repeated attempts too "
        "frequently or exceeding its amount limit."
    ),
    "fraudulent": Decline("card_declined", "fraudulent", "Your card was declined."),
    AUTHENTICATION_REQUIRED: Decline(
        "authentication_required", "authentication_required",
        "Your card was declined. This transaction requires authentication."
    ),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TestCard:
    """What one test payment method is, and what it does."""

    __test__ = False  # not a pytest test class, whatever its name

    brand: str  #: Stripe's ``card.brand``
    last4: str
    funding: str = "credit"
    country: str = "US"
    decline: str | None = None  #: every charge declines with this reason (a DECLINES key)
    authentication: bool = False  #: a charge needs the customer to authenticate (off session: it cannot)
    pending: PaymentStatus | None = None  #: a charge stays pending, then settles to this
    refund_fails: bool = False  #: a refund succeeds, then fails (Stripe's "asynchronous refund failure")
    dispute: str | None = None  #: a charge is disputed at once, with this reason
    attach_only: bool = False  #: attaching to a customer works; every charge declines (Stripe's 0341 card)

    @property
    def display_brand(self) -> str:
        return self.brand


_VISA = TestCard("visa", "4242")

#: payment method id -> its card (docs.stripe.com/testing; the ``pm_…`` PaymentMethod column)
TEST_CARDS: Mapping[str, TestCard] = {
    "pm_card_visa": _VISA,
    "pm_card_visa_debit": TestCard("visa", "5556", funding="debit"),
    "pm_card_mastercard": TestCard("mastercard", "4444"),
    "pm_card_mastercard_debit": TestCard("mastercard", "8210", funding="debit"),
    "pm_card_mastercard_prepaid": TestCard("mastercard", "5100", funding="prepaid"),
    "pm_card_amex": TestCard("amex", "0005"),
    "pm_card_discover": TestCard("discover", "1117"),
    "pm_card_diners": TestCard("diners", "0004"),
    "pm_card_jcb": TestCard("jcb", "0505", country="JP"),
    "pm_card_unionpay": TestCard("unionpay", "0005", country="CN"),
    "pm_card_bypassPending": TestCard("visa", "0077"),
    # declined payments
    "pm_card_visa_chargeDeclined": TestCard("visa", "0002", decline="card_declined"),
    "pm_card_chargeDeclined": TestCard("visa", "0002", decline="card_declined"),
    "pm_card_visa_chargeDeclinedInsufficientFunds": TestCard("visa", "9995", decline="insufficient_funds"),
    "pm_card_chargeDeclinedInsufficientFunds": TestCard("visa", "9995", decline="insufficient_funds"),
    "pm_card_visa_chargeDeclinedLostCard": TestCard("visa", "9987", decline="lost_card"),
    "pm_card_chargeDeclinedLostCard": TestCard("visa", "9987", decline="lost_card"),
    "pm_card_visa_chargeDeclinedStolenCard": TestCard("visa", "9979", decline="stolen_card"),
    "pm_card_chargeDeclinedStolenCard": TestCard("visa", "9979", decline="stolen_card"),
    "pm_card_chargeDeclinedExpiredCard": TestCard("visa", "0069", decline="expired_card"),
    "pm_card_chargeDeclinedIncorrectCvc": TestCard("visa", "0127", decline="incorrect_cvc"),
    "pm_card_chargeDeclinedProcessingError": TestCard("visa", "0119", decline="processing_error"),
    "pm_card_visa_chargeDeclinedVelocityLimitExceeded": TestCard("visa", "6975", decline="card_velocity_exceeded"),
    "pm_card_chargeCustomerFail": TestCard("visa", "0341", decline="card_declined", attach_only=True),
    "pm_card_radarBlock": TestCard("visa", "0019", decline="fraudulent"),
    # authentication: an off-session charge of these cannot authenticate
    "pm_card_authenticationRequired": TestCard("visa", "3184", authentication=True),
    "pm_card_threeDSecure2Required": TestCard("visa", "3220", authentication=True),
    "pm_card_threeDSecureRequired": TestCard("visa", "3063", authentication=True),
    "pm_card_authenticationRequiredOnSetup": TestCard("visa", "3155"),  # saved off session: no authentication
    # refunds and disputes
    "pm_card_refundFail": TestCard("visa", "5126", refund_fails=True),
    "pm_card_createDispute": TestCard("visa", "0259", dispute="fraudulent"),
    "pm_card_createDisputeProductNotReceived": TestCard("visa", "2685", dispute="product_not_received"),
    "pm_card_createDisputeInquiry": TestCard("visa", "1976", dispute="inquiry"),
    # the sandbox's own names, in every flavour
    "pm_card_declined": TestCard("visa", "0002", decline="card_declined"),
    "pm_card_insufficient_funds": TestCard("visa", "9995", decline="insufficient_funds"),
    "pm_card_expired": TestCard("visa", "0069", decline="expired_card"),
    "pm_requires_action": TestCard("visa", "3184", authentication=True),
    "pm_pending": TestCard("visa", "4242", pending=PaymentStatus.SUCCEEDED),
    "pm_pending_fail": TestCard("visa", "4242", pending=PaymentStatus.FAILED),
}


def card_of(payment_method: str | None) -> TestCard | None:
    """The test card ``payment_method`` names, if it is one."""
    return TEST_CARDS.get(payment_method or "")


def card_or_visa(payment_method: str | None) -> TestCard:
    """The test card, else what any other payment method is to the sandbox: a Visa ending 4242."""
    return card_of(payment_method) or _VISA
