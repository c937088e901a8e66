"""Refunds in `recon stats` and the metrics endpoint, on both databases: counted by status, and the refunds in
flight (created, processing, pending) in the money at risk with the unfinished payments."""

from __future__ import annotations

import json

from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.refund_rows import NewRefund, RefundSource, RefundTransition
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.integration.test_metrics import served_samples

P = PaymentStatus


def workload(db: Database) -> None:
    """A pending payment of 3.00 EUR; a succeeded one of 50.00 EUR with a refund of 10.00 in flight and one of
    5.00 succeeded; a refund of 2.00 failed."""
    store = PaymentStore(db)
    pending, paid = store.create([NewPayment("shop", "order-p", 300, "EUR", "stripe"),
                                  NewPayment("shop", "order-s", 5000, "EUR", "stripe")], charge=False)
    refunds = RefundStore(db)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pending, P.CREATED, P.PENDING, EventSource.CHARGE))
        assert store.apply(conn, Transition(paid, P.CREATED, P.SUCCEEDED, EventSource.CHARGE, psp_reference="pi_s"))
    flying, done, failed = refunds.create([NewRefund(paid, "rf-1", 1000, None, "a"),
                                           NewRefund(paid, "rf-2", 500, None, "a"),
                                           NewRefund(paid, "rf-3", 200, None, "a")], queue="charges")
    with db.begin() as conn:
        assert refunds.apply(conn, RefundTransition(flying, P.CREATED, P.PENDING, RefundSource.REFUND))
        assert refunds.apply(conn, RefundTransition(done, P.CREATED, P.SUCCEEDED, RefundSource.REFUND))
        assert refunds.apply(conn, RefundTransition(failed, P.CREATED, P.FAILED, RefundSource.REFUND))


def test_stats__refunds_by_status_and_in_flight_in_the_money_at_risk(db: Database, db_url: str,
                                                                     recon: Runner) -> None:
    workload(db)
    doc = json.loads(recon("stats", "--json", db_url=db_url).stdout)
    pay = doc["payments"]
    assert pay["refunds"]["by_status"] == {"failed": 1, "pending": 1, "succeeded": 1}
    assert pay["refunds"]["in_flight"] == {"EUR": 1000}
    assert pay["money_at_risk"] == {"EUR": 1300}  # the pending payment's 3.00 and the refund's 10.00
    text = recon("stats", db_url=db_url).stdout
    assert "refunds: failed 1, pending 1, succeeded 1; in flight: 10.00 EUR" in text


def test_metrics__refunds_and_money_at_risk(db: Database) -> None:
    workload(db)
    samples = served_samples(db)
    assert samples[("recon_refunds", (("currency", "EUR"), ("status", "pending")))] == 1
    assert samples[("recon_refunds", (("currency", "EUR"), ("status", "failed")))] == 1
    assert samples[("recon_refunds_in_flight_minor_units", (("currency", "EUR"),))] == 1000
    assert samples[("recon_money_at_risk_minor_units", (("currency", "EUR"),))] == 1300
