"""Refund webhooks on both databases, received by `recon serve`'s application and applied by the webhook job:
Stripe's refund.* events (data.object a Refund, Stripe's canonical object from fixtures3.json) and Adyen's REFUND,
REFUND_FAILED and REFUNDED_REVERSED (each checked against Adyen's Webhooks-v1.json and signed with Adyen's own
HMAC helper). They move our refund, never the payment; a redelivery changes nothing; a refund we never asked for
(made at the PSP's dashboard) still sends its payment to review; and Stripe's charge.refunded about our own
refunds is no surprise.
"""

from __future__ import annotations

from typing import Any

import pytest

from recon.app import App
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.refund_rows import NewRefund, RefundSource, RefundTransition
from recon.rows import PaymentStatus
from tests.adapters.stripe_oracle import canonical
from tests.console import TestClient
from tests.integration.test_webhooks import (
    ADYEN_ACCOUNT,
    adyen_body,
    adyen_item,
    payment,
    post_stripe,
    stripe_event,
    webhook_app,
    webhook_client,
    work,
)

P = PaymentStatus


app = pytest.fixture(webhook_app, name="app")
client = pytest.fixture(webhook_client, name="client")


def refund_of(db: Database, pid: int, ref: str, amount: int, *, pending_as: str | None = None) -> int:
    """Our refund of ``amount``, sent: pending at the PSP under ``pending_as`` (its refund id), or just sent."""
    store = RefundStore(db)
    [rid] = store.create([NewRefund(pid, ref, amount, None, "alice")], queue="charges")
    with db.begin() as conn:
        assert store.apply(conn, RefundTransition(rid, P.CREATED, P.PROCESSING, RefundSource.REFUND))
        if pending_as:
            assert store.apply(conn, RefundTransition(rid, P.PROCESSING, P.PENDING, RefundSource.REFUND,
                                                      psp_refund_id=pending_as))
    return rid


def stripe_refund(refund_id: str, ref: str | None, *, status: str, amount: int, pi: str = "pi_1",
                  **more: Any) -> dict[str, Any]:
    return canonical("refund", id=refund_id, status=status, amount=amount, currency="eur", payment_intent=pi,
                     metadata={"refund_reference": ref} if ref else {}, **more)


def test_stripe_refund_events__move_our_refund_and_never_the_payment(app: App, client: TestClient,
                                                                     db: Database) -> None:
    pid = payment(db, "order-1", psp="stripe", status=P.SUCCEEDED, psp_reference="pi_1", amount=5000)
    rid = refund_of(db, pid, "rf-1", 2000, pending_as="re_1")
    body = stripe_event("refund.updated", stripe_refund("re_1", "rf-1", status="succeeded", amount=2000))
    assert post_stripe(client, body).status_code == 200
    assert post_stripe(client, body).status_code == 200  # a redelivery: stored once
    work(app)
    refund = RefundStore(db).get(rid)
    assert refund is not None and refund.status is P.SUCCEEDED
    assert [e.source for e in RefundStore(db).events(rid)][-1] == "webhook"
    # Stripe's charge.refunded says all refunded so far: our own refund, no surprise for the payment
    charge = canonical("charge", payment_intent="pi_1", amount=5000, amount_refunded=2000, refunded=False,
                       currency="eur", metadata={"merchant_reference": "order-1"})
    assert post_stripe(client, stripe_event("charge.refunded", charge)).status_code == 200
    work(app)
    paid = PaymentStore(db).get(pid)
    assert paid is not None and paid.status is P.SUCCEEDED and paid.refunded_amount == 2000


def test_stripe_refund_events__found_by_our_reference_and_the_id_stored(app: App, client: TestClient,
                                                                        db: Database) -> None:
    pid = payment(db, "order-1", psp="stripe", status=P.SUCCEEDED, psp_reference="pi_1", amount=5000)
    rid = refund_of(db, pid, "rf-1", 1000)  # its answer was lost: no refund id yet
    post_stripe(client, stripe_event("refund.created", stripe_refund("re_9", "rf-1", status="pending", amount=1000)))
    work(app)
    refund = RefundStore(db).get(rid)
    assert refund is not None and refund.status is P.PROCESSING and refund.psp_refund_id == "re_9"
    post_stripe(client, stripe_event("refund.failed", stripe_refund(
        "re_9", "rf-1", status="failed", amount=1000, failure_reason="expired_or_canceled_card")))
    work(app)
    failed = RefundStore(db).get(rid)
    assert failed is not None and failed.status is P.FAILED
    assert failed.failure_reason == "psp: expired_or_canceled_card"
    paid = PaymentStore(db).get(pid)
    assert paid is not None and paid.refunded_amount == 0  # the failed refund's amount is free again


def test_stripe_refund_failed_after_success__goes_to_review(app: App, client: TestClient, db: Database) -> None:
    pid = payment(db, "order-1", psp="stripe", status=P.SUCCEEDED, psp_reference="pi_1", amount=5000)
    rid = refund_of(db, pid, "rf-1", 1000, pending_as="re_1")
    post_stripe(client, stripe_event("refund.updated", stripe_refund("re_1", "rf-1", status="succeeded",
                                                                     amount=1000)))
    post_stripe(client, stripe_event("refund.failed", stripe_refund(
        "re_1", "rf-1", status="failed", amount=1000, failure_reason="lost_or_stolen_card")))
    work(app)
    refund = RefundStore(db).get(rid)
    assert refund is not None and refund.status is P.NEEDS_REVIEW
    assert refund.review_reason == ("refund_reversed: the PSP says failed for a refund ours was succeeded, reason "
                                    "lost_or_stolen_card")


def test_stripe_refund_not_ours__its_payment_goes_to_review(app: App, client: TestClient, db: Database) -> None:
    pid = payment(db, "order-1", psp="stripe", status=P.SUCCEEDED, psp_reference="pi_1", amount=5000)
    post_stripe(client, stripe_event("refund.created", stripe_refund("re_dash", None, status="succeeded",
                                                                     amount=700)))
    work(app)
    paid = PaymentStore(db).get(pid)
    assert paid is not None and paid.status is P.NEEDS_REVIEW
    assert (paid.review_reason or "").startswith("psp_reversed: refunded 7.00 EUR at the PSP")


def test_adyen_refund_events__received_then_refund_then_reversed(app: App, client: TestClient, db: Database) -> None:
    pid = payment(db, "order-a", psp="adyen", status=P.SUCCEEDED, psp_reference="8815208516304269", amount=5000)
    rid = refund_of(db, pid, "rf-a", 2500, pending_as="993617894906488A")  # Adyen's [received]
    ok = adyen_body(adyen_item("REFUND", "993617894906488A", "rf-a", value=2500, original="8815208516304269"))
    assert client.post("/webhooks/adyen", json=ok).text == "[accepted]"
    work(app)
    refund = RefundStore(db).get(rid)
    assert refund is not None and refund.status is P.SUCCEEDED
    back = adyen_body(adyen_item("REFUNDED_REVERSED", "993617894906488A", "rf-a", value=2500,
                                 original="8815208516304269"))
    client.post("/webhooks/adyen", json=back)
    work(app)
    reversed_ = RefundStore(db).get(rid)
    assert reversed_ is not None and reversed_.status is P.NEEDS_REVIEW
    assert (reversed_.review_reason or "").startswith("refund_reversed: the PSP says REFUNDED_REVERSED")
    paid = PaymentStore(db).get(pid)
    assert paid is not None and paid.status is P.SUCCEEDED  # the payment is not what moved


def test_adyen_refund_failed__fails_our_pending_refund(app: App, client: TestClient, db: Database) -> None:
    pid = payment(db, "order-a", psp="adyen", status=P.SUCCEEDED, psp_reference="8815208516304269", amount=5000)
    rid = refund_of(db, pid, "rf-a", 5000, pending_as="993617894906488A")
    client.post("/webhooks/adyen", json=adyen_body(adyen_item(
        "REFUND_FAILED", "993617894906488A", "rf-a", value=5000, original="8815208516304269",
        reason="Refund failed")))
    work(app)
    refund = RefundStore(db).get(rid)
    assert refund is not None and refund.status is P.FAILED and refund.failure_reason == "psp: Refund failed"
    paid = PaymentStore(db).get(pid)
    assert paid is not None and paid.refunded_amount == 0
    assert ADYEN_ACCOUNT  # the notifications name the payment's account
