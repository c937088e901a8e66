"""The Stripe adapter against recorded-style Stripe JSON (respx; no network)."""

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
from psp_adapters.protocol import ChargeRequest, Failed, NotFound, Pending, PspRef, Secret, Succeeded, Unknown
from psp_adapters.stripe import StripeAdapter
from psp_adapters.stripe.wire import PaymentIntentStatus

KEY = "sk_test_51NotARealKeyButLooksLikeOne0000"
URL = "https://stripe.test"
NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)
FIXTURES = Path(__file__).parent / "stripe" / "fixtures"
CHARGE = ChargeRequest(
    merchant_reference="order-1042",
    amount=2000,
    currency="USD",
    payment_method="pm_card_visa",
    description="order 1042",
)
PI_ID = "pi_3MtwBwLkdIwHu7ix28a3tqPa"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def intent(status: str, **changes: object) -> dict[str, Any]:
    doc = load("payment_intent_succeeded.json")
    doc.update(status=status, **changes)
    return doc


@pytest.fixture
def stripe() -> Any:
    adapter = StripeAdapter(URL, api_key=Secret(KEY), now_func=lambda: NOW)
    yield adapter
    adapter.close()


def create(adapter: StripeAdapter, request: ChargeRequest = CHARGE) -> Any:
    return adapter.create_payment(request, idempotency_key="idem-order-1042")


def test_create__posts_form_with_key_headers_and_metadata(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    route = router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(200, json=intent("succeeded"))
    )
    outcome = create(stripe)
    sent = route.calls.last.request
    assert sent.headers["Authorization"] == f"Bearer {KEY}"
    assert sent.headers["Idempotency-Key"] == "idem-order-1042"
    assert sent.headers["Content-Type"] == "application/x-www-form-urlencoded"
    form = {key: values[0] for key, values in parse_qs(sent.content.decode()).items()}
    assert form["amount"] == "2000"
    assert form["currency"] == "usd"
    assert form["confirm"] == "true"
    assert form["payment_method"] == "pm_card_visa"
    assert form["metadata[merchant_reference]"] == "order-1042"
    assert form["description"] == "order 1042"
    assert outcome == Succeeded(
        psp_reference=PI_ID,
        amount=2000,
        currency="USD",
        raw_status="succeeded",
        merchant_reference="order-1042",
    )


@pytest.mark.parametrize(
    ("status", "changes", "expected", "reason"),
    [
        ("succeeded", {}, Succeeded, None),
        ("processing", {}, Pending, None),
        ("requires_action", {}, Pending, None),
        ("requires_confirmation", {}, Pending, None),
        ("requires_capture", {}, Pending, None),
        ("requires_payment_method", {}, Pending, None),
        (
            "requires_payment_method",
            {
                "last_payment_error": {
                    "type": "card_error",
                    "code": "card_declined",
                    "decline_code": "stolen_card",
                }
            },
            Failed,
            "stolen_card",
        ),
        ("canceled", {"cancellation_reason": "abandoned"}, Failed, "abandoned"),
        ("canceled", {}, Failed, "canceled"),
    ],
)
def test_wire__every_payment_intent_status_maps(
    stripe: StripeAdapter,
    router: respx.MockRouter,
    status: str,
    changes: dict[str, object],
    expected: type,
    reason: str | None,
) -> None:
    router.get(f"{URL}/v1/payment_intents/{PI_ID}").mock(
        return_value=httpx.Response(200, json=intent(status, **changes))
    )
    outcome = stripe.fetch_payment(PspRef(psp_reference=PI_ID))
    assert type(outcome) is expected
    assert outcome.raw_status == status
    if reason is not None:
        assert isinstance(outcome, Failed) and outcome.reason == reason


def test_wire__table_covers_every_enum_member() -> None:
    covered = {
        "succeeded",
        "processing",
        "requires_action",
        "requires_confirmation",
        "requires_capture",
        "requires_payment_method",
        "canceled",
    }
    assert covered == {member.value for member in PaymentIntentStatus}


def test_wire__unrecognised_status_is_unknown(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(200, json=intent("requires_magic"))
    )
    outcome = create(stripe)
    assert outcome == Unknown(
        psp_reference=PI_ID,
        amount=2000,
        currency="USD",
        raw_status="requires_magic",
        merchant_reference="order-1042",
    )


def test_create__card_decline_is_failed_not_an_exception(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(402, json=load("error_card_declined.json"))
    )
    outcome = create(stripe)
    assert isinstance(outcome, Failed)
    assert outcome.reason == "insufficient_funds"
    assert outcome.psp_reference == "pi_3MtwBwLkdIwHu7ix0snN0B15"
    assert outcome.merchant_reference == "order-1043"
    assert outcome.amount == 2000 and outcome.currency == "USD"


def test_create__decline_without_decline_code_uses_code(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    body = load("error_card_declined.json")
    body["error"].pop("decline_code")
    body["error"]["code"] = "expired_card"
    router.post(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(402, json=body))
    assert create(stripe).reason == "expired_card"


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [("7", 7.0), (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0), (None, None)],
)
def test_errors__429_is_rate_limited_with_retry_after(
    stripe: StripeAdapter, router: respx.MockRouter, retry_after: str | None, expected: float | None
) -> None:
    headers = {"Retry-After": retry_after} if retry_after else {}
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(429, json=load("error_rate_limit.json"), headers=headers)
    )
    with pytest.raises(PspRateLimited) as info:
        create(stripe)
    assert info.value.retry_after == expected
    assert info.value.code == "rate_limit"


@pytest.mark.parametrize("status", [500, 502, 503, 504, 424])
def test_errors__5xx_and_424_are_transient(
    stripe: StripeAdapter, router: respx.MockRouter, status: int
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(status, json=load("error_api.json"))
    )
    with pytest.raises(PspTransientError) as info:
        create(stripe)
    assert type(info.value) is PspTransientError
    assert info.value.status_code == status


def test_errors__non_json_5xx_from_a_proxy_is_transient(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    router.get(f"{URL}/v1/payment_intents/{PI_ID}").mock(
        return_value=httpx.Response(502, text="<html>Bad Gateway")
    )
    with pytest.raises(PspTransientError):
        stripe.fetch_payment(PspRef(psp_reference=PI_ID))


@pytest.mark.parametrize(("header", "expected"), [("true", True), ("false", False), (None, None)])
def test_errors__stripe_should_retry_header_is_carried(
    stripe: StripeAdapter, router: respx.MockRouter, header: str | None, expected: bool | None
) -> None:
    headers = {"Stripe-Should-Retry": header} if header else {}
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(500, json=load("error_api.json"), headers=headers)
    )
    with pytest.raises(PspError) as info:
        create(stripe)
    assert info.value.should_retry is expected


@pytest.mark.parametrize("status", [401, 403])
def test_errors__401_and_403_are_auth_errors_without_the_key(
    stripe: StripeAdapter, router: respx.MockRouter, status: int
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(status, json=load("error_authentication.json"))
    )
    with pytest.raises(PspAuthError) as info:
        create(stripe)
    assert "sk_test" not in str(info.value)  # Stripe echoes a masked key; we quote none of it


@pytest.mark.parametrize("status", [400, 422, 404, 405])
def test_errors__other_4xx_are_rejections(
    stripe: StripeAdapter, router: respx.MockRouter, status: int
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(status, json=load("error_invalid_request.json"))
    )
    with pytest.raises(PspRejectedError) as info:
        create(stripe)
    assert type(info.value) is PspRejectedError
    assert info.value.code == "parameter_missing"
    assert "Missing required param: currency." in str(info.value)


def test_errors__idempotency_error_is_idempotency_bug(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(400, json=load("error_idempotency.json"))
    )
    with pytest.raises(PspIdempotencyError):
        create(stripe)


def test_errors__409_key_in_use_is_transient_not_a_bug(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(409, json=load("error_idempotency_key_in_use.json"))
    )
    with pytest.raises(PspTransientError) as info:
        create(stripe)
    assert info.value.status_code == 409
    assert info.value.code == "idempotency_key_in_use"


def test_fetch__resource_missing_is_not_found(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.get(f"{URL}/v1/payment_intents/pi_missing").mock(
        return_value=httpx.Response(404, json=load("error_resource_missing.json"))
    )
    assert stripe.fetch_payment(PspRef(psp_reference="pi_missing", merchant_reference="r")) == NotFound(
        psp_reference="pi_missing", merchant_reference="r"
    )


def test_fetch__by_merchant_reference_searches_metadata(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    route = router.get(f"{URL}/v1/payment_intents/search").mock(
        return_value=httpx.Response(200, json=load("search_result.json"))
    )
    outcome = stripe.fetch_payment(PspRef(merchant_reference="order-1042"))
    assert route.calls.last.request.url.params["query"] == "metadata['merchant_reference']:'order-1042'"
    assert isinstance(outcome, Succeeded) and outcome.psp_reference == PI_ID


def test_fetch__search_escapes_quotes(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    route = router.get(f"{URL}/v1/payment_intents/search").mock(
        return_value=httpx.Response(200, json=load("search_result_empty.json"))
    )
    assert stripe.fetch_payment(PspRef(merchant_reference="o'neil")) == NotFound(merchant_reference="o'neil")
    assert route.calls.last.request.url.params["query"] == "metadata['merchant_reference']:'o\\'neil'"


def test_fetch__several_intents_for_one_reference_prefers_the_succeeded_one(
    stripe: StripeAdapter, router: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    body = load("search_result.json")
    body["data"] = [
        intent("requires_payment_method", id="pi_a", created=1714737700),
        intent("succeeded", id="pi_b"),
    ]
    router.get(f"{URL}/v1/payment_intents/search").mock(return_value=httpx.Response(200, json=body))
    with caplog.at_level(logging.WARNING):
        outcome = stripe.fetch_payment(PspRef(merchant_reference="order-1042"))
    assert outcome.psp_reference == "pi_b"
    assert "2 payment intents" in caplog.text


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


def test_settlements__pages_lazily_with_starting_after(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    since, until = datetime(2024, 5, 3, tzinfo=UTC), datetime(2024, 5, 4, tzinfo=UTC)
    second = router.get(f"{URL}/v1/charges", params={"starting_after": "ch_3PcqA2LkdIwHu7ix1xYzAbC2"}).mock(
        return_value=httpx.Response(200, json=load("charges_page_2.json"))
    )
    first = router.get(f"{URL}/v1/charges").mock(
        return_value=httpx.Response(200, json=load("charges_page_1.json"))
    )
    lines = stripe.iter_settlements(since, until)
    assert not first.called  # nothing is fetched before iteration
    head = [next(lines), next(lines)]
    assert first.call_count == 1 and not second.called
    rest = list(lines)
    assert second.call_count == 1
    params = first.calls.last.request.url.params
    assert params["created[gte]"] == str(int(since.timestamp()))
    assert params["created[lt]"] == str(int(until.timestamp()))
    assert params["limit"] == "100"
    assert [(line.psp_reference, line.status, line.amount, line.currency) for line in head + rest] == [
        (PI_ID, "succeeded", 2000, "USD"),
        ("pi_3MtwBwLkdIwHu7ix28a3tqPb", "refunded", 500, "JPY"),
        ("pi_3MtwBwLkdIwHu7ix28a3tqPc", "failed", 1500, "EUR"),
    ]
    assert head[0].merchant_reference == "order-1042"
    assert head[0].settled_at == datetime.fromtimestamp(1714737900, UTC)


def test_settlements__naive_window_is_refused_at_once(stripe: StripeAdapter) -> None:
    with pytest.raises(ValueError, match="aware"):
        stripe.iter_settlements(datetime(2024, 5, 3), datetime(2024, 5, 4))


@pytest.mark.parametrize(
    "body",
    [
        b"<html>not json</html>",
        b'{"object": "payment_intent", "status": "succeeded"}',
        b"[]",
        json.dumps(intent("succeeded", amount=20.0)).encode(),
    ],
    ids=["not-json", "missing-fields", "not-an-object", "float-amount"],
)
def test_wire__bad_payment_intent_is_protocol_error(
    stripe: StripeAdapter, router: respx.MockRouter, body: bytes
) -> None:
    router.post(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(200, content=body))
    with pytest.raises(PspProtocolError):
        create(stripe)


def test_wire__list_page_without_has_more_is_protocol_error(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    router.get(f"{URL}/v1/charges").mock(
        return_value=httpx.Response(200, json={"object": "list", "data": []})
    )
    with pytest.raises(PspProtocolError):
        list(stripe.iter_settlements(datetime(2024, 5, 3, tzinfo=UTC), datetime(2024, 5, 4, tzinfo=UTC)))


@pytest.mark.parametrize(
    ("currency", "iso_amount", "stripe_amount"),
    [
        ("JPY", 500, "500"),
        ("KRW", 12000, "12000"),
        ("USD", 1999, "1999"),
        ("KWD", 5120, "5120"),
        ("ISK", 5, "500"),
        ("MGA", 300, "3"),
    ],
)
def test_wire__amounts_stay_integers_across_currency_exponents(
    stripe: StripeAdapter, router: respx.MockRouter, currency: str, iso_amount: int, stripe_amount: str
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        form = {key: values[0] for key, values in parse_qs(request.content.decode()).items()}
        return httpx.Response(
            200,
            json=intent(
                "succeeded",
                amount=int(form["amount"]),
                amount_received=int(form["amount"]),
                currency=form["currency"],
            ),
        )

    route = router.post(f"{URL}/v1/payment_intents").mock(side_effect=answer)
    outcome = create(stripe, ChargeRequest(merchant_reference="r", amount=iso_amount, currency=currency))
    assert parse_qs(route.calls.last.request.content.decode())["amount"] == [stripe_amount]
    assert outcome.amount == iso_amount and isinstance(outcome.amount, int)
    assert outcome.currency == currency


def test_wire__amount_stripe_cannot_represent_is_rejected_before_sending(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    route = router.post(f"{URL}/v1/payment_intents")
    with pytest.raises(PspRejectedError):
        create(stripe, ChargeRequest(merchant_reference="r", amount=150, currency="MGA"))
    assert not route.called


def test_secrets__absent_from_errors_reprs_and_logs(
    stripe: StripeAdapter, router: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    answers: list[httpx.Response | Exception] = [
        httpx.Response(
            401,
            json={"error": {"message": f"Invalid API Key provided: {KEY}", "type": "invalid_request_error"}},
        ),
        httpx.Response(400, json={"error": {"message": f"bad key {KEY}", "type": "invalid_request_error"}}),
        httpx.Response(500, json=load("error_api.json")),
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
