"""`recon report` and refunds, on both databases: the PSP's refund line of a succeeded payment is matched when our
own refunds (not failed) account for it, and stays a status_mismatch when they do not (a refund we never asked
for, or one of ours that failed)."""

from __future__ import annotations

from datetime import timedelta

from recon.db.database import Database
from recon.db.refund_store import RefundStore
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
