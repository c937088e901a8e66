"""The real Stripe and Adyen adapters inside the payment flows, over respx-mocked HTTP, on both databases.

The PSPs' answers are built from their own documents (Stripe's canonical objects, read from ../shared/specs;
Adyen's bodies validated against its v71 OpenAPI schema), never from what the adapters expect.
"""

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
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.rows import EventSource, JobState, PaymentStatus, Transition
from tests.adapters import adyen_schema
from tests.adapters.conftest import fixture_json
from tests.adapters.stripe_oracle import canonical, search_result
from tests.integration.payment_flow import create, drain, handlers_for, sweep_now

STRIPE = "https://stripe.test"
ADYEN = "https://checkout.adyen.test"
ADYEN_REPORTS = "https://reports.adyen.test"
STRIPE_CARD = {"payment_method": "pm_card_visa", "customer_reference": "cus_NffrFeUfNV2Hib"}


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        yield router


def stripe_error(kind: str, message: str) -> dict[str, Any]:
    """Stripe's error object (docs.stripe.com/api/errors)."""
    return {"error": {"type": kind, "message": message}}


def intent(**changes: Any) -> dict[str, Any]:
    return canonical("payment_intent", **{"status": "succeeded", "amount": 2000, "amount_received": 2000,
                                          "currency": "usd", **changes})


def test_stripe_charge__a_saved_500_is_not_resent_and_reconciliation_finds_the_truth(
        db: Database, mock: respx.MockRouter) -> None:
    # docs.stripe.com/api/idempotent_requests: a 500 is saved under the key and replayed for 24 h
    [pid] = create(db, 1, amount=2000, currency="USD", psp="stripe", **STRIPE_CARD)
    create_route = mock.post(f"{STRIPE}/v1/payment_intents").mock(
        return_value=httpx.Response(500, json=stripe_error("api_error", "Something went wrong on Stripe's end.")))
    with StripeAdapter(STRIPE, api_key=Secret("sk_test_flow")) as adapter:
        drain(db, handlers_for(db, adapter), queues=["charges"])
        assert create_route.call_count == 1  # not the ~12 futile POSTs of a retry loop
        ledger = PaymentStore(db)
        payment = ledger.get(pid)
        assert payment is not None and payment.status is PaymentStatus.PENDING
        assert [j.state for j in JobStore(db).list_jobs(kind="charge", limit=5)] == [JobState.SUCCEEDED]

        found = intent(id="pi_flow_1", metadata={"merchant_reference": "order-0"})
        search = mock.get(f"{STRIPE}/v1/payment_intents/search").mock(
            return_value=httpx.Response(200, json=search_result("/v1/payment_intents/search", [found])))
        sweep_now(db, handlers_for(db, adapter))
        assert search.call_count == 1 and "order-0" in str(search.calls[0].request.url)
        healed = ledger.get(pid)
        assert healed is not None and healed.status is PaymentStatus.SUCCEEDED and healed.psp_reference == "pi_flow_1"
        assert [e.to_status for e in ledger.events(pid)] == ["created", "processing", "pending", "succeeded"]
        form = dict(x.split("=", 1) for x in create_route.calls[0].request.content.decode().split("&"))
        assert (form["amount"], form["currency"], form["customer"], form["off_session"]) == (
            "2000", "usd", "cus_NffrFeUfNV2Hib", "true")


def test_stripe_charge__a_proxy_502_is_retried_with_the_same_key(db: Database, mock: respx.MockRouter) -> None:
    [pid] = create(db, 1, amount=2000, currency="USD", psp="stripe", **STRIPE_CARD)
    route = mock.post(f"{STRIPE}/v1/payment_intents").mock(side_effect=[
        httpx.Response(502, text="<html>bad gateway</html>"),
        httpx.Response(200, json=intent(id="pi_flow_2", metadata={"merchant_reference": "order-0"})),
    ])
    with StripeAdapter(STRIPE, api_key=Secret("sk_test_flow")) as adapter:
        drain(db, handlers_for(db, adapter), queues=["charges"])
        keys = {call.request.headers["Idempotency-Key"] for call in route.calls}
        payment = PaymentStore(db).get(pid)
        assert route.call_count == 2 and payment is not None and keys == {payment.idempotency_key}
        assert payment.status is PaymentStatus.SUCCEEDED and payment.psp_reference == "pi_flow_2"


def test_stripe_reconcile__amount_mismatch_needs_review(db: Database, mock: respx.MockRouter) -> None:
    [pid] = create(db, 1, amount=2000, currency="USD", psp="stripe", charge=False, **STRIPE_CARD)
    ledger = PaymentStore(db)
    with db.begin() as conn:
        ledger.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.PENDING, EventSource.CHARGE,
                                      psp_reference="pi_flow_3"))
    mock.get(f"{STRIPE}/v1/payment_intents/pi_flow_3").mock(
        return_value=httpx.Response(200, json=intent(id="pi_flow_3", amount=1999, amount_received=1999)))
    with StripeAdapter(STRIPE, api_key=Secret("sk_test_flow")) as adapter:
        summary = sweep_now(db, handlers_for(db, adapter))
        payment = ledger.get(pid)
        assert payment is not None and payment.status is PaymentStatus.NEEDS_REVIEW
        assert payment.review_reason == "amount_mismatch: ours 2000 USD, PSP 1999"
        assert summary.counts["needs_review"] == 1
        event = ledger.events(pid)[-1]
        assert event.source == "reconcile" and event.details and event.details["psp_amount"] == 1999


@pytest.mark.skipif(not adyen_schema.SPECS_AVAILABLE, reason="../shared/specs/adyen/CheckoutService-v71.json "
                                                             "not found: Adyen's schema checks cannot run")
def test_adyen_charge__refused_is_a_decline_and_429_is_retried(db: Database, mock: respx.MockRouter) -> None:
    ids = create(db, 2, amount=1250, currency="EUR", psp="adyen", account="ShopECOM",
                 payment_method="8415718415172200", customer_reference="shopper-0042")
    refused = fixture_json("adyen", "payment_refused.json")
    authorised = fixture_json("adyen", "payment_authorised.json")
    bodies: list[Any] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if body["reference"] == "order-0":
            return httpx.Response(200, json={**refused, "merchantReference": "order-0"})
        answer.calls += 1  # type: ignore[attr-defined]
        if answer.calls == 1:  # type: ignore[attr-defined]
            return httpx.Response(429, json=fixture_json("adyen", "error_rate_limited.json"),
                                  headers={"Retry-After": "0"})
        return httpx.Response(200, json={**authorised, "merchantReference": "order-1"})

    answer.calls = 0  # type: ignore[attr-defined]
    mock.post(url__regex=rf"{ADYEN}/v\d+/payments").mock(side_effect=answer)
    adapter = AdyenAdapter(ADYEN, api_key=Secret("AQEflowkey0000000000000000"), merchant_account="ShopECOM",
                           report_base_url=ADYEN_REPORTS, report_api_key=Secret("AQEreportkey00000000000000"))
    drain(db, handlers_for(db, adapter), queues=["charges"])
    for body in bodies:  # every body recon sent is one Adyen's own schema accepts
        adyen_schema.validate_payment_request(body)
    assert {b["shopperReference"] for b in bodies} == {"shopper-0042"}
    assert {b["merchantAccount"] for b in bodies} == {"ShopECOM"}
    ledger = PaymentStore(db)
    declined, ok = ledger.get(ids[0]), ledger.get(ids[1])
    assert declined is not None and declined.status is PaymentStatus.FAILED
    assert "declined" in (declined.failure_reason or "")
    assert ok is not None and ok.status is PaymentStatus.SUCCEEDED and ok.psp_reference == authorised["pspReference"]
    adapter.close()
