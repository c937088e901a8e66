"""The payment page's capture form and cancel button, on both databases: shown for an authorised payment only, the
capture's amount in major units defaulting to the whole authorisation left, queued as the signed-in operator
(operator role; a viewer is refused), a refusal shown next to its form (422, nothing written), a cancel refused
until its confirmation is ticked, POST -> redirect -> GET, the CSRF token required; the page lists the payment's
captures and cancels."""

from __future__ import annotations

import json

import sqlalchemy as sa

from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.console import console, csrf_token, refusal

P = PaymentStatus


def authorised(db: Database, ref: str, amount: int = 5000) -> int:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("shop", ref, amount, "EUR", "stripe", capture_mode="manual")], charge=False)
    with db.begin() as conn:
        assert store.apply(
            conn, Transition(pid, P.CREATED, P.AUTHORISED, EventSource.CHARGE, psp_reference=f"pi_{ref}")
        )
    return pid


def modifications(recon: Runner, db_url: str, ref: str) -> list[tuple[str, str, int, str, str]]:
    shown = json.loads(recon("payments", "show", ref, "--json", db_url=db_url).stdout)["modifications"]
    return [(m["modification_reference"], m["kind"], m["amount"], m["status"], m["requested_by"]) for m in shown]


def audit_rows(db: Database) -> list[tuple[str, str, str, str]]:
    with db.begin() as conn:
        rows = conn.execute(
            sa.text("SELECT actor, action, subject, outcome FROM audit_log WHERE action LIKE 'payment.%' ORDER BY id")
        ).all()
    return [(r.actor, r.action, r.subject, r.outcome) for r in rows]


def test_capture_form__defaults_to_the_whole_authorisation_refused_beyond_it_then_queued(
    db: Database, db_url: str, recon: Runner
) -> None:
    authorised(db, "order-1")
    with console(db_url, login="ann") as client:
        page = client.get("/payments/order-1")
        assert page.status_code == 200 and 'action="/payments/order-1/capture"' in page.text
        assert 'action="/payments/order-1/cancel"' in page.text and "No capture or cancel." in page.text
        assert 'name="amount" maxlength="40" size="10" inputmode="decimal" value="50.00"' in page.text
        assert 'action="/payments/order-1/refund"' not in page.text  # nothing captured: nothing to refund
        csrf = csrf_token(client, "/payments/order-1")
        assert client.post("/payments/order-1/capture", data={"amount": "1.00"}).status_code == 403  # no CSRF
        over = client.post("/payments/order-1/capture", data={"amount": "50.01", "csrf": csrf},
                           follow_redirects=False)  # refused: POST -> redirect -> GET
        said = refusal(client, over, to="/payments/order-1?", form="capture")
        assert said.startswith("not captured: ") and "5001 is more than the 5000" in said
        assert over.headers["location"].endswith("#captures")
        assert 'value="50.01"' in client.get(over.headers["location"]).text  # the form keeps what was typed
        bad = client.post("/payments/order-1/capture", data={"amount": "1.5e1", "csrf": csrf}, follow_redirects=False)
        assert refusal(client, bad, to="/payments/order-1?", form="capture").startswith("not captured: amount")
        assert modifications(recon, db_url, "order-1") == []  # nothing written
        done = client.post(
            "/payments/order-1/capture",
            data={"amount": "", "operator": "mallory", "csrf": csrf},
            follow_redirects=False,
        )
        assert done.status_code == 303 and done.headers["location"].startswith("/payments/order-1")
        shown = client.get(done.headers["location"])
        assert "capture order-1-capture1 of 50.00 EUR queued by ann" in shown.text
        assert 'data-modification="order-1-capture1"' in shown.text
        assert 'data-modification-status="created"' in shown.text
        assert 'action="/payments/order-1/capture"' not in shown.text  # one capture or cancel a payment
        assert 'data-stat="modification-under-way"' in shown.text
        again = client.post("/payments/order-1/capture", data={"amount": "1.00", "csrf": csrf}, follow_redirects=False)
        assert "already under way or done" in refusal(client, again, to="/payments/order-1?", form="capture")
    # the signed-in operator, never the typed field; the whole authorisation by default
    assert modifications(recon, db_url, "order-1") == [("order-1-capture1", "capture", 5000, "created", "ann")]
    [job] = JobStore(db).list_jobs(kind="capture", limit=5)
    assert job.queue == "charges"
    with console(db_url, login="vic") as viewer:
        r = viewer.post(
            "/payments/order-1/capture", data={"amount": "1.00", "csrf": csrf_token(viewer, "/payments/order-1")},
            follow_redirects=False,
        )
        assert refusal(viewer, r, to="/payments/order-1?", form="capture") == \
            "not captured: vic has the role viewer; this takes operator or above"
    assert audit_rows(db) == [
        ("ann", "payment.capture", "order-1", "refused"),
        ("ann", "payment.capture", "order-1", "refused"),
        ("ann", "payment.capture", "order-1", "done"),
        ("ann", "payment.capture", "order-1", "refused"),
    ]


def test_cancel_button__asks_for_its_confirmation_then_queues_the_cancel(
    db: Database, db_url: str, recon: Runner
) -> None:
    authorised(db, "order-2", amount=1234)
    with console(db_url, login="ann") as client:
        csrf = csrf_token(client, "/payments/order-2")
        unconfirmed = client.post("/payments/order-2/cancel", data={"csrf": csrf}, follow_redirects=False)
        assert refusal(client, unconfirmed, to="/payments/order-2?", form="cancel") == \
            'not cancelled: tick "Yes, release the whole authorisation" to confirm'
        assert modifications(recon, db_url, "order-2") == []  # nothing written
        done = client.post("/payments/order-2/cancel", data={"confirm": "1", "csrf": csrf}, follow_redirects=False)
        assert done.status_code == 303
        shown = client.get(done.headers["location"])
        assert "cancel order-2-cancel1 of 12.34 EUR queued by ann" in shown.text
        assert 'data-modification="order-2-cancel1"' in shown.text
        refused = client.post("/payments/order-2/cancel", data={"confirm": "1", "csrf": csrf}, follow_redirects=False)
        assert refusal(client, refused, to="/payments/order-2?", form="cancel").startswith("not cancelled: ")
    assert modifications(recon, db_url, "order-2") == [("order-2-cancel1", "cancel", 1234, "created", "ann")]
    assert audit_rows(db) == [
        ("ann", "payment.cancel", "order-2", "done"),
        ("ann", "payment.cancel", "order-2", "refused"),
    ]


def test_payment_page__no_capture_form_unless_authorised(db: Database, db_url: str) -> None:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("shop", "order-3", 5000, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, P.CREATED, P.SUCCEEDED, EventSource.CHARGE, psp_reference="pi_3"))
    with console(db_url, login="ann") as client:
        page = client.get("/payments/order-3").text
        assert 'action="/payments/order-3/capture"' not in page and 'action="/payments/order-3/cancel"' not in page
        assert "No capture or cancel." in page
        csrf = csrf_token(client, "/payments/order-3")
        r = client.post("/payments/order-3/capture", data={"amount": "1.00", "csrf": csrf}, follow_redirects=False)
        assert refusal(client, r, to="/payments/order-3?", form="capture").startswith("not captured: ")
