"""Webhooks end to end on both databases: signed by the PSPs' official SDKs (stripe-python's
``WebhookSignature``, the Adyen library's ``generate_notification_sig``), shaped by Stripe's canonical objects
(fixtures3.json) and Adyen's published schema (Webhooks-v1.json), received by `recon serve`'s application
over HTTP, applied by a real worker."""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import stripe
from Adyen import util as adyen_util

from recon.app import App
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from recon.webhooks.intake import Intake
from recon.webhooks.server import create_app
from tests.adapters.adyen_schema import SPECS_DIR
from tests.adapters.stripe_oracle import canonical
from tests.cli import Runner
from tests.console import TestClient  # imported there with starlette's httpx2 warning silenced

STRIPE_OLD, STRIPE_NEW = "whsec_" + secrets.token_hex(16), "whsec_" + secrets.token_hex(16)
ADYEN_KEY = secrets.token_hex(32)
CARD = "4242424242424242"
ADYEN_ACCOUNT = "ShopECOM"


def webhook_app(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    """The App of `recon serve` with this module's Stripe secrets (old and new) and Adyen HMAC key: the ``app``
    fixture of every webhook test module (``app = pytest.fixture(webhook_app, name="app")``)."""
    monkeypatch.setenv("RECON_STRIPE_WEBHOOK_SECRET", f"{STRIPE_OLD},{STRIPE_NEW}")
    monkeypatch.setenv("RECON_ADYEN_HMAC_KEY", ADYEN_KEY)
    monkeypatch.delenv("RECON_CONFIG", raising=False)
    application = App(database_url=db_url)
    yield application
    application.close()
    application.db.dispose()


def webhook_client(app: App) -> Iterator[TestClient]:
    """A client of `recon serve`'s application on ``app``: the ``client`` fixture of every webhook test module."""
    with TestClient(create_app(app), base_url="http://127.0.0.1") as c:
        yield c


app = pytest.fixture(webhook_app, name="app")
client = pytest.fixture(webhook_client, name="client")


def payment(db: Database, ref: str, *, psp: str, amount: int = 1000, currency: str = "EUR",
            status: PaymentStatus = PaymentStatus.PROCESSING, psp_reference: str | None = None,
            account: str | None = None) -> int:
    """A payment of ours; an Adyen one in the account the test's notifications name (ADYEN_ACCOUNT)."""
    store = PaymentStore(db)
    account = account or (ADYEN_ACCOUNT if psp == "adyen" else "shop")
    [pid] = store.create([NewPayment(account, ref, amount, currency, psp)], charge=False)
    if status is not PaymentStatus.CREATED:
        with db.begin() as conn:
            assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, status, EventSource.CHARGE,
                                                psp_reference=psp_reference))
    return pid


def work(app: App) -> None:
    """A worker on the webhooks queue until no webhook job is left."""
    app.worker([app.webhook_config.queue], handlers=app.handlers(kinds=("webhook",))).run(burst=True)


def status(db: Database, pid: int) -> PaymentStatus:
    return PaymentStore(db).get(pid).status  # type: ignore[union-attr]


def count(db: Database, table: str) -> int:
    with db.begin() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())  # nosec B608  # test table names


# --- Stripe -------------------------------------------------------------------------------------------------


def stripe_event(event_type: str, obj: dict[str, Any], *, event_id: str | None = None) -> bytes:
    """An Event as Stripe sends it: fixtures3.json's event with ``obj`` as data.object."""
    doc = canonical("event", id=event_id or f"evt_{secrets.token_hex(12)}", type=event_type,
                    created=int(time.time()), data={"object": obj})
    return json.dumps(doc).encode()


def intent(pi: str, ref: str, *, status: str, amount: int = 1000, currency: str = "eur", **more: Any) -> dict[str, Any]:
    return canonical("payment_intent", id=pi, status=status, amount=amount, amount_received=amount
                     if status == "succeeded" else 0, currency=currency, metadata={"merchant_reference": ref}, **more)


def post_stripe(client: TestClient, body: bytes, *, secret: str = STRIPE_NEW, timestamp: int | None = None,
                header: str | None = None) -> Any:
    signed = header or stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=timestamp)
    return client.post("/webhooks/stripe", content=body, headers={"Stripe-Signature": signed,
                                                                  "Content-Type": "application/json"})


def test_stripe__succeeded_heals_with_the_event_as_evidence_and_a_redelivery_changes_nothing(
        app: App, db: Database, client: TestClient) -> None:
    pid = payment(db, "order-1", psp="stripe")
    body = stripe_event("payment_intent.succeeded", intent("pi_1", "order-1", status="succeeded"))
    first = post_stripe(client, body)
    assert first.status_code == 200 and first.json() == {"received": True}
    again = post_stripe(client, body)  # Stripe delivers again: same event id
    assert again.status_code == 200
    assert count(db, "webhook_events") == 1 and count(db, "jobs") == 1
    work(app)
    assert status(db, pid) is PaymentStatus.SUCCEEDED
    event = PaymentStore(db).events(pid)[-1]
    assert (event.source, event.from_status, event.to_status) == ("webhook", "processing", "succeeded")
    assert (event.details or {})["webhook"]["event_type"] == "payment_intent.succeeded"
    assert (event.details or {})["psp_reference"] == "pi_1"
    assert PaymentStore(db).get(pid).psp_reference == "pi_1"  # type: ignore[union-attr]
    # the stripe-python SDK verifies what we accepted, with the secret it was signed with
    stripe.WebhookSignature.verify_header(body.decode(), first.request.headers["Stripe-Signature"], STRIPE_NEW, 300)


def test_stripe__out_of_order_a_late_processing_never_overwrites_a_final_state(
        app: App, db: Database, client: TestClient) -> None:
    pid = payment(db, "order-1", psp="stripe")
    post_stripe(client, stripe_event("payment_intent.succeeded", intent("pi_1", "order-1", status="succeeded")))
    work(app)
    late = post_stripe(client, stripe_event("payment_intent.processing",
                                            intent("pi_1", "order-1", status="processing")))
    assert late.status_code == 200
    work(app)
    assert status(db, pid) is PaymentStatus.SUCCEEDED
    with db.begin() as conn:
        states = [r[0] for r in conn.execute(sa.text("SELECT state FROM webhook_events ORDER BY id"))]
    assert states == ["applied", "stale"]


@pytest.mark.parametrize("event_type, obj, expected, reason", [
    ("payment_intent.payment_failed",
     {"status": "requires_payment_method", "last_payment_error": {"type": "card_error", "code": "card_declined",
                                                                  "decline_code": "insufficient_funds"}},
     PaymentStatus.FAILED, "insufficient_funds"),
    ("payment_intent.canceled", {"status": "canceled", "cancellation_reason": "abandoned"}, PaymentStatus.FAILED,
     "abandoned"),
    ("payment_intent.requires_action", {"status": "requires_action"}, PaymentStatus.NEEDS_REVIEW,
     "authentication_required"),
])
def test_stripe__failures_and_3ds_reach_the_same_states_as_reconciliation(
        app: App, db: Database, client: TestClient, event_type: str, obj: dict[str, Any], expected: PaymentStatus,
        reason: str) -> None:
    pid = payment(db, "order-1", psp="stripe")
    fields = {k: v for k, v in obj.items() if k != "status"}
    assert post_stripe(client, stripe_event(event_type, intent("pi_1", "order-1", status=obj["status"],
                                                               **fields))).status_code == 200
    work(app)
    p = PaymentStore(db).get(pid)
    assert p.status is expected  # type: ignore[union-attr]
    assert reason in ((p.failure_reason or "") + (p.review_reason or ""))  # type: ignore[union-attr]


def test_stripe__processing_on_an_unfinished_payment_is_evidence_and_keeps_the_reference(
        app: App, db: Database, client: TestClient) -> None:
    pid = payment(db, "order-1", psp="stripe", status=PaymentStatus.PENDING)
    post_stripe(client, stripe_event("payment_intent.processing", intent("pi_9", "order-1", status="processing")))
    work(app)
    p = PaymentStore(db).get(pid)
    assert p.status is PaymentStatus.PENDING and p.psp_reference == "pi_9"  # type: ignore[union-attr]
    note = PaymentStore(db).events(pid)[-1]
    assert (note.source, note.from_status, note.to_status) == ("webhook", "pending", "pending")


def test_stripe__amount_mismatch_refund_and_dispute_go_to_review_with_the_reason(
        app: App, db: Database, client: TestClient) -> None:
    mismatch = payment(db, "order-1", psp="stripe", amount=1000)
    post_stripe(client, stripe_event("payment_intent.succeeded",
                                     intent("pi_1", "order-1", status="succeeded", amount=900)))
    refunded = payment(db, "order-2", psp="stripe", status=PaymentStatus.SUCCEEDED, psp_reference="pi_2")
    charge = canonical("charge", id="ch_2", payment_intent="pi_2", amount=1000, amount_refunded=1000, refunded=True,
                       currency="eur")
    post_stripe(client, stripe_event("charge.refunded", charge))
    disputed = payment(db, "order-3", psp="stripe", status=PaymentStatus.SUCCEEDED, psp_reference="pi_3")
    dispute = canonical("dispute", id="dp_3", payment_intent="pi_3", charge="ch_3", amount=1000, currency="eur",
                        reason="fraudulent", status="needs_response")
    post_stripe(client, stripe_event("charge.dispute.created", dispute))
    work(app)
    store = PaymentStore(db)
    assert [store.get(i).status for i in (mismatch, refunded, disputed)] == [PaymentStatus.NEEDS_REVIEW] * 3  # type: ignore[union-attr]
    assert (store.get(mismatch).review_reason or "").startswith("amount_mismatch:")  # type: ignore[union-attr]
    assert "refunded 10.00 EUR" in (store.get(refunded).review_reason or "")  # type: ignore[union-attr]
    assert (store.get(disputed).review_reason or "").startswith("psp_reversed: disputed")  # type: ignore[union-attr]
    assert "fraudulent" in (store.get(disputed).review_reason or "")  # type: ignore[union-attr]


def test_stripe__an_event_for_a_payment_we_do_not_know_is_kept_for_stats_and_the_report(
        app: App, db: Database, db_url: str, client: TestClient, recon: Runner) -> None:
    post_stripe(client, stripe_event("payment_intent.succeeded", intent("pi_x", "nobody", status="succeeded")))
    work(app)
    with db.begin() as conn:
        assert conn.execute(sa.text("SELECT state FROM webhook_events")).scalar_one() == "unknown_payment"
    stats = json.loads(recon("stats", "--json", db_url=db_url).stdout)
    assert {"psp": "stripe", "state": "unknown_payment", "events": 1} in stats["webhooks"]
    unknown = app.webhooks.unknown_between(psp="stripe", since=app.jobs.db_now().replace(year=2000),
                                           until=app.jobs.db_now().replace(year=2100))
    assert [(e.psp_reference, e.merchant_reference, e.amount) for e in unknown] == [("pi_x", "nobody", 1000)]


def reconcile_jobs(db: Database) -> list[tuple[str, Any]]:
    with db.begin() as conn:
        rows = conn.execute(sa.text("SELECT unique_key, payload FROM jobs WHERE kind = 'reconcile' ORDER BY id")).all()
    return [(key, json.loads(p) if isinstance(p, str) else p) for key, p in rows]


def test_stripe__a_success_of_another_payment_intent_carrying_our_reference_never_heals_ours(
        app: App, db: Database, client: TestClient) -> None:
    """Issue 22, item 1: ours holds pi_A; a correctly signed payment_intent.succeeded for pi_B whose metadata
    carries our merchant reference is evidence naming both, and our reconcile job (asking about pi_A), never a
    heal: the link to pi_A is kept and the possible second charge is visible."""
    pid = payment(db, "order-1", psp="stripe", status=PaymentStatus.PROCESSING, psp_reference="pi_A")
    post_stripe(client, stripe_event("payment_intent.succeeded", intent("pi_B", "order-1", status="succeeded")))
    work(app)
    p = PaymentStore(db).get(pid)
    assert p is not None and (p.status, p.psp_reference) == (PaymentStatus.PROCESSING, "pi_A")
    note = PaymentStore(db).events(pid)[-1]
    assert (note.source, note.from_status, note.to_status) == ("webhook", "processing", "processing")
    assert note.details is not None and note.details["psp_reference"] == "pi_B"
    assert note.details["psp_reference_conflict"] == {"ours": "pi_A", "theirs": ["pi_B"]}
    assert note.details["webhook"]["event_type"] == "payment_intent.succeeded"
    assert reconcile_jobs(db) == [(f"reconcile:{pid}", {"payment_id": pid})]
    with db.begin() as conn:
        assert conn.execute(sa.text("SELECT state, payment_id FROM webhook_events")).one() == ("applied", pid)


def test_stripe__news_of_another_payment_intent_about_a_final_payment(
        app: App, db: Database, client: TestClient) -> None:
    """A succeeded payment hearing that another PaymentIntent under its reference succeeded may be charged
    twice: review, naming both, ours kept. News that moved no money (a cancellation of the other) is a note."""
    charged_twice = payment(db, "order-1", psp="stripe", status=PaymentStatus.SUCCEEDED, psp_reference="pi_A")
    other_canceled = payment(db, "order-2", psp="stripe", status=PaymentStatus.SUCCEEDED, psp_reference="pi_C")
    post_stripe(client, stripe_event("payment_intent.succeeded", intent("pi_B", "order-1", status="succeeded")))
    post_stripe(client, stripe_event("payment_intent.canceled", intent("pi_D", "order-2", status="canceled",
                                                                       cancellation_reason="abandoned")))
    work(app)
    store = PaymentStore(db)
    twice, canceled = store.get(charged_twice), store.get(other_canceled)
    assert twice is not None and (twice.status, twice.psp_reference) == (PaymentStatus.NEEDS_REVIEW, "pi_A")
    assert (twice.review_reason or "").startswith("reference_conflict:") and "pi_B" in (twice.review_reason or "")
    assert canceled is not None and (canceled.status, canceled.psp_reference) == (PaymentStatus.SUCCEEDED, "pi_C")
    note = store.events(other_canceled)[-1]
    assert (note.from_status, note.to_status) == ("succeeded", "succeeded")
    assert note.details is not None and note.details["psp_reference_conflict"] == {"ours": "pi_C", "theirs": ["pi_D"]}
    assert reconcile_jobs(db) == []  # final payments: no reconcile job would change them


@pytest.mark.parametrize("case", ["tampered", "other_secret", "old_timestamp", "future_timestamp", "no_header",
                                  "v0_only"])
def test_stripe__bad_signatures_are_refused_counted_and_store_nothing(
        app: App, db: Database, client: TestClient, case: str, caplog: pytest.LogCaptureFixture) -> None:
    body = stripe_event("payment_intent.succeeded", intent("pi_1", "order-1", status="succeeded",
                                                           description=f"card {CARD}"))
    now = int(time.time())
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), STRIPE_NEW, timestamp=now)
    sent, headers = body, {"Stripe-Signature": header}
    if case == "tampered":
        sent = body.replace(b'"amount": 1000', b'"amount": 1')
    elif case == "other_secret":
        headers["Stripe-Signature"] = stripe.WebhookSignature.generate_signature_header(body.decode(), "whsec_other")
    elif case == "old_timestamp":  # a delivery replayed later than the tolerance
        headers["Stripe-Signature"] = stripe.WebhookSignature.generate_signature_header(body.decode(), STRIPE_NEW,
                                                                                        timestamp=now - 301)
    elif case == "future_timestamp":
        headers["Stripe-Signature"] = stripe.WebhookSignature.generate_signature_header(body.decode(), STRIPE_NEW,
                                                                                        timestamp=now + 3600)
    elif case == "no_header":
        headers = {}
    elif case == "v0_only":
        headers["Stripe-Signature"] = header.replace("v1=", "v0=")
    with caplog.at_level(logging.WARNING):
        r = client.post("/webhooks/stripe", content=sent, headers=headers)
    assert r.status_code == 400
    assert count(db, "webhook_events") == 0 and count(db, "jobs") == 0
    lines = [rec.getMessage() for rec in caplog.records if rec.name.startswith("recon.webhooks")]
    assert len(lines) == 1 and CARD not in lines[0] and "order-1" not in lines[0]
    metrics = client.get("/metrics").text
    reason = {"tampered": "bad_signature", "other_secret": "bad_signature", "old_timestamp": "stale_timestamp",
              "future_timestamp": "stale_timestamp", "no_header": "no_signature", "v0_only": "no_signature"}[case]
    assert f'recon_webhooks_total{{outcome="{reason}",psp="stripe"}} 1.0' in metrics


def test_stripe__rotation_accepts_either_secret_and_a_header_carrying_both_signatures(
        app: App, db: Database, client: TestClient) -> None:
    for n, secret in enumerate((STRIPE_OLD, STRIPE_NEW)):
        body = stripe_event("payment_intent.processing", intent(f"pi_{n}", f"order-{n}", status="processing"))
        assert post_stripe(client, body, secret=secret).status_code == 200
    body = stripe_event("payment_intent.processing", intent("pi_9", "order-9", status="processing"))
    now = int(time.time())
    old = stripe.WebhookSignature.generate_signature_header(body.decode(), "whsec_retired", timestamp=now)
    new = stripe.WebhookSignature.generate_signature_header(body.decode(), STRIPE_NEW, timestamp=now)
    both = f"{old},{new.split(',')[1]}"  # t=…,v1=<retired secret's>,v1=<current secret's>
    assert post_stripe(client, body, header=both).status_code == 200
    assert count(db, "webhook_events") == 3


def test_stripe__an_oversized_body_is_refused_before_parsing_and_a_card_number_is_never_stored(
        app: App, db: Database, client: TestClient) -> None:
    big = stripe_event("payment_intent.succeeded", intent("pi_1", "order-1", status="succeeded",
                                                          description="x" * 300_000))
    assert post_stripe(client, big).status_code == 413
    assert count(db, "webhook_events") == 0
    pid = payment(db, "order-2", psp="stripe")
    body = stripe_event("payment_intent.succeeded", intent("pi_2", "order-2", status="succeeded",
                                                           description=f"paid with {CARD}"))
    assert post_stripe(client, body).status_code == 200
    work(app)
    assert status(db, pid) is PaymentStatus.SUCCEEDED
    with db.begin() as conn:
        stored = json.dumps([list(map(str, r)) for r in conn.execute(sa.text("SELECT * FROM webhook_events"))])
        events = json.dumps([list(map(str, r)) for r in conn.execute(sa.text("SELECT * FROM payment_events"))])
    assert CARD not in stored and CARD not in events


def test_stripe__an_unlisted_event_type_is_acknowledged_and_not_stored(app: App, db: Database,
                                                                       client: TestClient) -> None:
    body = stripe_event("customer.created", canonical("customer"))
    assert post_stripe(client, body).status_code == 200
    assert count(db, "webhook_events") == 0
    assert 'recon_webhooks_total{outcome="ignored",psp="stripe"} 1.0' in client.get("/metrics").text


# --- Adyen --------------------------------------------------------------------------------------------------


def webhooks_document() -> Any:
    path = SPECS_DIR / "Webhooks-v1.json"
    if not path.is_file():
        pytest.skip(f"Adyen's Webhooks-v1.json is not at {path}")
    return json.loads(path.read_text(encoding="utf-8"))


def check_with_adyens_schema(body: dict[str, Any]) -> None:
    """``body`` (one item, as Adyen sends them) against the request schema Webhooks-v1.json gives its event."""
    from jsonschema import Draft202012Validator

    document = webhooks_document()
    [wrapper] = body["notificationItems"]
    code = wrapper["NotificationRequestItem"]["eventCode"]
    schema = document["webhooks"][f"/{code}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    errors = sorted(Draft202012Validator({**schema, "components": document["components"]}).iter_errors(body), key=str)
    assert not errors, [e.message for e in errors]


def adyen_item(code: str, psp_reference: str, ref: str, *, success: bool = True, value: int = 1000,
               currency: str = "EUR", original: str | None = None, reason: str | None = None,
               key: str = ADYEN_KEY, account: str = ADYEN_ACCOUNT) -> dict[str, Any]:
    item: dict[str, Any] = {"amount": {"currency": currency, "value": value}, "eventCode": code,
                            "eventDate": "2026-12-01T12:00:00+01:00", "merchantAccountCode": account,
                            "merchantReference": ref, "pspReference": psp_reference,
                            "success": "true" if success else "false"}
    if original:
        item["originalReference"] = original
    if reason:
        item["reason"] = reason
    item["additionalData"] = {"hmacSignature": adyen_util.generate_notification_sig(item, key).decode()}
    return item


def adyen_body(item: dict[str, Any]) -> dict[str, Any]:
    """A notification as Adyen sends it (one item), checked by Adyen's schema and Adyen's own HMAC helper."""
    body = {"live": "false", "notificationItems": [{"NotificationRequestItem": item}]}
    check_with_adyens_schema(body)
    assert adyen_util.is_valid_hmac_notification(body, ADYEN_KEY)
    return body


def test_adyen__authorisation_cancellation_refund_chargeback_each_as_documented(
        app: App, db: Database, client: TestClient) -> None:
    ok = payment(db, "order-1", psp="adyen")
    refused = payment(db, "order-2", psp="adyen")
    cancelled = payment(db, "order-3", psp="adyen", psp_reference="PSP3")
    refunded = payment(db, "order-4", psp="adyen", status=PaymentStatus.SUCCEEDED, psp_reference="PSP4")
    charged_back = payment(db, "order-5", psp="adyen", status=PaymentStatus.SUCCEEDED, psp_reference="PSP5")
    bodies = [adyen_body(adyen_item("AUTHORISATION", "PSP1", "order-1")),
              adyen_body(adyen_item("AUTHORISATION", "PSP2", "order-2", success=False, reason="Refused")),
              adyen_body(adyen_item("CANCELLATION", "MOD3", "order-3", original="PSP3")),
              adyen_body(adyen_item("REFUND", "MOD4", "order-4", original="PSP4", value=400)),
              adyen_body(adyen_item("CHARGEBACK", "MOD5", "order-5", original="PSP5"))]
    for body in bodies:
        r = client.post("/webhooks/adyen", json=body)
        assert r.status_code == 200 and r.text == "[accepted]"
    assert client.post("/webhooks/adyen", json=bodies[0]).text == "[accepted]"  # redelivered: stored once
    assert count(db, "webhook_events") == 5
    work(app)
    store = PaymentStore(db)
    got = {i: store.get(i) for i in (ok, refused, cancelled, refunded, charged_back)}
    assert got[ok].status is PaymentStatus.SUCCEEDED and got[ok].psp_reference == "PSP1"  # type: ignore[union-attr]
    assert got[refused].status is PaymentStatus.FAILED and "Refused" in got[refused].failure_reason  # type: ignore[union-attr,operator]
    assert got[cancelled].status is PaymentStatus.FAILED  # type: ignore[union-attr]
    assert got[refunded].status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]
    assert "refunded 4.00 EUR" in (got[refunded].review_reason or "")  # type: ignore[union-attr]
    assert "disputed" in (got[charged_back].review_reason or "")  # type: ignore[union-attr]


def test_adyen__report_available_queues_reconcile_jobs_for_unfinished_payments(
        app: App, db: Database, client: TestClient) -> None:
    pending = payment(db, "order-1", psp="adyen", status=PaymentStatus.PENDING, psp_reference="PSP1")
    payment(db, "order-2", psp="stripe", status=PaymentStatus.PENDING)
    report = adyen_item("REPORT_AVAILABLE", "payments_accounting_report_2026_12_01.csv", "",
                        reason="https://ca-test.adyen.com/reports/download/x.csv")
    assert client.post("/webhooks/adyen", json=adyen_body(report)).text == "[accepted]"
    work(app)
    with db.begin() as conn:
        rows = conn.execute(sa.text("SELECT kind, payload FROM jobs WHERE queue = 'reconcile'")).all()
        state = conn.execute(sa.text("SELECT state FROM webhook_events")).scalar_one()
    queued = [(k, json.loads(p) if isinstance(p, str) else p) for k, p in rows]
    assert queued == [("reconcile", {"payment_id": pending})]
    assert state == "ignored"


def test_adyen__a_notification_from_another_merchant_account_is_not_ours(
        app: App, db: Database, client: TestClient) -> None:
    """Issue 22, item 2: two shops of one company both send order-1001. Ours is in ShopECOM; an AUTHORISATION
    from ShopPOS naming order-1001 (or its PSP reference) is kept as unknown_payment, never healing ours."""
    pid = payment(db, "order-1001", psp="adyen")
    held = payment(db, "order-1002", psp="adyen", status=PaymentStatus.PENDING, psp_reference="PSP2")
    for body in (adyen_item("AUTHORISATION", "PSP1", "order-1001", account="ShopPOS"),
                 adyen_item("CANCELLATION", "MOD2", "order-1002", original="PSP2", account="ShopPOS")):
        assert client.post("/webhooks/adyen", json=adyen_body(body)).text == "[accepted]"
    work(app)
    store = PaymentStore(db)
    assert [(p.status, p.psp_reference) for p in store.get_many([pid, held])] == [
        (PaymentStatus.PROCESSING, None), (PaymentStatus.PENDING, "PSP2")]
    assert [len(store.events(i)) for i in (pid, held)] == [2, 2]  # created, then the test's own move
    with db.begin() as conn:
        assert [tuple(r) for r in conn.execute(sa.text("SELECT state, payment_id FROM webhook_events"))] == [
            ("unknown_payment", None)] * 2
    unknown = app.webhooks.unknown_between(psp="adyen", since=app.jobs.db_now().replace(year=2000),
                                           until=app.jobs.db_now().replace(year=2100))
    assert [(e.merchant_reference, e.merchant_account) for e in unknown] == [
        ("order-1001", "ShopPOS"), ("order-1002", "ShopPOS")]  # recon report: missing_locally


@pytest.mark.parametrize("case", ["tampered", "other_key", "no_signature", "not_json"])
def test_adyen__a_bad_item_refuses_the_whole_request(app: App, db: Database, client: TestClient, case: str) -> None:
    good = adyen_item("AUTHORISATION", "PSP1", "order-1")
    bad = adyen_item("AUTHORISATION", "PSP2", "order-2", key=secrets.token_hex(32) if case == "other_key"
                     else ADYEN_KEY)
    if case == "tampered":
        bad["amount"]["value"] = 1
    if case == "no_signature":
        bad.pop("additionalData")
    content = b"{not json" if case == "not_json" else json.dumps(
        {"live": "false", "notificationItems": [{"NotificationRequestItem": good}, {"NotificationRequestItem": bad}]}
    ).encode()
    r = client.post("/webhooks/adyen", content=content, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.text != "[accepted]"
    assert count(db, "webhook_events") == 0


def test_adyen__basic_auth_when_configured(db_url: str, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_ADYEN_HMAC_KEY", ADYEN_KEY)
    monkeypatch.setenv("RECON_ADYEN_WEBHOOK_USERNAME", "adyen")
    monkeypatch.setenv("RECON_ADYEN_WEBHOOK_PASSWORD", "s3cret-pass")
    application = App(database_url=db_url)
    body = adyen_body(adyen_item("AUTHORISATION", "PSP1", "order-1"))
    with TestClient(create_app(application), base_url="http://127.0.0.1") as c:
        assert c.post("/webhooks/adyen", json=body).status_code == 401
        assert c.post("/webhooks/adyen", json=body, auth=("adyen", "wrong")).status_code == 401
        assert count(db, "webhook_events") == 0
        assert c.post("/webhooks/adyen", json=body, auth=("adyen", "s3cret-pass")).text == "[accepted]"
        assert c.post("/webhooks/stripe", content=b"{}").status_code == 404  # no Stripe secret: no endpoint
    application.db.dispose()


def test_serve__refuses_to_start_without_any_webhook_secret(db_url: str, recon: Runner) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECON_STRIPE", "RECON_ADYEN"))}
    r = recon("serve", "--port", "0", db_url=db_url, env=env)
    assert r.returncode == 2 and "RECON_STRIPE_WEBHOOK_SECRET" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = recon("serve", "--port", "0", "--console", "--host", "0.0.0.0", db_url=db_url,  # nosec B104  # the test
              env={**env, "RECON_STRIPE_WEBHOOK_SECRET": STRIPE_NEW})
    assert r.returncode == 2 and "RECON_CONSOLE_TOKEN" in r.stderr


def test_report__lists_a_webhook_for_a_payment_we_do_not_know_as_missing_locally(
        app: App, db: Database, db_url: str, client: TestClient, recon: Runner, tmp_path: Path) -> None:
    import os
    from datetime import UTC, datetime, timedelta

    from psp_adapters.sandbox.server import SandboxServer

    post_stripe(client, stripe_event("payment_intent.succeeded", intent("pi_lost", "nobody", status="succeeded",
                                                                       amount=4200)))
    work(app)
    today = datetime.now(UTC).date()
    with SandboxServer(tmp_path / "psp.db", flavor="stripe", api_key="sk_test_report") as stripe_sandbox:
        env = {**os.environ, "RECON_STRIPE_BASE_URL": stripe_sandbox.url, "RECON_STRIPE_API_KEY": "sk_test_report"}
        r = recon("report", "--psp", "stripe", "--since", today.isoformat(), "--until",
                  (today + timedelta(days=1)).isoformat(), "--format", "json", db_url=db_url, env=env)
    assert r.returncode == 1, r.stderr  # a discrepancy
    items = [i for i in json.loads(r.stdout)["items"] if i["category"] == "missing_locally"]
    assert [(i["psp_reference"], i["merchant_reference"], i["psp_amount"]) for i in items] == [
        ("pi_lost", "nobody", 4200)]
    assert "payment_intent.succeeded webhook" in items[0]["detail"]


def test_serve__webhook_posts_go_straight_to_their_endpoint_and_everything_else_to_the_routes(
        app: App, client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    assert client.get("/webhooks/stripe").status_code == 405  # Starlette's route: POST only
    assert client.get("/healthz").text == "ok\n"
    assert client.post("/webhooks/elsewhere").status_code == 404
    intake = Intake(app.webhooks, app.webhook_config, max_attempts=5)

    async def broken(psp: str, request: Any) -> Any:
        raise RuntimeError("the endpoint broke")

    intake.receive = broken  # type: ignore[method-assign]
    with TestClient(create_app(app, intake=intake), base_url="http://127.0.0.1") as c, \
            caplog.at_level(logging.ERROR, logger="recon.webhooks"):
        answer = c.post("/webhooks/stripe", content=b"{}")
    assert answer.status_code == 500 and answer.text == "Internal Server Error"
    assert "webhook endpoint /webhooks/stripe failed" in caplog.text


def test_adyen__report_available_queues_window_jobs_where_the_adapter_lists_payments(app: App, db: Database) -> None:
    from recon.reconcile.webhook import report_sweep
    from recon.reconcile.window import WINDOW_KIND

    adyen = [payment(db, f"order-{n}", psp="adyen", status=PaymentStatus.PENDING, psp_reference=f"PSP{n}")
             for n in range(3)]
    payment(db, "order-s", psp="stripe", status=PaymentStatus.PENDING)
    sweep = report_sweep(app.payments, app.client(), queue="reconcile", listing_func=lambda: {"adyen", "stripe"},
                         config=app.reconcile_config)
    assert sweep("adyen") == 3
    with db.begin() as conn:
        rows = conn.execute(sa.text("SELECT kind, payload FROM jobs WHERE queue = 'reconcile'")).all()
    payloads = [(k, json.loads(p) if isinstance(p, str) else p) for k, p in rows]
    assert [k for k, _ in payloads] == [WINDOW_KIND]  # one window: one report download per account-day
    assert sorted(payloads[0][1]["ids"]) == adyen  # only the PSP whose report is new, none of Stripe's


# --- payouts ----------------------------------------------------------------------------------------------


def jobs_of(db: Database, kind: str) -> list[tuple[str, Any]]:
    with db.begin() as conn:
        rows = conn.execute(sa.text("SELECT queue, payload FROM jobs WHERE kind = :k ORDER BY id"), {"k": kind}).all()
    return [(q, json.loads(p) if isinstance(p, str) else p) for q, p in rows]


@pytest.mark.parametrize("event_type", ["payout.paid", "payout.failed", "payout.reconciliation_completed"])
def test_stripe__payout_events_queue_the_payouts_job(app: App, db: Database, client: TestClient,
                                                     event_type: str) -> None:
    po = canonical("payout", id="po_123", status=event_type.split(".")[1].replace("reconciliation_completed", "paid"))
    body = stripe_event(event_type, po)
    assert post_stripe(client, body).status_code == 200
    assert post_stripe(client, body).status_code == 200  # redelivered: one event, one job
    work(app)
    assert jobs_of(db, "payouts") == [("close", {"psp": "stripe", "days_back": 31, "files": ["po_123"]})]
    with db.begin() as conn:
        assert conn.execute(sa.text("SELECT news, state, psp_reference FROM webhook_events")).one() == (
            "payout", "applied", "po_123")


def test_adyen__a_settlement_details_report_queues_the_payouts_job_not_a_sweep(
        app: App, db: Database, client: TestClient) -> None:
    payment(db, "order-1", psp="adyen", status=PaymentStatus.PENDING, psp_reference="PSP1")
    report = adyen_item("REPORT_AVAILABLE", "settlement_detail_report_batch_7.csv", "",
                        reason="https://ca-test.adyen.com/reports/download/MerchantAccount/ShopECOM/"
                               "settlement_detail_report_batch_7.csv")
    assert client.post("/webhooks/adyen", json=adyen_body(report)).text == "[accepted]"
    work(app)
    assert jobs_of(db, "payouts") == [("close", {"psp": "adyen", "days_back": 31,
                                                 "files": ["settlement_detail_report_batch_7.csv"]})]
    assert jobs_of(db, "reconcile") == []
