"""`recon refunds import | show`, `recon refund` and the movements of `recon payments show`, on both backends,
through the real command line: all or nothing, one-line errors naming file, line and field (exit 2), and never
beyond what a payment captured."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.operator_rows import Role
from recon.refund_rows import NewRefund, RefundSource, RefundTransition
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner

HEADER = "merchant_reference,refund_reference,amount,reason\n"


def succeeded(db: Database, ref: str, amount: int, currency: str = "EUR", psp: str = "stripe") -> int:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("default", ref, amount, currency, psp)], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.SUCCEEDED, EventSource.CHARGE,
                                            psp_reference=f"pi_{ref}"))
    return pid


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "refunds.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_refunds_import__amounts_exact_jobs_queued(db: Database, db_url: str, tmp_path: Path, staff: object,
                                                  recon: Runner) -> None:
    a = succeeded(db, "order-1", 5000)
    b = succeeded(db, "order-2", 1000, currency="JPY")
    path = write(tmp_path, HEADER + "order-1,rf-1,12.34,requested_by_customer\norder-1,rf-2,37.66,\n"
                                    "order-2,rf-3,1000,duplicate\n")
    r = recon("refunds", "import", str(path), "--by", "ann", "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"file": str(path), "imported": 3, "refund_jobs_queued": 3}
    store = RefundStore(db)
    got = [(x.refund_reference, x.amount, x.currency, x.reason, x.requested_by) for x in
           store.for_payment(a) + store.for_payment(b)]
    assert got == [("rf-1", 1234, "EUR", "requested_by_customer", "ann"), ("rf-2", 3766, "EUR", None, "ann"),
                   ("rf-3", 1000, "JPY", "duplicate", "ann")]
    assert len(JobStore(db).list_jobs(kind="refund", limit=10)) == 3
    p = PaymentStore(db).get(a)
    assert p is not None and p.refunded_amount == 5000


@pytest.mark.parametrize(("rows", "message"), [
    ("order-1,rf-1,30.00,\norder-1,rf-2,30.00,\n",
     "refunds.csv:3: amount 30.00 is more than the 50.00 EUR payment 'order-1' has captured and not refunded after "
     "30.00 EUR asked above (field amount)"),
    ("order-9,rf-1,1.00,\n", "refunds.csv:2: payment 'order-9' not found (field merchant_reference)"),
    ("order-1,rf-1,1.005,\n", "refunds.csv:2: amount '1.005' has more decimals than EUR allows (2) (field amount)"),
    ("order-1,rf-1,1.00,because\n", "refunds.csv:2: reason 'because' is not one of the PSP's reason codes: "
                                     "duplicate, fraudulent, requested_by_customer (field reason)"),
    ("order-1,rf-1,1.00,\norder-1,rf-1,1.00,\n",
     "refunds.csv:3: refund_reference 'rf-1' is also on line 2 (field refund_reference)"),
    ("order-p,rf-1,1.00,\n", "refunds.csv:2: payment 'order-p' is pending; only a succeeded payment is refunded "
                              "(field merchant_reference)"),
])
def test_refunds_import__any_bad_row_imports_nothing(db: Database, db_url: str, tmp_path: Path, recon: Runner,
                                                     rows: str, message: str) -> None:
    succeeded(db, "order-1", 5000)
    [pending] = PaymentStore(db).create([NewPayment("default", "order-p", 100, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        PaymentStore(db).apply(conn, Transition(pending, PaymentStatus.CREATED, PaymentStatus.PENDING,
                                                EventSource.CHARGE))
    path = write(tmp_path, HEADER + rows)
    r = recon("refunds", "import", str(path), db_url=db_url)  # as the system (no --by)
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == f"recon: {tmp_path / message}"
    assert RefundStore(db).existing_references(["rf-1", "rf-2"]) == set()
    assert JobStore(db).list_jobs(kind="refund", limit=5) == []


def test_refunds_import__a_bad_header_is_refused(db: Database, db_url: str, tmp_path: Path, recon: Runner) -> None:
    path = write(tmp_path, "merchant_reference,amount\norder-1,1.00\n")
    r = recon("refunds", "import", str(path), db_url=db_url)
    assert r.returncode == 2 and "refunds.csv:1: the header must name the columns" in r.stderr


def test_refund__command_refunds_and_payments_show_lists_it(db: Database, db_url: str, recon: Runner,
                                                             staff: dict[str, Role]) -> None:
    succeeded(db, "order-1", 5000)
    r = recon("refund", "order-1", "--amount", "20.00", "--reason", "requested_by_customer", "--by", "bob",
              "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)["refund"]
    assert (made["refund_reference"], made["amount"], made["status"], made["requested_by"]) == (
        "order-1-r1", 2000, "created", "bob")
    r = recon("refund", "order-1", "--amount", "30.01", "--by", "bob", db_url=db_url)
    assert r.returncode == 2
    assert r.stderr.strip() == ("recon: --amount: amount 30.01 is more than the 30.00 EUR payment 'order-1' has "
                                "captured and not refunded")
    r = recon("payments", "show", "order-1", "--json", db_url=db_url)
    assert [x["refund_reference"] for x in json.loads(r.stdout)["refunds"]] == ["order-1-r1"]
    r = recon("payments", "show", "order-1", db_url=db_url)
    assert r.returncode == 0 and "1 refunds of order-1" in r.stdout and "20.00 EUR" in r.stdout
    r = recon("refunds", "show", "order-1-r1", "--json", db_url=db_url)
    shown = json.loads(r.stdout)
    assert shown["refund"]["payment"] == "order-1" and [e["to_status"] for e in shown["events"]] == ["created"]
    [event] = shown["events"]  # its fields as RefundEvent printed them, the refund's id named refund_id
    assert list(event) == ["id", "refund_id", "from_status", "to_status", "source", "at", "job_id", "attempt",
                           "details"]
    assert event["refund_id"] == shown["refund"]["id"] and event["source"] == "manual"
    assert datetime.fromisoformat(event["at"]).tzinfo is not None
    assert recon("refunds", "show", "nope", db_url=db_url).returncode == 2


def test_refunds_resolve__only_a_refund_in_review_and_by_hand(db: Database, db_url: str, recon: Runner,
                                                              staff: dict[str, Role]) -> None:
    pid = succeeded(db, "order-1", 5000)
    store = RefundStore(db)
    [rid] = store.create([NewRefund(pid, "rf-1", 2000, None, "alice")], queue="charges")
    r = recon("refunds", "resolve", "rf-1", "--as", "failed", "--reason", "x", "--by", "bob", db_url=db_url)
    assert r.returncode == 2 and "is created, not in needs_review" in r.stderr
    with db.begin() as conn:
        assert store.apply(conn, RefundTransition(rid, PaymentStatus.CREATED, PaymentStatus.NEEDS_REVIEW,
                                                  RefundSource.RECONCILE, review_reason="refund_reversed: x"))
    r = recon("refunds", "resolve", "rf-1", "--as", "failed", "--reason", "the PSP returned it", "--by", "bob",
              "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    done = store.get(rid)
    assert done is not None and done.status is PaymentStatus.FAILED
    assert done.failure_reason == "resolved by hand: the PSP returned it"
    last = store.events(rid)[-1]
    assert (last.source, last.details) == ("manual", {"operator": "bob", "reason": "the PSP returned it"})
    paid = PaymentStore(db).get(pid)
    assert paid is not None and paid.refunded_amount == 0  # its amount is free again


def test_refund__by_an_operator_role_checked_and_audited(db: Database, db_url: str, recon: Runner,
                                                         staff: dict[str, Role]) -> None:
    """``--by`` names an enabled operator whose role allows refunds (operator or above); a viewer, a name that is
    no operator and a refused amount leave nothing but their audit row."""
    succeeded(db, "order-1", 5000)
    for by, why in (("vic", "has the role viewer; this takes operator or above"), ("nobody", "is not an operator")):
        r = recon("refund", "order-1", "--amount", "1.00", "--by", by, db_url=db_url)
        assert r.returncode == 2 and why in r.stderr, r.stderr
    assert RefundStore(db).for_payment(PaymentStore(db).by_reference("order-1").id) == []  # type: ignore[union-attr]
    assert recon("refund", "order-1", "--amount", "50.01", "--by", "ann", db_url=db_url).returncode == 2
    r = recon("refund", "order-1", "--amount", "12.00", "--reason", "requested_by_customer", "--by", "ann",
              db_url=db_url)
    assert r.returncode == 0, r.stderr
    with db.begin() as conn:
        rows = [tuple(r) for r in conn.execute(sa.text(
            "SELECT actor, action, subject, outcome, evidence FROM audit_log WHERE action = 'refund.create' "
            "ORDER BY id"))]
    assert [r[:4] for r in rows] == [("ann", "refund.create", "order-1", "refused"),
                                     ("ann", "refund.create", "order-1", "done")]
    evidence = rows[1][4] if isinstance(rows[1][4], dict) else json.loads(rows[1][4])
    assert evidence == {"refund": "order-1-r1", "amount": 1200, "currency": "EUR", "reason": "requested_by_customer"}


def test_review_recheck__of_a_refund_queues_its_reconcile_job_and_is_audited(db: Database, db_url: str,
                                                                            recon: Runner,
                                                                            staff: dict[str, Role]) -> None:
    """``recon review recheck REFUND_REF`` queues the refund's reconcile job (asked again even when final) as an
    operator, with an audit row ``refund.recheck`` naming the job; a viewer is refused and queues nothing."""
    pid = succeeded(db, "order-1", 5000)
    [rid] = RefundStore(db).create([NewRefund(pid, "rf-1", 1500, None, "ann")], queue="charge")
    refused = recon("review", "recheck", "rf-1", "--by", "vic", db_url=db_url)
    assert refused.returncode == 2 and "has the role viewer" in refused.stderr
    assert JobStore(db).list_jobs(kind="reconcile_refund", limit=10) == []
    asked = recon("review", "recheck", "rf-1", "--by", "ann", "--json", db_url=db_url)
    assert asked.returncode == 0, asked.stderr
    job_id = json.loads(asked.stdout)["job_id"]
    [job] = JobStore(db).list_jobs(kind="reconcile_refund", limit=10)
    assert job.id == job_id and job.payload == {"refund_id": rid, "recheck": True}
    with db.begin() as conn:
        rows = [tuple(r) for r in conn.execute(sa.text(
            "SELECT actor, action, subject, outcome, evidence FROM audit_log WHERE action = 'refund.recheck' "
            "ORDER BY id"))]
    assert [r[:4] for r in rows] == [("ann", "refund.recheck", "rf-1", "done")]
    evidence = rows[0][4] if isinstance(rows[0][4], dict) else json.loads(rows[0][4])
    assert evidence == {"job": job_id, "status": "created"}
