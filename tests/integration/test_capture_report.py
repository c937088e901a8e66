"""`recon report` and captures, on both databases: a manual-capture payment settles what it captured, so a
partial capture's settlement line is matched against the captured amount, not the authorised one."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from recon.db.database import Database
from recon.reconcile.settlement import Category
from tests.integration.test_report import Listing, line, local, report


def test_report__a_partial_capture_settles_its_captured_amount(db: Database) -> None:
    partial = local(db, "captured-part", psp_reference="C1", amount=5000)
    local(db, "automatic", psp_reference="C2", amount=5000)
    with db.begin() as conn:  # as a confirmed capture of 30.00 leaves it (recon.db.modification_store)
        conn.execute(sa.text("UPDATE payments SET capture_mode = 'manual', captured_amount = 3000 WHERE id = :id"),
                     {"id": partial})
    listing = Listing([line("C1", "captured-part", "succeeded", at=timedelta(days=3), amount=3000),
                       line("C2", "automatic", "succeeded", at=timedelta(days=3), amount=3000)])
    out, _ = report(db, listing)
    assert out.by_ref() == {"captured-part": [Category.MATCHED], "automatic": [Category.AMOUNT_MISMATCH]}
