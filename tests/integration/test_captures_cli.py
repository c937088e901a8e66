"""`recon capture`, `recon cancel`, the payments CSV's capture column and `[psp.NAME] capture`, on both backends,
through the real command line: only an enabled operator with the operator role (recon.actions: an audit row for
each, refusals included), never more than authorised, one-line errors (exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.modification_rows import ModificationSource, ModificationTransition, NewModification
from recon.operator_rows import Role
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner


def authorised(db: Database, ref: str, amount: int = 5000) -> int:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("default", ref, amount, "EUR", "stripe", capture_mode="manual")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.AUTHORISED, EventSource.CHARGE,
                                            psp_reference=f"pi_{ref}"))
    return pid


def audit_rows(db: Database) -> list[tuple[str, str, str, str]]:
    with db.begin() as conn:
        return [tuple(r) for r in conn.execute(sa.text(  # type: ignore[misc]
            "SELECT actor, action, subject, outcome FROM audit_log WHERE action LIKE 'payment.%' ORDER BY id"))]


def test_capture__by_an_operator_partial_at_most_the_authorisation_audited(
        db: Database, db_url: str, recon: Runner, staff: dict[str, Role]) -> None:
    pid = authorised(db, "order-1")
    r = recon("capture", "order-1", "--amount", "20.00", "--by", "ann", "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)["modification"]
    assert (made["kind"], made["modification_reference"], made["amount"], made["status"], made["requested_by"]) == (
        "capture", "order-1-capture1", 2000, "created", "ann")
    [job] = JobStore(db).list_jobs(kind="capture", limit=5)
    assert job.payload == {"modification_id": made["id"]} and job.queue == "charges"
    r = recon("capture", "order-1", "--amount", "10.00", "--by", "ann", db_url=db_url)
    assert r.returncode == 2  # one capture per payment, as Stripe allows
    assert r.stderr.strip() == ("recon: capture 'order-1-capture2': a capture or cancel of the payment is already "
                                "under way or done; nothing written")
    r = recon("cancel", "order-1", "--by", "ann", db_url=db_url)
    assert r.returncode == 2 and "already under way or done" in r.stderr
    r = recon("capture", "order-1", "--amount", "1.00", "--by", "vic", db_url=db_url)  # a viewer
    assert r.returncode == 2 and "vic" in r.stderr
    r = recon("capture", "order-1", "--amount", "1.00", "--by", "nobody", db_url=db_url)
    assert r.returncode == 2
    assert [m.amount for m in ModificationStore(db).for_payment(pid)] == [2000]
    assert audit_rows(db) == [("ann", "payment.capture", "order-1", "done"),
                              ("ann", "payment.capture", "order-1", "refused"),
                              ("ann", "payment.cancel", "order-1", "refused")]
    r = recon("payments", "show", "order-1", "--json", db_url=db_url)
    shown = json.loads(r.stdout)
    assert [m["modification_reference"] for m in shown["modifications"]] == ["order-1-capture1"]
    assert (shown["payment"]["status"], shown["payment"]["capture_mode"]) == ("authorised", "manual")
    r = recon("payments", "show", "order-1", db_url=db_url)
    assert r.returncode == 0 and "1 captures and cancels of order-1" in r.stdout and "20.00 EUR" in r.stdout


def test_cancel__releases_all_and_refuses_a_capture_after_it(db: Database, db_url: str, recon: Runner,
                                                             staff: dict[str, Role]) -> None:
    authorised(db, "order-2")
    r = recon("capture", "order-2", "--amount", "50.01", "--by", "ann", db_url=db_url)
    assert r.returncode == 2
    assert r.stderr.strip() == ("recon: capture 'order-2-capture1': 5001 is more than the 5000 (minor units of EUR) "
                                "the payment authorised; nothing written")
    r = recon("cancel", "order-2", "--by", "ann", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "cancel order-2-cancel1 of 50.00 EUR queued (cancel job)"
    r = recon("capture", "order-2", "--by", "ann", db_url=db_url)
    assert r.returncode == 2 and "nothing written" in r.stderr
    PaymentStore(db).create([NewPayment("default", "auto-1", 1000, "EUR", "stripe")], charge=False)
    r = recon("capture", "auto-1", "--by", "ann", db_url=db_url)
    assert r.returncode == 2 and "captured automatically" in r.stderr
    assert recon("capture", "nope", "--by", "ann", db_url=db_url).returncode == 2


def test_payments_import__capture_column_and_the_psps_default(db: Database, db_url: str, tmp_path: Path,
                                                              recon: Runner) -> None:
    config = tmp_path / "recon.toml"
    config.write_text('[psp.stripe]\ncapture = "manual"\nauthorisation_validity = "5d"\n', encoding="utf-8")
    path = tmp_path / "payments.csv"
    path.write_text("merchant_reference,amount,currency,psp,payment_method,customer_reference,capture\n"
                    "m-1,1.00,EUR,stripe,pm_card_visa,cus_1,\n"
                    "m-2,1.00,EUR,stripe,pm_card_visa,cus_1,automatic\n"
                    "m-3,1.00,EUR,sandbox,,,\n"
                    "m-4,1.00,EUR,sandbox,,,Manual\n", encoding="utf-8")
    r = recon("--config", str(config), "payments", "import", str(path), db_url=db_url)
    assert r.returncode == 0, r.stderr
    got = {p.merchant_reference: p.capture_mode for p in PaymentStore(db).iter_payments()}
    assert got == {"m-1": "manual", "m-2": "automatic", "m-3": "automatic", "m-4": "manual"}
    bad = tmp_path / "bad.csv"
    bad.write_text("merchant_reference,amount,currency,psp,capture\nb-1,1.00,EUR,sandbox,later\n", encoding="utf-8")
    r = recon("payments", "import", str(bad), db_url=db_url)
    assert r.returncode == 2
    assert r.stderr.strip() == f"recon: {bad}:2: capture 'later' is neither automatic nor manual (field capture)"


def test_config__capture_settings_are_bounded(db_url: str, tmp_path: Path, recon: Runner) -> None:
    for text, message in [
        ('capture = "sometimes"', "psp.stripe.capture: expected one of automatic, manual, got 'sometimes'"),
        ('authorisation_validity = "90d"', "psp.stripe.authorisation_validity: must be over 0 and at most 60d"),
        ('authorisation_validity = "2d"\nauthorisation_warning = "3d"', "psp.stripe.authorisation_warning"),
    ]:
        config = tmp_path / "recon.toml"
        config.write_text(f"[psp.stripe]\n{text}\n", encoding="utf-8")
        r = recon("--config", str(config), "stats", db_url=db_url)
        assert r.returncode == 2 and message in r.stderr and str(config) in r.stderr, r.stderr


def in_review(db: Database, pid: int, ref: str) -> int:
    store = ModificationStore(db)
    mid = store.create(NewModification(pid, "capture", ref, "ann", amount=4000), queue="charges")
    with db.begin() as conn:
        assert store.apply(conn, ModificationTransition(mid, PaymentStatus.CREATED, PaymentStatus.NEEDS_REVIEW,
                                                        ModificationSource.RECONCILE,
                                                        review_reason="no_final_answer: after 2 checks"))
    return mid


def test_captures_resolve__only_in_review_by_an_operator_audited(db: Database, db_url: str, recon: Runner,
                                                                 staff: dict[str, Role]) -> None:
    lost = in_review(db, authorised(db, "order-5"), "order-5-capture1")
    taken_pid = authorised(db, "order-6")
    taken = in_review(db, taken_pid, "order-6-capture1")
    r = recon("captures", "resolve", "order-5-capture1", "--as", "failed", "--reason", "never captured at the PSP",
              "--by", "vic", db_url=db_url)
    assert r.returncode == 2  # a viewer
    r = recon("captures", "resolve", "order-5-capture1", "--as", "failed", "--reason", "never captured at the PSP",
              "--by", "ann", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "capture order-5-capture1 resolved as failed"
    failed = ModificationStore(db).get(lost)
    assert failed is not None and failed.failure_reason == "resolved by hand: never captured at the PSP"
    freed = PaymentStore(db).by_reference("order-5")
    assert freed is not None and (freed.status, freed.authorisation_claimed) == (PaymentStatus.AUTHORISED, 0)
    r = recon("captures", "resolve", "order-5-capture1", "--as", "succeeded", "--reason", "again", "--by", "ann",
              db_url=db_url)
    assert r.returncode == 2 and "not in needs_review" in r.stderr
    r = recon("captures", "resolve", "order-6-capture1", "--as", "succeeded", "--reason", "captured, dashboard",
              "--by", "ann", "--json", db_url=db_url)
    assert r.returncode == 0 and json.loads(r.stdout)["modification"]["status"] == "succeeded"
    paid = PaymentStore(db).get(taken_pid)
    assert paid is not None and (paid.status, paid.captured_amount) == (PaymentStatus.SUCCEEDED, 4000)
    assert [e.source for e in ModificationStore(db).events(taken)][-1] == "manual"
    with db.begin() as conn:
        rows = [tuple(r) for r in conn.execute(sa.text(
            "SELECT actor, subject, outcome FROM audit_log WHERE action = 'modification.resolve' ORDER BY id"))]
    assert rows == [("ann", "order-5-capture1", "done"), ("ann", "order-5-capture1", "refused"),
                    ("ann", "order-6-capture1", "done")]
