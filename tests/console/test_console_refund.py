"""The payment page's refund form and its movements, on both databases: a refund asked for by the signed-in
operator (operator role; a viewer is refused), the amount in major units, refused next to the form beyond what was
captured (nothing written), POST -> redirect -> GET once queued, the CSRF token required; the refunds and disputes
listed with the dispute's evidence deadline, in the payment's facts and in the review queue."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from recon.db.database import Database
from recon.db.dispute_store import DisputeStore
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.dispute_rows import DisputeStatus, DisputeWord
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.console import console, csrf_token, refusal

P = PaymentStatus


def succeeded(db: Database, ref: str, amount: int = 5000) -> int:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("shop", ref, amount, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, P.CREATED, P.SUCCEEDED, EventSource.CHARGE, psp_reference="pi_1"))
    return pid


def test_refund_form__queued_by_the_operator_refused_beyond_the_capture(
    db: Database, db_url: str, recon: Runner
) -> None:
    succeeded(db, "order-1")
    with console(db_url, login="ann") as client:
        page = client.get("/payments/order-1")
        assert page.status_code == 200 and 'action="/payments/order-1/refund"' in page.text
        assert "50.00 EUR can still be refunded" in page.text and '<option value="requested_by_customer">' in page.text
        csrf = csrf_token(client, "/payments/order-1")
        assert client.post("/payments/order-1/refund", data={"amount": "1.00"}).status_code == 403  # no CSRF token
        over = client.post("/payments/order-1/refund", data={"amount": "50.01", "csrf": csrf}, follow_redirects=False)
        said = refusal(client, over, to="/payments/order-1?", form="refund")
        assert said.startswith("not refunded: amount: amount 50.01 is more than the 50.00 EUR")
        assert over.headers["location"].endswith("#refunds")  # POST -> redirect -> GET: a reload sends nothing
        shown = client.get(over.headers["location"])
        assert shown.status_code == 200
        assert (
            'data-form-error="refund">not refunded: amount: amount 50.01 is more than the 50.00 EUR payment '
            "&#39;order-1&#39; has captured and not refunded"
        ) in shown.text
        assert 'value="50.01"' in shown.text  # the form keeps what was typed
        bad = client.post("/payments/order-1/refund", data={"amount": "1.5e1", "csrf": csrf}, follow_redirects=False)
        assert refusal(client, bad, to="/payments/order-1?", form="refund").startswith("not refunded: amount:")
        card = client.post("/payments/order-1/refund", data={"amount": "4242424242424242", "csrf": csrf},
                           follow_redirects=False)  # a card number typed into the form never reaches the address
        assert card.status_code == 303 and "4242424242424242" not in card.headers["location"]
        assert "4242424242424242" not in client.get(card.headers["location"]).text
        forged = over.headers["location"].replace("50.01", "40.00")  # a link cannot make up a refusal or a value
        assert "data-form-error" not in client.get(forged).text and 'value="40.00"' not in client.get(forged).text
        done = client.post(
            "/payments/order-1/refund",
            data={"amount": "12.34", "reason": "requested_by_customer", "operator": "mallory", "csrf": csrf},
            follow_redirects=False,
        )
        assert done.status_code == 303 and done.headers["location"].startswith("/payments/order-1")
        shown = client.get(done.headers["location"])
        assert "refund order-1-r1 of 12.34 EUR queued by ann" in shown.text
        assert 'data-refund="order-1-r1"' in shown.text and "37.66 EUR can still be refunded" in shown.text
    made = json.loads(recon("refunds", "show", "order-1-r1", "--json", db_url=db_url).stdout)["refund"]
    assert (made["amount"], made["requested_by"], made["reason"], made["status"]) == (
        1234,
        "ann",
        "requested_by_customer",
        "created",
    )  # the signed-in operator, never the typed field
    with console(db_url, login="vic") as viewer:
        r = viewer.post(
            "/payments/order-1/refund", data={"amount": "1.00", "csrf": csrf_token(viewer, "/payments/order-1")},
            follow_redirects=False,
        )
        assert refusal(viewer, r, to="/payments/order-1?", form="refund") == \
            "not refunded: vic has the role viewer; this takes operator or above"
    refs = [
        r["refund_reference"]
        for r in json.loads(recon("payments", "show", "order-1", "--json", db_url=db_url).stdout)["refunds"]
    ]
    assert refs == ["order-1-r1"]


def test_payment_page__disputes_with_their_evidence_deadline_and_the_queue_shows_it(db: Database, db_url: str) -> None:
    pid = succeeded(db, "order-2")
    due = (datetime.now(UTC) + timedelta(days=5)).replace(microsecond=0)
    store = PaymentStore(db)
    with db.begin() as conn:
        DisputeStore(db).record(
            conn,
            DisputeWord(
                pid, "stripe", "dp_2", DisputeStatus.OPENED, 5000, "EUR", 1500, "fraudulent", "needs_response", due
            ),
            details={},
            job_id=None,
            attempt=None,
        )
        assert store.apply(
            conn,
            Transition(
                pid,
                P.SUCCEEDED,
                P.NEEDS_REVIEW,
                EventSource.WEBHOOK,
                review_reason="psp_reversed: disputed (chargeback) 50.00 EUR",
                details={"psp_outcome": "dispute", "psp_status": "needs_response", "evidence_due_by": due.isoformat()},
            ),
        )
    with console(db_url, login="ann") as client:
        page = client.get("/payments/order-2").text
        assert 'data-dispute="dp_2"' in page and 'data-dispute-status="opened"' in page
        assert f'<time datetime="{due.isoformat()}">' in page and 'data-stat="evidence-due"' in page
        assert "15.00 EUR" in page  # the dispute fee
        assert 'action="/payments/order-2/refund"' not in page  # in review: nothing to refund from here
        queue = client.get("/review").text
        assert f"dispute evidence by {due.isoformat()}" in queue


def test_refund_form__refused_on_a_payment_that_is_not_succeeded_says_why_where_the_form_would_be(
    db: Database, db_url: str
) -> None:
    """A payment that cannot be refunded (here: still processing) has no refund form; a refund posted anyway
    (a stale page, a second tab) is refused, nothing written, and the refusal is shown in its refunds section
    after the redirect."""
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("shop", "order-3", 5000, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, P.CREATED, P.PROCESSING, EventSource.CHARGE, psp_reference="pi_3"))
    with console(db_url, login="ann") as client:
        page = client.get("/payments/order-3")
        assert 'action="/payments/order-3/refund"' not in page.text
        csrf = csrf_token(client, "/payments/order-3")
        r = client.post("/payments/order-3/refund", data={"amount": "10.00", "csrf": csrf}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].endswith("#refunds")
        shown = client.get(r.headers["location"]).text
    section = shown[shown.index('<section id="refunds">'):]
    section = section[:section.index("</section>")]
    assert 'data-form-error="refund">not refunded: ' in section and "processing" in section
    assert RefundStore(db).for_payment(pid) == []
