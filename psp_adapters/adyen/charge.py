"""What an Adyen charge must be, and the body it is sent as: a merchant-initiated payment with a stored card.

docs.adyen.com/online-payments/tokenization/make-token-payments: ``paymentMethod {type: scheme,
storedPaymentMethodId}``, ``shopperReference``, ``shopperInteraction: ContAuth`` and a
``recurringProcessingModel``, plus what the ``PaymentRequest`` schema requires (``amount``, ``merchantAccount``,
``paymentMethod``, ``reference``, ``returnUrl``; docs.adyen.com/api-explorer/Checkout/72/post/payments). The
body is the same in Checkout v71 and v72; only ``returnUrl``'s bound differs (``RETURN_URL_MAX``). ``check_charge``
states every rule a charge must meet before it is sent; ``payment_body`` refuses (PspRejectedError) what
``check_charge`` refuses, so no body the schema would reject ever leaves. Answers are ``wire``'s business.
"""

from __future__ import annotations

from dataclasses import replace

from psp_adapters.adyen.wire import PSP_NAME, to_adyen_amount
from psp_adapters.errors import PspRejectedError
from psp_adapters.protocol import ChargeRequest, FieldProblem

#: card on file, shopper not present (docs.adyen.com/online-payments/tokenization/make-token-payments)
SHOPPER_INTERACTION = "ContAuth"
#: the ``PaymentRequest.recurringProcessingModel`` enum (v71 and v72)
RECURRING_PROCESSING_MODELS = ("CardOnFile", "Subscription", "UnscheduledCardOnFile")
#: a merchant-initiated charge on a non-fixed schedule (the schema's description of the value)
DEFAULT_RECURRING_PROCESSING_MODEL = "UnscheduledCardOnFile"
#: ``returnUrl`` is required by the schema (a missing one is error 14_030 "Return URL is missing") but a
#: ContAuth charge never redirects a shopper: a redirect answer is ActionRequired, never followed. The default
#: is on the reserved ``.invalid`` domain (RFC 2606), so nobody can be sent anywhere by it; set ``return_url``
#: (``RECON_ADYEN_RETURN_URL``) to your own page if your account needs a real one.
DEFAULT_RETURN_URL = "https://recon.invalid/adyen/return"
#: ``PaymentRequest.returnUrl.maxLength`` per API version (v72 lowered it from 8,000 to 1,024)
RETURN_URL_MAX = {"v71": 8000, "v72": 1024}
REFERENCE_MAX = 80  #: ``PaymentRequest.reference``: "Maximum length: 80 characters." (v72: also its maxLength)
SHOPPER_REFERENCE_MIN = 3  #: ``PaymentRequest.shopperReference.minLength`` ("Minimum length: 3 characters")
SHOPPER_REFERENCE_MAX = 256  #: ``PaymentRequest.shopperReference.maxLength``
STORED_PAYMENT_METHOD_ID_MAX = 64  #: ``CardDetails.storedPaymentMethodId.maxLength``
#: a label recon uses for "no particular account"; it is never sent as a merchant account
DEFAULT_ACCOUNT_LABEL = "default"
MERCHANT_ACCOUNT_SETTING = "[psp.adyen] merchant_account / RECON_ADYEN_MERCHANT_ACCOUNT"


def resolve_merchant_account(requested: str | None, default: str | None) -> str:
    """The account a charge or a report read goes to: ``requested`` unless it is empty or the label
    ``"default"``, else the configured ``default``. Raises PspRejectedError naming the setting when neither
    gives one. The label ``"default"`` is never returned."""
    for candidate in (requested, default):
        if candidate and candidate != DEFAULT_ACCOUNT_LABEL:
            return candidate
    raise PspRejectedError(
        f"{PSP_NAME}: no merchant account: the payment names none and {MERCHANT_ACCOUNT_SETTING} is not set",
        psp=PSP_NAME,
    )


def check_charge(request: ChargeRequest) -> list[FieldProblem]:
    """What Adyen would refuse about a merchant-initiated charge of ``request``; empty when none.

    Pure: no settings, no call. ``request.merchant_account`` must be the resolved account (the caller
    resolves its default first): ``None``/``""`` means none, and the label ``"default"`` is refused. Each
    problem names the ChargeRequest field. Rules: the ``PaymentRequest`` schema's bounds, v71 and v72 alike
    (``reference`` at most 80, ``shopperReference`` 3 to 256, ``storedPaymentMethodId`` at most 64 characters), a stored
    payment method and a shopper reference for a token payment (docs.adyen.com/online-payments/tokenization/
    make-token-payments), and amounts in Adyen's currency exponents (docs.adyen.com/development-resources/
    currency-codes).
    """
    problems = [
        *_reference_problems(request.merchant_reference),
        *_account_problems(request.merchant_account),
        *_payment_method_problems(request.payment_method),
        *_shopper_problems(request.customer_reference),
        *_amount_problems(request.amount, request.currency),
    ]
    return problems


def payment_body(
    request: ChargeRequest, *, merchant_account: str, return_url: str, recurring_processing_model: str
) -> dict[str, object]:
    """The JSON body of ``POST /{v71|v72}/payments``: a merchant-initiated charge of a stored card (the same
    fields in both versions).

    ``merchant_account`` is the resolved account (``resolve_merchant_account``). Raises PspRejectedError,
    before anything is sent, listing every problem ``check_charge`` finds. ``request.description`` is not
    sent: /payments has no free-text description field.
    """
    problems = check_charge(replace(request, merchant_account=merchant_account))
    if problems:
        text = "; ".join(f"{problem.field}: {problem.message}" for problem in problems)
        raise PspRejectedError(f"{PSP_NAME}: charge refused before sending: {text}", psp=PSP_NAME)
    assert request.payment_method is not None and request.customer_reference is not None  # check_charge  # nosec B101
    return {
        "amount": {"value": to_adyen_amount(request.amount, request.currency), "currency": request.currency},
        "reference": request.merchant_reference,
        "merchantAccount": merchant_account,
        "paymentMethod": {"type": "scheme", "storedPaymentMethodId": request.payment_method},
        "shopperReference": request.customer_reference,
        "shopperInteraction": SHOPPER_INTERACTION,
        "recurringProcessingModel": recurring_processing_model,
        "returnUrl": return_url,
        # manual capture: "Set to true to require manual capture for the transaction" (AdditionalDataCommon)
        **({"additionalData": {"manualCapture": "true"}} if request.manual_capture else {}),
    }


def _reference_problems(reference: str) -> list[FieldProblem]:
    if not reference:
        return [FieldProblem("merchant_reference", "Adyen needs a payment reference")]
    if len(reference) > REFERENCE_MAX:
        return [FieldProblem("merchant_reference", f"Adyen takes at most {REFERENCE_MAX} characters")]
    return []


def _account_problems(account: str | None) -> list[FieldProblem]:
    if not account:
        return [FieldProblem("merchant_account", f"Adyen needs a merchant account; set {MERCHANT_ACCOUNT_SETTING}")]
    if account == DEFAULT_ACCOUNT_LABEL:
        return [FieldProblem("merchant_account", f"{account!r} is not an Adyen merchant account")]
    return []


def _payment_method_problems(token: str | None) -> list[FieldProblem]:
    if not token:
        return [FieldProblem("payment_method", "Adyen needs the stored card's storedPaymentMethodId")]
    if len(token) > STORED_PAYMENT_METHOD_ID_MAX:
        return [FieldProblem("payment_method", f"a storedPaymentMethodId has at most "
                                               f"{STORED_PAYMENT_METHOD_ID_MAX} characters")]
    return []


def _shopper_problems(shopper: str | None) -> list[FieldProblem]:
    if not shopper:
        return [FieldProblem("customer_reference", "Adyen needs the shopperReference the card is stored under")]
    if not SHOPPER_REFERENCE_MIN <= len(shopper) <= SHOPPER_REFERENCE_MAX:
        return [FieldProblem("customer_reference", f"a shopperReference has {SHOPPER_REFERENCE_MIN} to "
                                                   f"{SHOPPER_REFERENCE_MAX} characters")]
    return []


def _amount_problems(amount: int, currency: str) -> list[FieldProblem]:
    if len(currency) != 3 or not currency.isalpha() or not currency.isupper():
        return [FieldProblem("currency", f"{currency!r} is not an upper-case ISO-4217 code")]
    if amount < 0:
        return [FieldProblem("amount", "Adyen charges no negative amounts")]
    try:
        to_adyen_amount(amount, currency)
    except PspRejectedError:
        return [FieldProblem("amount", f"Adyen takes whole {currency} units only (its currency exponent)")]
    return []
