"""A PSP's own identifiers are shown exactly where they are shown as such, on both databases: an Adyen
pspReference of 16 digits that passes the Luhn check (one in ten do) on the payment page, the payments list, the
review queue, both CSV exports, a payout's lines and ``recon payments show`` / ``review show`` /
``payouts show``, with the refund's and the dispute's PSP ids beside it, while a card number planted in a free
text next to them (as if it reached the database some other way than the stores, which redact it) is still
masked at every one of those outputs."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime

import sqlalchemy as sa

from recon.db import schema
from recon.db.database import Database
from recon.db.dispute_store import DisputeStore
from recon.db.payment_store import PaymentStore
from recon.db.payout_store import PayoutStore
from recon.db.refund_store import RefundStore
from recon.dispute_rows import DisputeStatus, DisputeWord
from recon.payout_rows import LineKind, NewPayout, NewPayoutLine, PayoutStatus
from recon.redact import CARD_MASK, identifier, is_luhn_valid, redact
from recon.refund_rows import NewRefund
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.console import console

P = PaymentStatus
#: Adyen's pspReference of the payment, its refund's and its dispute's: 16 digits, each Luhn-valid
REFERENCE, REFUND_ID, DISPUTE_ID = "8515208516304268", "9912345678901239", "8816000000000007"
#: a card number, grouped as people type it
CARD = "4111 1111 1111 1111"


def seed(db: Database) -> int:
    """order-a1: succeeded at Adyen, refunded, disputed and paid out (the payout's id returned); order-a2: in
    review with the same PSP reference; a card number planted in their free texts past the stores (a direct
    UPDATE)."""
    store = PaymentStore(db)
    [paid, held] = store.create([NewPayment("shop", "order-a1", 5000, "EUR", "adyen"),
                                 NewPayment("shop", "order-a2", 7000, "EUR", "adyen")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(paid, P.CREATED, P.SUCCEEDED, EventSource.CHARGE, psp_reference=REFERENCE))
        assert store.apply(conn, Transition(held, P.CREATED, P.NEEDS_REVIEW, EventSource.RECONCILE,
                                            psp_reference=REFERENCE,
                                            review_reason="amount_mismatch: ours 7000 EUR, PSP 6900",
                                            details={"psp_reference": REFERENCE, "psp_status": "Authorised"}))
        DisputeStore(db).record(conn, DisputeWord(paid, "adyen", DISPUTE_ID, DisputeStatus.OPENED, 5000, "EUR", None,
                                                  "fraud", "Chargeback", None),
                                details={}, job_id=None, attempt=None)
    RefundStore(db).create([NewRefund(paid, "order-a1-r1", 1000, None, "ann")], queue="refunds")
    with db.begin() as conn:
        conn.execute(sa.update(schema.refunds).values(psp_refund_id=REFUND_ID))
        conn.execute(sa.update(schema.payments).where(schema.payments.c.id == paid)
                     .values(failure_reason=f"the customer read out {CARD} on the phone"))
        conn.execute(sa.update(schema.payments).where(schema.payments.c.id == held)
                     .values(review_reason=f"amount_mismatch: card {CARD} per ticket 7"))
    line = NewPayoutLine("row-1", LineKind.CHARGE, REFERENCE, "order-a1", 5000, 30, 4970, "EUR")
    return PayoutStore(db).store(NewPayout("adyen", "ShopEU", "ShopEU/42", 4970, "EUR", PayoutStatus.PAID,
                                           datetime.now(UTC).date(), None, None, (line,))).payout_id


def test_the_references_are_luhn_valid_and_redact_alone_would_mask_them() -> None:
    for ref in (REFERENCE, REFUND_ID, DISPUTE_ID):
        assert is_luhn_valid(ref) and redact(ref) == CARD_MASK  # what the outputs showed: "[card]"
        assert identifier(ref) == ref
    assert identifier(CARD) == CARD_MASK  # a grouped number is no single token: no identifier, masked
    assert identifier("sk_live_0123456789abcdef") == "[redacted]"  # a key is masked even as an identifier


def test_console__the_psp_identifiers_exactly_a_card_in_free_text_beside_them_masked(db: Database, db_url: str) -> None:
    payout = seed(db)
    with console(db_url, login="ann") as client:
        page = client.get("/payments/order-a1").text
        assert re.search(rf'data-stat="psp-reference">{REFERENCE}<', page)
        assert f"<td>{REFUND_ID}</td>" in page and f'<tr data-dispute="{DISPUTE_ID}"><td>{DISPUTE_ID}</td>' in page
        assert "the customer read out [card] on the phone" in page and "4111" not in page

        review_page = client.get("/payments/order-a2").text  # the event's evidence: its PSP reference exactly
        assert f"<dt>PSP reference</dt><dd>{REFERENCE}</dd>" in review_page
        assert "card [card] per ticket 7" in review_page and "4111" not in review_page

        listing = client.get("/payments?reference=order-a").text
        assert listing.count(f"<td data-psp-reference>{REFERENCE}</td>") == 2 and CARD_MASK not in listing

        queue = client.get("/review").text
        assert f"data-psp-reference title=\"the PSP's reference\">{REFERENCE}</small>" in queue
        assert "card [card] per ticket 7" in queue and "4111" not in queue

        rows = list(csv.DictReader(io.StringIO(client.get("/payments?reference=order-a&format=csv").text)))
        assert {r["merchant_reference"]: r["psp_reference"] for r in rows} == {"order-a1": REFERENCE,
                                                                              "order-a2": REFERENCE}
        assert {r["failure_reason"] for r in rows} == {"", "the customer read out [card] on the phone"}
        [row] = csv.DictReader(io.StringIO(client.get("/review?format=csv").text))
        assert row["psp_reference"] == REFERENCE and row["review_reason"] == "amount_mismatch: card [card] per ticket 7"

        lines = client.get(f"/payouts/{payout}").text  # a payout's lines: the PSP reference of each
        assert f"<td>{REFERENCE}</td>" in lines and CARD_MASK not in lines


def test_cli__payments_show_and_review_show_print_the_psp_identifiers_exactly(db: Database, db_url: str,
                                                                              recon: Runner) -> None:
    payout = seed(db)
    shown = recon("payments", "show", "order-a1", db_url=db_url)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert re.search(rf"psp_reference\s+│\s+{REFERENCE}\s", out), out
    assert REFUND_ID in out and DISPUTE_ID in out  # the refunds' and disputes' tables
    assert "the customer read out [card] on the phone" in out and "4111" not in out
    review = recon("review", "show", "order-a2", db_url=db_url)
    assert review.returncode == 0, review.stderr
    assert re.search(rf"psp_reference\s+│\s+{REFERENCE}\s", review.stdout), review.stdout
    assert "card [card] per ticket 7" in review.stdout and "4111" not in review.stdout
    lines = recon("payouts", "show", str(payout), db_url=db_url)
    assert lines.returncode == 0, lines.stderr
    assert re.search(rf"charge\s+{REFERENCE}\s+order-a1\s+gross 5000", lines.stdout), lines.stdout
