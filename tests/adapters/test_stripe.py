"""The Stripe adapter against oracles it did not write (respx; no network).

Requests are compared with what Stripe's official SDK (stripe-python) sends for the same call
(``stripe_oracle.sdk_request``); every Stripe object fed to the adapter is built from Stripe's canonical
example objects (``stripe_oracle.canonical``: fixtures3.json, read from ../shared/specs at test time), changed
only where the test says. Error bodies are hand-written in the shape of Stripe's error object
(https://docs.stripe.com/api/errors: ``{"error": {"type", "code", "decline_code", "message", "param",
"payment_intent", …}}``), since fixtures3.json has none: tests/adapters/stripe/fixtures/error_*.json.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
import respx
import stripe as stripe_sdk

from psp_adapters import registry
from psp_adapters.errors import (
    PspAuthError,
    PspError,
    PspIdempotencyError,
    PspProtocolError,
    PspRateLimited,
    PspRejectedError,
    PspTransientError,
    PspUnknownOutcome,
)
from psp_adapters.protocol import (
    ActionRequired,
    Authorised,
    ChargeRequest,
    Failed,
    NotFound,
    Pending,
    PspRef,
    Secret,
    SettlementLine,
    Succeeded,
    Unknown,
)
from psp_adapters.stripe import StripeAdapter, check_charge, wire
from psp_adapters.stripe.wire import API_VERSION, PaymentIntentStatus
from tests.adapters.stripe_oracle import Sent, canonical, listing, sdk_request, search_result

KEY = "sk_test_51NotARealKeyButLooksLikeOne0000"
URL = "https://stripe.test"
NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)
FIXTURES = Path(__file__).parent / "stripe" / "fixtures"
PM = "pm_card_visa"  # Stripe's test PaymentMethod (https://docs.stripe.com/testing)
CUSTOMER = "cus_QXg1o8vcGmoR32"  # the canonical Customer's id
CHARGE = ChargeRequest(
    merchant_reference="order-1042",
    amount=2000,
    currency="USD",
    payment_method=PM,
    customer_reference=CUSTOMER,
    description="order 1042",
)
IDEM = "idem-order-1042"
PI_ID = "pi_1PgafyB7WZ01zgkWSjxsAJo3"  # the canonical PaymentIntent's id
PAYMENT = {"amount": 2000, "currency": "usd", "metadata": {"merchant_reference": "order-1042"}}


def error_body(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def intent(status: str, **changes: object) -> dict[str, Any]:
    """The canonical PaymentIntent in ``status`` (its example ``last_payment_error`` cleared unless given)."""
    return canonical("payment_intent", **{"status": status, "last_payment_error": None, **changes})


def paid(status: str = "succeeded", **changes: object) -> dict[str, Any]:
    """The canonical PaymentIntent as the answer to CHARGE: our amount, currency and reference."""
    received = 2000 if status == "succeeded" else 0
    return intent(status, **{**PAYMENT, "amount_received": received, **changes})


def card_error(code: str, *, decline_code: str | None = None, payment_intent: object = None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": "card_error", "code": code, "message": "Your card was declined.",
                             "doc_url": f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}"}
    if decline_code is not None:
        error["decline_code"] = decline_code
    if payment_intent is not None:
        error["payment_intent"] = payment_intent
    return {"error": error}


def form_of(request: httpx.Request) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(request.content.decode()).items()}


@pytest.fixture
def stripe() -> Any:
    with StripeAdapter(URL, api_key=Secret(KEY), now_func=lambda: NOW) as adapter:
        yield adapter


def create(adapter: StripeAdapter, request: ChargeRequest = CHARGE) -> Any:
    return adapter.create_payment(request, idempotency_key=IDEM)


def sdk(call: Any, answer: dict[str, Any]) -> Sent:
    return sdk_request(call, api_key=KEY, base_url=URL, answer=answer)


# --- Stripe-Version -------------------------------------------------------------------------------------


def test_api_version__is_the_version_stripe_python_pins() -> None:
    assert API_VERSION == stripe_sdk.api_version


def test_api_version__sent_on_every_request(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    routes = [
        router.post(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(200, json=paid())),
        router.get(f"{URL}/v1/payment_intents/{PI_ID}").mock(return_value=httpx.Response(200, json=paid())),
        router.get(f"{URL}/v1/payment_intents/search").mock(
            return_value=httpx.Response(200, json=search_result("/v1/payment_intents/search", []))),
        router.get(f"{URL}/v1/balance_transactions").mock(
            return_value=httpx.Response(200, json=listing("/v1/balance_transactions", []))),
    ]
    create(stripe)
    stripe.fetch_payment(PspRef(psp_reference=PI_ID))
    stripe.fetch_payment(PspRef(merchant_reference="order-1042"))
    list(stripe.iter_settlements(NOW - timedelta(days=1), NOW))
    assert [route.calls.last.request.headers["Stripe-Version"] for route in routes] == [API_VERSION] * 4


def test_api_version__constructor_and_registry_setting_override_it(router: respx.MockRouter) -> None:
    route = router.get(f"{URL}/v1/payment_intents/{PI_ID}").mock(return_value=httpx.Response(200, json=paid()))
    with StripeAdapter(URL, api_key=Secret(KEY), api_version="2025-03-31.basil") as adapter:
        adapter.fetch_payment(PspRef(psp_reference=PI_ID))
    assert route.calls.last.request.headers["Stripe-Version"] == "2025-03-31.basil"
    settings = registry.settings_from_env("stripe", {"RECON_STRIPE_API_KEY": KEY,
                                                     "RECON_STRIPE_API_VERSION": "2024-06-20",
                                                     "RECON_STRIPE_BASE_URL": URL})
    built = registry.get_factory("stripe")(settings)
    built.fetch_payment(PspRef(psp_reference=PI_ID))
    built.close()
    assert route.calls.last.request.headers["Stripe-Version"] == "2024-06-20"
    unset = registry.get_factory("stripe")({"base_url": URL, "api_key": Secret(KEY)})
    unset.fetch_payment(PspRef(psp_reference=PI_ID))
    unset.close()
    assert route.calls.last.request.headers["Stripe-Version"] == API_VERSION


# --- requests: the adapter sends what stripe-python sends ----------------------------------------------


def test_oracle__create_is_the_sdks_off_session_charge(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    """https://docs.stripe.com/payments/save-and-reuse, "Charge the saved payment method later"."""
    route = router.post(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(200, json=paid()))
    create(stripe)
    expected = sdk(lambda client: client.v1.payment_intents.create(
        {
            "amount": 2000,
            "currency": "usd",
            "customer": CUSTOMER,
            "payment_method": PM,
            "confirm": True,
            "off_session": True,
            "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
            "metadata": {"merchant_reference": "order-1042"},
            "description": "order 1042",
        },
        {"idempotency_key": IDEM},
    ), paid())
    assert Sent.of(route.calls.last.request) == expected


def test_oracle__retrieve_is_the_sdks(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    route = router.get(f"{URL}/v1/payment_intents/{PI_ID}").mock(return_value=httpx.Response(200, json=paid()))
    stripe.fetch_payment(PspRef(psp_reference=PI_ID))
    assert Sent.of(route.calls.last.request) == sdk(lambda client: client.v1.payment_intents.retrieve(PI_ID), paid())


@pytest.mark.parametrize(("reference", "query"), [
    ("order-1042", "metadata['merchant_reference']:'order-1042'"),
    ("o'neil", "metadata['merchant_reference']:'o\\'neil'"),
])
def test_oracle__search_is_the_sdks(stripe: StripeAdapter, router: respx.MockRouter, reference: str,
                                    query: str) -> None:
    """https://docs.stripe.com/search#search-query-language (quotes escaped with a backslash)."""
    page = search_result("/v1/payment_intents/search", [])
    route = router.get(f"{URL}/v1/payment_intents/search").mock(return_value=httpx.Response(200, json=page))
    stripe.fetch_payment(PspRef(merchant_reference=reference))
    expected = sdk(lambda client: client.v1.payment_intents.search({"query": query, "limit": 10}), page)
    assert Sent.of(route.calls.last.request) == expected


def test_oracle__balance_transaction_pages_are_the_sdks(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    since, until = datetime(2024, 5, 3, tzinfo=UTC), datetime(2024, 5, 4, 0, 0, 0, 500000, tzinfo=UTC)
    first_page = listing("/v1/balance_transactions", [canonical("balance_transaction", id="txn_last",
                                                                reporting_category="payout")], has_more=True)
    last_page = listing("/v1/balance_transactions", [])
    route = router.get(f"{URL}/v1/balance_transactions").mock(
        side_effect=[httpx.Response(200, json=first_page), httpx.Response(200, json=last_page)])
    assert list(stripe.iter_settlements(since, until)) == []
    params = {"created": {"gte": int(since.timestamp()), "lt": int(until.timestamp()) + 1}, "limit": 100,
              "expand": ["data.source"]}
    first = sdk(lambda client: client.v1.balance_transactions.list(params), last_page)
    then = sdk(lambda client: client.v1.balance_transactions.list(
        {**params, "starting_after": "txn_last"}), last_page)
    assert [Sent.of(call.request) for call in route.calls] == [first, then]


# --- the charge -------------------------------------------------------------------------------------------


def test_create__charges_the_stored_method_off_session_without_a_return_url(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    route = router.post(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(200, json=paid()))
    outcome = create(stripe)
    sent = route.calls.last.request
    assert sent.headers["Authorization"] == f"Bearer {KEY}"
    assert sent.headers["Idempotency-Key"] == IDEM
    form = form_of(sent)
    assert (form["customer"], form["payment_method"]) == (CUSTOMER, PM)
    assert (form["confirm"], form["off_session"]) == ("true", "true")
    assert form["automatic_payment_methods[allow_redirects]"] == "never"
    assert not {"return_url", "payment_method_types[0]", "payment_method_types[]"} & set(form)
    assert outcome == Succeeded(psp_reference=PI_ID, amount=2000, currency="USD", raw_status="succeeded",
                                merchant_reference="order-1042")


@pytest.mark.parametrize(("request_", "field"), [
    (ChargeRequest("r", 2000, "USD", customer_reference=CUSTOMER), "payment_method"),
    (ChargeRequest("r", 2000, "USD", payment_method=PM), "customer_reference"),
    (ChargeRequest("r", 5125, "KWD", payment_method=PM, customer_reference=CUSTOMER), "amount"),
    (ChargeRequest("r", 150, "MGA", payment_method=PM, customer_reference=CUSTOMER), "amount"),
])
def test_create__a_charge_stripe_would_refuse_is_never_sent(
    stripe: StripeAdapter, router: respx.MockRouter, request_: ChargeRequest, field: str
) -> None:
    route = router.post(f"{URL}/v1/payment_intents")
    with pytest.raises(PspRejectedError, match=field):
        create(stripe, request_)
    assert not route.called


@pytest.mark.parametrize(("currency", "iso_amount", "stripe_amount"), [
    ("JPY", 500, "500"),
    ("KRW", 12000, "12000"),
    ("USD", 1999, "1999"),
    ("KWD", 5120, "5120"),
    ("ISK", 5, "500"),
    ("MGA", 300, "3"),
])
def test_create__amounts_stay_integers_across_currency_exponents(
    stripe: StripeAdapter, router: respx.MockRouter, currency: str, iso_amount: int, stripe_amount: str
) -> None:
    """https://docs.stripe.com/currencies: zero-decimal, three-decimal and special cases (ISK, MGA)."""

    def answer(request: httpx.Request) -> httpx.Response:
        form = form_of(request)
        return httpx.Response(200, json=paid(amount=int(form["amount"]), amount_received=int(form["amount"]),
                                             currency=form["currency"]))

    route = router.post(f"{URL}/v1/payment_intents").mock(side_effect=answer)
    request = ChargeRequest("r", iso_amount, currency, payment_method=PM, customer_reference=CUSTOMER)
    outcome = create(stripe, request)
    assert form_of(route.calls.last.request)["amount"] == stripe_amount
    assert outcome.amount == iso_amount and isinstance(outcome.amount, int)
    assert outcome.currency == currency


# --- check_charge ----------------------------------------------------------------------------------------


def test_check_charge__is_exported_by_the_package() -> None:
    assert check_charge is wire.check_charge
    assert check_charge(CHARGE) == []


@pytest.mark.parametrize("changes", [
    {"payment_method": "pm_1Pgc75B7WZ01zgkWlHVgdEGJ"},  # the canonical PaymentMethod's id
    {"currency": "KWD", "amount": 5120},
    {"currency": "BHD", "amount": 10},
    {"merchant_reference": "r" * 500},
])
def test_check_charge__accepts_what_stripe_takes(changes: dict[str, Any]) -> None:
    fields = {"merchant_reference": "order-1", "amount": 2000, "currency": "USD", "payment_method": PM,
              "customer_reference": CUSTOMER, **changes}
    assert check_charge(ChargeRequest(**fields)) == []


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"payment_method": None}, "payment_method", "required"),
    ({"payment_method": "card_1PgaftB7WZ01zgkWm3waTcFp"}, "payment_method", "pm_"),  # a legacy Card id
    ({"payment_method": "src_1PgaftB7WZ01zgkW"}, "payment_method", "pm_"),  # a deprecated Source id
    ({"payment_method": "4242424242424242"}, "payment_method", "pm_"),
    ({"customer_reference": None}, "customer_reference", "required"),
    ({"customer_reference": "shopper-0042"}, "customer_reference", "cus_"),
    ({"merchant_reference": "r" * 501}, "merchant_reference", "500"),
    ({"amount": 0}, "amount", "positive"),
    ({"currency": "MGA", "amount": 150}, "amount", "whole"),
] + [({"currency": code, "amount": 5125}, "amount", "end in 0") for code in ("BHD", "JOD", "KWD", "OMR", "TND")])
def test_check_charge__names_the_field_stripe_would_refuse(changes: dict[str, Any], field: str,
                                                           words: str) -> None:
    """https://docs.stripe.com/currencies#three-decimal, https://docs.stripe.com/metadata ("value:
    500-character limit"), https://docs.stripe.com/api/sources (deprecated)."""
    fields = {"merchant_reference": "order-1", "amount": 2000, "currency": "USD", "payment_method": PM,
              "customer_reference": CUSTOMER, **changes}
    [problem] = check_charge(ChargeRequest(**fields))
    assert problem.field == field and words in problem.message


@pytest.mark.parametrize("code", ["BHD", "JOD", "KWD", "OMR", "TND"])
def test_to_stripe_amount__refuses_a_three_decimal_amount_not_ending_in_zero(code: str) -> None:
    assert wire.to_stripe_amount(5120, code) == 5120
    with pytest.raises(PspRejectedError, match="end in 0"):
        wire.to_stripe_amount(5125, code)


# --- outcomes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "changes", "expected", "reason"), [
    ("succeeded", {}, Succeeded, None),
    ("processing", {}, Pending, None),
    ("requires_action", {"next_action": {"type": "use_stripe_sdk"}}, ActionRequired, None),
    ("requires_confirmation", {}, Pending, None),
    ("requires_capture", {}, Authorised, None),  # held for a manual capture (recon: pending if automatic)
    ("requires_payment_method", {}, Pending, None),
    ("requires_payment_method",
     {"last_payment_error": {"type": "card_error", "code": "card_declined", "decline_code": "stolen_card"}},
     Failed, "stolen_card"),
    ("requires_payment_method",
     {"last_payment_error": {"type": "card_error", "code": "authentication_required"}}, ActionRequired, None),
    ("requires_payment_method",
     {"last_payment_error": {"type": "card_error", "code": "card_declined",
                             "decline_code": "authentication_required"}}, ActionRequired, None),
    ("canceled", {"cancellation_reason": "abandoned"}, Failed, "abandoned"),
    ("canceled", {}, Failed, "canceled"),
])
def test_wire__every_payment_intent_status_maps(
    stripe: StripeAdapter, router: respx.MockRouter, status: str, changes: dict[str, object], expected: type,
    reason: str | None,
) -> None:
    router.get(f"{URL}/v1/payment_intents/{PI_ID}").mock(
        return_value=httpx.Response(200, json=intent(status, **changes)))
    outcome = stripe.fetch_payment(PspRef(psp_reference=PI_ID))
    assert type(outcome) is expected
    assert outcome.raw_status == status
    assert (outcome.psp_reference, outcome.amount, outcome.currency) == (PI_ID, 1099, "USD")
    if reason is not None:
        assert isinstance(outcome, Failed) and outcome.reason == reason


def test_wire__table_covers_every_enum_member() -> None:
    covered = {"succeeded", "processing", "requires_action", "requires_confirmation", "requires_capture",
               "requires_payment_method", "canceled"}
    assert covered == {member.value for member in PaymentIntentStatus}


def test_wire__unrecognised_status_is_unknown(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(200, json=paid("requires_magic")))
    assert create(stripe) == Unknown(psp_reference=PI_ID, amount=2000, currency="USD", raw_status="requires_magic",
                                     merchant_reference="order-1042")


def test_create__requires_action_is_action_required_not_success_or_pending(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(200, json=paid("requires_action", next_action={"type": "use_stripe_sdk"})))
    assert create(stripe) == ActionRequired(psp_reference=PI_ID, amount=2000, currency="USD",
                                            raw_status="requires_action", merchant_reference="order-1042")


@pytest.mark.parametrize(("code", "decline_code"), [
    ("authentication_required", None),
    ("card_declined", "authentication_required"),
])
def test_create__402_authentication_required_is_action_required_with_the_intent(
    stripe: StripeAdapter, router: respx.MockRouter, code: str, decline_code: str | None
) -> None:
    """https://docs.stripe.com/declines/codes (``authentication_required``): off-session, the customer must
    come back; the error carries the PaymentIntent, left in ``requires_payment_method``."""
    left = paid("requires_payment_method", last_payment_error={"type": "card_error", "code": code,
                                                               "decline_code": decline_code})
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(402, json=card_error(code, decline_code=decline_code, payment_intent=left)))
    assert create(stripe) == ActionRequired(psp_reference=PI_ID, amount=2000, currency="USD",
                                            raw_status="requires_payment_method", merchant_reference="order-1042")


def test_create__402_authentication_required_without_the_intent_is_still_action_required(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(402, json=card_error("authentication_required")))
    assert create(stripe) == ActionRequired(raw_status="authentication_required")


def test_create__card_decline_is_failed_not_an_exception(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    left = paid("requires_payment_method", last_payment_error={"type": "card_error", "code": "card_declined",
                                                               "decline_code": "insufficient_funds"})
    body = card_error("card_declined", decline_code="insufficient_funds", payment_intent=left)
    router.post(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(402, json=body))
    assert create(stripe) == Failed(psp_reference=PI_ID, amount=2000, currency="USD",
                                    raw_status="requires_payment_method", merchant_reference="order-1042",
                                    reason="insufficient_funds")


def test_create__decline_without_decline_code_uses_code(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(402, json=card_error("expired_card")))
    assert create(stripe) == Failed(raw_status="card_error", reason="expired_card")


def test_fetch__search_answers_map_like_any_intent(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    page = search_result("/v1/payment_intents/search", [paid("requires_action")])
    router.get(f"{URL}/v1/payment_intents/search").mock(return_value=httpx.Response(200, json=page))
    outcome = stripe.fetch_payment(PspRef(merchant_reference="order-1042"))
    assert isinstance(outcome, ActionRequired) and outcome.psp_reference == PI_ID


def test_fetch__resource_missing_is_not_found(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.get(f"{URL}/v1/payment_intents/pi_missing").mock(
        return_value=httpx.Response(404, json=error_body("error_resource_missing.json")))
    assert stripe.fetch_payment(PspRef(psp_reference="pi_missing", merchant_reference="r")) == NotFound(
        psp_reference="pi_missing", merchant_reference="r")


def test_fetch__empty_search_is_not_found(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.get(f"{URL}/v1/payment_intents/search").mock(
        return_value=httpx.Response(200, json=search_result("/v1/payment_intents/search", [])))
    assert stripe.fetch_payment(PspRef(merchant_reference="o'neil")) == NotFound(merchant_reference="o'neil")


def test_fetch__several_intents_for_one_reference_prefers_the_succeeded_one(
    stripe: StripeAdapter, router: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    page = search_result("/v1/payment_intents/search", [
        paid("requires_payment_method", id="pi_a", created=1714737700),
        paid("succeeded", id="pi_b"),
    ])
    router.get(f"{URL}/v1/payment_intents/search").mock(return_value=httpx.Response(200, json=page))
    with caplog.at_level(logging.WARNING):
        outcome = stripe.fetch_payment(PspRef(merchant_reference="order-1042"))
    assert outcome.psp_reference == "pi_b"
    assert "2 payment intents" in caplog.text


# --- errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("retry_after", "expected"), [
    ("7", 7.0), (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0), (None, None),
])
def test_errors__429_is_rate_limited_with_retry_after(
    stripe: StripeAdapter, router: respx.MockRouter, retry_after: str | None, expected: float | None
) -> None:
    headers = {"Retry-After": retry_after} if retry_after else {}
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(429, json=error_body("error_rate_limit.json"), headers=headers))
    with pytest.raises(PspRateLimited) as info:
        create(stripe)
    assert info.value.retry_after == expected
    assert info.value.code == "rate_limit"


@pytest.mark.parametrize("status", [500, 502, 503, 504, 424])
def test_errors__5xx_and_424_are_transient(stripe: StripeAdapter, router: respx.MockRouter, status: int) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(status, json=error_body("error_api.json")))
    with pytest.raises(PspTransientError) as info:
        create(stripe)
    assert type(info.value) is PspTransientError
    assert info.value.status_code == status


def test_errors__stripes_500_to_the_create_is_saved_under_the_key(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    """https://docs.stripe.com/api/idempotent_requests: the first answer is saved once the endpoint started,
    500s included; the same key only replays it."""
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(500, json=error_body("error_api.json"), headers={"Stripe-Should-Retry": "false"}))
    with pytest.raises(PspTransientError) as info:
        create(stripe)
    assert (info.value.saved, info.value.replayed, info.value.should_retry) == (True, False, False)


def test_errors__a_replayed_answer_is_marked_replayed(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(500, json=error_body("error_api.json"), headers={"Idempotent-Replayed": "true"}))
    with pytest.raises(PspTransientError) as info:
        create(stripe)
    assert (info.value.saved, info.value.replayed) == (True, True)


@pytest.mark.parametrize(("status", "body"), [
    (502, {"json": {"error": {"type": "api_error", "message": "Bad gateway"}}}),
    (503, {"json": {"error": {"type": "api_error", "message": "Service unavailable"}}}),
    (504, {"json": {"error": {"type": "api_error", "message": "Gateway timeout"}}}),
    (500, {"text": "<html>Internal Server Error</html>"}),  # not Stripe's body: a proxy's
])
def test_errors__gateway_5xx_and_bodiless_500_are_not_saved(
    stripe: StripeAdapter, router: respx.MockRouter, status: int, body: dict[str, Any]
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(status, **body))
    with pytest.raises(PspTransientError) as info:
        create(stripe)
    assert info.value.saved is False and info.value.status_code == status


def test_errors__500_to_a_read_is_not_saved(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.get(f"{URL}/v1/payment_intents/{PI_ID}").mock(
        return_value=httpx.Response(500, json=error_body("error_api.json")))
    with pytest.raises(PspTransientError) as info:
        stripe.fetch_payment(PspRef(psp_reference=PI_ID))
    assert info.value.saved is False


def test_errors__non_json_5xx_from_a_proxy_is_transient(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.get(f"{URL}/v1/payment_intents/{PI_ID}").mock(return_value=httpx.Response(502, text="<html>Bad Gateway"))
    with pytest.raises(PspTransientError):
        stripe.fetch_payment(PspRef(psp_reference=PI_ID))


@pytest.mark.parametrize(("status", "name", "header", "expected"), [
    (500, "error_api.json", "false", False),
    (500, "error_api.json", "true", True),
    (400, "error_invalid_request.json", "true", True),
    (409, "error_idempotency_key_in_use.json", "true", True),
    (409, "error_idempotency_key_in_use.json", "false", False),
    (500, "error_api.json", None, None),
])
def test_errors__stripe_should_retry_is_carried_both_ways(
    stripe: StripeAdapter, router: respx.MockRouter, status: int, name: str, header: str | None,
    expected: bool | None
) -> None:
    """The header overrides the status's default either way (stripe-python's ``_should_retry`` obeys it)."""
    headers = {"Stripe-Should-Retry": header} if header else {}
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(status, json=error_body(name), headers=headers))
    with pytest.raises(PspError) as info:
        create(stripe)
    assert info.value.status_code == status and info.value.should_retry is expected


@pytest.mark.parametrize("status", [401, 403])
def test_errors__401_and_403_are_auth_errors_without_the_key(
    stripe: StripeAdapter, router: respx.MockRouter, status: int
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(status, json=error_body("error_authentication.json")))
    with pytest.raises(PspAuthError) as info:
        create(stripe)
    assert "sk_test" not in str(info.value)  # Stripe echoes a masked key; we quote none of it


@pytest.mark.parametrize("status", [400, 422, 404, 405])
def test_errors__other_4xx_are_rejections(stripe: StripeAdapter, router: respx.MockRouter, status: int) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(status, json=error_body("error_invalid_request.json")))
    with pytest.raises(PspRejectedError) as info:
        create(stripe)
    assert type(info.value) is PspRejectedError
    assert info.value.code == "parameter_missing"
    assert "Missing required param: currency." in str(info.value)
    assert info.value.saved is False


def test_errors__idempotency_error_is_idempotency_bug(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(400, json=error_body("error_idempotency.json")))
    with pytest.raises(PspIdempotencyError):
        create(stripe)


def test_errors__409_key_in_use_is_transient_and_not_saved(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    """A request conflicting with a concurrent one on the same key is not saved (idempotent_requests)."""
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(409, json=error_body("error_idempotency_key_in_use.json")))
    with pytest.raises(PspTransientError) as info:
        create(stripe)
    assert (info.value.status_code, info.value.code, info.value.saved) == (409, "idempotency_key_in_use", False)


def test_idempotency_retention__is_stripes_24_hours() -> None:
    """https://docs.stripe.com/api/idempotent_requests: keys may be pruned once at least 24 hours old."""
    assert StripeAdapter.idempotency_retention == timedelta(hours=24)


# --- transport -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("exc", [httpx.ConnectTimeout, httpx.ConnectError])
def test_transport__connect_failure_is_transient_for_create(
    stripe: StripeAdapter, router: respx.MockRouter, exc: type[Exception]
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(side_effect=exc("refused"))
    with pytest.raises(PspTransientError) as info:
        create(stripe)
    assert not isinstance(info.value, PspUnknownOutcome)


def test_transport__read_timeout_after_send__create_is_unknown_fetch_is_transient(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(side_effect=httpx.ReadTimeout("slow"))
    router.get(f"{URL}/v1/payment_intents/{PI_ID}").mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(PspUnknownOutcome) as info:
        create(stripe)
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)
    with pytest.raises(PspTransientError) as fetched:
        stripe.fetch_payment(PspRef(psp_reference=PI_ID))
    assert not isinstance(fetched.value, PspUnknownOutcome)


# --- settlements: balance transactions ---------------------------------------------------------------------

T0 = 1714737600  # 2024-05-03 12:00 UTC


def txn(txn_id: str, category: str, source: object, *, amount: int, fee: int, currency: str,
        kind: str | None = None) -> dict[str, Any]:
    """The canonical balance transaction with its source expanded (``expand[]=data.source``)."""
    return canonical("balance_transaction", id=txn_id, reporting_category=category, type=kind or category,
                     source=source, amount=amount, fee=fee, net=amount - fee, currency=currency,
                     created=T0 - int(txn_id.rsplit("_", 1)[1]))


def charge(**changes: object) -> dict[str, Any]:
    return canonical("charge", **changes)


def page_one() -> dict[str, Any]:
    return listing("/v1/balance_transactions", [
        # USD presented, settled in EUR with Stripe's fee
        txn("txn_1", "charge", charge(id="ch_1", amount=2000, currency="usd", payment_intent="pi_A",
                                      metadata={"merchant_reference": "order-1042"}),
            amount=1850, fee=84, currency="eur"),
        txn("txn_2", "payout", canonical("payout"), amount=-1100, fee=0, currency="usd"),
        txn("txn_3", "refund", canonical("refund", id="re_1", amount=500, currency="jpy", payment_intent="pi_B"),
            amount=-500, fee=0, currency="jpy"),
        txn("txn_4", "fee", None, amount=-200, fee=0, currency="usd", kind="stripe_fee"),
    ], has_more=True)


def page_two() -> dict[str, Any]:
    return listing("/v1/balance_transactions", [
        txn("txn_5", "dispute", canonical("dispute", id="dp_1", amount=1000, currency="usd", payment_intent="pi_C"),
            amount=-1000, fee=1500, currency="usd", kind="adjustment"),
        txn("txn_6", "refund_failure", canonical("refund", payment_intent="pi_B"), amount=500, fee=0,
            currency="jpy", kind="adjustment"),
        txn("txn_7", "dispute_reversal", canonical("dispute", payment_intent="pi_C"), amount=1000, fee=-1500,
            currency="usd", kind="adjustment"),
        # ISK: Stripe counts hundredths (https://docs.stripe.com/currencies, special cases), ISO whole krónur
        txn("txn_8", "charge", charge(id="ch_8", amount=50000, currency="isk", payment_intent="pi_D",
                                      amount_refunded=10000, metadata={"merchant_reference": "order-1044"}),
            amount=50000, fee=1500, currency="isk"),
    ])


def test_settlements__balance_transactions_page_lazily_by_starting_after(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    """https://docs.stripe.com/payouts/reconciliation, https://docs.stripe.com/reports/reporting-categories."""
    since, until = datetime(2024, 5, 3, tzinfo=UTC), datetime(2024, 5, 4, tzinfo=UTC)
    second = router.get(f"{URL}/v1/balance_transactions", params={"starting_after": "txn_4"}).mock(
        return_value=httpx.Response(200, json=page_two()))
    first = router.get(f"{URL}/v1/balance_transactions").mock(return_value=httpx.Response(200, json=page_one()))
    lines = stripe.iter_settlements(since, until)
    assert not first.called  # nothing is fetched before iteration
    head = [next(lines), next(lines)]
    assert first.call_count == 1 and not second.called
    rest = list(lines)
    assert second.call_count == 1
    params = first.calls.last.request.url.params
    assert (params["created[gte]"], params["created[lt]"]) == (str(int(since.timestamp())), str(int(until.timestamp())))
    assert (params["limit"], params["expand[0]"]) == ("100", "data.source")
    at = [datetime.fromtimestamp(T0 - n, UTC) for n in (1, 3, 5, 8)]
    assert head + rest == [
        SettlementLine("pi_A", "order-1042", 2000, "USD", "succeeded", at[0], fee=84, net=1766,
                       settlement_currency="EUR"),
        SettlementLine("pi_B", None, 500, "JPY", "refunded", at[1], fee=0, net=-500),
        SettlementLine("pi_C", None, 1000, "USD", "chargeback", at[2], fee=1500, net=-2500),
        SettlementLine("pi_D", "order-1044", 500, "ISK", "partially_refunded", at[3], fee=15, net=485),
    ]
    assert all(line.payout is None for line in head + rest)
    assert head[0].raw["id"] == "txn_1"


@pytest.mark.parametrize(("changes", "status"), [
    ({}, "succeeded"),
    ({"refunded": True, "amount_refunded": 100}, "refunded"),
    ({"amount_refunded": 40}, "partially_refunded"),
    ({"disputed": True}, "chargeback"),
    ({"status": "pending"}, "pending"),
    ({"status": "failed"}, "failed"),
    ({"status": "mystery"}, "unknown:mystery"),
])
def test_settlements__a_charge_line_reads_the_charges_current_state(
    stripe: StripeAdapter, router: respx.MockRouter, changes: dict[str, object], status: str
) -> None:
    source = charge(**changes)  # the canonical Charge: no PaymentIntent, so the line names the Charge
    router.get(f"{URL}/v1/balance_transactions").mock(return_value=httpx.Response(200, json=listing(
        "/v1/balance_transactions", [canonical("balance_transaction", source=source)])))
    [line] = stripe.iter_settlements(datetime(2024, 5, 3, tzinfo=UTC), datetime(2024, 5, 4, tzinfo=UTC))
    assert (line.psp_reference, line.amount, line.currency, line.status) == (source["id"], 100, "USD", status)
    assert (line.fee, line.net, line.settlement_currency) == (0, 100, None)


@pytest.mark.parametrize(("currency", "stripe_amount", "iso_amount"), [
    ("mga", 3, 300), ("isk", 50000, 500), ("jpy", 500, 500), ("kwd", 5120, 5120),
])
def test_settlements__amounts_cross_stripes_units_as_integers(
    stripe: StripeAdapter, router: respx.MockRouter, currency: str, stripe_amount: int, iso_amount: int
) -> None:
    source = charge(amount=stripe_amount, currency=currency)
    router.get(f"{URL}/v1/balance_transactions").mock(return_value=httpx.Response(200, json=listing(
        "/v1/balance_transactions", [canonical("balance_transaction", source=source, amount=stripe_amount,
                                               fee=0, net=stripe_amount, currency=currency)])))
    [line] = stripe.iter_settlements(datetime(2024, 5, 3, tzinfo=UTC), datetime(2024, 5, 4, tzinfo=UTC))
    assert line.amount == iso_amount == line.net and isinstance(line.amount, int)


def test_settlements__a_refund_without_payment_intent_names_its_charge(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    refund = canonical("refund")  # as canonical: payment_intent null, charge ch_…
    router.get(f"{URL}/v1/balance_transactions").mock(return_value=httpx.Response(200, json=listing(
        "/v1/balance_transactions", [txn("txn_1", "refund", refund, amount=-100, fee=0, currency="usd")])))
    [line] = stripe.iter_settlements(datetime(2024, 5, 3, tzinfo=UTC), datetime(2024, 5, 4, tzinfo=UTC))
    assert (line.psp_reference, line.status) == (refund["charge"], "refunded")


def test_settlements__an_unknown_category_is_skipped_and_logged(
    stripe: StripeAdapter, router: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    router.get(f"{URL}/v1/balance_transactions").mock(return_value=httpx.Response(200, json=listing(
        "/v1/balance_transactions", [canonical("balance_transaction", reporting_category="brand_new"),
                                     canonical("balance_transaction", reporting_category="transfer")])))
    with caplog.at_level(logging.INFO):
        assert list(stripe.iter_settlements(datetime(2024, 5, 3, tzinfo=UTC), datetime(2024, 5, 4, tzinfo=UTC))) == []
    assert "brand_new" in caplog.text and "transfer" not in caplog.text


@pytest.mark.parametrize("body", [
    {"object": "list", "data": []},  # no has_more
    "unexpanded",
], ids=["list-without-has_more", "source-not-expanded"])
def test_settlements__a_bad_page_is_a_protocol_error(
    stripe: StripeAdapter, router: respx.MockRouter, body: object
) -> None:
    if body == "unexpanded":  # the canonical transaction as is: ``source`` is an id, not the Charge
        body = listing("/v1/balance_transactions", [canonical("balance_transaction")])
    router.get(f"{URL}/v1/balance_transactions").mock(return_value=httpx.Response(200, json=body))
    with pytest.raises(PspProtocolError):
        list(stripe.iter_settlements(datetime(2024, 5, 3, tzinfo=UTC), datetime(2024, 5, 4, tzinfo=UTC)))


def test_settlements__naive_window_is_refused_at_once(stripe: StripeAdapter) -> None:
    with pytest.raises(ValueError, match="aware"):
        stripe.iter_settlements(datetime(2024, 5, 3), datetime(2024, 5, 4))


@pytest.mark.parametrize("body", [
    b"<html>not json</html>",
    b'{"object": "payment_intent", "status": "succeeded"}',
    b"[]",
    "float-amount",
], ids=["not-json", "missing-fields", "not-an-object", "float-amount"])
def test_wire__bad_payment_intent_is_protocol_error(
    stripe: StripeAdapter, router: respx.MockRouter, body: bytes | str
) -> None:
    content = json.dumps(paid(amount=20.0)).encode() if body == "float-amount" else body
    router.post(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(200, content=content))
    with pytest.raises(PspProtocolError):
        create(stripe)


# --- secrets ---------------------------------------------------------------------------------------------


def test_secrets__absent_from_errors_reprs_and_logs(
    stripe: StripeAdapter, router: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    answers: list[httpx.Response | Exception] = [
        httpx.Response(401, json={"error": {"message": f"Invalid API Key provided: {KEY}",
                                            "type": "invalid_request_error"}}),
        httpx.Response(400, json={"error": {"message": f"bad key {KEY}", "type": "invalid_request_error"}}),
        httpx.Response(500, json=error_body("error_api.json")),
        httpx.ReadTimeout("slow"),
        httpx.ConnectError("refused"),
    ]
    router.post(f"{URL}/v1/payment_intents").mock(side_effect=answers)
    errors: list[PspError] = []
    with caplog.at_level(logging.DEBUG):
        for _ in answers:
            with pytest.raises(PspError) as info:
                create(stripe)
            errors.append(info.value)
    assert len(errors) == len(answers)
    for error in errors:
        assert KEY not in str(error) and KEY not in repr(error)
        assert error.__cause__ is None or KEY not in repr(error.__cause__)
    assert KEY not in repr(stripe)
    assert KEY not in caplog.text
