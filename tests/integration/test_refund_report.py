"""`recon report` and refunds (and disputes), on both databases: the PSP's refund line of a succeeded payment is
matched when our own refunds (not failed) account for it, and stays a status_mismatch when they do not (a refund we
never asked for, or one of ours that failed); a chargeback line names the payment's dispute as recorded."""

from __future__ import annotations

from datetime import timedelta

from recon.db.database import Database
from recon.db.dispute_store import DisputeStore
from recon.db.refund_store import RefundStore
from recon.dispute_rows import DisputeStatus, DisputeWord
from recon.reconcile.settlement import Category
from recon.refund_rows import NewRefund, RefundSource, RefundTransition
from recon.rows import PaymentStatus
from tests.integration.test_report import Listing, line, local, report


def test_report__a_refund_line_our_refunds_account_for_is_matched(db: Database) -> None:
    ours = local(db, "refunded-by-us", psp_reference="R1")
    local(db, "refunded-elsewhere", psp_reference="R2")
    failed = local(db, "refund-failed", psp_reference="R3")
    refunds = RefundStore(db)
    refunds.create([NewRefund(ours, "rf-1", 1000, None, "alice")], queue="charges")
    [gone] = refunds.create([NewRefund(failed, "rf-3", 1000, None, "alice")], queue="charges")
    with db.begin() as conn:
        assert refunds.apply(conn, RefundTransition(gone, PaymentStatus.CREATED, PaymentStatus.FAILED,
                                                    RefundSource.REFUND))
    listing = Listing([
        line("R1", "refunded-by-us", "succeeded", at=timedelta(days=3)),
        line("R1", None, "refunded", at=timedelta(days=1)),
        line("R2", "refunded-elsewhere", "succeeded", at=timedelta(days=3)),
        line("R2", None, "refunded", at=timedelta(days=1)),
        line("R3", "refund-failed", "succeeded", at=timedelta(days=3)),
        line("R3", None, "refunded", at=timedelta(days=1)),
    ])
    out, _ = report(db, listing)
    assert out.by_ref() == {"refunded-by-us": [Category.MATCHED], "refunded-elsewhere": [Category.STATUS_MISMATCH],
                            "refund-failed": [Category.STATUS_MISMATCH]}
    matched = next(i for i in out.items if i.merchant_reference == "refunded-by-us")
    assert matched.detail.startswith("refunded by our refunds (1000 minor units not failed)")


def test_report__a_chargeback_line_names_our_dispute(db: Database) -> None:
    disputed = local(db, "disputed", psp_reference="C1")
    local(db, "disputed-unknown", psp_reference="C2")
    with db.begin() as conn:
        DisputeStore(db).record(conn, DisputeWord(disputed, "sandbox", "dp_C1", DisputeStatus.LOST, 1000, "EUR", None,
                                                  "fraudulent", "lost", None), details={}, job_id=None, attempt=None)
    listing = Listing([
        line("C1", "disputed", "succeeded", at=timedelta(days=3)),
        line("C1", None, "chargeback", at=timedelta(days=1)),
        line("C2", "disputed-unknown", "succeeded", at=timedelta(days=3)),
        line("C2", None, "chargeback", at=timedelta(days=1)),
    ])
    out, _ = report(db, listing)
    assert out.by_ref() == {"disputed": [Category.STATUS_MISMATCH], "disputed-unknown": [Category.STATUS_MISMATCH]}
    details = {i.merchant_reference: i.detail for i in out.items}
    assert details == {"disputed": "the PSP says chargeback; our dispute dp_C1 lost; 2 PSP lines merged",
                       "disputed-unknown": "the PSP says chargeback; 2 PSP lines merged"}
