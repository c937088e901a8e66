"""The Adyen flavour's webhooks, checked against Adyen's own Python library (the oracle we did not write:
``Adyen.util.is_valid_hmac_notification``) and Adyen's Webhooks-v1 OpenAPI document (read from
``<repo>/../shared/specs/adyen/`` at test time, through ``tests/adapters/adyen_schema.py``).
"""

from __future__ import annotations

import base64
import copy
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from Adyen.util import is_valid_hmac_notification

from psp_adapters.protocol import Secret
from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.webhooks import WebhookConfig
from tests.adapters import adyen_schema
from tests.adapters.sandbox.webhook_receiver import Delivery, Receiver, receiving

pytestmark = adyen_schema.requires_webhook_specs

KEY = "AQE_sandbox_key"
HMAC_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
USER, PASSWORD = "ws_webhooks@Company.Acme", "hook-pass"
START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # 13:00 CET
ACCEPTED = (200, b"[accepted]")
DAY_REPORT = "payments_accounting_report_2026_03_02.csv"


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving(ACCEPTED) as r:
        yield r


@pytest.fixture
def server(tmp_path: Path, clock: Clock, receiver: Receiver) -> Iterator[SandboxServer]:
    hooks = WebhookConfig(
        url=receiver.url, secret=Secret(HMAC_KEY), username=USER, password=Secret(PASSWORD), backoff_seconds=0.05
    )
    with SandboxServer(tmp_path / "a.db", flavor="adyen", api_key=KEY, now_func=clock, webhooks=hooks) as srv:
        yield srv


@pytest.fixture
def http(server: SandboxServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=5.0, headers={"X-API-Key": KEY}) as c:
        yield c


def pay(http: httpx.Client, reference: str = "order-1", *, value: int = 1250, method: str = "pm_card_visa") -> str:
    body = {
        "amount": {"value": value, "currency": "EUR"},
        "merchantAccount": "AcmeEU",
        "paymentMethod": {"type": "scheme", "storedPaymentMethodId": method},
        "reference": reference,
        "returnUrl": "https://shop.example/return",
        "shopperReference": "shopper-1",
        "shopperInteraction": "ContAuth",
    }
    answer = http.post("/v71/payments", json=body, headers={"Idempotency-Key": reference})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["pspReference"])


def item(delivery: Delivery) -> dict[str, Any]:
    """The delivery's one NotificationRequestItem, after every check Adyen's documents and library make."""
    body = delivery.json()
    assert adyen_schema.validate_webhook(body).endswith("NotificationRequest")
    assert body["live"] == "false" and len(body["notificationItems"]) == 1
    found: dict[str, Any] = body["notificationItems"][0]["NotificationRequestItem"]
    assert is_valid_hmac_notification(copy.deepcopy(found), HMAC_KEY), found
    assert is_valid_hmac_notification(copy.deepcopy(body), HMAC_KEY)  # the whole notification, as the library takes it
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert delivery.headers["Authorization"] == expected
    return found


def codes(deliveries: list[Delivery]) -> list[tuple[str, str]]:
    return [(item(d)["eventCode"], item(d)["success"]) for d in deliveries]


def test_authorised__authorisation_then_the_days_report_available(
    http: httpx.Client, server: SandboxServer, receiver: Receiver
) -> None:
    ref = pay(http)

    auth, report = (item(d) for d in receiver.wait_for(2))
    assert {k: v for k, v in auth.items() if k != "additionalData"} == {
        "amount": {"currency": "EUR", "value": 1250},
        "eventCode": "AUTHORISATION",
        "eventDate": "2026-03-02T13:00:00+01:00",
        "merchantAccountCode": "AcmeEU",
        "merchantReference": "order-1",
        "paymentMethod": "visa",
        "pspReference": ref,
        "success": "true",
    }
    name = "payments_accounting_report_2026_03_02.csv"
    assert (report["eventCode"], report["pspReference"], report["success"]) == ("REPORT_AVAILABLE", name, "true")
    assert report["reason"] == f"{server.url}/reports/download/MerchantAccount/AcmeEU/{name}"
    download = httpx.get(report["reason"], timeout=5.0)  # no report user configured: open
    assert download.status_code == 200 and ref in download.text
    pay(http, "order-2")
    assert codes(receiver.quiet(0.3)[2:]) == [("AUTHORISATION", "true")]  # the day was announced already


def test_refused_and_redirect__authorisation_false_with_the_reason_and_nothing_for_a_redirect(
    http: httpx.Client, receiver: Receiver
) -> None:
    pay(http, "order-3ds", method="pm_requires_action")  # RedirectShopper: the shopper never comes back
    refused = pay(http, "order-1", method="pm_card_declined")

    first = item(receiver.wait_for(1)[0])
    assert (first["pspReference"], first["eventCode"], first["success"]) == (refused, "AUTHORISATION", "false")
    assert first["reason"] == "Refused"
    assert [item(d)["eventCode"] for d in receiver.quiet(0.3)] == ["AUTHORISATION", "REPORT_AVAILABLE"]


def test_pending__nothing_while_received_then_authorisation_when_it_settles(
    http: httpx.Client, clock: Clock, receiver: Receiver
) -> None:
    ref = pay(http, method="pm_pending")
    assert receiver.quiet(0.3) == []

    clock.now += timedelta(seconds=6)

    auth = item(receiver.wait_for(1)[0])
    assert (auth["pspReference"], auth["eventCode"], auth["success"]) == (ref, "AUTHORISATION", "true")
    assert auth["eventDate"] == "2026-03-02T13:00:05+01:00"  # when it settled


def test_modifications__refund_chargeback_cancellation_have_their_own_reference_and_the_original(
    http: httpx.Client, receiver: Receiver
) -> None:
    refunded, disputed = pay(http, "order-1"), pay(http, "order-2")
    pending = pay(http, "order-3", method="pm_pending")
    receiver.wait_for(3)
    refund = http.post(f"/_admin/payments/{refunded}/refund", json={"amount": 400}).json()
    dispute = http.post(f"/_admin/payments/{disputed}/dispute", json={}).json()
    assert http.post(f"/_admin/payments/{pending}/cancel", json={}).status_code == 200

    found = [item(d) for d in receiver.wait_for(6)[3:]]

    assert [(i["eventCode"], i["success"]) for i in found] == [
        ("REFUND", "true"),
        ("CHARGEBACK", "true"),
        ("CANCELLATION", "true"),
    ]
    assert [i["originalReference"] for i in found] == [refunded, disputed, pending]
    assert (found[0]["pspReference"], found[0]["amount"]) == (refund["pspReference"], {"currency": "EUR", "value": 400})
    assert (found[1]["pspReference"], found[1]["reason"]) == (dispute["pspReference"], "general")
    assert found[2]["pspReference"] not in (pending, refunded, disputed) and len(found[2]["pspReference"]) == 16


def test_hmac__a_tampered_amount_or_another_key_is_rejected_by_adyens_library(
    http: httpx.Client, receiver: Receiver
) -> None:
    pay(http)
    good = item(receiver.wait_for(1)[0])

    tampered = copy.deepcopy(good)
    tampered["amount"]["value"] = 1
    assert not is_valid_hmac_notification(tampered, HMAC_KEY)
    assert not is_valid_hmac_notification(copy.deepcopy(good), "00" * 32)


def test_acknowledgement__anything_but_accepted_is_retried(
    http: httpx.Client, server: SandboxServer, receiver: Receiver
) -> None:
    pay(http)
    receiver.wait_for(2)  # AUTHORISATION and the day's REPORT_AVAILABLE, acknowledged
    receiver.script.extend([(200, b"ok"), (500, b"[accepted]")])  # neither acknowledges

    ref = pay(http, "order-2")

    deliveries = receiver.wait_for(5)[2:]
    assert [d.body for d in deliveries] == [deliveries[0].body] * 3  # the same AUTHORISATION, three times
    deadline = time.monotonic() + 5
    while (row := http.get("/_admin/webhooks", params={"psp_reference": ref}).json()["webhooks"][0])["state"] in (
        "sending",
        "retrying",
    ):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert (row["event_id"], row["state"], row["attempts"], row["last_status"]) == (
        f"{ref}:AUTHORISATION:true",
        "delivered",
        3,
        200,
    )


def test_disputes_decided__notification_chargeback_reversed_second_chargeback_and_report_rows(
    http: httpx.Client, server: SandboxServer, clock: Clock, receiver: Receiver
) -> None:
    ref = pay(http)
    receiver.wait_for(2)
    made = http.post(f"/_admin/payments/{ref}/dispute", json={"notify_first": True})
    assert made.status_code == 200, made.text
    dispute = made.json()["pspReference"]
    clock.now += timedelta(hours=1)
    assert http.post(f"/_admin/disputes/{dispute}/close", json={"outcome": "won"}).status_code == 200
    clock.now += timedelta(hours=1)
    assert http.post(f"/_admin/disputes/{dispute}/close", json={"outcome": "lost"}).status_code == 200
    got = [item(d) for d in receiver.wait_for(6)[2:]]
    assert [(i["eventCode"], i["pspReference"], i["originalReference"]) for i in got] == [
        (code, dispute, ref) for code in ("NOTIFICATION_OF_CHARGEBACK", "CHARGEBACK", "CHARGEBACK_REVERSED",
                                          "SECOND_CHARGEBACK")]
    assert got[0]["additionalData"]["defensePeriodEndsAt"] == "2026-03-23T13:00:00+01:00"  # 21 days on
    report = httpx.get(f"{server.url}/reports/download/MerchantAccount/AcmeEU/{DAY_REPORT}", timeout=5.0).text
    kinds = [line.split(",")[9] for line in report.splitlines()[1:] if ref in line]
    assert kinds[-3:] == ["Chargeback", "ChargebackReversed", "SecondChargeback"]


def test_refund_reversed__refunded_reversed_after_refund_and_its_report_row(
    http: httpx.Client, server: SandboxServer, receiver: Receiver
) -> None:
    ref = pay(http)
    receiver.wait_for(2)
    refund = http.post(f"/_admin/payments/{ref}/refund", json={"amount": 500}).json()
    assert http.post(f"/_admin/refunds/{refund['pspReference']}/reverse", json={}).status_code == 200
    assert http.post(f"/_admin/refunds/{refund['pspReference']}/reverse", json={}).status_code == 400  # once
    got = [item(d) for d in receiver.wait_for(4)[2:]]
    assert [(i["eventCode"], i["success"], i["amount"]["value"]) for i in got] == [
        ("REFUND", "true", 500), ("REFUNDED_REVERSED", "true", 500)]
    report = httpx.get(f"{server.url}/reports/download/MerchantAccount/AcmeEU/{DAY_REPORT}", timeout=5.0).text
    assert [line.split(",")[9] for line in report.splitlines()[1:] if ref in line][-2:] == ["Refunded",
                                                                                           "RefundedReversed"]
