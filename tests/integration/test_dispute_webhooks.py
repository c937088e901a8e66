"""Disputes as objects of their own, on both databases, from the PSPs' webhooks received by `recon serve`'s
application: Stripe's charge.dispute.* (data.object Stripe's canonical Dispute from fixtures3.json) and Adyen's
NOTIFICATION_OF_CHARGEBACK, CHARGEBACK, SECOND_CHARGEBACK and CHARGEBACK_REVERSED (each checked against Adyen's
Webhooks-v1.json and signed with Adyen's own HMAC helper). A dispute is opened once, with its evidence deadline,
the amount withdrawn and the fee; it moves by its state machine; an opened one sends its payment to review, where
the desk shows the deadline; a redelivery changes nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from recon.app import App
from recon.db.database import Database
from recon.db.dispute_store import DisputeStore
from recon.db.payment_store import PaymentStore
from recon.dispute_rows import DisputeStatus
from recon.rows import PaymentStatus
from tests.adapters.stripe_oracle import canonical
from tests.cli import Runner
from tests.console import TestClient
from tests.integration.test_webhooks import (
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
D = DisputeStatus
DUE = 1723679999  # fixtures3.json's Dispute: evidence_details.due_by


app = pytest.fixture(webhook_app, name="app")
client = pytest.fixture(webhook_client, name="client")


def stripe_dispute(status: str, **more: object) -> dict[str, object]:
    return canonical("dispute", **{"status": status, "amount": 1000, "currency": "eur", "payment_intent": "pi_1",
                                   **more})


def test_stripe_dispute__opened_with_its_deadline_then_lost(app: App, client: TestClient, db: Database,
                                                            db_url: str, recon: Runner) -> None:
    pid = payment(db, "order-1", psp="stripe", status=P.SUCCEEDED, psp_reference="pi_1")
    fees = [{"id": "txn_1", "object": "balance_transaction", "fee": 1500, "amount": -1000, "currency": "eur"}]
    created = stripe_event("charge.dispute.created", stripe_dispute("needs_response", balance_transactions=fees))
    assert post_stripe(client, created).status_code == 200
    assert post_stripe(client, created).status_code == 200  # a redelivery: stored once
    work(app)
    [dispute] = DisputeStore(db).for_payment(pid)
    assert (dispute.psp_dispute_id, dispute.status, dispute.amount, dispute.currency, dispute.fee, dispute.reason) == (
        "dp_1Pgc71B7WZ01zgkWMevJiAUx", D.OPENED, 1000, "EUR", 1500, "general")
    assert dispute.evidence_due_by == datetime.fromtimestamp(DUE, UTC)
    paid = PaymentStore(db).get(pid)
    assert paid is not None and paid.status is P.NEEDS_REVIEW
    assert (paid.review_reason or "").startswith("psp_reversed: disputed (chargeback) 10.00 EUR")
    listed = json.loads(recon("review", "list", "--json", db_url=db_url).stdout)["payments"]
    assert [i["evidence_due_by"] for i in listed] == [datetime.fromtimestamp(DUE, UTC).isoformat()]
    shown = recon("review", "show", "order-1", db_url=db_url).stdout
    assert "1 disputes of order-1" in shown and "opened" in shown
    post_stripe(client, stripe_event("charge.dispute.closed", stripe_dispute("lost")))
    work(app)
    [lost] = DisputeStore(db).for_payment(pid)
    assert (lost.status, lost.psp_status, lost.fee) == (D.LOST, "lost", 1500)  # what it did not say is kept
    doc = json.loads(recon("payments", "show", "order-1", "--json", db_url=db_url).stdout)
    assert [d["status"] for d in doc["disputes"]] == ["lost"]


def test_adyen_chargebacks__notified_charged_back_reversed_then_lost(app: App, client: TestClient,
                                                                    db: Database) -> None:
    pid = payment(db, "order-a", psp="adyen", status=P.SUCCEEDED, psp_reference="9913140798220028")

    def post(code: str, psp_reference: str, *, original: str | None = None, **extra: str) -> None:
        item = adyen_item(code, psp_reference, "order-a", original=original, reason="4853:Cardholder Dispute")
        item["additionalData"].update(extra)  # outside the signed fields, as Adyen's HMAC defines them
        assert client.post("/webhooks/adyen", json=adyen_body(item)).text == "[accepted]"
        work(app)

    post("NOTIFICATION_OF_CHARGEBACK", "8536173024791891", original="9913140798220028",
         defensePeriodEndsAt="2021-07-31T03:03:08+02:00")
    [opened] = DisputeStore(db).for_payment(pid)
    assert (opened.psp_dispute_id, opened.status) == ("9913140798220028", D.OPENED)
    assert opened.evidence_due_by == datetime(2021, 7, 31, 1, 3, 8, tzinfo=UTC)
    post("CHARGEBACK", "8636172945333378", original="9913140798220028")
    [withdrawn] = DisputeStore(db).for_payment(pid)
    assert withdrawn.status is D.OPENED and withdrawn.psp_status == "CHARGEBACK"
    post("CHARGEBACK_REVERSED", "9913140798220028")
    assert DisputeStore(db).for_payment(pid)[0].status is D.REVERSED
    post("SECOND_CHARGEBACK", "9913140798220028")  # after the reversal, as Adyen's dispute flow documents it
    assert DisputeStore(db).for_payment(pid)[0].status is D.LOST
    # late news: lost is final, the word only noted
    post("CHARGEBACK_REVERSED", "8536173024791892", original="9913140798220028")
    assert DisputeStore(db).for_payment(pid)[0].status is D.LOST
    paid = PaymentStore(db).get(pid)
    assert paid is not None and paid.status is P.NEEDS_REVIEW


def test_dispute_of_a_payment_we_do_not_know__kept_as_unknown(app: App, client: TestClient, db: Database) -> None:
    post_stripe(client, stripe_event("charge.dispute.created", stripe_dispute("needs_response",
                                                                              payment_intent="pi_nobody")))
    work(app)
    with db.begin() as conn:
        states = [r[0] for r in conn.execute(sa.text("SELECT state FROM webhook_events"))]
        disputes = conn.execute(sa.text("SELECT count(*) FROM disputes")).scalar_one()
    assert states == ["unknown_payment"] and disputes == 0
