"""The Adyen flavour driven by Adyen's official Python library (``Adyen`` 16), Checkout v71 and v72 side by side,
every request and answer validated against that version's OpenAPI document (``adyen_checks``), every webhook
against Webhooks-v1.json and Adyen's HMAC helper (``Adyen.util.is_valid_hmac_notification``).

What is checked: ``/payments`` (automatic and manual capture), ``/payments/details`` after a RedirectShopper,
``/paymentMethods`` with a shopper's stored cards, and the modifications (docs.adyen.com/online-payments/
modify-payments): captures, cancels, refunds and reversals answered ``received`` (201) and decided later, each
told by its webhook (CAPTURE, CANCELLATION, REFUND, CANCEL_OR_REFUND, REFUND_FAILED, EXPIRE; ``success: false`` with
a reason when Adyen could not do it), and what the Payment accounting report books for them.
"""

from __future__ import annotations

import copy
import csv
import io
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import Adyen
import httpx
import pytest
from Adyen.util import is_valid_hmac_notification

from psp_adapters.protocol import Secret
from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.records import sandbox_fee
from psp_adapters.sandbox.webhooks import WebhookConfig
from tests.adapters import adyen_schema
from tests.adapters.sandbox.adyen_checks import Checks, library
from tests.adapters.sandbox.test_flavor_adyen import START, Clock
from tests.adapters.sandbox.webhook_receiver import Delivery, Receiver, receiving

pytestmark = [adyen_schema.requires_specs, adyen_schema.requires_webhook_specs]

KEY = "AQE_sdk_key"
HMAC_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
ACCOUNT = "AcmeEU"
VERSIONS = ("v71", "v72")
CET = ZoneInfo("CET")  # the sandbox's default report time zone


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving((200, b"[accepted]")) as r:
        yield r


@pytest.fixture
def server(clock: Clock, receiver: Receiver) -> Iterator[SandboxServer]:
    hooks = WebhookConfig(url=receiver.url, secret=Secret(HMAC_KEY), backoff_seconds=0.05)
    with SandboxServer(flavor="adyen", api_key=KEY, now_func=clock, webhooks=hooks) as srv:
        yield srv


@pytest.fixture
def checks() -> Checks:
    return Checks()


@pytest.fixture(params=VERSIONS)
def adyen(request: pytest.FixtureRequest, server: SandboxServer, checks: Checks) -> Adyen.Adyen:
    return library(server.url, KEY, request.param, checks)


def payment(reference: str = "order-1", *, value: int = 1250, method: str = "pm_card_visa",
            manual: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "amount": {"value": value, "currency": "EUR"}, "merchantAccount": ACCOUNT, "reference": reference,
        "paymentMethod": {"type": "scheme", "storedPaymentMethodId": method}, "shopperReference": "shopper-1",
        "shopperInteraction": "ContAuth", "recurringProcessingModel": "UnscheduledCardOnFile",
        "returnUrl": "https://shop.example/return",
    }
    if manual:
        body["additionalData"] = {"manualCapture": "true"}
    return body


def item(delivery: Delivery) -> dict[str, Any]:
    """The delivery's NotificationRequestItem, after Adyen's schema and HMAC helper accepted it."""
    body = delivery.json()
    adyen_schema.validate_webhook(body)
    found: dict[str, Any] = body["notificationItems"][0]["NotificationRequestItem"]
    assert is_valid_hmac_notification(copy.deepcopy(body), HMAC_KEY), found
    return found


def events(receiver: Receiver, count: int) -> list[tuple[str, str, str]]:
    """(eventCode, success, pspReference) of the first ``count`` deliveries that are not REPORT_AVAILABLE."""
    found: list[tuple[str, str, str]] = []
    for n in range(count, 4 * count + 4):
        found = [(i["eventCode"], i["success"], i["pspReference"]) for i in map(item, receiver.wait_for(n))
                 if i["eventCode"] != "REPORT_AVAILABLE"]
        if len(found) >= count:
            return found[:count]
    return found


def report_rows(server: SandboxServer, reference: str, day: datetime = START) -> list[tuple[str, str]]:
    """(Record Type, Main Amount) of a payment's rows in the account's report of ``day`` (CET)."""
    name = f"payments_accounting_report_{day.astimezone(CET):%Y_%m_%d}.csv"
    text = httpx.get(f"{server.url}/reports/download/MerchantAccount/{ACCOUNT}/{name}", timeout=5).text
    return [(row["Record Type"], row["Main Amount"]) for row in csv.DictReader(io.StringIO(text))
            if row["Psp Reference"] == reference]


# -- /payments, v71 and v72 side by side ------------------------------------------------------------------------


def test_payments__v71_and_v72_side_by_side_with_the_librarys_idempotency_key(
    server: SandboxServer, checks: Checks
) -> None:
    results = {}
    for version in VERSIONS:
        adyen = library(server.url, KEY, version, checks)
        first = adyen.checkout.payments_api.payments(payment(f"order-{version}"), idempotency_key=f"key-{version}")
        replay = adyen.checkout.payments_api.payments(payment(f"order-{version}"), idempotency_key=f"key-{version}")
        assert (first.status_code, first.message["resultCode"]) == (200, "Authorised")
        assert replay.message == first.message  # the key's first answer, again
        results[version] = first.psp

    assert results["v71"] != results["v72"] and checks.requests == 4 and checks.answers == [200] * 4
    counts = httpx.get(f"{server.url}/_admin/charges", timeout=5).json()
    assert counts["per_key"] == {"key-v71": 1, "key-v72": 1}
    unchecked = library(server.url, KEY, check_requests=False)  # the schema refuses it before the sandbox does
    with pytest.raises(Adyen.AdyenAPIUnprocessableEntity) as refused:
        unchecked.checkout.payments_api.payments({**payment(), "returnUrl": "https://x.test/" + "r" * 1020})
    assert refused.value.error_code == "702"  # v72's returnUrl bound (1,024); v71 takes it
    assert library(server.url, KEY, "v71").checkout.payments_api.payments(
        {**payment("order-long"), "returnUrl": "https://x.test/" + "r" * 1020}).message["resultCode"] == "Authorised"


def test_payments__a_wrong_key_is_401_for_the_library(server: SandboxServer) -> None:
    with pytest.raises(Adyen.AdyenAPIAuthenticationError):
        library(server.url, "AQE_wrong").checkout.payments_api.payments(payment())


def test_payment_methods__cards_and_the_shoppers_stored_cards(adyen: Adyen.Adyen) -> None:
    adyen.checkout.payments_api.payments(payment(method="pm_card_mastercard"))
    adyen.checkout.payments_api.payments(payment("order-2", method="pm_card_mastercard"))

    found = adyen.checkout.payments_api.payment_methods({"merchantAccount": ACCOUNT, "shopperReference": "shopper-1"})
    anyone = adyen.checkout.payments_api.payment_methods({"merchantAccount": ACCOUNT, "countryCode": "NL"})

    assert [m["type"] for m in found.message["paymentMethods"]] == ["scheme"]
    [stored] = found.message["storedPaymentMethods"]
    assert (stored["id"], stored["brand"], stored["lastFour"]) == ("pm_card_mastercard", "mc", "4444")
    assert "ContAuth" in stored["supportedShopperInteractions"]
    assert anyone.message["storedPaymentMethods"] == []
    unchecked = library(adyen.checkout.payments_api.baseUrl.rsplit("/", 1)[0], KEY, check_requests=False)
    with pytest.raises(Adyen.AdyenAPIUnprocessableEntity):
        unchecked.checkout.payments_api.payment_methods({"countryCode": "NL"})  # no merchantAccount


def test_payments_details__a_redirect_completed_is_authorised_and_told(
    adyen: Adyen.Adyen, receiver: Receiver
) -> None:
    waiting = adyen.checkout.payments_api.payments(payment(method="pm_card_threeDSecure2Required")).message
    assert waiting["resultCode"] == "RedirectShopper"
    md = waiting["action"]["url"].rsplit("MD=", 1)[1]  # what the shopper's browser brings back

    done = adyen.checkout.payments_api.payments_details({"details": {"redirectResult": md}})

    assert (done.message["resultCode"], done.message["pspReference"]) == ("Authorised", waiting["pspReference"])
    assert events(receiver, 1) == [("AUTHORISATION", "true", waiting["pspReference"])]
    with pytest.raises(Adyen.AdyenAPIUnprocessableEntity):
        adyen.checkout.payments_api.payments_details({"details": {"redirectResult": "not-one-of-ours"}})


# -- modifications ------------------------------------------------------------------------------------------


def test_capture__received_then_captured_and_booked(
    adyen: Adyen.Adyen, server: SandboxServer, receiver: Receiver
) -> None:
    authorised = adyen.checkout.payments_api.payments(payment(manual=True))
    psp = authorised.message["pspReference"]
    assert report_rows(server, psp) == [("Received", "12.50"), ("Authorised", "12.50")]

    capture = adyen.checkout.modifications_api.capture_authorised_payment(
        {"merchantAccount": ACCOUNT, "amount": {"value": 1000, "currency": "EUR"}, "reference": "cap-1"}, psp)

    assert capture.status_code == 201
    assert (capture.message["status"], capture.message["paymentPspReference"], capture.message["reference"]) == (
        "received", psp, "cap-1")
    assert events(receiver, 2) == [("AUTHORISATION", "true", psp), ("CAPTURE", "true", capture.message["pspReference"])]
    rows = report_rows(server, psp)
    assert rows[2:] == [("SentForSettle", "10.00"), ("Settled", "10.00")]  # a partial capture
    settled = [r for r in csv.DictReader(io.StringIO(httpx.get(
        f"{server.url}/reports/download/MerchantAccount/{ACCOUNT}/payments_accounting_report_{START:%Y_%m_%d}.csv",
        timeout=5).text)) if r["Record Type"] == "Settled"]
    assert settled[0]["Commission (SC)"] == f"{sandbox_fee(1000) / 100:.2f}"


def test_cancel_and_refund__each_its_webhook_and_its_report_row(
    adyen: Adyen.Adyen, server: SandboxServer, receiver: Receiver
) -> None:
    authorised = adyen.checkout.payments_api.payments(payment("order-auth", manual=True)).message["pspReference"]
    captured = adyen.checkout.payments_api.payments(payment("order-paid")).message["pspReference"]
    modifications = adyen.checkout.modifications_api

    cancel = modifications.cancel_authorised_payment_by_psp_reference({"merchantAccount": ACCOUNT}, authorised)
    refund = modifications.refund_captured_payment(
        {"merchantAccount": ACCOUNT, "amount": {"value": 250, "currency": "EUR"}, "merchantRefundReason": "RETURN"},
        captured)

    assert (cancel.status_code, refund.status_code) == (201, 201)
    assert refund.message["merchantRefundReason"] == "RETURN"
    told = events(receiver, 4)
    assert told[2:] == [("CANCELLATION", "true", cancel.message["pspReference"]),
                        ("REFUND", "true", refund.message["pspReference"])]
    assert report_rows(server, authorised)[-1] == ("Cancelled", "12.50")
    assert report_rows(server, captured)[-2:] == [("SentForRefund", "2.50"), ("Refunded", "2.50")]


def test_reversal__cancels_an_authorisation_and_refunds_a_capture(adyen: Adyen.Adyen, receiver: Receiver) -> None:
    authorised = adyen.checkout.payments_api.payments(payment("order-a", manual=True)).message["pspReference"]
    captured = adyen.checkout.payments_api.payments(payment("order-c")).message["pspReference"]
    reverse = adyen.checkout.modifications_api.refund_or_cancel_payment

    first = reverse({"merchantAccount": ACCOUNT}, authorised).message["pspReference"]
    second = reverse({"merchantAccount": ACCOUNT}, captured).message["pspReference"]

    told = [item(d) for d in receiver.wait_for(5) if item(d)["eventCode"] == "CANCEL_OR_REFUND"]
    assert [(i["pspReference"], i["originalReference"], i["additionalData"]["modification.action"])
            for i in told] == [(first, authorised, "cancel"), (second, captured, "refund")]


@pytest.mark.parametrize(
    ("kind", "body", "reason"),
    [
        ("captures", {"amount": {"value": 1250, "currency": "EUR"}}, "Transaction has already been captured"),
        ("cancels", {}, "Transaction has already been captured"),
        ("refunds", {"amount": {"value": 2000, "currency": "EUR"}}, "Insufficient balance on payment"),
        ("refunds", {"amount": {"value": 100, "currency": "USD"}}, "Modification in different currency"),
    ],
)
def test_modifications__what_adyen_cannot_do_is_received_then_told_success_false(
    server: SandboxServer, receiver: Receiver, kind: str, body: dict[str, Any], reason: str
) -> None:
    adyen = library(server.url, KEY)
    psp = adyen.checkout.payments_api.payments(payment()).message["pspReference"]
    url = f"{server.url}/v72/payments/{psp}/{kind}"

    answer = httpx.post(url, json={"merchantAccount": ACCOUNT, **body}, headers={"X-API-Key": KEY}, timeout=5)

    assert (answer.status_code, answer.json()["status"]) == (201, "received")
    told = [item(d) for d in receiver.wait_for(3) if item(d)["eventCode"] not in ("AUTHORISATION", "REPORT_AVAILABLE")]
    assert (told[0]["success"], told[0]["originalReference"]) == ("false", psp)
    assert told[0]["reason"].startswith(reason)


def test_modifications__an_unknown_payment_or_another_account_is_422(server: SandboxServer) -> None:
    adyen = library(server.url, KEY, check_requests=False)  # one request lacks what the schema requires, on purpose
    psp = adyen.checkout.payments_api.payments(payment()).message["pspReference"]
    refunds = adyen.checkout.modifications_api.refund_captured_payment
    amount = {"value": 100, "currency": "EUR"}
    with pytest.raises(Adyen.AdyenAPIUnprocessableEntity) as unknown:
        refunds({"merchantAccount": ACCOUNT, "amount": amount}, "ZZZZZZZZZZZZZZZZ")
    assert unknown.value.error_code == "167"
    with pytest.raises(Adyen.AdyenAPIUnprocessableEntity) as other:
        refunds({"merchantAccount": "SomeoneElse", "amount": amount}, psp)
    assert other.value.error_code == "901"
    with pytest.raises(Adyen.AdyenAPIUnprocessableEntity) as no_amount:
        refunds({"merchantAccount": ACCOUNT}, psp)
    assert no_amount.value.error_code == "100"


def test_modifications__processed_after_the_delay_and_a_refund_may_fail_later(
    server: SandboxServer, receiver: Receiver, clock: Clock
) -> None:
    httpx.post(f"{server.url}/_admin/faults", json={"modification_delay_seconds": 30, "settle_after_seconds": 60},
               headers={"X-API-Key": KEY}, timeout=5).raise_for_status()
    adyen = library(server.url, KEY)
    psp = adyen.checkout.payments_api.payments(payment(method="pm_card_refundFail")).message["pspReference"]
    refund = adyen.checkout.modifications_api.refund_captured_payment(
        {"merchantAccount": ACCOUNT, "amount": {"value": 1250, "currency": "EUR"}}, psp).message["pspReference"]
    assert [i[0] for i in events(receiver, 1)] == ["AUTHORISATION"]
    assert len([d for d in receiver.quiet(0.3) if item(d)["eventCode"] == "REFUND"]) == 0  # not due yet

    clock.advance(seconds=31)
    assert events(receiver, 2)[1] == ("REFUND", "true", refund)
    clock.advance(seconds=60)

    assert events(receiver, 3)[2] == ("REFUND_FAILED", "true", refund)
    assert report_rows(server, psp)[-1] == ("RefundFailed", "12.50")


def test_expiry__an_authorisation_never_captured_expires_after_28_days(
    server: SandboxServer, receiver: Receiver, clock: Clock
) -> None:
    adyen = library(server.url, KEY)
    psp = adyen.checkout.payments_api.payments(payment(manual=True)).message["pspReference"]
    clock.advance(days=28, seconds=1)

    assert [e[0] for e in events(receiver, 2)] == ["AUTHORISATION", "EXPIRE"]
    assert report_rows(server, psp, clock.now) == [("Expired", "12.50")]  # booked the day it expired


def test_modifications__the_same_idempotency_key_receives_once(
    adyen: Adyen.Adyen, server: SandboxServer, receiver: Receiver
) -> None:
    psp = adyen.checkout.payments_api.payments(payment()).message["pspReference"]
    body = {"merchantAccount": ACCOUNT, "amount": {"value": 300, "currency": "EUR"}}
    first = adyen.checkout.modifications_api.refund_captured_payment(body, psp, idempotency_key="refund-1")
    again = adyen.checkout.modifications_api.refund_captured_payment(body, psp, idempotency_key="refund-1")

    assert again.message == first.message  # the first answer, replayed: one refund
    told = [e for e in events(receiver, 2) if e[0] == "REFUND"]
    assert told == [("REFUND", "true", first.message["pspReference"])]
    assert report_rows(server, psp)[-1] == ("Refunded", "3.00") and len(report_rows(server, psp)) == 6
