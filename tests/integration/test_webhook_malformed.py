"""A correctly signed webhook whose numbers no column or datetime holds is malformed: 400, counted, nothing stored
(issue 22, item 7). A 500 would make the PSP deliver it again forever; an amount past 64 bits raised
OverflowError in the BIGINT column. Signed by the PSPs' own libraries (stripe-python, Adyen's), on both
databases, through `recon serve`'s application."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from Adyen import util as adyen_util

from recon.app import App
from recon.db.database import Database
from recon.webhooks.server import create_app
from tests.console import TestClient
from tests.integration.test_webhooks import (
    ADYEN_KEY,
    STRIPE_NEW,
    adyen_item,
    count,
    intent,
    post_stripe,
    stripe_event,
)

#: 2^63 + 8, the amount of the hostile tester's event
TOO_LARGE = 2**63 + 8


@pytest.fixture
def app(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("RECON_STRIPE_WEBHOOK_SECRET", STRIPE_NEW)
    monkeypatch.setenv("RECON_ADYEN_HMAC_KEY", ADYEN_KEY)
    monkeypatch.delenv("RECON_CONFIG", raising=False)
    application = App(database_url=db_url)
    yield application
    application.close()
    application.db.dispose()


@pytest.fixture
def client(app: App) -> Iterator[TestClient]:
    with TestClient(create_app(app), base_url="http://127.0.0.1") as c:
        yield c


def refused(client: TestClient, db: Database, response: Any, psp: str) -> None:
    assert response.status_code == 400, response.text
    assert response.text == "malformed\n"
    assert count(db, "webhook_events") == 0 and count(db, "jobs") == 0
    assert f'recon_webhooks_total{{outcome="malformed",psp="{psp}"}} 1.0' in client.get("/metrics").text


@pytest.mark.parametrize("change", [
    {"amount": TOO_LARGE},
    {"amount": 2**63},
    {"amount": -1000},
    {"amount_received": TOO_LARGE},
    {"amount": 2**62, "currency": "mga"},  # x100 into ISO minor units: past 64 bits
], ids=["2^63+8", "2^63", "negative", "received-2^63+8", "mga-scaled-past-64-bits"])
def test_stripe__an_amount_outside_64_bits_or_negative_is_malformed_and_stored_nowhere(
        app: App, db: Database, client: TestClient, change: dict[str, Any]) -> None:
    obj = {**intent("pi_1", "order-1", status="succeeded"), **change}
    refused(client, db, post_stripe(client, stripe_event("payment_intent.succeeded", obj)), "stripe")


@pytest.mark.parametrize("created", [10**15, 2**63 + 8, -1])
def test_stripe__an_event_created_outside_1970_to_9999_is_malformed(
        app: App, db: Database, client: TestClient, created: int) -> None:
    doc = json.loads(stripe_event("payment_intent.succeeded", intent("pi_1", "order-1", status="succeeded")))
    doc["created"] = created
    refused(client, db, post_stripe(client, json.dumps(doc).encode()), "stripe")


@pytest.mark.parametrize("event", ["charge.refunded", "charge.dispute.created"])
def test_stripe__a_refund_or_dispute_past_64_bits_is_malformed(
        app: App, db: Database, client: TestClient, event: str) -> None:
    field = "amount_refunded" if event == "charge.refunded" else "amount"
    obj = {"id": "ch_1", "object": "charge" if event == "charge.refunded" else "dispute", "payment_intent": "pi_1",
           "currency": "eur", "amount": 1000, "refunded": True, "status": "needs_response", field: TOO_LARGE}
    refused(client, db, post_stripe(client, stripe_event(event, obj)), "stripe")


def post_adyen(client: TestClient, item: dict[str, Any]) -> Any:
    body = {"live": "false", "notificationItems": [{"NotificationRequestItem": item}]}
    assert adyen_util.is_valid_hmac_notification(body, ADYEN_KEY)  # Adyen's library: correctly signed
    return client.post("/webhooks/adyen", content=json.dumps(body).encode(),
                       headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(("value", "event_date"), [
    (TOO_LARGE, "2026-12-01T12:00:00+01:00"),
    (-1000, "2026-12-01T12:00:00+01:00"),
    (1000, "2026-12-01T12:00:00"),  # no offset: no instant (SQLite refused it with a 500, PostgreSQL guessed)
    (1000, "9999-12-31T23:00:00-05:00"),  # year 10000 in UTC
    (1000, "0001-01-01T00:30:00+01:00"),  # year 0 in UTC
], ids=["2^63+8", "negative", "no-offset", "after-9999-in-utc", "before-1-in-utc"])
def test_adyen__a_value_or_event_date_no_column_holds_is_malformed_and_stored_nowhere(
        app: App, db: Database, client: TestClient, value: int, event_date: str) -> None:
    item = adyen_item("AUTHORISATION", "QFQTPCQ8HXSKGK82", "order-1", value=value)
    item["eventDate"] = event_date
    item["additionalData"] = {"hmacSignature": adyen_util.generate_notification_sig(item, ADYEN_KEY).decode()}
    refused(client, db, post_adyen(client, item), "adyen")


def test_content_length__digits_of_other_scripts_are_refused_not_a_500(app: App, db: Database) -> None:
    """A Content-Length of "²" (latin-1 0xB2: str.isdigit() is True, int() refuses it) is no size: 413."""
    import asyncio

    sent: list[dict[str, Any]] = []

    async def call() -> None:
        scope = {"type": "http", "method": "POST", "path": "/webhooks/stripe", "raw_path": b"/webhooks/stripe",
                 "query_string": b"", "headers": [(b"content-length", "\u00b2".encode("latin-1")),
                                                  (b"host", b"127.0.0.1")], "http_version": "1.1",
                 "scheme": "http", "server": ("127.0.0.1", 8471), "client": ("127.0.0.1", 5000), "root_path": ""}

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await create_app(app)(scope, receive, send)

    asyncio.run(call())
    assert sent[0]["status"] == 413
    assert count(db, "webhook_events") == 0
