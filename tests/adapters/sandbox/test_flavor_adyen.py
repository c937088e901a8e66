"""The sandbox's Adyen flavour over real HTTP on 127.0.0.1: Checkout v71 ``/payments`` and the Payment
accounting report.

Every request sent to ``/payments`` and every answer is validated against Adyen's own OpenAPI document for
Checkout v71 (``CheckoutService-v71.json``, JSON Schema 2020-12), read from ``<repo>/../shared/specs/`` at test
time: the tests skip, saying so, when it is absent.
"""

from __future__ import annotations

import csv
import io
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.adyen_report import COLUMNS
from psp_adapters.sandbox.records import sandbox_fee

KEY = "AQE_sandbox_key"
SPECS = Path(__file__).resolve().parents[3].parent / "shared" / "specs"
START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # 13:00 CET
SPEC_URI = "urn:adyen:checkout:v71"


class Clock:
    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture(scope="module")
def registry() -> Registry:
    path = SPECS / "adyen" / "CheckoutService-v71.json"
    if not path.exists():
        pytest.skip(f"Adyen's Checkout v71 OpenAPI document is absent ({path}); see shared/specs/README.md")
    resource = Resource.from_contents(json.loads(path.read_text()), default_specification=DRAFT202012)
    return Registry().with_resource(SPEC_URI, resource)


def schema(registry: Registry, name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"{SPEC_URI}#/components/schemas/{name}"}, registry=registry)


class Adyen:
    """A raw client of the flavour that checks every /payments request and answer against the v71 schema."""

    def __init__(self, http: httpx.Client, registry: Registry) -> None:
        self.http = http
        self.request_schema = schema(registry, "PaymentRequest")
        self.response_schema = schema(registry, "PaymentResponse")
        self.error_schema = schema(registry, "ServiceError")

    def body(self, **fields: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "amount": {"value": 1250, "currency": "EUR"},
            "merchantAccount": "AcmeEU",
            "paymentMethod": {"type": "scheme", "storedPaymentMethodId": "pm_card_visa"},
            "reference": "order-1",
            "returnUrl": "https://shop.example/return",
            "shopperReference": "shopper-1",
            "shopperInteraction": "ContAuth",
            "recurringProcessingModel": "UnscheduledCardOnFile",
        }
        body.update(fields)
        return {name: value for name, value in body.items() if value is not None}

    def pay(self, key: str | None = "k1", *, valid: bool = True, **fields: Any) -> httpx.Response:
        body = self.body(**fields)
        assert self.request_schema.is_valid(body) is valid, list(self.request_schema.iter_errors(body))[:3]
        response = self.http.post("/v71/payments", json=body, headers={"Idempotency-Key": key} if key else {})
        self.check(response)
        return response

    def check(self, response: httpx.Response) -> None:
        validator = self.response_schema if response.status_code == 200 else self.error_schema
        errors = list(validator.iter_errors(response.json()))
        assert not errors, errors[:3]

    def report(self, account: str, day: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(
            f"/reports/download/MerchantAccount/{account}/payments_accounting_report_{day}.csv", **kwargs
        )

    def rows(self, account: str, day: str) -> list[dict[str, str]]:
        response = self.report(account, day)
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("text/csv")
        reader = csv.DictReader(io.StringIO(response.text))
        assert tuple(reader.fieldnames or ()) == COLUMNS
        return list(reader)

    def faults(self, **faults: object) -> None:
        assert self.http.post("/_admin/faults", json=faults).status_code == 200

    def charges(self, key: str | None = None) -> dict[str, Any]:
        return dict(self.http.get("/_admin/charges", params={"idempotency_key": key} if key else {}).json())


@pytest.fixture
def clock() -> Clock:
    return Clock()


def start(tmp_path: Path, clock: Clock, **options: Any) -> SandboxServer:
    return SandboxServer(tmp_path / "adyen.db", flavor="adyen", api_key=KEY, now_func=clock, **options).start()


@pytest.fixture
def server(tmp_path: Path, clock: Clock) -> Iterator[SandboxServer]:
    srv = start(tmp_path, clock)
    yield srv
    srv.stop()


@pytest.fixture
def adyen(server: SandboxServer, registry: Registry) -> Iterator[Adyen]:
    with httpx.Client(base_url=server.url, timeout=5.0, headers={"X-API-Key": KEY}) as http:
        yield Adyen(http, registry)


# -- /payments -----------------------------------------------------------------------------------------------


def test_payments__authorised_answer_is_a_v71_payment_response(adyen: Adyen) -> None:
    response = adyen.pay("k1")

    assert response.status_code == 200 and response.headers["Idempotency-Key"] == "k1"
    doc = response.json()
    assert (doc["resultCode"], doc["merchantReference"], doc["amount"]) == (
        "Authorised",
        "order-1",
        {"currency": "EUR", "value": 1250},
    )
    assert len(doc["pspReference"]) == 16 and doc["pspReference"].isalnum()
    assert adyen.charges() == {"keys": 1, "charges": 1, "max_per_key": 1, "per_key": {"k1": 1}}


@pytest.mark.parametrize(
    ("field", "code"),
    [
        ("amount", "100"),
        ("merchantAccount", "702"),
        ("paymentMethod", "702"),
        ("reference", "130"),
        ("returnUrl", "14_030"),
    ],
)
def test_payments__a_missing_required_field_is_422_with_adyens_error_code(adyen: Adyen, field: str, code: str) -> None:
    response = adyen.pay("k1", valid=False, **{field: None})

    assert response.status_code == 422
    error = response.json()
    assert (error["status"], error["errorCode"], error["errorType"]) == (422, code, "validation")
    assert adyen.charges()["charges"] == 0
    assert adyen.pay("k1").json()["resultCode"] == "Authorised"  # nothing was saved under the key


@pytest.mark.parametrize("value", [2**63, 2**63 + 8, 10**30])
def test_payments__a_value_past_the_schemas_int64_is_422_137_and_charges_nothing(adyen: Adyen, value: int) -> None:
    body = adyen.body(amount={"currency": "EUR", "value": value})
    response = adyen.http.post("/v71/payments", json=body, headers={"Idempotency-Key": "k1"})

    assert response.status_code == 422  # was a 500: the ledger's SQLite column is 64 bits
    assert (response.json()["errorCode"], response.json()["errorType"]) == ("137", "validation")
    assert adyen.charges()["charges"] == 0


def test_payments__unreadable_json_is_400(adyen: Adyen) -> None:
    response = adyen.http.post("/v71/payments", content=b"{nope", headers={"Content-Type": "application/json"})

    assert response.status_code == 400
    adyen.check(response)
    assert response.json()["errorCode"] == "702"


@pytest.mark.parametrize(
    ("fields", "code", "reason"),
    [
        ({"paymentMethod": {"type": "scheme", "storedPaymentMethodId": "pm_card_declined"}}, "2", "Refused"),
        (
            {"paymentMethod": {"type": "scheme", "storedPaymentMethodId": "pm_card_insufficient_funds"}},
            "12",
            "Not enough balance",
        ),
    ],
)
def test_refusal__is_http_200_refused_with_the_reason(
    adyen: Adyen, fields: dict[str, Any], code: str, reason: str
) -> None:
    doc = adyen.pay("k1", **fields).json()

    assert (doc["resultCode"], doc["refusalReasonCode"], doc["refusalReason"]) == ("Refused", code, reason)
    assert "paymentMethod" not in doc


def test_requires_action__is_redirect_shopper_with_a_redirect_action(adyen: Adyen) -> None:
    adyen.faults(rate_requires_action=1.0)

    doc = adyen.pay("k1").json()

    assert doc["resultCode"] == "RedirectShopper"
    assert (doc["action"]["type"], doc["action"]["method"]) == ("redirect", "GET")
    assert doc["action"]["url"].startswith("http://127.0.0.1:")


def test_auth__x_api_key_is_required(adyen: Adyen) -> None:
    for headers in ({"X-API-Key": "wrong"}, {"X-API-Key": ""}):
        response = adyen.http.post("/v71/payments", json=adyen.body(), headers=headers)
        assert response.status_code == 401
        adyen.check(response)
        assert (response.json()["errorCode"], response.json()["errorType"]) == ("000", "security")
    assert adyen.charges()["charges"] == 0


@pytest.mark.parametrize(("field", "status"), [("rate_500", 500), ("rate_503", 503)])
def test_faults__server_errors_are_transient_internal_errors_and_save_nothing(
    adyen: Adyen, field: str, status: int
) -> None:
    adyen.faults(**{field: 1.0})
    response = adyen.pay("k1")
    assert (response.status_code, response.headers["Transient-Error"]) == (status, "true")
    assert response.json()["errorType"] == "internal"
    adyen.faults(**{field: 0.0})

    assert adyen.pay("k1").json()["resultCode"] == "Authorised"
    assert adyen.charges("k1")["charges"] == 1


def test_faults__429_is_in_adyens_error_shape_with_the_faults_retry_after(adyen: Adyen) -> None:
    adyen.faults(rate_429=1.0, retry_after_seconds=2)

    response = adyen.pay("k1")

    assert (response.status_code, response.headers["Retry-After"], response.json()["status"]) == (429, "2", 429)


# -- idempotency ---------------------------------------------------------------------------------------------


def test_idempotency__the_same_key_replays_the_first_answer_whatever_the_body(adyen: Adyen) -> None:
    first = adyen.pay("k1")
    again = adyen.pay("k1")
    other_body = adyen.pay("k1", amount={"value": 999, "currency": "EUR"}, reference="order-2")

    assert again.content == first.content == other_body.content  # Adyen documents no comparison of bodies
    assert again.headers["Idempotency-Key"] == "k1"
    assert adyen.charges("k1")["charges"] == 1


def test_idempotency__a_request_while_the_first_is_in_progress_is_422_704_transient(
    server: SandboxServer, adyen: Adyen
) -> None:
    adyen.faults(latency_ms=2500)  # the first request keeps the key in flight this long (loaded CI: be generous)
    results: dict[str, httpx.Response] = {}

    def first() -> None:
        with httpx.Client(base_url=server.url, timeout=5.0, headers={"X-API-Key": KEY}) as own:
            results["first"] = own.post("/v71/payments", json=adyen.body(), headers={"Idempotency-Key": "k1"})

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(0.6)
    second = adyen.pay("k1")
    thread.join()
    adyen.faults(latency_ms=0)

    assert (second.status_code, second.headers["Transient-Error"]) == (422, "true")
    assert (second.json()["errorCode"], second.json()["message"]) == ("704", "request already processed or in progress")
    assert results["first"].json()["resultCode"] == "Authorised"
    assert adyen.pay("k1").content == results["first"].content
    assert adyen.charges("k1")["charges"] == 1


def test_idempotency__keys_are_at_most_64_characters_and_kept_31_days(adyen: Adyen, clock: Clock) -> None:
    assert adyen.pay("k" * 65).status_code == 422
    first = adyen.pay("k" * 64)

    clock.advance(days=30)
    assert adyen.pay("k" * 64).content == first.content
    clock.advance(days=2)
    later = adyen.pay("k" * 64)

    assert later.json()["pspReference"] != first.json()["pspReference"]
    assert adyen.charges("k" * 64)["charges"] == 2


def test_idempotency__a_payment_without_a_key_simply_executes(adyen: Adyen) -> None:
    refs = {adyen.pay(None).json()["pspReference"] for _ in range(2)}

    assert len(refs) == 2 and adyen.charges()["without_key"] == 2


def test_restart__payments_keys_and_reports_survive(tmp_path: Path, clock: Clock, registry: Registry) -> None:
    server = start(tmp_path, clock)
    with httpx.Client(base_url=server.url, headers={"X-API-Key": KEY}) as http:
        first = Adyen(http, registry).pay("k1")
    server.stop()
    server = start(tmp_path, clock)
    try:
        with httpx.Client(base_url=server.url, headers={"X-API-Key": KEY}) as http:
            again = Adyen(http, registry)
            assert again.pay("k1").content == first.content
            assert [r["Record Type"] for r in again.rows("AcmeEU", "2026_03_02")] == [
                "Received",
                "Authorised",
                "SentForSettle",
                "Settled",
            ]
    finally:
        server.stop()


# -- the Payment accounting report ---------------------------------------------------------------------------


def test_report__one_journal_row_per_event_per_account_booked_in_cet(adyen: Adyen, clock: Clock) -> None:
    paid = adyen.pay("k1", amount={"value": 1000, "currency": "EUR"}).json()["pspReference"]
    clock.advance(minutes=5)
    declining = {"type": "scheme", "storedPaymentMethodId": "pm_card_declined"}
    refused = adyen.pay("k2", amount={"value": 1402, "currency": "EUR"}, reference="order-2", paymentMethod=declining)
    refused = refused.json()["pspReference"]
    adyen.pay("k3", merchantAccount="AcmeUS", reference="us-1", amount={"value": 500, "currency": "USD"})

    rows = adyen.rows("AcmeEU", "2026_03_02")

    assert [(r["Psp Reference"], r["Record Type"]) for r in rows] == [
        (paid, "Received"),
        (paid, "Authorised"),
        (paid, "SentForSettle"),
        (paid, "Settled"),
        (refused, "Received"),
        (refused, "Refused"),
    ]
    assert {r["Merchant Account"] for r in rows} == {"AcmeEU"}
    assert {(r["TimeZone"], r["Company Account"]) for r in rows} == {("CET", "SandboxCompany")}
    assert rows[0]["Booking Date"] == "2026-03-02 13:00:00" and rows[4]["Booking Date"] == "2026-03-02 13:05:00"
    settled = rows[3]
    fee = sandbox_fee(1000)
    assert (settled["Main Amount"], settled["Captured (PC)"], settled["Settlement Currency"]) == (
        "10.00",
        "-10.00",
        "EUR",
    )
    assert (settled["Payable (SC)"], settled["Commission (SC)"]) == (f"{(1000 - fee) / 100:.2f}", f"{fee / 100:.2f}")
    assert (rows[0]["Received (PC)"], rows[1]["Authorised (PC)"], rows[5]["Received (PC)"]) == (
        "10.00",
        "10.00",
        "-14.02",
    )
    assert [r["Merchant Reference"] for r in adyen.rows("AcmeUS", "2026_03_02")] == ["us-1"] * 4


def test_report__days_and_booking_dates_follow_the_timezone_column(tmp_path: Path, registry: Registry) -> None:
    clock = Clock(datetime(2026, 7, 1, 3, 30, tzinfo=UTC))  # 1 July 05:30 CEST; 30 June 23:30 in New York
    for zone, day, booked, abbreviation in (
        ("CET", "2026_07_01", "2026-07-01 05:30:00", "CEST"),
        ("America/New_York", "2026_06_30", "2026-06-30 23:30:00", "EDT"),
    ):
        server = SandboxServer(
            tmp_path / f"{zone.replace('/', '_')}.db", flavor="adyen", now_func=clock, report_timezone=zone
        ).start()
        try:
            with httpx.Client(base_url=server.url) as http:
                api = Adyen(http, registry)
                api.pay("k1")
                [received, *_] = api.rows("AcmeEU", day)
                assert (received["Booking Date"], received["TimeZone"]) == (booked, abbreviation)
                instant = datetime.strptime(received["Booking Date"], "%Y-%m-%d %H:%M:%S").replace(
                    tzinfo=ZoneInfo(zone)
                )
                assert instant == clock.now
                other_day = "2026_06_30" if day == "2026_07_01" else "2026_07_01"
                if other_day < day:
                    assert api.rows("AcmeEU", other_day) == []  # the UTC day is not the report day
        finally:
            server.stop()


def test_report__slow_settlement_is_received_then_settles_into_the_report(adyen: Adyen, clock: Clock) -> None:
    adyen.faults(pending_fraction=1.0, settle_after_seconds=600.0)
    doc = adyen.pay("k1").json()
    assert doc["resultCode"] == "Received"
    assert [r["Record Type"] for r in adyen.rows("AcmeEU", "2026_03_02")] == ["Received"]

    clock.advance(minutes=11)

    rows = adyen.rows("AcmeEU", "2026_03_02")
    assert [r["Record Type"] for r in rows] == ["Received", "Authorised", "SentForSettle", "Settled"]
    assert rows[-1]["Booking Date"] == "2026-03-02 13:10:00"


def test_report__refunds_and_chargebacks_are_journal_rows_of_their_day(adyen: Adyen, clock: Clock) -> None:
    refunded = adyen.pay("k1").json()["pspReference"]
    disputed = adyen.pay("k2", reference="order-2").json()["pspReference"]
    clock.advance(days=1)
    refund = adyen.http.post(f"/_admin/payments/{refunded}/refund", json={"amount": 250}).json()
    chargeback = adyen.http.post(f"/_admin/payments/{disputed}/dispute", json={}).json()

    rows = adyen.rows("AcmeEU", "2026_03_03")

    assert [(r["Psp Reference"], r["Record Type"], r["Main Amount"], r["Payable (SC)"]) for r in rows] == [
        (refunded, "SentForRefund", "2.50", ""),
        (refunded, "Refunded", "2.50", "-2.50"),
        (disputed, "Chargeback", "12.50", "-27.50"),  # the amount and the dispute fee
    ]
    assert (refund["paymentPspReference"], refund["status"]) == (refunded, "received")
    assert (chargeback["paymentPspReference"], chargeback["eventCode"]) == (disputed, "CHARGEBACK")
    assert len(adyen.rows("AcmeEU", "2026_03_02")) == 8  # the day before is unchanged


def test_report__unknown_account_and_future_day_are_404_an_empty_day_is_the_header(adyen: Adyen) -> None:
    adyen.pay("k1")

    assert adyen.report("Nobody", "2026_03_02").status_code == 404
    assert adyen.report("AcmeEU", "2026_03_03").status_code == 404  # not written yet
    assert adyen.rows("AcmeEU", "2026_03_01") == []
    assert adyen.report("AcmeEU", "2026_02_30").status_code == 404


def test_report__the_report_user_authenticates_by_basic_auth_or_its_own_api_key(
    tmp_path: Path, clock: Clock, registry: Registry
) -> None:
    server = start(
        tmp_path, clock, report_username="report@Company.Acme", report_password="s3cret", report_api_key="report_key"
    )
    try:
        with httpx.Client(base_url=server.url, headers={"X-API-Key": KEY}) as http:
            api = Adyen(http, registry)
            api.pay("k1")
            path = "/reports/download/MerchantAccount/AcmeEU/payments_accounting_report_2026_03_02.csv"
            assert http.get(path).status_code == 401  # the payments API key is not the report user
            with httpx.Client(base_url=server.url) as anonymous:
                assert anonymous.get(path).status_code == 401
                assert anonymous.get(path, auth=("report@Company.Acme", "wrong")).status_code == 401
                assert anonymous.get(path, auth=("report@Company.Acme", "s3cret")).status_code == 200
                assert anonymous.get(path, headers={"X-API-Key": "report_key"}).status_code == 200
    finally:
        server.stop()


def test_cli__psp_sandbox_offers_the_flavor_and_the_report_user() -> None:
    from recon.commands.psp import psp_sandbox

    result = CliRunner().invoke(psp_sandbox, ["--help"])  # the command alone: the group would configure logging

    assert result.exit_code == 0, result.output
    for option in (
        "--flavor",
        "--report-username",
        "--report-password",
        "--report-api-key",
        "--report-timezone",
        "--rate-requires-action",
    ):
        assert option in result.output
