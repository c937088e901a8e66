"""The Adyen adapter against recorded-style Checkout JSON and Payment accounting report CSV (respx).

Checked by what the adapter did not write: every ``POST /v72/payments`` (or, with ``api_version="v71"``,
``/v71/payments``) body any test here makes is validated against the ``PaymentRequest`` schema of Adyen's own
OpenAPI document of that version (``adyen_schema``, read at test time from ../shared/specs), every JSON fixture
against ``PaymentResponse`` or ``ServiceError`` of both versions, and the adapter's bounds and enums against the
schema's. Behaviours cite the docs.adyen.com page they follow.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
import respx

from psp_adapters import registry
from psp_adapters.adyen import AdyenAdapter, charge, check_charge, report, wire
from psp_adapters.adyen import adapter as adyen_adapter
from psp_adapters.adyen.wire import RecordType, ResultCode
from psp_adapters.errors import (
    PspAuthError,
    PspError,
    PspProtocolError,
    PspRateLimited,
    PspRejectedError,
    PspTransientError,
    PspUnknownOutcome,
)
from psp_adapters.protocol import (
    ActionRequired,
    ChargeRequest,
    Failed,
    FieldProblem,
    PaymentOutcome,
    Pending,
    PspRef,
    Secret,
    Succeeded,
    Unknown,
)
from tests.adapters import adyen_schema
from tests.adapters.adyen_schema import requires_specs

KEY = "AQEyhmfxNotARealKeyButLooksLikeOne0000qwerty"
REPORT_KEY = "AQEyhmfxReportUserKeyNotReal0000asdfgh"
REPORT_USER = "report@Company.AcmeCompany"
REPORT_PASSWORD = "Rep0rtUserPassw0rdNotReal"
URL = "https://checkout.adyen.test"
REPORTS = "https://reports.adyen.test"
DOWNLOAD = f"{REPORTS}/reports/download/MerchantAccount/AcmeShopEU"
DOWNLOAD_US = f"{REPORTS}/reports/download/MerchantAccount/AcmeShopUS"
NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)
FIXTURES = Path(__file__).parent / "adyen" / "fixtures"
CHARGE = ChargeRequest(
    merchant_reference="order-2001",
    amount=1250,
    currency="EUR",
    payment_method="8415718415172200",
    customer_reference="shopper-0042",
)


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def report_file(day: str) -> httpx.Response:
    return httpx.Response(
        200, text=(FIXTURES / f"payments_accounting_report_{day}.csv").read_text(encoding="utf-8")
    )


def csv_report(*rows: dict[str, str], columns: tuple[str, ...] = report.REPORT_COLUMNS) -> httpx.Response:
    """A report in the documented layout; each row names only the cells it fills."""
    lines = [",".join(columns)]
    for row in rows:
        cells = {"Company Account": "AcmeCompany", "Merchant Account": "AcmeShopEU", "Psp Reference":
                 "QFQTPCQ8HXSKGK82", "Merchant Reference": "order-2001", "Payment Method": "visa",
                 "Main Currency": "EUR", "Main Amount": "12.50", **row}
        lines.append(",".join(cells.get(column, "") for column in columns))
    return httpx.Response(200, text="\n".join(lines) + "\n")


def build(**overrides: Any) -> AdyenAdapter:
    settings: dict[str, Any] = dict(
        api_key=Secret(KEY),
        merchant_account="AcmeShopEU",
        report_base_url=REPORTS,
        report_api_key=Secret(REPORT_KEY),
        lookback_days=3,
        now_func=lambda: NOW,
    )
    settings.update(overrides)
    return AdyenAdapter(URL, **settings)


@pytest.fixture(autouse=True)
def every_payments_body_is_a_valid_payment_request(router: respx.MockRouter) -> Iterator[None]:
    """At teardown of every test: each /v71|v72/payments body the adapter sent validates against Adyen's
    PaymentRequest schema of that version (a no-op when the OpenAPI documents are absent; the schema tests skip
    then)."""
    yield
    if not adyen_schema.SPECS_AVAILABLE:
        return
    for call in router.calls:
        version = adyen_schema.payments_version(call.request)
        if version is not None:
            adyen_schema.validate_payment_request(json.loads(call.request.content), version)


@pytest.fixture
def adyen() -> Iterator[AdyenAdapter]:
    adapter = build()
    yield adapter
    adapter.close()


def create(adapter: AdyenAdapter, request: ChargeRequest = CHARGE) -> Any:
    return adapter.create_payment(request, idempotency_key="idem-order-2001")


def mock_payments(router: respx.MockRouter, body: Any = None, status: int = 200, *, version: str = "v72",
                  **kw: Any) -> respx.Route:
    answer = httpx.Response(status, json=load("payment_authorised.json") if body is None else body, **kw)
    return router.post(f"{URL}/{version}/payments").mock(return_value=answer)


def sent(route: respx.Route) -> Any:
    return json.loads(route.calls.last.request.content)


# --- the charge: docs.adyen.com/online-payments/tokenization/make-token-payments and the PaymentRequest


def test_create__posts_a_token_payment_with_every_field_adyen_requires(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    route = mock_payments(router)
    outcome = create(adyen)
    request = route.calls.last.request
    assert request.headers["X-API-Key"] == KEY
    assert request.headers["Idempotency-Key"] == "idem-order-2001"
    assert "Authorization" not in request.headers
    assert sent(route) == {
        "amount": {"value": 1250, "currency": "EUR"},
        "reference": "order-2001",
        "merchantAccount": "AcmeShopEU",
        "paymentMethod": {"type": "scheme", "storedPaymentMethodId": "8415718415172200"},
        "shopperReference": "shopper-0042",
        "shopperInteraction": "ContAuth",
        "recurringProcessingModel": "UnscheduledCardOnFile",
        "returnUrl": charge.DEFAULT_RETURN_URL,
    }
    assert outcome == Succeeded(
        psp_reference="QFQTPCQ8HXSKGK82",
        amount=1250,
        currency="EUR",
        raw_status="Authorised",
        merchant_reference="order-2001",
    )


@requires_specs
@pytest.mark.parametrize("version", ["v72", "v71"])
def test_schema__the_body_carries_every_field_the_versions_schema_requires(
    router: respx.MockRouter, version: str
) -> None:
    route = mock_payments(router, version=version)
    create(build(api_version=version))
    body = sent(route)
    assert route.calls.last.request.url.path == f"/{version}/payments"
    adyen_schema.validate_payment_request(body, version)
    assert set(adyen_schema.schema("PaymentRequest", version)["required"]) <= set(body)


def test_create__speaks_v72_by_default_and_v71_when_asked(router: respx.MockRouter) -> None:
    v72, v71 = mock_payments(router), mock_payments(router, version="v71")
    create(build())
    assert (v72.call_count, v71.call_count) == (1, 0)
    create(build(api_version="v71"))
    assert (v72.call_count, v71.call_count) == (1, 1)
    assert sent(v71) == sent(v72)  # the same body: the versions differ only in their bounds
    assert wire.DEFAULT_API_VERSION == "v72" and "v72" in repr(build())
    with pytest.raises(ValueError, match="api_version 'v70' is not one of v71, v72"):
        build(api_version="v70")


@requires_specs
@pytest.mark.parametrize("version", ["v72", "v71"])
def test_schema__the_return_url_bound_is_the_versions(router: respx.MockRouter, version: str) -> None:
    """v72 lowered ``returnUrl.maxLength`` from 8,000 to 1,024: the setting is checked against the version's."""
    longest = adyen_schema.schema("PaymentRequest", version)["properties"]["returnUrl"]["maxLength"]
    assert charge.RETURN_URL_MAX[version] == longest
    url = "https://shop.example/" + "r" * (longest - len("https://shop.example/"))
    route = mock_payments(router, version=version)
    create(build(api_version=version, return_url=url))  # the autouse fixture validates it at the edge
    assert len(sent(route)["returnUrl"]) == longest
    with pytest.raises(ValueError, match=f"1 to {longest} characters"):
        build(api_version=version, return_url=url + "r")


@requires_specs
@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"returnUrl": None}, "returnUrl"),
        ({"shopperReference": "ab"}, "too short"),
        ({"recurringProcessingModel": "Sometimes"}, "is not one of"),
        ({"shopperInteraction": "Telepathy"}, "is not one of"),
        ({"amount": {"value": 12.5, "currency": "EUR"}}, "integer"),
        ({"amount": {"value": 1250, "currency": "EURO"}}, "too long"),
        ({"description": "not a PaymentRequest field"}, "Additional properties"),
    ],
    ids=["no-returnUrl", "short-shopperReference", "bad-model", "bad-interaction", "float", "currency", "extra"],
)
def test_schema__the_validator_bites(change: dict[str, Any], why: str) -> None:
    body = charge.payment_body(CHARGE, merchant_account="AcmeShopEU", return_url=charge.DEFAULT_RETURN_URL,
                               recurring_processing_model=charge.DEFAULT_RECURRING_PROCESSING_MODEL)
    adyen_schema.validate_payment_request(body)
    broken = {key: value for key, value in {**body, **change}.items() if value is not None}
    with pytest.raises(AssertionError, match=why):
        adyen_schema.validate_payment_request(broken)


@requires_specs
def test_schema__the_body_before_this_adapter_knew_the_schema_is_refused() -> None:
    """What the adapter used to send: no returnUrl, no shopperReference."""
    old = {
        "amount": {"value": 1250, "currency": "EUR"},
        "reference": "order-2001",
        "merchantAccount": "AcmeShopEU",
        "shopperInteraction": "ContAuth",
        "recurringProcessingModel": "UnscheduledCardOnFile",
        "paymentMethod": {"type": "scheme", "storedPaymentMethodId": "8415718415172200"},
    }
    with pytest.raises(AssertionError, match="returnUrl"):
        adyen_schema.validate_payment_request(old)


@pytest.mark.parametrize(
    ("requested", "expected"),
    [(None, "AcmeShopEU"), ("", "AcmeShopEU"), ("default", "AcmeShopEU"), ("AcmeShopUS", "AcmeShopUS")],
)
def test_create__request_account_else_the_default_and_never_the_label_default(
    adyen: AdyenAdapter, router: respx.MockRouter, requested: str | None, expected: str
) -> None:
    route = mock_payments(router)
    create(adyen, ChargeRequest(**{**_fields(CHARGE), "merchant_account": requested}))
    assert sent(route)["merchantAccount"] == expected


def test_create__no_account_anywhere_is_rejected_naming_the_setting(router: respx.MockRouter) -> None:
    route = mock_payments(router)
    adapter = build(merchant_account=None)
    with pytest.raises(PspRejectedError) as info:
        create(adapter, ChargeRequest(**{**_fields(CHARGE), "merchant_account": "default"}))
    assert "[psp.adyen] merchant_account" in str(info.value) and "RECON_ADYEN_MERCHANT_ACCOUNT" in str(info.value)
    assert not route.called
    create(adapter, ChargeRequest(**{**_fields(CHARGE), "merchant_account": "AcmeShopUS"}))
    assert sent(route)["merchantAccount"] == "AcmeShopUS"


def test_construct__merchant_account_is_a_default_and_never_the_label() -> None:
    build(merchant_account=None).close()
    with pytest.raises(ValueError, match="label"):
        build(merchant_account="default")


@pytest.mark.parametrize("model", charge.RECURRING_PROCESSING_MODELS)
def test_create__recurring_processing_model_is_configurable(router: respx.MockRouter, model: str) -> None:
    route = mock_payments(router)
    create(build(recurring_processing_model=model))
    assert sent(route)["recurringProcessingModel"] == model


@requires_specs
@pytest.mark.parametrize("version", ["v72", "v71"])
def test_schema__recurring_processing_models_are_the_schemas_enum(version: str) -> None:
    properties = adyen_schema.schema("PaymentRequest", version)["properties"]
    enum = properties["recurringProcessingModel"]["enum"]
    assert sorted(charge.RECURRING_PROCESSING_MODELS) == sorted(enum)
    assert charge.DEFAULT_RECURRING_PROCESSING_MODEL in enum
    assert charge.SHOPPER_INTERACTION in properties["shopperInteraction"]["enum"]


def test_create__return_url_is_a_setting_with_a_harmless_default(router: respx.MockRouter) -> None:
    route = mock_payments(router)
    create(build(return_url="https://shop.example/payments/return"))
    assert sent(route)["returnUrl"] == "https://shop.example/payments/return"
    assert charge.DEFAULT_RETURN_URL.startswith("https://") and ".invalid/" in charge.DEFAULT_RETURN_URL


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"api_key": Secret("")}, "api_key"),
        ({"recurring_processing_model": "Weekly"}, "recurring_processing_model"),
        ({"return_url": ""}, "return_url"),
        ({"return_url": "https://x.example/" + "a" * 8000}, "return_url"),
        ({"return_url": "https://x.example/" + "a" * 1010}, "1 to 1024 characters"),  # v72's bound
        ({"api_version": "71"}, "api_version"),
        ({"lookback_days": -1}, "lookback_days"),
    ],
)
def test_construct__settings_are_validated(overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build(**overrides)


# --- check_charge: the same rules, before anything is stored or sent


def _fields(request: ChargeRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in ChargeRequest.__dataclass_fields__}


def _resolved(**changes: Any) -> ChargeRequest:
    return ChargeRequest(**{**_fields(CHARGE), "merchant_account": "AcmeShopEU", **changes})


def test_check_charge__a_chargeable_request_has_no_problem() -> None:
    assert check_charge(_resolved()) == []
    assert check_charge is charge.check_charge


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"payment_method": None}, "payment_method"),
        ({"payment_method": ""}, "payment_method"),
        ({"payment_method": "x" * 65}, "payment_method"),
        ({"customer_reference": None}, "customer_reference"),
        ({"customer_reference": "ab"}, "customer_reference"),
        ({"customer_reference": "s" * 257}, "customer_reference"),
        ({"merchant_reference": "a" * 81}, "merchant_reference"),
        ({"merchant_reference": ""}, "merchant_reference"),
        ({"merchant_account": None}, "merchant_account"),
        ({"merchant_account": ""}, "merchant_account"),
        ({"merchant_account": "default"}, "merchant_account"),
        ({"amount": 150050, "currency": "IDR"}, "amount"),  # Adyen counts IDR in whole rupiah
        ({"amount": 5, "currency": "CVE"}, "amount"),
        ({"currency": "eur"}, "currency"),
    ],
)
def test_check_charge__each_problem_names_the_chargerequest_field(changes: dict[str, Any], field: str) -> None:
    problems = check_charge(_resolved(**changes))
    assert [problem.field for problem in problems] == [field]
    assert all(isinstance(problem, FieldProblem) and problem.message for problem in problems)


def test_check_charge__bounds_are_inclusive(router: respx.MockRouter) -> None:
    edge = _resolved(merchant_reference="r" * 80, customer_reference="abc", payment_method="p" * 64)
    assert check_charge(edge) == []
    assert check_charge(_resolved(customer_reference="s" * 256)) == []
    route = mock_payments(router)
    create(build(), edge)  # the autouse fixture validates the body at the edges
    assert sent(route)["reference"] == "r" * 80


@requires_specs
@pytest.mark.parametrize("version", ["v72", "v71"])
def test_schema__check_charge_bounds_are_the_schemas(version: str) -> None:
    request = adyen_schema.schema("PaymentRequest", version)["properties"]
    assert (request["shopperReference"]["minLength"], request["shopperReference"]["maxLength"]) == (
        charge.SHOPPER_REFERENCE_MIN, charge.SHOPPER_REFERENCE_MAX)
    assert f"Maximum length: {charge.REFERENCE_MAX} characters" in request["reference"]["description"]
    assert request["reference"].get("maxLength", charge.REFERENCE_MAX) == charge.REFERENCE_MAX  # v72 states it
    assert request["returnUrl"]["maxLength"] == charge.RETURN_URL_MAX[version]
    card = adyen_schema.schema("CardDetails", version)["properties"]
    assert card["storedPaymentMethodId"]["maxLength"] == charge.STORED_PAYMENT_METHOD_ID_MAX
    assert "scheme" in card["type"]["enum"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"payment_method": None}, "payment_method"), ({"customer_reference": "ab"}, "customer_reference")],
)
def test_create__a_charge_check_failure_is_rejected_before_sending(
    adyen: AdyenAdapter, router: respx.MockRouter, changes: dict[str, Any], field: str
) -> None:
    route = mock_payments(router)
    with pytest.raises(PspRejectedError, match=field):
        create(adyen, ChargeRequest(**{**_fields(CHARGE), **changes}))
    assert not route.called


def test_create__an_idempotency_key_over_64_characters_is_rejected_before_sending(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    """docs.adyen.com/development-resources/api-idempotency: "a maximum of 64 characters"."""
    route = mock_payments(router)
    adyen.create_payment(CHARGE, idempotency_key="k" * 64)
    with pytest.raises(PspRejectedError, match="64"):
        adyen.create_payment(CHARGE, idempotency_key="k" * 65)
    assert route.call_count == 1


# --- result codes: docs.adyen.com/online-payments/build-your-integration/payment-result-codes

RESULT_CODES = {
    "Authorised": Succeeded,
    "PartiallyAuthorised": Pending,
    "Refused": Failed,
    "Error": Failed,
    "Cancelled": Failed,
    "Pending": Pending,
    "Received": Pending,
    "RedirectShopper": ActionRequired,
    "IdentifyShopper": ActionRequired,
    "ChallengeShopper": ActionRequired,
    "PresentToShopper": ActionRequired,
    "AuthenticationFinished": Pending,
    "AuthenticationNotRequired": Pending,
}


def test_wire__result_code_table_covers_every_enum_member() -> None:
    assert set(RESULT_CODES) == {member.value for member in ResultCode}


@requires_specs
@pytest.mark.parametrize("version", ["v72", "v71"])
def test_schema__result_codes_are_the_versions_enum_but_the_undocumented_success(version: str) -> None:
    enum = set(adyen_schema.schema("PaymentResponse", version)["properties"]["resultCode"]["enum"])
    assert enum - {member.value for member in ResultCode} == {"Success"}
    assert {member.value for member in ResultCode} <= enum


@pytest.mark.parametrize(("result_code", "expected"), sorted(RESULT_CODES.items()))
def test_wire__every_result_code_maps(
    adyen: AdyenAdapter, router: respx.MockRouter, result_code: str, expected: type
) -> None:
    mock_payments(router, load("payment_authorised.json") | {"resultCode": result_code})
    outcome = create(adyen)
    assert type(outcome) is expected
    assert isinstance(outcome, PaymentOutcome) and outcome.raw_status == result_code


def test_create__refusal_is_failed_with_refusal_reason(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    mock_payments(router, load("payment_refused.json"))
    outcome = create(adyen)
    assert isinstance(outcome, Failed)
    assert outcome.reason == "Not enough balance"
    assert outcome.psp_reference == "V4HZ4RBFJGXXGN82"


def test_create__a_redirect_is_action_required_a_merchant_initiated_charge_cannot_finish(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    mock_payments(router, load("payment_redirect.json"))
    assert create(adyen) == ActionRequired(raw_status="RedirectShopper", merchant_reference="order-2003")


@pytest.mark.parametrize("result_code", ["Success", "SomethingNew"])
def test_wire__unrecognised_result_code_is_unknown(
    adyen: AdyenAdapter, router: respx.MockRouter, result_code: str
) -> None:
    mock_payments(router, load("payment_authorised.json") | {"resultCode": result_code})
    outcome = create(adyen)
    assert isinstance(outcome, Unknown) and outcome.raw_status == result_code


@pytest.mark.parametrize(
    "content",
    [
        b"<html>oops</html>",
        b'{"pspReference": "X"}',
        b'{"resultCode": 3}',
        b'{"resultCode": "Authorised", "amount": {"value": 12.5, "currency": "EUR"}}',
    ],
    ids=["not-json", "no-result-code", "result-code-not-string", "float-amount"],
)
def test_wire__bad_payment_response_is_protocol_error(
    adyen: AdyenAdapter, router: respx.MockRouter, content: bytes
) -> None:
    router.post(f"{URL}/v72/payments").mock(return_value=httpx.Response(200, content=content))
    with pytest.raises(PspProtocolError):
        create(adyen)


# --- errors: docs.adyen.com/development-resources/response-handling, .../error-codes, .../api-idempotency


def test_errors__422_validation_is_rejected(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    mock_payments(router, load("error_validation.json"), status=422)
    with pytest.raises(PspRejectedError) as info:
        create(adyen)
    assert info.value.code == "101" and "Invalid card number" in str(info.value)


@pytest.mark.parametrize(
    ("error_type", "code"), [("configuration", "905_1"), ("validation", "702"), ("Configuration", "905")]
)
def test_errors__a_500_configuration_or_validation_error_is_permanent(
    adyen: AdyenAdapter, router: respx.MockRouter, error_type: str, code: str
) -> None:
    """"Our servers may return a 500 status code also when the request is incorrect" (response-handling)."""
    body = load("error_configuration.json") | {"errorType": error_type, "errorCode": code}
    mock_payments(router, body, status=500)
    with pytest.raises(PspRejectedError) as info:
        create(adyen)
    assert type(info.value) is PspRejectedError
    assert info.value.code == code and info.value.status_code == 500


@pytest.mark.parametrize("status", [401, 403])
def test_errors__401_and_403_are_auth_errors(
    adyen: AdyenAdapter, router: respx.MockRouter, status: int
) -> None:
    mock_payments(router, load("error_security.json") | {"status": status}, status=status)
    with pytest.raises(PspAuthError):
        create(adyen)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_errors__a_5xx_not_marked_transient_is_the_keys_saved_answer(
    adyen: AdyenAdapter, router: respx.MockRouter, status: int
) -> None:
    """"If the API does not return a transient error header … do not retry the request" (api-idempotency):
    Adyen keeps a non-transient answer as the key's final result."""
    mock_payments(router, load("error_internal.json") | {"status": status}, status=status)
    with pytest.raises(PspTransientError) as info:
        create(adyen)
    assert info.value.status_code == status
    assert info.value.saved is True and info.value.should_retry is False


def test_errors__a_5xx_marked_transient_is_retried_with_the_same_key(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    mock_payments(router, load("error_internal.json"), status=500, headers={"Transient-Error": "true"})
    with pytest.raises(PspTransientError) as info:
        create(adyen)
    assert info.value.saved is False and info.value.should_retry is True


def test_errors__a_proxy_5xx_without_an_adyen_body_never_reached_the_key_store(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.post(f"{URL}/v72/payments").mock(return_value=httpx.Response(502, text="<html>bad gateway</html>"))
    with pytest.raises(PspTransientError) as info:
        create(adyen)
    assert info.value.saved is False and info.value.should_retry is None


def test_errors__703_idempotency_store_unavailable_is_transient(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    """"the API returns an HTTP 503 … error code 703 … The system marks the request as a transient error"."""
    mock_payments(router, load("error_idempotency_unavailable.json"), status=503)
    with pytest.raises(PspTransientError) as info:
        create(adyen)
    assert info.value.code == "703" and info.value.saved is False and info.value.should_retry is True


def test_errors__429_is_rate_limited_with_retry_after(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    mock_payments(router, load("error_rate_limited.json"), status=429, headers={"Retry-After": "12"})
    with pytest.raises(PspRateLimited) as info:
        create(adyen)
    assert info.value.retry_after == 12.0 and info.value.saved is False


@pytest.mark.parametrize(
    ("status", "header", "hint"), [(409, "true", True), (422, "true", True), (409, None, None), (422, None, None)]
)
def test_errors__704_same_key_in_flight_is_transient(
    adyen: AdyenAdapter, router: respx.MockRouter, status: int, header: str | None, hint: bool | None
) -> None:
    """"If you submit a duplicate request before the first request has completed, the API returns an HTTP 422
    … or HTTP 409 … with the error code 704" (api-idempotency, "Transient errors")."""
    headers = {"Transient-Error": header} if header else {}
    mock_payments(router, load("error_in_flight.json") | {"status": status}, status=status, headers=headers)
    with pytest.raises(PspTransientError) as info:
        create(adyen)
    assert type(info.value) is PspTransientError
    assert info.value.code == "704" and info.value.status_code == status
    assert info.value.should_retry is hint and info.value.saved is False


def test_idempotency__retention_is_the_documented_seven_days() -> None:
    """"Idempotency keys are valid for a minimum period of 7 days after first submission" (api-idempotency)."""
    assert AdyenAdapter.idempotency_retention == timedelta(days=7)


def test_transport__connect_timeout_is_transient_read_timeout_on_create_is_unknown(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.post(f"{URL}/v72/payments").mock(
        side_effect=[httpx.ConnectTimeout("slow"), httpx.ReadTimeout("slow")]
    )
    with pytest.raises(PspTransientError) as first:
        create(adyen)
    assert not isinstance(first.value, PspUnknownOutcome)
    with pytest.raises(PspUnknownOutcome):
        create(adyen)


def test_transport__read_timeout_on_fetch_is_transient(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    router.get(url__startswith=DOWNLOAD).mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(PspTransientError) as info:
        adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    assert not isinstance(info.value, PspUnknownOutcome)


# --- the report user: docs.adyen.com/reporting/automatically-get-reports


def test_reports__the_report_users_api_key_never_the_checkout_key(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    route = router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(404))
    adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    headers = route.calls.last.request.headers
    assert headers["X-API-Key"] == REPORT_KEY and "Authorization" not in headers


@pytest.mark.parametrize("api_key", [None, Secret(REPORT_KEY)], ids=["basic-only", "basic-and-key"])
def test_reports__basic_auth_when_username_and_password_are_given(
    router: respx.MockRouter, api_key: Secret | None
) -> None:
    adapter = build(report_api_key=api_key, report_username=REPORT_USER, report_password=Secret(REPORT_PASSWORD))
    route = router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(404))
    adapter.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    headers = route.calls.last.request.headers
    token = base64.b64encode(f"{REPORT_USER}:{REPORT_PASSWORD}".encode()).decode()
    assert headers["Authorization"] == f"Basic {token}" and "X-API-Key" not in headers


@pytest.mark.parametrize(
    "credentials",
    [{}, {"report_username": REPORT_USER}, {"report_password": Secret(REPORT_PASSWORD)},
     {"report_api_key": Secret("")}],
    ids=["none", "username-only", "password-only", "empty-key"],
)
def test_reports__without_report_credentials_the_constructor_names_them(credentials: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as info:
        build(**{"report_api_key": None, **credentials})
    text = str(info.value)
    for name in ("report_api_key", "report_username/report_password", "RECON_ADYEN_REPORT_API_KEY",
                 "RECON_ADYEN_REPORT_USERNAME", "RECON_ADYEN_REPORT_PASSWORD"):
        assert name in text


def test_registry__adyen_factory_passes_every_setting_through(router: respx.MockRouter) -> None:
    settings = registry.settings_from_env("adyen", {
        "RECON_ADYEN_BASE_URL": URL,
        "RECON_ADYEN_API_KEY": KEY,
        "RECON_ADYEN_RETURN_URL": "https://shop.example/return",
        "RECON_ADYEN_RECURRING_PROCESSING_MODEL": "Subscription",
        "RECON_ADYEN_REPORT_BASE_URL": REPORTS,
        "RECON_ADYEN_REPORT_USERNAME": REPORT_USER,
        "RECON_ADYEN_REPORT_PASSWORD": REPORT_PASSWORD,
        "RECON_ADYEN_REPORT_TIMEZONE": "Europe/Amsterdam",
    })
    adapter = registry.get_factory("adyen")(settings)  # no merchant account: only a default, not required
    route = mock_payments(router)
    adapter.create_payment(_resolved(merchant_account="AcmeShopUS"), idempotency_key="k-1")
    assert sent(route)["returnUrl"] == "https://shop.example/return"
    assert sent(route)["recurringProcessingModel"] == "Subscription"
    reports = router.get(url__startswith=DOWNLOAD_US).mock(return_value=httpx.Response(404))
    adapter.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82", merchant_account="AcmeShopUS"))
    assert reports.calls.last.request.headers["Authorization"].startswith("Basic ")
    adapter.close()
    without = {key: value for key, value in settings.items() if not key.startswith("report_")}
    with pytest.raises(ValueError, match="RECON_ADYEN_REPORT_API_KEY"):
        registry.get_factory("adyen")(without)
    v71 = registry.get_factory("adyen")(registry.settings_from_env("adyen", {
        **{f"RECON_ADYEN_{key.upper()}": str(value.reveal() if isinstance(value, Secret) else value)
           for key, value in settings.items() if isinstance(value, str | Secret)},
        "RECON_ADYEN_API_VERSION": "v71"}))  # [psp.adyen] api_version = "v71" in the file does the same
    old = mock_payments(router, version="v71")
    v71.create_payment(_resolved(merchant_account="AcmeShopUS"), idempotency_key="k-2")
    assert old.call_count == 1 and route.call_count == 1
    v71.close()


# --- fetch: the Payment accounting report (docs.adyen.com/reporting/invoice-reconciliation/
# payment-accounting-report) of the payment's merchant account


def test_fetch__walks_reports_newest_first_and_stops_at_the_first_mention(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    today = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_02.csv").mock(
        return_value=report_file("2024_05_02")
    )
    older = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_01.csv").mock(
        return_value=report_file("2024_05_01")
    )
    outcome = adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    assert outcome == Succeeded(
        psp_reference="QFQTPCQ8HXSKGK82",
        merchant_reference="order-2001",
        amount=1250,
        currency="EUR",
        raw_status="Settled",
    )
    assert today.called and not older.called


@pytest.mark.parametrize(("account", "prefix"), [("AcmeShopUS", DOWNLOAD_US), ("default", DOWNLOAD), (None, DOWNLOAD)])
def test_fetch__reads_the_reports_of_the_payments_merchant_account(
    adyen: AdyenAdapter, router: respx.MockRouter, account: str | None, prefix: str
) -> None:
    # each account's report names that account in its Merchant Account column (the fixture's is AcmeShopEU)
    text = report_file("2024_05_02").text.replace("AcmeShopEU", account if account == "AcmeShopUS" else "AcmeShopEU")
    route = router.get(url__startswith=prefix + "/").mock(return_value=httpx.Response(200, text=text))
    outcome = adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82", merchant_account=account))
    assert outcome.raw_status == "Settled" and route.call_count == 1


def test_fetch__a_row_of_another_merchant_account_is_never_ours(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    """Two accounts of one company may both use a merchant reference: a row naming another account in its
    Merchant Account column does not answer for a payment of ours, by either reference."""
    router.get(url__startswith=DOWNLOAD_US + "/").mock(return_value=report_file("2024_05_02"))  # AcmeShopEU rows
    for ref in (PspRef(psp_reference="QFQTPCQ8HXSKGK82", merchant_account="AcmeShopUS"),
                PspRef(merchant_reference="order-2001", merchant_account="AcmeShopUS")):
        outcome = adyen.fetch_payment(ref)
        assert isinstance(outcome, Pending) and outcome.raw_status is None, ref


def test_fetch__without_any_account_is_rejected_naming_the_setting(router: respx.MockRouter) -> None:
    with pytest.raises(PspRejectedError, match="RECON_ADYEN_MERCHANT_ACCOUNT"):
        build(merchant_account=None).fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))


def test_fetch__skips_reports_not_generated_yet_and_finds_by_merchant_reference(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_02.csv").mock(return_value=httpx.Response(404))
    router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_01.csv").mock(
        return_value=report_file("2024_05_01")
    )
    outcome = adyen.fetch_payment(PspRef(merchant_reference="order-2002"))
    assert isinstance(outcome, Failed)
    assert outcome.psp_reference == "V4HZ4RBFJGXXGN82" and outcome.raw_status == "Refused"


def test_fetch__absent_from_every_report_is_pending_never_not_found(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    route = router.get(url__startswith=DOWNLOAD).mock(
        side_effect=[httpx.Response(404), report_file("2024_05_01"), report_file("2024_05_01"),
                     httpx.Response(404)]
    )
    outcome = adyen.fetch_payment(PspRef(psp_reference="NOSUCHPAYMENT000", merchant_reference="order-9"))
    assert outcome == Pending(psp_reference="NOSUCHPAYMENT000", merchant_reference="order-9")
    assert route.call_count == 4  # today and lookback_days=3 days back


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def day_routes(router: respx.MockRouter, prefix: str = DOWNLOAD, **responses: httpx.Response
               ) -> dict[str, respx.Route]:
    """One route per day's file of the lookback (NOW is 2024-05-02, lookback_days=3), each answering as given
    (an empty report by default)."""
    return {day: router.get(f"{prefix}/payments_accounting_report_{day}.csv").mock(
        return_value=responses.get(f"d{day}", csv_report())) for day in ("2024_05_02", "2024_05_01",
                                                                          "2024_04_30", "2024_04_29")}


def test_fetch__files_of_final_days_are_downloaded_once_and_today_and_yesterday_every_time(
    router: respx.MockRouter
) -> None:
    """Adyen writes each day's file once, the next morning: from the day before yesterday on, a file is final.
    Checking payments one by one then costs two downloads each, not lookback_days + 1."""
    adapter = build(monotonic_func=Ticks())
    routes = day_routes(router)
    for n in range(3):
        assert adapter.fetch_payment(PspRef(psp_reference=f"NOTYET{n}")) == Pending(psp_reference=f"NOTYET{n}")
    assert {day: r.call_count for day, r in routes.items()} == {
        "2024_05_02": 3, "2024_05_01": 3, "2024_04_30": 1, "2024_04_29": 1}


def test_fetch__a_kept_file_answers_like_the_download_and_expires_after_its_time(router: respx.MockRouter) -> None:
    ticks = Ticks()
    adapter = build(monotonic_func=ticks)
    routes = day_routes(router, d2024_04_30=report_file("2024_05_01"))  # the payment's rows, on a final day
    first = adapter.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    assert isinstance(first, Succeeded) and first.raw_status == "SentForSettle"  # its latest row in that file
    ticks.now += adyen_adapter.REPORT_CACHE_SECONDS - 1
    assert adapter.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82")) == first
    assert routes["2024_04_30"].call_count == 1
    ticks.now += 2  # downloaded REPORT_CACHE_SECONDS + 1 ago: read again
    assert adapter.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82")) == first
    assert routes["2024_04_30"].call_count == 2


def test_fetch__missing_and_oversized_files_are_not_kept_and_each_account_has_its_own(
    router: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adyen_adapter, "REPORT_CACHE_ROWS", 2)
    adapter = build(monotonic_func=Ticks())
    three_rows = csv_report(*({"Psp Reference": f"OTHER{n}", "Record Type": "Settled", "TimeZone": "CEST",
                               "Booking Date": "2024-04-29 10:00:00"} for n in range(3)))
    eu = day_routes(router, d2024_04_30=httpx.Response(404), d2024_04_29=three_rows)
    us = day_routes(router, DOWNLOAD_US)
    for _ in range(2):
        adapter.fetch_payment(PspRef(psp_reference="NOTYET"))
        adapter.fetch_payment(PspRef(psp_reference="NOTYET", merchant_account="AcmeShopUS"))
    assert eu["2024_04_30"].call_count == 2  # not generated (404): asked again
    assert eu["2024_04_29"].call_count == 2  # 3 rows, over the 2 the cache may hold
    assert (us["2024_04_30"].call_count, us["2024_04_29"].call_count) == (1, 1)  # its own, kept


def test_fetch__the_cache_keeps_at_most_its_rows_least_recently_used_out_first(
    router: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adyen_adapter, "REPORT_CACHE_ROWS", 2)  # two empty files (one each)
    adapter = build(monotonic_func=Ticks())
    eu, us = day_routes(router), day_routes(router, DOWNLOAD_US)
    adapter.fetch_payment(PspRef(psp_reference="NOTYET"))  # EU's 04-30 and 04-29 kept
    adapter.fetch_payment(PspRef(psp_reference="NOTYET", merchant_account="AcmeShopUS"))  # US's push them out
    adapter.fetch_payment(PspRef(psp_reference="NOTYET"))
    assert (eu["2024_04_30"].call_count, eu["2024_04_29"].call_count) == (2, 2)
    adapter.fetch_payment(PspRef(psp_reference="NOTYET"))  # EU's kept again now
    assert (eu["2024_04_30"].call_count, eu["2024_04_29"].call_count) == (2, 2)
    assert (us["2024_04_30"].call_count, us["2024_04_29"].call_count) == (1, 1)


def test_fetch__threads_share_the_cache_safely(router: respx.MockRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's runner threads share one adapter: concurrent lookups, evictions included, answer as alone."""
    monkeypatch.setattr(adyen_adapter, "REPORT_CACHE_ROWS", 3)  # evictions all the time
    adapter = build(monotonic_func=Ticks())
    day_routes(router, d2024_04_30=report_file("2024_05_01"))
    day_routes(router, DOWNLOAD_US)
    answers: list[str | None] = []
    errors: list[BaseException] = []

    def look(n: int) -> None:
        try:
            for i in range(20):
                account = "AcmeShopUS" if (n + i) % 2 else None
                answers.append(adapter.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82",
                                                            merchant_account=account)).raw_status)
        except BaseException as exc:  # any failure of a thread fails the test below
            errors.append(exc)

    threads = [threading.Thread(target=look, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and len(answers) == 160
    assert sorted(set(answers), key=str) == [None, "SentForSettle"]  # US knows nothing of it, EU its latest row
    assert answers.count("SentForSettle") == 80


RECORD_TYPES = {
    "Received": Pending,
    "Authorised": Succeeded,
    "AuthorisedPending": Pending,
    "Refused": Failed,
    "Error": Failed,
    "Cancelled": Failed,
    "Expired": Failed,
    "CaptureFailed": Pending,
    "SentForSettle": Succeeded,
    "Settled": Succeeded,
    "SentForRefund": Succeeded,
    "Refunded": Succeeded,
    "RefundFailed": Succeeded,
    "RefundedReversed": Succeeded,
    "Chargeback": Succeeded,
    "ChargebackReversed": Succeeded,
    "SecondChargeback": Succeeded,
}


def test_wire__record_type_table_covers_every_enum_member() -> None:
    assert set(RECORD_TYPES) == {member.value for member in RecordType}


def _journal(*record_types: str) -> httpx.Response:
    return csv_report(*({"Booking Date": f"2024-05-02 09:{minute:02d}:00", "TimeZone": "CEST", "Record Type": kind}
                        for minute, kind in enumerate(record_types)))


@pytest.mark.parametrize(("record_type", "expected"), sorted(RECORD_TYPES.items()))
def test_wire__every_record_type_maps(
    adyen: AdyenAdapter, router: respx.MockRouter, record_type: str, expected: type
) -> None:
    router.get(url__startswith=DOWNLOAD).mock(return_value=_journal("Received", record_type))
    outcome = adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    assert type(outcome) is expected and outcome.raw_status == record_type


def test_wire__unrecognised_record_types_do_not_hide_a_known_one(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.get(url__startswith=DOWNLOAD).mock(return_value=_journal("Authorised", "FeeAdjustment"))
    assert adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82")).raw_status == "Authorised"
    router.get(url__startswith=DOWNLOAD).mock(return_value=_journal("FeeAdjustment"))
    outcome = adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    assert isinstance(outcome, Unknown) and outcome.raw_status == "FeeAdjustment"


@pytest.mark.parametrize(
    "text",
    [
        "Psp Reference,Record Type\nQFQTPCQ8HXSKGK82,Settled\n",
        "Psp Reference,Merchant Reference,Booking Date,TimeZone,Main Currency,Main Amount,Record Type\n"
        "QFQTPCQ8HXSKGK82,o,yesterday,CET,EUR,12.50,Settled\n",
        "Psp Reference,Merchant Reference,Booking Date,TimeZone,Main Currency,Main Amount,Record Type\n"
        "QFQTPCQ8HXSKGK82,o,2024-05-02 09:00:00,CET,EUR,12.505,Settled\n",
        "Psp Reference,Merchant Reference,Booking Date,TimeZone,Main Currency,Main Amount,Record Type\n"
        "QFQTPCQ8HXSKGK82,o,2024-05-02 09:00:00,XYZT,EUR,12.50,Settled\n",
    ],
    ids=["missing-columns", "bad-date", "finer-than-minor-unit", "unknown-zone"],
)
def test_wire__bad_report_is_protocol_error(adyen: AdyenAdapter, router: respx.MockRouter, text: str) -> None:
    router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(200, text=text))
    with pytest.raises(PspProtocolError):
        adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))


@pytest.mark.parametrize("status", [401, 500])
def test_fetch__report_errors_are_typed(adyen: AdyenAdapter, router: respx.MockRouter, status: int) -> None:
    router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(status, text="<html>no</html>"))
    with pytest.raises(PspAuthError if status == 401 else PspTransientError) as info:
        adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    assert info.value.saved is False  # a GET has no idempotency key whose answer Adyen could keep


def test_report__fixtures_follow_the_documented_columns() -> None:
    for path in sorted(FIXTURES.glob("*.csv")):
        header = path.read_text(encoding="utf-8").splitlines()[0].split(",")
        assert tuple(header) == report.REPORT_COLUMNS, path.name
    assert set(report.REQUIRED_COLUMNS) <= set(report.REPORT_COLUMNS)
    assert set(report.FEE_COLUMNS) <= set(report.REPORT_COLUMNS)


# --- TimeZone: "the time zone of the Booking Date column" (payment-accounting-report); abbreviations such as
# "BST, CET, CEST" (docs.adyen.com/reporting/settlement-detail-report)


@pytest.mark.parametrize(
    ("booked", "zone", "configured", "utc"),
    [
        ("2024-05-02 07:40:00", "CEST", "UTC", "2024-05-02 05:40"),
        ("2024-01-15 06:40:00", "CET", "UTC", "2024-01-15 05:40"),
        ("2024-07-15 06:40:00", "CET", "Europe/Amsterdam", "2024-07-15 05:40"),  # CET is +01:00, even in July
        ("2024-10-27 02:30:00", "CEST", "Europe/Amsterdam", "2024-10-27 00:30"),  # the repeated hour, 1st
        ("2024-10-27 02:30:00", "CET", "Europe/Amsterdam", "2024-10-27 01:30"),  # the repeated hour, 2nd
        ("2024-05-02 10:00:00", "EEST", "UTC", "2024-05-02 07:00"),
        ("2024-01-15 10:00:00", "EET", "UTC", "2024-01-15 08:00"),
        ("2024-05-02 10:00:00", "BST", "UTC", "2024-05-02 09:00"),
        ("2024-01-15 09:00:00", "CST", "America/Chicago", "2024-01-15 15:00"),  # ambiguous: the setting decides
        ("2024-01-15 09:00:00", "CST", "Asia/Shanghai", "2024-01-15 01:00"),
        ("2024-05-02 09:00:00", "UTC", "Europe/Amsterdam", "2024-05-02 09:00"),
        ("2024-05-02 09:00:00", "", "Europe/Amsterdam", "2024-05-02 07:00"),  # no column value: the setting
    ],
)
def test_report__booking_date_is_read_in_its_time_zone_column(
    booked: str, zone: str, configured: str, utc: str
) -> None:
    text = csv_report({"Booking Date": booked, "TimeZone": zone, "Record Type": "Settled"}).text
    [row] = report.parse_report(text, tz=ZoneInfo(configured))
    assert row.booked_at == datetime.strptime(utc, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


def test_report__without_a_timezone_column_the_configured_zone_applies() -> None:
    columns = tuple(c for c in report.REPORT_COLUMNS if c != "TimeZone")
    text = csv_report({"Booking Date": "2024-05-02 09:00:00", "Record Type": "Settled"}, columns=columns).text
    [row] = report.parse_report(text, tz=ZoneInfo("Europe/Amsterdam"))
    assert row.booked_at == datetime(2024, 5, 2, 7, 0, tzinfo=UTC)


def test_report__an_unplaceable_zone_names_the_setting_that_fixes_it() -> None:
    text = csv_report({"Booking Date": "2024-01-15 09:00:00", "TimeZone": "IST", "Record Type": "Settled"}).text
    with pytest.raises(PspProtocolError, match="RECON_ADYEN_REPORT_TIMEZONE"):
        report.parse_report(text, tz=ZoneInfo("UTC"))
    [row] = report.parse_report(text, tz=ZoneInfo("Asia/Kolkata"))
    assert row.booked_at == datetime(2024, 1, 15, 3, 30, tzinfo=UTC)


# --- settlements


def test_settlements__one_report_per_day_fetched_lazily_with_fees_on_settled_lines(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    first = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_01.csv").mock(
        return_value=report_file("2024_05_01")
    )
    second = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_02.csv").mock(
        return_value=report_file("2024_05_02")
    )
    lines = adyen.iter_settlements(datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 3, tzinfo=UTC))
    assert not first.called
    head = [next(lines), next(lines)]
    assert first.call_count == 1 and not second.called
    rest = list(lines)
    assert second.call_count == 1
    got = [(line.psp_reference, line.status, line.amount, line.currency, line.fee, line.net,
            line.settlement_currency) for line in head + rest]
    assert got == [
        ("V4HZ4RBFJGXXGN82", "failed", 1250, "EUR", None, None, None),
        ("K8TQ4RBFJGXXGN82", "succeeded", 1500, "JPY", 45, 1455, "JPY"),  # blended: Commission (SC)
        ("QFQTPCQ8HXSKGK82", "succeeded", 1250, "EUR", 29, 1221, "EUR"),  # IC++: markup + scheme + interchange
        ("K8TQ4RBFJGXXGN82", "refunded", 1500, "JPY", None, None, None),
    ]
    assert rest[0].settled_at == datetime(2024, 5, 2, 5, 40, tzinfo=UTC)  # 07:40 CEST


def test_settlements__rows_outside_the_window_are_left_out(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_02.csv").mock(
        return_value=report_file("2024_05_02")
    )
    since = datetime(2024, 5, 2, 6, 0, tzinfo=UTC)
    lines = list(adyen.iter_settlements(since, since + timedelta(hours=12)))
    assert [line.status for line in lines] == ["refunded"]


def test_settlements__days_are_the_accounts_and_the_window_is_compared_in_utc(router: respx.MockRouter) -> None:
    adapter = build(report_timezone="Europe/Amsterdam")
    late = csv_report({"Booking Date": "2024-05-02 01:30:00", "TimeZone": "CEST", "Record Type": "Settled"})
    may_1 = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_01.csv").mock(
        return_value=httpx.Response(404))
    may_2 = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_02.csv").mock(return_value=late)
    lines = list(adapter.iter_settlements(datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 2, tzinfo=UTC)))
    assert may_1.call_count == 1 and may_2.call_count == 1  # 2024-05-01 00:00Z .. 23:59Z spans two CEST days
    assert [line.settled_at for line in lines] == [datetime(2024, 5, 1, 23, 30, tzinfo=UTC)]


def test_settlements__every_given_account_plus_the_default_each_once(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    day = "payments_accounting_report_2024_05_02.csv"
    us = router.get(f"{DOWNLOAD_US}/{day}").mock(return_value=csv_report(
        {"Merchant Account": "AcmeShopUS", "Psp Reference": "USPAYMENT0000001", "Main Currency": "USD",
         "Booking Date": "2024-05-02 07:00:00", "TimeZone": "CEST", "Record Type": "Settled"}))
    eu = router.get(f"{DOWNLOAD}/{day}").mock(return_value=report_file("2024_05_02"))
    since = datetime(2024, 5, 2, 4, 0, tzinfo=UTC)
    lines = list(adyen.iter_settlements(since, since + timedelta(hours=4),
                                        merchant_accounts=["AcmeShopUS", "AcmeShopEU", "AcmeShopUS", "default", ""]))
    assert us.call_count == 1 and eu.call_count == 1
    assert [line.psp_reference for line in lines] == ["USPAYMENT0000001", "QFQTPCQ8HXSKGK82"]


def test_settlements__without_any_account_is_rejected_at_once(router: respx.MockRouter) -> None:
    adapter = build(merchant_account=None)
    with pytest.raises(PspRejectedError, match="merchant_account"):
        adapter.iter_settlements(datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 2, tzinfo=UTC))
    with pytest.raises(ValueError, match="aware"):
        adapter.iter_settlements(datetime(2024, 5, 1), datetime(2024, 5, 2, tzinfo=UTC))


def test_settlements__a_settled_row_without_fee_columns_has_no_fee() -> None:
    columns = (*report.REQUIRED_COLUMNS, "TimeZone")
    text = csv_report({"Booking Date": "2024-05-02 07:40:00", "TimeZone": "CEST", "Record Type": "Settled"},
                      columns=columns).text
    [row] = report.parse_report(text, tz=ZoneInfo("UTC"))
    line = wire.to_settlement_line(row, status="succeeded")
    assert (line.fee, line.net, line.settlement_currency) == (None, None, None)


# --- amounts: docs.adyen.com/development-resources/currency-codes


@pytest.mark.parametrize(
    ("currency", "iso_amount", "adyen_value"),
    [
        ("EUR", 1250, 1250),
        ("JPY", 500, 500),
        ("KWD", 5125, 5125),
        ("ISK", 5, 500),
        ("CLP", 990, 99000),
        ("IDR", 1500000, 15000),
    ],
)
def test_wire__amounts_follow_adyen_currency_table(
    adyen: AdyenAdapter, router: respx.MockRouter, currency: str, iso_amount: int, adyen_value: int
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        amount = json.loads(request.content)["amount"]
        return httpx.Response(200, json={"resultCode": "Authorised", "pspReference": "P", "amount": amount})

    route = router.post(f"{URL}/v72/payments").mock(side_effect=answer)
    outcome = create(adyen, ChargeRequest(**{**_fields(CHARGE), "amount": iso_amount, "currency": currency}))
    assert sent(route)["amount"]["value"] == adyen_value
    assert outcome.amount == iso_amount and outcome.currency == currency


def test_wire__idr_with_cents_is_rejected_before_sending(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    route = router.post(f"{URL}/v72/payments")
    with pytest.raises(PspRejectedError, match="amount"):
        create(adyen, ChargeRequest(**{**_fields(CHARGE), "amount": 150050, "currency": "IDR"}))
    assert not route.called


# --- what the adapter did not write checks both directions


@requires_specs
def test_fixtures__every_json_fixture_is_a_valid_adyen_document() -> None:
    paths = sorted(FIXTURES.glob("*.json"))
    assert paths
    for path in paths:
        doc = load(path.name)
        for version in adyen_schema.VERSIONS:
            if path.name.startswith("error_"):
                adyen_schema.validate_service_error(doc, version)
            else:
                adyen_schema.validate_payment_response(doc, version)


@requires_specs
def test_schema_transport__drives_the_real_adapter_and_checks_both_directions() -> None:
    answers = {"body": load("payment_authorised.json")}

    def server(request: httpx.Request) -> httpx.Response:
        if adyen_schema.is_payments_call(request):
            return httpx.Response(200, json=answers["body"])
        return httpx.Response(404)

    transport = adyen_schema.SchemaCheckingTransport(httpx.MockTransport(server))
    adapter = build(transport=transport)
    assert isinstance(create(adapter), Succeeded)
    assert transport.checked == 2
    assert adapter.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82")) == Pending(
        psp_reference="QFQTPCQ8HXSKGK82")  # report downloads pass through unchecked
    answers["body"] = {"resultCode": "Authorised", "amount": {"value": "12.50", "currency": "EUR"}}
    with pytest.raises(AssertionError, match="PaymentResponse"):
        create(adapter)
    adapter.close()


# --- secrets


def test_secrets__absent_from_errors_reprs_and_logs(router: respx.MockRouter, caplog: pytest.LogCaptureFixture) -> None:
    adapter = build(report_username=REPORT_USER, report_password=Secret(REPORT_PASSWORD))
    token = base64.b64encode(f"{REPORT_USER}:{REPORT_PASSWORD}".encode()).decode()
    answers: list[httpx.Response | Exception] = [
        httpx.Response(401, json=load("error_security.json")),
        httpx.Response(422, json={"status": 422, "errorCode": "901", "message": f"bad key {KEY}"}),
        httpx.Response(500, json=load("error_internal.json")),
        httpx.Response(500, json=load("error_configuration.json") | {"message": f"no {REPORT_PASSWORD}"}),
        httpx.ReadTimeout("slow"),
        httpx.ConnectError("refused"),
    ]
    router.post(f"{URL}/v72/payments").mock(side_effect=answers)
    router.get(url__startswith=DOWNLOAD).mock(
        return_value=httpx.Response(403, text=f"denied {REPORT_KEY} {REPORT_PASSWORD} {token}"))
    errors: list[PspError] = []
    with caplog.at_level(logging.DEBUG):
        for _ in answers:
            with pytest.raises(PspError) as info:
                create(adapter)
            errors.append(info.value)
        with pytest.raises(PspAuthError) as fetched:
            adapter.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
        errors.append(fetched.value)
    for error in errors:
        for secret in (KEY, REPORT_KEY, REPORT_PASSWORD, token):
            assert secret not in str(error) and secret not in repr(error)
    for secret in (KEY, REPORT_KEY, REPORT_PASSWORD, token):
        assert secret not in repr(adapter) and secret not in caplog.text
    adapter.close()
