"""The Stripe- and Adyen-shaped adapters inside the payment flows, over respx-mocked HTTP, on both databases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

from psp_adapters.adyen.adapter import AdyenAdapter
from psp_adapters.protocol import Secret
from psp_adapters.stripe.adapter import StripeAdapter
from recon.db.database import Database
from recon.db.ledger import LedgerStore, Transition
from recon.payments.model import EventSource, PaymentStatus
from tests.adapters.conftest import fixture_json
from tests.integration.payment_flow import create, drain, handlers_for, sweep_now

STRIPE = "https://stripe.test"
ADYEN = "https://checkout.adyen.test"


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        yield router


def intent(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = fixture_json("stripe", "payment_intent_succeeded.json")
    body.update(changes)
    return body


def test_stripe_charge__5xx_then_success_reuses_the_idempotency_key(db: Database, mock: respx.MockRouter) -> None:
    [pid] = create(db, 1, amount=2000, currency="USD", psp="stripe")
    route = mock.post(f"{STRIPE}/v1/payment_intents").mock(side_effect=[
        httpx.Response(500, json=fixture_json("stripe", "error_api.json")),
        httpx.Response(200, json=intent(id="pi_flow_1", metadata={"merchant_reference": "order-0"})),
    ])
    adapter = StripeAdapter(STRIPE, api_key=Secret("sk_test_flow"))
    drain(db, handlers_for(db, adapter), queues=["charges"])
    keys = {call.request.headers["Idempotency-Key"] for call in route.calls}
    assert route.call_count == 2 and len(keys) == 1
    ledger = LedgerStore(db)
    payment = ledger.get(pid)
    assert payment is not None and payment.status is PaymentStatus.SUCCEEDED
    assert payment.psp_reference == "pi_flow_1" and keys == {payment.idempotency_key}
    # the 5xx made the payment pending (unknown), never failed; the retry settled it
    assert [e.to_status for e in ledger.events(pid)] == ["created", "processing", "pending", "succeeded"]
    form = dict(x.split("=", 1) for x in route.calls[0].request.content.decode().split("&"))
    assert form["amount"] == "2000" and form["currency"] == "usd"
    adapter.close()


def test_stripe_reconcile__amount_mismatch_needs_review(db: Database, mock: respx.MockRouter) -> None:
    [pid] = create(db, 1, amount=2000, currency="USD", psp="stripe", charge=False)
    ledger = LedgerStore(db)
    with db.begin() as conn:
        ledger.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.PENDING, EventSource.CHARGE,
                                      psp_reference="pi_flow_2"))
    mock.get(f"{STRIPE}/v1/payment_intents/pi_flow_2").mock(
        return_value=httpx.Response(200, json=intent(id="pi_flow_2", amount=1999, amount_received=1999)))
    adapter = StripeAdapter(STRIPE, api_key=Secret("sk_test_flow"))
    summary = sweep_now(db, handlers_for(db, adapter))
    payment = ledger.get(pid)
    assert payment is not None and payment.status is PaymentStatus.NEEDS_REVIEW
    assert payment.review_reason == "amount_mismatch: ours 2000 USD, PSP 1999"
    assert summary.counts["needs_review"] == 1
    event = ledger.events(pid)[-1]
    assert event.source == "reconcile" and event.details and event.details["psp_amount"] == 1999
    adapter.close()


def test_adyen_charge__refused_is_a_decline_and_429_is_retried(db: Database, mock: respx.MockRouter) -> None:
    ids = create(db, 2, amount=1250, currency="EUR", psp="adyen")
    refused = fixture_json("adyen", "payment_refused.json")
    authorised = fixture_json("adyen", "payment_authorised.json")

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body["reference"] == "order-0":
            return httpx.Response(200, json={**refused, "merchantReference": "order-0"})
        answer.calls += 1  # type: ignore[attr-defined]
        if answer.calls == 1:  # type: ignore[attr-defined]
            return httpx.Response(429, json=fixture_json("adyen", "error_rate_limited.json"),
                                  headers={"Retry-After": "0"})
        return httpx.Response(200, json={**authorised, "merchantReference": "order-1"})

    answer.calls = 0  # type: ignore[attr-defined]
    mock.post(url__regex=rf"{ADYEN}/v\d+/payments").mock(side_effect=answer)
    adapter = AdyenAdapter(ADYEN, api_key=Secret("AQEflowkey0000000000000000"), merchant_account="ShopECOM")
    drain(db, handlers_for(db, adapter), queues=["charges"])
    ledger = LedgerStore(db)
    declined, ok = ledger.get(ids[0]), ledger.get(ids[1])
    assert declined is not None and declined.status is PaymentStatus.FAILED
    assert "declined" in (declined.failure_reason or "")
    assert ok is not None and ok.status is PaymentStatus.SUCCEEDED and ok.psp_reference == authorised["pspReference"]
    adapter.close()
