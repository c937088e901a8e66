"""The Adyen adapter against recorded-style Checkout JSON and Payment accounting report CSV (respx)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from psp_adapters.adyen import AdyenAdapter
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
    ChargeRequest,
    Failed,
    PaymentOutcome,
    Pending,
    PspRef,
    Secret,
    Succeeded,
    Unknown,
)

KEY = "AQEyhmfxNotARealKeyButLooksLikeOne0000qwerty"
REPORT_KEY = "AQEyhmfxReportUserKeyNotReal0000asdfgh"
URL = "https://checkout.adyen.test"
REPORTS = "https://reports.adyen.test"
DOWNLOAD = f"{REPORTS}/reports/download/MerchantAccount/AcmeShopEU"
NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)
FIXTURES = Path(__file__).parent / "adyen" / "fixtures"
CHARGE = ChargeRequest(
    merchant_reference="order-2001", amount=1250, currency="EUR", payment_method="8415718415172200"
)


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def report(day: str) -> httpx.Response:
    return httpx.Response(
        200, text=(FIXTURES / f"payments_accounting_report_{day}.csv").read_text(encoding="utf-8")
    )


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


@pytest.fixture
def adyen() -> Any:
    adapter = build()
    yield adapter
    adapter.close()


def create(adapter: AdyenAdapter, request: ChargeRequest = CHARGE) -> Any:
    return adapter.create_payment(request, idempotency_key="idem-order-2001")


def test_create__posts_checkout_json_with_api_key_and_idempotency_key(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    route = router.post(f"{URL}/v71/payments").mock(
        return_value=httpx.Response(200, json=load("payment_authorised.json"))
    )
    outcome = create(adyen)
    sent = route.calls.last.request
    assert sent.headers["X-API-Key"] == KEY
    assert sent.headers["Idempotency-Key"] == "idem-order-2001"
    assert "Authorization" not in sent.headers
    body = json.loads(sent.content)
    assert body["amount"] == {"value": 1250, "currency": "EUR"}
    assert body["reference"] == "order-2001"
    assert body["merchantAccount"] == "AcmeShopEU"
    assert body["paymentMethod"] == {"type": "scheme", "storedPaymentMethodId": "8415718415172200"}
    assert outcome == Succeeded(
        psp_reference="QFQTPCQ8HXSKGK82",
        amount=1250,
        currency="EUR",
        raw_status="Authorised",
        merchant_reference="order-2001",
    )


def test_create__request_merchant_account_overrides_the_default(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    route = router.post(f"{URL}/v71/payments").mock(
        return_value=httpx.Response(200, json=load("payment_authorised.json"))
    )
    create(
        adyen, ChargeRequest(merchant_reference="r", amount=1, currency="EUR", merchant_account="AcmeShopUS")
    )
    assert json.loads(route.calls.last.request.content)["merchantAccount"] == "AcmeShopUS"


RESULT_CODES = {
    "Authorised": Succeeded,
    "PartiallyAuthorised": Pending,
    "Refused": Failed,
    "Error": Failed,
    "Cancelled": Failed,
    "Pending": Pending,
    "Received": Pending,
    "RedirectShopper": Pending,
    "IdentifyShopper": Pending,
    "ChallengeShopper": Pending,
    "PresentToShopper": Pending,
    "AuthenticationFinished": Pending,
    "AuthenticationNotRequired": Pending,
}


def test_wire__result_code_table_covers_every_enum_member() -> None:
    assert set(RESULT_CODES) == {member.value for member in ResultCode}


@pytest.mark.parametrize(("result_code", "expected"), sorted(RESULT_CODES.items()))
def test_wire__every_result_code_maps(
    adyen: AdyenAdapter, router: respx.MockRouter, result_code: str, expected: type
) -> None:
    body = load("payment_authorised.json")
    body["resultCode"] = result_code
    router.post(f"{URL}/v71/payments").mock(return_value=httpx.Response(200, json=body))
    outcome = create(adyen)
    assert type(outcome) is expected
    assert isinstance(outcome, PaymentOutcome) and outcome.raw_status == result_code


def test_create__refusal_is_failed_with_refusal_reason(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    router.post(f"{URL}/v71/payments").mock(
        return_value=httpx.Response(200, json=load("payment_refused.json"))
    )
    outcome = create(adyen)
    assert isinstance(outcome, Failed)
    assert outcome.reason == "Not enough balance"
    assert outcome.psp_reference == "V4HZ4RBFJGXXGN82"


def test_create__redirect_without_psp_reference_is_pending(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.post(f"{URL}/v71/payments").mock(
        return_value=httpx.Response(200, json=load("payment_redirect.json"))
    )
    assert create(adyen) == Pending(raw_status="RedirectShopper", merchant_reference="order-2003")


@pytest.mark.parametrize("result_code", ["Success", "SomethingNew"])
def test_wire__unrecognised_result_code_is_unknown(
    adyen: AdyenAdapter, router: respx.MockRouter, result_code: str
) -> None:
    body = load("payment_authorised.json")
    body["resultCode"] = result_code
    router.post(f"{URL}/v71/payments").mock(return_value=httpx.Response(200, json=body))
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
    router.post(f"{URL}/v71/payments").mock(return_value=httpx.Response(200, content=content))
    with pytest.raises(PspProtocolError):
        create(adyen)


def test_errors__422_validation_is_rejected(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    router.post(f"{URL}/v71/payments").mock(
        return_value=httpx.Response(422, json=load("error_validation.json"))
    )
    with pytest.raises(PspRejectedError) as info:
        create(adyen)
    assert info.value.code == "101" and "Invalid card number" in str(info.value)


@pytest.mark.parametrize("status", [401, 403])
def test_errors__401_and_403_are_auth_errors(
    adyen: AdyenAdapter, router: respx.MockRouter, status: int
) -> None:
    body = load("error_security.json") | {"status": status}
    router.post(f"{URL}/v71/payments").mock(return_value=httpx.Response(status, json=body))
    with pytest.raises(PspAuthError):
        create(adyen)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_errors__5xx_is_transient(adyen: AdyenAdapter, router: respx.MockRouter, status: int) -> None:
    router.post(f"{URL}/v71/payments").mock(
        return_value=httpx.Response(status, json=load("error_internal.json"))
    )
    with pytest.raises(PspTransientError) as info:
        create(adyen)
    assert info.value.status_code == status


def test_errors__429_is_rate_limited_with_retry_after(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    router.post(f"{URL}/v71/payments").mock(
        return_value=httpx.Response(429, json=load("error_rate_limited.json"), headers={"Retry-After": "12"})
    )
    with pytest.raises(PspRateLimited) as info:
        create(adyen)
    assert info.value.retry_after == 12.0


@pytest.mark.parametrize(
    ("status", "header", "hint"), [(409, "true", True), (422, "true", True), (409, None, None)]
)
def test_errors__704_same_key_in_flight_is_transient(
    adyen: AdyenAdapter, router: respx.MockRouter, status: int, header: str | None, hint: bool | None
) -> None:
    body = load("error_in_flight.json") | {"status": status}
    headers = {"Transient-Error": header} if header else {}
    router.post(f"{URL}/v71/payments").mock(return_value=httpx.Response(status, json=body, headers=headers))
    with pytest.raises(PspTransientError) as info:
        create(adyen)
    assert type(info.value) is PspTransientError
    assert info.value.code == "704" and info.value.status_code == status
    assert info.value.should_retry is hint


def test_transport__connect_timeout_is_transient_read_timeout_on_create_is_unknown(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.post(f"{URL}/v71/payments").mock(
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


def test_fetch__walks_reports_newest_first_and_stops_at_the_first_mention(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    today = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_02.csv").mock(
        return_value=report("2024_05_02")
    )
    older = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_01.csv").mock(
        return_value=report("2024_05_01")
    )
    outcome = adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    assert outcome == Succeeded(
        psp_reference="QFQTPCQ8HXSKGK82",
        merchant_reference="order-2001",
        amount=1250,
        currency="EUR",
        raw_status="Settled",
    )
    assert today.calls.last.request.headers["X-API-Key"] == REPORT_KEY
    assert not older.called


def test_fetch__skips_reports_not_generated_yet_and_finds_by_merchant_reference(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_02.csv").mock(return_value=httpx.Response(404))
    router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_01.csv").mock(
        return_value=report("2024_05_01")
    )
    outcome = adyen.fetch_payment(PspRef(merchant_reference="order-2002"))
    assert isinstance(outcome, Failed)
    assert outcome.psp_reference == "V4HZ4RBFJGXXGN82" and outcome.raw_status == "Refused"


def test_fetch__absent_from_every_report_is_pending_never_not_found(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    route = router.get(url__startswith=DOWNLOAD).mock(
        side_effect=[httpx.Response(404), report("2024_05_01"), report("2024_05_01"), httpx.Response(404)]
    )
    outcome = adyen.fetch_payment(PspRef(psp_reference="NOSUCHPAYMENT000", merchant_reference="order-9"))
    assert outcome == Pending(psp_reference="NOSUCHPAYMENT000", merchant_reference="order-9")
    assert route.call_count == 4  # today and lookback_days=3 days back


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


def _one_row_report(*record_types: str) -> httpx.Response:
    lines = ["Psp Reference,Merchant Reference,Booking Date,TimeZone,Main Currency,Main Amount,Record Type"]
    for minute, record_type in enumerate(record_types):
        lines.append(f"QFQTPCQ8HXSKGK82,order-2001,2024-05-02 09:{minute:02d}:00,UTC,EUR,12.50,{record_type}")
    return httpx.Response(200, text="\n".join(lines) + "\n")


@pytest.mark.parametrize(("record_type", "expected"), sorted(RECORD_TYPES.items()))
def test_wire__every_record_type_maps(
    adyen: AdyenAdapter, router: respx.MockRouter, record_type: str, expected: type
) -> None:
    router.get(url__startswith=DOWNLOAD).mock(return_value=_one_row_report("Received", record_type))
    outcome = adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    assert type(outcome) is expected and outcome.raw_status == record_type


def test_wire__unrecognised_record_types_do_not_hide_a_known_one(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.get(url__startswith=DOWNLOAD).mock(return_value=_one_row_report("Authorised", "FeeAdjustment"))
    assert adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82")).raw_status == "Authorised"
    router.get(url__startswith=DOWNLOAD).mock(return_value=_one_row_report("FeeAdjustment"))
    outcome = adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
    assert isinstance(outcome, Unknown) and outcome.raw_status == "FeeAdjustment"


@pytest.mark.parametrize(
    "text",
    [
        "Psp Reference,Record Type\nQFQTPCQ8HXSKGK82,Settled\n",
        "Psp Reference,Merchant Reference,Booking Date,Main Currency,Main Amount,Record Type\n"
        "QFQTPCQ8HXSKGK82,o,yesterday,EUR,12.50,Settled\n",
        "Psp Reference,Merchant Reference,Booking Date,Main Currency,Main Amount,Record Type\n"
        "QFQTPCQ8HXSKGK82,o,2024-05-02 09:00:00,EUR,12.505,Settled\n",
    ],
    ids=["missing-columns", "bad-date", "finer-than-minor-unit"],
)
def test_wire__bad_report_is_protocol_error(adyen: AdyenAdapter, router: respx.MockRouter, text: str) -> None:
    router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(200, text=text))
    with pytest.raises(PspProtocolError):
        adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))


@pytest.mark.parametrize("status", [401, 500])
def test_fetch__report_errors_are_typed(adyen: AdyenAdapter, router: respx.MockRouter, status: int) -> None:
    router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(status, text="<html>no</html>"))
    with pytest.raises(PspAuthError if status == 401 else PspTransientError):
        adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))


def test_settlements__one_report_per_day_fetched_lazily(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    first = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_01.csv").mock(
        return_value=report("2024_05_01")
    )
    second = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_02.csv").mock(
        return_value=report("2024_05_02")
    )
    lines = adyen.iter_settlements(datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 3, tzinfo=UTC))
    assert not first.called
    head = [next(lines), next(lines)]
    assert first.call_count == 1 and not second.called
    rest = list(lines)
    assert second.call_count == 1
    assert [(line.psp_reference, line.status, line.amount, line.currency) for line in head + rest] == [
        ("V4HZ4RBFJGXXGN82", "failed", 1250, "EUR"),
        ("K8TQ4RBFJGXXGN82", "succeeded", 1500, "JPY"),
        ("QFQTPCQ8HXSKGK82", "succeeded", 1250, "EUR"),
        ("K8TQ4RBFJGXXGN82", "refunded", 1500, "JPY"),
    ]
    assert rest[0].settled_at == datetime(2024, 5, 2, 5, 40, tzinfo=UTC)


def test_settlements__rows_outside_the_window_are_left_out(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_02.csv").mock(
        return_value=report("2024_05_02")
    )
    since = datetime(2024, 5, 2, 6, 0, tzinfo=UTC)
    lines = list(adyen.iter_settlements(since, since + timedelta(hours=12)))
    assert [line.status for line in lines] == ["refunded"]


def test_settlements__report_time_zone_sets_day_boundaries(router: respx.MockRouter) -> None:
    adapter = build(report_timezone="Europe/Amsterdam")
    route = router.get(f"{DOWNLOAD}/payments_accounting_report_2024_05_02.csv").mock(
        return_value=report("2024_05_02")
    )
    since = datetime(2024, 5, 1, 22, 0, tzinfo=UTC)  # 2024-05-02 00:00 in Amsterdam (CEST)
    lines = list(adapter.iter_settlements(since, since + timedelta(days=1)))
    assert route.call_count == 1
    assert lines[0].settled_at == datetime(2024, 5, 2, 3, 40, tzinfo=UTC)  # 05:40 CEST


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

    route = router.post(f"{URL}/v71/payments").mock(side_effect=answer)
    outcome = create(adyen, ChargeRequest(merchant_reference="r", amount=iso_amount, currency=currency))
    assert json.loads(route.calls.last.request.content)["amount"]["value"] == adyen_value
    assert outcome.amount == iso_amount and outcome.currency == currency


def test_wire__idr_with_cents_is_rejected_before_sending(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    route = router.post(f"{URL}/v71/payments")
    with pytest.raises(PspRejectedError):
        create(adyen, ChargeRequest(merchant_reference="r", amount=150050, currency="IDR"))
    assert not route.called


def test_construct__settings_are_validated() -> None:
    with pytest.raises(ValueError, match="merchant_account"):
        build(merchant_account="")
    with pytest.raises(ValueError, match="api_key"):
        build(api_key=Secret(""))


def test_secrets__absent_from_errors_reprs_and_logs(
    adyen: AdyenAdapter, router: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    answers: list[httpx.Response | Exception] = [
        httpx.Response(401, json=load("error_security.json")),
        httpx.Response(422, json={"status": 422, "errorCode": "901", "message": f"bad key {KEY}"}),
        httpx.Response(500, json=load("error_internal.json")),
        httpx.ReadTimeout("slow"),
        httpx.ConnectError("refused"),
    ]
    router.post(f"{URL}/v71/payments").mock(side_effect=answers)
    router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(403, text=f"denied {REPORT_KEY}"))
    errors: list[PspError] = []
    with caplog.at_level(logging.DEBUG):
        for _ in answers:
            with pytest.raises(PspError) as info:
                create(adyen)
            errors.append(info.value)
        with pytest.raises(PspAuthError) as fetched:
            adyen.fetch_payment(PspRef(psp_reference="QFQTPCQ8HXSKGK82"))
        errors.append(fetched.value)
    for error in errors:
        for secret in (KEY, REPORT_KEY):
            assert secret not in str(error) and secret not in repr(error)
    assert KEY not in repr(adyen) and REPORT_KEY not in repr(adyen)
    assert KEY not in caplog.text and REPORT_KEY not in caplog.text
