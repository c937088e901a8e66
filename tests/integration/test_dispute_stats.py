"""Disputes in `recon stats` and the metrics endpoint, on both databases: counted by PSP and status; the open ones
with the money withdrawn per currency and how many have their evidence due within seven days."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from recon.db.database import Database
from recon.db.dispute_store import DisputeStore
from recon.db.payment_store import PaymentStore
from recon.dispute_rows import DisputeStatus, DisputeWord
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.integration.test_metrics import served_samples

D = DisputeStatus


def workload(db: Database) -> None:
    """Three succeeded payments: a Stripe dispute of 10.00 EUR due in 2 days, one of 20.00 EUR due in 20 days (both
    open, fee 15.00 the first), and an Adyen one of 7.00 EUR lost."""
    store = PaymentStore(db)
    ids = store.create(
        [NewPayment("shop", f"order-{n}", 5000, "EUR", psp) for n, psp in enumerate(("stripe", "stripe", "adyen"))],
        charge=False,
    )
    now = datetime.now(UTC)
    words = [
        ("stripe", "dp_1", D.OPENED, 1000, 1500, now + timedelta(days=2)),
        ("stripe", "dp_2", D.OPENED, 2000, None, now + timedelta(days=20)),
        ("adyen", "8836", D.LOST, 700, None, None),
    ]
    with db.begin() as conn:
        for pid in ids:
            assert store.apply(
                conn,
                Transition(
                    pid, PaymentStatus.CREATED, PaymentStatus.SUCCEEDED, EventSource.CHARGE, psp_reference=f"psp-{pid}"
                ),
            )
        for pid, (psp, dp, status, amount, fee, due) in zip(ids, words, strict=True):
            DisputeStore(db).record(
                conn,
                DisputeWord(pid, psp, dp, status, amount, "EUR", fee, "fraudulent", None, due),
                details={},
                job_id=None,
                attempt=None,
            )


def test_stats__disputes_by_status_open_withdrawn_and_due_soon(db: Database, db_url: str, recon: Runner) -> None:
    workload(db)
    doc = json.loads(recon("stats", "--json", db_url=db_url).stdout)["disputes"]
    assert doc["by_psp"] == {"adyen": {"lost": 1}, "stripe": {"opened": 2}}
    assert (doc["open"], doc["due_soon"], doc["withdrawn"], doc["fees"]) == (2, 1, {"EUR": 3000}, {"EUR": 1500})
    text = recon("stats", db_url=db_url).stdout
    assert (
        "disputes: adyen: lost 1; stripe: opened 2; open 2, withdrawn 30.00 EUR, evidence due within 7 days: 1"
        in " ".join(text.split())
    )


def test_metrics__disputes(db: Database) -> None:
    workload(db)
    samples = served_samples(db)
    assert samples[("recon_disputes", (("psp", "stripe"), ("status", "opened")))] == 2
    assert samples[("recon_disputes", (("psp", "adyen"), ("status", "lost")))] == 1
    assert samples[("recon_disputes_open_withdrawn_minor_units", (("currency", "EUR"),))] == 3000
    assert samples[("recon_disputes_evidence_due_soon", ())] == 1
