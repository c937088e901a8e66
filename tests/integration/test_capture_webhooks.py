"""Capture and cancel webhooks on both databases, received by `recon serve`'s application and applied by the
webhook job: Adyen's AUTHORISATION of a manual-capture payment, CAPTURE, CAPTURE_FAILED and CANCELLATION (each
checked against Adyen's Webhooks-v1.json and signed with Adyen's own HMAC helper), and Stripe's
payment_intent.amount_capturable_updated and payment_intent.canceled (Stripe's canonical PaymentIntent). They move
our capture or cancel and, through it, the payment; a redelivery changes nothing; a cancel we never asked for
still ends its payment."""

from __future__ import annotations

import pytest

from recon.app import App
from recon.db.database import Database
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.modification_rows import ModificationSource, ModificationTransition, NewModification
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.adapters.stripe_oracle import canonical
from tests.console import TestClient
from tests.integration.test_webhooks import (
    ADYEN_ACCOUNT,
    adyen_body,
    adyen_item,
    post_stripe,
    stripe_event,
    webhook_app,
    webhook_client,
    work,
)

P = PaymentStatus
PAYMENT_REF = "8815208516304269"
CAPTURE_REF = "993617894906488A"


app = pytest.fixture(webhook_app, name="app")
client = pytest.fixture(webhook_client, name="client")


def manual(db: Database, ref: str, *, psp: str, to: PaymentStatus, psp_reference: str | None,
           amount: int = 5000) -> int:
    store = PaymentStore(db)
    account = ADYEN_ACCOUNT if psp == "adyen" else "shop"
    [pid] = store.create([NewPayment(account, ref, amount, "EUR", psp, capture_mode="manual")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, P.CREATED, to, EventSource.CHARGE, psp_reference=psp_reference))
    return pid


def sent(db: Database, pid: int, kind: str, ref: str, *, amount: int | None = None, pending_as: str) -> int:
    """Our capture or cancel, answered [received] with its pspReference."""
    store = ModificationStore(db)
    mid = store.create(NewModification(pid, kind, ref, "alice", amount=amount), queue="charges")
    with db.begin() as conn:
        assert store.apply(conn, ModificationTransition(mid, P.CREATED, P.PROCESSING, ModificationSource.MODIFICATION))
        assert store.apply(conn, ModificationTransition(mid, P.PROCESSING, P.PENDING, ModificationSource.MODIFICATION,
                                                        psp_modification_id=pending_as))
    return mid


def test_adyen__authorisation_of_a_manual_payment_then_capture_moves_both(app: App, client: TestClient,
                                                                          db: Database) -> None:
    pid = manual(db, "order-a", psp="adyen", to=P.PROCESSING, psp_reference=None)
    client.post("/webhooks/adyen", json=adyen_body(adyen_item("AUTHORISATION", PAYMENT_REF, "order-a", value=5000)))
    work(app)
    held = PaymentStore(db).get(pid)
    assert held is not None and (held.status, held.captured_amount) == (P.AUTHORISED, 0)  # not money yet
    mid = sent(db, pid, "capture", "order-a-capture1", amount=3000, pending_as=CAPTURE_REF)
    body = adyen_body(adyen_item("CAPTURE", CAPTURE_REF, "order-a-capture1", value=3000, original=PAYMENT_REF))
    assert client.post("/webhooks/adyen", json=body).text == "[accepted]"
    assert client.post("/webhooks/adyen", json=body).text == "[accepted]"  # a redelivery: stored once
    work(app)
    mod = ModificationStore(db).get(mid)
    assert mod is not None and mod.status is P.SUCCEEDED
    assert [e.source for e in ModificationStore(db).events(mid)][-1] == "webhook"
    paid = PaymentStore(db).get(pid)
    assert paid is not None and (paid.status, paid.captured_amount) == (P.SUCCEEDED, 3000)


def test_adyen__capture_failed_frees_the_claim_and_the_payment_stays_authorised(app: App, client: TestClient,
                                                                               db: Database) -> None:
    pid = manual(db, "order-b", psp="adyen", to=P.AUTHORISED, psp_reference=PAYMENT_REF)
    mid = sent(db, pid, "capture", "order-b-capture1", pending_as=CAPTURE_REF)
    client.post("/webhooks/adyen", json=adyen_body(adyen_item(
        "CAPTURE_FAILED", CAPTURE_REF, "order-b-capture1", value=5000, original=PAYMENT_REF, reason="Insufficient")))
    work(app)
    mod = ModificationStore(db).get(mid)
    assert mod is not None and mod.status is P.FAILED and mod.failure_reason == "psp: Insufficient"
    held = PaymentStore(db).get(pid)
    assert held is not None and (held.status, held.authorisation_claimed) == (P.AUTHORISED, 0)


def test_adyen__cancellation_ours_and_not_ours(app: App, client: TestClient, db: Database) -> None:
    ours = manual(db, "order-c", psp="adyen", to=P.AUTHORISED, psp_reference=PAYMENT_REF)
    mid = sent(db, ours, "cancel", "order-c-cancel1", pending_as=CAPTURE_REF)
    client.post("/webhooks/adyen", json=adyen_body(adyen_item("CANCELLATION", CAPTURE_REF, "order-c-cancel1",
                                                              value=5000, original=PAYMENT_REF)))
    theirs = manual(db, "order-d", psp="adyen", to=P.AUTHORISED, psp_reference="8815208516304270")
    client.post("/webhooks/adyen", json=adyen_body(adyen_item("CANCELLATION", "993617894906489A", "dashboard",
                                                              value=5000, original="8815208516304270")))
    work(app)
    mod = ModificationStore(db).get(mid)
    assert mod is not None and mod.status is P.SUCCEEDED
    cancelled = PaymentStore(db).get(ours)
    assert cancelled is not None and cancelled.status is P.FAILED
    assert cancelled.failure_reason == "cancelled: order-c-cancel1 by alice"
    other = PaymentStore(db).get(theirs)
    assert other is not None and other.status is P.FAILED
    assert other.failure_reason == "psp: cancelled (authorisation ended uncaptured)"


def test_stripe__amount_capturable_updated_authorises_and_canceled_ends_it(app: App, client: TestClient,
                                                                          db: Database) -> None:
    pid = manual(db, "order-s", psp="stripe", to=P.PENDING, psp_reference="pi_s")
    held = canonical("payment_intent", id="pi_s", status="requires_capture", amount=5000, currency="eur",
                     capture_method="manual", amount_capturable=5000, metadata={"merchant_reference": "order-s"})
    assert post_stripe(client, stripe_event("payment_intent.amount_capturable_updated", held)).status_code == 200
    work(app)
    authorised = PaymentStore(db).get(pid)
    assert authorised is not None and authorised.status is P.AUTHORISED and authorised.authorised_at is not None
    expired = canonical("payment_intent", id="pi_s", status="canceled", amount=5000, currency="eur",
                        capture_method="manual", cancellation_reason="automatic",
                        metadata={"merchant_reference": "order-s"})
    post_stripe(client, stripe_event("payment_intent.canceled", expired))
    work(app)
    ended = PaymentStore(db).get(pid)
    assert ended is not None and ended.status is P.FAILED
    assert ended.failure_reason == "psp: automatic (authorisation ended uncaptured)"


def stripe_intent(status: str, **more: object) -> dict[str, object]:
    return canonical("payment_intent", id="pi_w", status=status, amount=5000, currency="eur",
                     capture_method="manual", metadata={"merchant_reference": "order-w"}, **more)


def test_stripe__succeeded_and_canceled_end_our_capture_or_cancel(app: App, client: TestClient,
                                                                  db: Database) -> None:
    pid = manual(db, "order-w", psp="stripe", to=P.AUTHORISED, psp_reference="pi_w")
    mid = sent(db, pid, "capture", "order-w-capture1", amount=3000, pending_as="pi_w")  # its answer was lost
    post_stripe(client, stripe_event("payment_intent.succeeded", stripe_intent(
        "succeeded", amount_received=3000, amount_capturable=0)))
    work(app)
    mod = ModificationStore(db).get(mid)
    assert mod is not None and mod.status is P.SUCCEEDED
    paid = PaymentStore(db).get(pid)
    assert paid is not None and (paid.status, paid.captured_amount) == (P.SUCCEEDED, 3000)


def test_stripe__canceled_ends_our_cancel_and_fails_a_capture_with_its_payment(app: App, client: TestClient,
                                                                               db: Database) -> None:
    pid = manual(db, "order-w", psp="stripe", to=P.AUTHORISED, psp_reference="pi_w")
    mid = sent(db, pid, "capture", "order-w-capture1", pending_as="pi_w")
    post_stripe(client, stripe_event("payment_intent.canceled", stripe_intent(
        "canceled", cancellation_reason="automatic")))  # expired before our capture reached it
    work(app)
    mod = ModificationStore(db).get(mid)
    assert mod is not None and mod.status is P.FAILED and mod.failure_reason == "psp: automatic"
    ended = PaymentStore(db).get(pid)
    assert ended is not None and ended.status is P.FAILED and ended.authorisation_claimed == 0
    assert ended.failure_reason == "psp: automatic (authorisation ended uncaptured)"


def test_stripe__canceled_after_our_cancel_ends_it_as_ours(app: App, client: TestClient, db: Database) -> None:
    pid = manual(db, "order-w", psp="stripe", to=P.AUTHORISED, psp_reference="pi_w")
    mid = sent(db, pid, "cancel", "order-w-cancel1", pending_as="pi_w")
    post_stripe(client, stripe_event("payment_intent.canceled", stripe_intent("canceled", cancellation_reason=None)))
    work(app)
    mod = ModificationStore(db).get(mid)
    assert mod is not None and mod.status is P.SUCCEEDED
    ended = PaymentStore(db).get(pid)
    assert ended is not None and ended.status is P.FAILED
    assert ended.failure_reason == "cancelled: order-w-cancel1 by alice"


NEVER_REACHED = "never reached the PSP (not found after the grace period)"


def failed(db: Database, pid: int, ref: str, *, amount: int, why: str = NEVER_REACHED,
           psp_id: str | None = None) -> int:
    """Our capture, failed: healed as never having reached the PSP (no PSP id), or refused with ``psp_id``."""
    store = ModificationStore(db)
    mid = store.create(NewModification(pid, "capture", ref, "alice", amount=amount), queue="charges")
    with db.begin() as conn:
        assert store.apply(conn, ModificationTransition(mid, P.CREATED, P.PROCESSING, ModificationSource.MODIFICATION))
        assert store.apply(conn, ModificationTransition(mid, P.PROCESSING, P.FAILED, ModificationSource.RECONCILE,
                                                        psp_modification_id=psp_id, failure_reason=why))
    return mid


def test_adyen__capture_after_our_never_reached_the_psp_sends_the_capture_and_its_payment_to_review(
        app: App, client: TestClient, db: Database) -> None:
    pid = manual(db, "order-f", psp="adyen", to=P.AUTHORISED, psp_reference=PAYMENT_REF)
    mid = failed(db, pid, "order-f-capture1", amount=3000)
    claimed = PaymentStore(db).get(pid)
    assert claimed is not None and claimed.authorisation_claimed == 0  # its claim was given back
    body = adyen_body(adyen_item("CAPTURE", CAPTURE_REF, "order-f-capture1", value=3000, original=PAYMENT_REF))
    assert client.post("/webhooks/adyen", json=body).text == "[accepted]"
    assert client.post("/webhooks/adyen", json=body).text == "[accepted]"  # a redelivery: stored once
    work(app)
    reason = ("status_mismatch: ours failed (never reached the PSP (not found after the grace period)), the PSP "
              "says CAPTURE 30.00 EUR for capture order-f-capture1")
    mod = ModificationStore(db).get(mid)
    assert mod is not None and (mod.status, mod.review_reason) == (P.NEEDS_REVIEW, reason)
    assert mod.psp_modification_id == CAPTURE_REF and mod.failure_reason == NEVER_REACHED  # kept, never overwritten
    [event] = [e for e in ModificationStore(db).events(mid) if e.to_status == "needs_review"]
    assert (event.from_status, event.source) == ("failed", "webhook")
    assert (event.details or {})["psp_status"] == "CAPTURE" and (event.details or {})["psp_amount"] == 3000
    held = PaymentStore(db).get(pid)
    assert held is not None and (held.status, held.review_reason) == (P.NEEDS_REVIEW, reason)
    assert (held.captured_amount, held.psp_reference) == (0, PAYMENT_REF)  # what moved is for a person to say
    [moved] = [e for e in PaymentStore(db).events(pid) if e.to_status == "needs_review"]
    assert (moved.from_status, moved.source) == ("authorised", "webhook")
    assert (moved.details or {})["modification"] == "order-f-capture1"


def test_adyen__capture_of_a_capture_failed_earlier_reviews_a_payment_a_second_capture_succeeded(
        app: App, client: TestClient, db: Database) -> None:
    pid = manual(db, "order-g", psp="adyen", to=P.AUTHORISED, psp_reference=PAYMENT_REF)
    first = sent(db, pid, "capture", "order-g-capture1", amount=3000, pending_as=CAPTURE_REF)
    client.post("/webhooks/adyen", json=adyen_body(adyen_item(
        "CAPTURE_FAILED", CAPTURE_REF, "order-g-capture1", value=3000, original=PAYMENT_REF, reason="Insufficient")))
    work(app)
    second = sent(db, pid, "capture", "order-g-capture2", amount=2000, pending_as="993617894906490A")
    client.post("/webhooks/adyen", json=adyen_body(adyen_item(
        "CAPTURE", "993617894906490A", "order-g-capture2", value=2000, original=PAYMENT_REF)))
    work(app)
    paid = PaymentStore(db).get(pid)
    assert paid is not None and (paid.status, paid.captured_amount) == (P.SUCCEEDED, 2000)
    # the first capture's CAPTURE, after its CAPTURE_FAILED: the PSP captured 30.00 more than we count
    client.post("/webhooks/adyen", json=adyen_body(adyen_item(
        "CAPTURE", CAPTURE_REF, "order-g-capture1", value=3000, original=PAYMENT_REF)))
    work(app)
    reason = ("status_mismatch: ours failed (psp: Insufficient), the PSP says CAPTURE 30.00 EUR for capture "
              "order-g-capture1")
    mod = ModificationStore(db).get(first)
    assert mod is not None and (mod.status, mod.review_reason) == (P.NEEDS_REVIEW, reason)
    other = ModificationStore(db).get(second)
    assert other is not None and other.status is P.SUCCEEDED
    held = PaymentStore(db).get(pid)
    assert held is not None and (held.status, held.review_reason, held.captured_amount) == (
        P.NEEDS_REVIEW, reason, 2000)


def test_adyen__capture_failed_redelivered_leaves_a_failed_capture_failed(app: App, client: TestClient,
                                                                         db: Database) -> None:
    pid = manual(db, "order-h", psp="adyen", to=P.AUTHORISED, psp_reference=PAYMENT_REF)
    mid = failed(db, pid, "order-h-capture1", amount=3000, why="psp: Insufficient", psp_id=CAPTURE_REF)
    client.post("/webhooks/adyen", json=adyen_body(adyen_item(
        "CAPTURE_FAILED", CAPTURE_REF, "order-h-capture1", value=3000, original=PAYMENT_REF, reason="Insufficient")))
    work(app)  # a redelivered failure: older news
    mod = ModificationStore(db).get(mid)
    assert mod is not None and mod.status is P.FAILED
    held = PaymentStore(db).get(pid)
    assert held is not None and held.status is P.AUTHORISED


def test_stripe__succeeded_after_our_capture_failed_sends_it_and_its_payment_to_review(
        app: App, client: TestClient, db: Database) -> None:
    pid = manual(db, "order-w", psp="stripe", to=P.AUTHORISED, psp_reference="pi_w")
    mid = failed(db, pid, "order-w-capture1", amount=3000, why="declined: card_declined", psp_id="pi_w")
    post_stripe(client, stripe_event("payment_intent.succeeded", stripe_intent(
        "succeeded", amount_received=3000, amount_capturable=0)))
    work(app)
    reason = ("status_mismatch: ours failed (declined: card_declined), the PSP says succeeded 30.00 EUR for capture "
              "order-w-capture1")
    mod = ModificationStore(db).get(mid)
    assert mod is not None and (mod.status, mod.review_reason, mod.psp_modification_id) == (
        P.NEEDS_REVIEW, reason, "pi_w")
    held = PaymentStore(db).get(pid)
    assert held is not None and (held.status, held.review_reason, held.captured_amount) == (
        P.NEEDS_REVIEW, reason, 0)
