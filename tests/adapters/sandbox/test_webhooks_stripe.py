"""The Stripe flavour's webhooks, checked against stripe-python (the oracle we did not write) and Stripe's
canonical objects (``fixtures3.json``, read from ``<repo>/../shared/specs/`` at test time).

Every delivery must pass ``stripe.WebhookSignature.verify_header`` with the endpoint secret and Stripe's default
tolerance, and parse through ``stripe.Webhook.construct_event`` into the SDK's typed objects; a tampered body,
another secret or another timestamp must not.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import stripe

from psp_adapters.protocol import Secret
from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.stripe_objects import STRIPE_API_VERSION
from psp_adapters.sandbox.webhooks import WebhookConfig
from tests.adapters.sandbox.stripe_checks import check_document, checked_sdk
from tests.adapters.sandbox.webhook_receiver import Delivery, Receiver, receiving

KEY = "sk_test_sandbox_123"
SECRET = "whsec_test_sandbox_0123456789abcdef"
SPECS = Path(__file__).resolve().parents[3].parent / "shared" / "specs"
START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
INTENT = {
    "amount": 1250,
    "currency": "eur",
    "payment_method": "pm_card_visa",
    "customer": "cus_123",
    "confirm": True,
    "off_session": True,
    "metadata": {"merchant_reference": "order-1"},
}


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(scope="module")
def canonical() -> dict[str, Any]:
    path = SPECS / "stripe" / "fixtures3.json"
    if not path.exists():
        pytest.skip(f"Stripe's canonical objects are absent ({path}); see shared/specs/README.md")
    resources: dict[str, Any] = json.loads(path.read_text())["resources"]
    return resources


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


@pytest.fixture
def server(tmp_path: Path, clock: Clock, receiver: Receiver) -> Iterator[SandboxServer]:
    hooks = WebhookConfig(url=receiver.url, secret=Secret(SECRET), backoff_seconds=0.05)
    with SandboxServer(tmp_path / "s.db", flavor="stripe", api_key=KEY, now_func=clock, webhooks=hooks) as srv:
        yield srv


@pytest.fixture
def sdk(server: SandboxServer) -> Iterator[stripe.StripeClient]:
    """Stripe's SDK on the sandbox, every answer checked against Stripe's canonical objects (stripe_checks)."""
    with checked_sdk(server.url, KEY) as client:
        yield client


@pytest.fixture
def http(server: SandboxServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=5.0, headers={"Authorization": f"Bearer {KEY}"}) as c:
        yield c


def create(sdk: stripe.StripeClient, key: str = "k1", **params: Any) -> str:
    """Create an intent; its id (also when Stripe answers 402)."""
    try:
        intent = sdk.v1.payment_intents.create(params={**INTENT, **params}, options={"idempotency_key": key})  # type: ignore[arg-type]
    except stripe.CardError as exc:
        return str(exc.json_body["error"]["payment_intent"]["id"])  # type: ignore[index]
    return intent.id


def verified(delivery: Delivery) -> stripe.Event:
    """The delivery as stripe-python reads it: signature, tolerance (300 s) and parsing."""
    assert delivery.headers["Content-Type"].startswith("application/json")
    payload, header = delivery.body.decode(), delivery.headers["Stripe-Signature"]
    assert stripe.WebhookSignature.verify_header(payload, header, SECRET, 300)
    assert check_document(json.loads(payload)) >= 2  # the Event and its data.object, like Stripe's own
    return stripe.Webhook.construct_event(payload, header, SECRET)


def types(deliveries: list[Delivery]) -> list[str]:
    return [d.json()["type"] for d in deliveries]


def assert_keys_like(obj: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert set(obj) <= set(theirs), sorted(set(obj) - set(theirs))


def test_success__one_signed_payment_intent_succeeded_event_shaped_like_stripes(
    sdk: stripe.StripeClient, http: httpx.Client, receiver: Receiver, canonical: dict[str, Any]
) -> None:
    intent_id = create(sdk)

    [delivery] = receiver.wait_for(1)
    event = verified(delivery)
    assert isinstance(event, stripe.Event) and isinstance(event.data.object, stripe.PaymentIntent)
    doc = delivery.json()
    assert set(doc) == set(canonical["event"])
    assert doc["id"].startswith("evt_") and (doc["object"], doc["type"]) == ("event", "payment_intent.succeeded")
    assert (doc["api_version"], doc["livemode"], doc["pending_webhooks"]) == (STRIPE_API_VERSION, False, 1)
    assert doc["created"] == int(START.timestamp())
    assert doc["request"] == {"id": None, "idempotency_key": "k1"}
    assert doc["data"]["object"] == http.get(f"/v1/payment_intents/{intent_id}").json()  # as the API serves it
    assert_keys_like(doc["data"]["object"], canonical["payment_intent"])
    assert delivery.path == "/hooks" and delivery.headers["User-Agent"].startswith("Stripe/")
    create(sdk)  # the same key again: a replay, no second event
    assert types(receiver.quiet(0.3)) == ["payment_intent.succeeded"]


def test_decline__payment_failed_with_the_decline_as_last_payment_error(
    sdk: stripe.StripeClient, receiver: Receiver
) -> None:
    create(sdk, payment_method="pm_card_declined")

    [delivery] = receiver.wait_for(1)
    intent = verified(delivery).data.object
    assert delivery.json()["type"] == "payment_intent.payment_failed"
    assert intent.status == "requires_payment_method"
    assert (intent.last_payment_error.code, intent.last_payment_error.decline_code) == (
        "card_declined",
        "generic_decline",
    )


def test_requires_action__requires_action_then_payment_failed_with_authentication_required(
    sdk: stripe.StripeClient, http: httpx.Client, receiver: Receiver, canonical: dict[str, Any]
) -> None:
    intent_id = create(sdk, payment_method="pm_card_authenticationRequired")

    waiting, failed = receiver.wait_for(2)
    assert types([waiting, failed]) == ["payment_intent.requires_action", "payment_intent.payment_failed"]
    first, then = verified(waiting).data.object, verified(failed).data.object
    assert (first.id, first.status, first.next_action.type) == (intent_id, "requires_action", "use_stripe_sdk")
    assert first.last_payment_error is None
    assert_keys_like(waiting.json()["data"]["object"], canonical["payment_intent"])
    assert then.last_payment_error.code == "authentication_required"
    assert failed.json()["data"]["object"] == http.get(f"/v1/payment_intents/{intent_id}").json()


def test_slow_settlement__processing_then_succeeded_or_failed_on_time_without_any_polling(
    sdk: stripe.StripeClient, clock: Clock, receiver: Receiver
) -> None:
    ok = create(sdk, "k1", payment_method="pm_pending")
    bad = create(sdk, "k2", payment_method="pm_pending_fail", metadata={"merchant_reference": "order-2"})
    assert types(receiver.wait_for(2)) == ["payment_intent.processing"] * 2

    clock.now += timedelta(seconds=6)  # past settle_after_seconds (5): the webhook thread settles them

    later = receiver.wait_for(4)[2:]
    events = {verified(d).data.object.id: (d.json()["type"], d.json()["request"]) for d in later}
    assert events == {
        ok: ("payment_intent.succeeded", {"id": None, "idempotency_key": None}),
        bad: ("payment_intent.payment_failed", {"id": None, "idempotency_key": None}),
    }


def test_refund_dispute_cancel__charge_refunded_dispute_created_and_canceled(
    sdk: stripe.StripeClient, http: httpx.Client, receiver: Receiver, canonical: dict[str, Any]
) -> None:
    refunded, disputed = create(sdk, "k1"), create(sdk, "k2", metadata={"merchant_reference": "order-2"})
    pending = create(sdk, "k3", payment_method="pm_pending", metadata={"merchant_reference": "order-3"})
    receiver.wait_for(3)
    assert http.post(f"/_admin/payments/{refunded}/refund", json={"amount": 400}).status_code == 200
    assert http.post(f"/_admin/payments/{refunded}/refund", json={}).status_code == 200  # the rest
    dispute = http.post(f"/_admin/payments/{disputed}/dispute", json={}).json()
    assert http.post(f"/_admin/payments/{pending}/cancel", json={}).status_code == 200

    deliveries = receiver.wait_for(10)[3:]

    assert types(deliveries) == [  # Stripe tells a refund as refund.created, then charge.refunded once it succeeded
        "refund.created",
        "charge.refunded",
        "refund.created",
        "charge.refunded",
        "charge.dispute.created",
        "charge.dispute.funds_withdrawn",
        "payment_intent.canceled",
    ]
    assert [verified(d).data.object.amount for d in deliveries[:3:2]] == [400, 850]
    assert verified(deliveries[5]).data.object.id == dispute["id"]  # funds_withdrawn: the same Dispute
    deliveries = deliveries[1::2][:2] + deliveries[4:5] + deliveries[6:]
    partial, full, disputed_event, canceled = (verified(d).data.object for d in deliveries)
    assert isinstance(partial, stripe.Charge) and partial.payment_intent == refunded
    assert (partial.amount_refunded, partial.refunded, full.amount_refunded, full.refunded) == (400, False, 1250, True)
    assert_keys_like(deliveries[0].json()["data"]["object"], canonical["charge"])
    assert isinstance(disputed_event, stripe.Dispute)
    raw = deliveries[2].json()["data"]["object"]
    assert raw == dispute  # as the admin API answered it
    assert {"charge", "payment_intent", "amount", "currency", "reason", "status"} <= set(raw)
    assert (raw["charge"], raw["payment_intent"], raw["amount"], raw["currency"]) == (
        "ch_" + disputed[3:],
        disputed,
        1250,
        "eur",
    )
    assert_keys_like(raw, canonical["dispute"])
    assert (canceled.id, canceled.status) == (pending, "canceled")


def test_signature__a_tampered_body_or_another_secret_is_rejected_by_stripe_python(
    sdk: stripe.StripeClient, receiver: Receiver
) -> None:
    create(sdk)
    [delivery] = receiver.wait_for(1)
    payload, header = delivery.body.decode(), delivery.headers["Stripe-Signature"]
    stamp = int(header.split(",")[0].removeprefix("t="))
    assert abs(stamp - time.time()) < 60  # signed with the wall clock, whatever the server's clock says

    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(payload.replace('"amount":1250', '"amount":1'), header, SECRET, 300)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(payload, header, "whsec_another", 300)
    with pytest.raises(stripe.SignatureVerificationError):  # the timestamp is signed too
        stripe.WebhookSignature.verify_header(payload, header.replace(f"t={stamp}", f"t={stamp + 1}"), SECRET, 300)


def test_refund_events__a_refund_that_fails_later_tells_each_step(
    sdk: stripe.StripeClient, receiver: Receiver, clock: Clock
) -> None:
    """docs.stripe.com/testing#refunds (pm_card_refundFail) and docs.stripe.com/api/events/types: refund.created,
    charge.refunded, then refund.updated, charge.refund.updated and refund.failed, each as Stripe signs it."""
    intent = create(sdk, payment_method="pm_card_refundFail")
    receiver.wait_for(1)
    refund = sdk.v1.refunds.create(params={"payment_intent": intent, "amount": 500})
    first = receiver.wait_for(3)[1:]
    clock.now += timedelta(seconds=6)  # past settle_after_seconds (5): the refund fails; the webhook thread's tick

    later = receiver.wait_for(6)[3:]

    assert types(first) == ["refund.created", "charge.refunded"]
    assert types(later) == ["refund.updated", "charge.refund.updated", "refund.failed"]
    events = [verified(d) for d in [*first, *later]]
    assert isinstance(events[0].data.object, stripe.Refund) and events[0].data.object.id == refund.id
    assert isinstance(events[1].data.object, stripe.Charge) and events[1].data.object.amount_refunded == 500
    failed = events[-1].data.object
    assert (failed.id, failed.status, failed.failure_reason) == (refund.id, "failed", "declined")
    assert [e.id for e in sdk.v1.events.list(params={"type": "refund.*"}).data][::-1] == [
        events[0].id, events[2].id, events[4].id]  # the same events, kept by the account


def test_capture_events__an_authorisation_then_its_capture(sdk: stripe.StripeClient, receiver: Receiver) -> None:
    intent = create(sdk, capture_method="manual")
    authorised = receiver.wait_for(1)
    sdk.v1.payment_intents.capture(intent, params={"amount_to_capture": 1000})

    captured = receiver.wait_for(2)[1:]

    assert types(authorised) == ["payment_intent.amount_capturable_updated"]
    assert verified(authorised[0]).data.object.amount_capturable == 1250
    assert types(captured) == ["payment_intent.succeeded"]
    assert verified(captured[0]).data.object.amount_received == 1000
    assert len(receiver.quiet(0.3)) == 2  # charge.* events are in /v1/events, not the endpoint's by default


def test_enabled_events__an_endpoint_for_every_event_gets_charge_and_creation_events_too(
    tmp_path: Path, clock: Clock, receiver: Receiver
) -> None:
    hooks = WebhookConfig(url=receiver.url, secret=Secret(SECRET), backoff_seconds=0.05, events=frozenset({"*"}))
    with SandboxServer(tmp_path / "all.db", flavor="stripe", api_key=KEY, now_func=clock, webhooks=hooks) as server:
        client = stripe.StripeClient(KEY, base_addresses={"api": server.url}, max_network_retries=0)
        create(client)
        assert types(receiver.wait_for(3)) == ["payment_intent.created", "charge.succeeded",
                                               "payment_intent.succeeded"]


def test_dispute_decided__closed_and_reinstated_events_and_the_dispute_listing(
    sdk: stripe.StripeClient, http: httpx.Client, receiver: Receiver, canonical: dict[str, Any]
) -> None:
    won, lost = create(sdk, "k1"), create(sdk, "k2", metadata={"merchant_reference": "order-2"})
    receiver.wait_for(2)
    disputes = [http.post(f"/_admin/payments/{pi}/dispute", json={}).json()["id"] for pi in (won, lost)]
    for dp, outcome in zip(disputes, ("won", "lost"), strict=True):
        answer = http.post(f"/_admin/disputes/{dp}/close", json={"outcome": outcome})
        assert answer.status_code == 200 and answer.json()["status"] == outcome
    again = http.post(f"/_admin/disputes/{disputes[1]}/close", json={"outcome": "won"})
    assert again.status_code == 400  # Stripe decides a dispute once
    deliveries = receiver.wait_for(9)[2:]
    assert types(deliveries) == ["charge.dispute.created", "charge.dispute.funds_withdrawn"] * 2 + [
        "charge.dispute.closed", "charge.dispute.funds_reinstated", "charge.dispute.closed"]
    closed = [verified(d).data.object for d in deliveries[4:]]
    assert all(isinstance(d, stripe.Dispute) for d in closed)
    assert [(d.id, d.status) for d in closed] == [(disputes[0], "won"), (disputes[0], "won"), (disputes[1], "lost")]
    listed = sdk.v1.disputes.list({"limit": 1})
    assert listed.has_more and [d.id for d in listed.data] == [disputes[1]]  # newest first
    rest = sdk.v1.disputes.list({"limit": 1, "starting_after": disputes[1]})
    assert [(d.id, d.status) for d in rest.data] == [(disputes[0], "won")] and not rest.has_more
    assert sdk.v1.disputes.retrieve(disputes[1]).status == "lost"
    assert_keys_like(http.get("/v1/disputes").json()["data"][0], canonical["dispute"])
