"""The close's pages and the approvals page in Chromium at 390 px (a phone): the payouts per day, one payout
with its lines, bank entry, exceptions and history, the open exceptions, the four-eyes requests. Nothing is
wider than the screen: the page body never scrolls sideways, and each table scrolls inside its own box.

Seeded through recon's own commands: payouts stored as the payouts job stores them (long PSP ids, a payout of
many lines), a camt.053 statement imported by ``recon bank import``, ``recon close`` (a match, a bank_missing
and an unexplained credit), and a PSP pause asked for by an operator (a pending four-eyes request)."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.db.database import Database
from recon.db.payout_store import PayoutStore
from recon.payout_rows import LineKind, NewPayout, NewPayoutLine, PayoutStatus
from tests.cli import Runner
from tests.console.browser.conftest import Console

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

IBAN = "NL91ABNA0417164300"
LONG = "po_1QxYzAbCdEfGhIjKlMnOpQrStUvWxYz0123456789"  # a PSP payout id as long as Stripe's get


def seed(db: Database, recon: Runner, db_url: str, tmp_path: Path) -> dict[str, int]:
    """Two payouts of ten days ago: LONG (40 lines, its credit carries its trace id) and po_gone (no credit);
    a foreign credit on the statement; closed."""
    day = datetime.now(UTC).date() - timedelta(days=10)
    store = PayoutStore(db)

    def payout(ref: str, amount: int, trace: str | None) -> int:
        per = amount // 40
        lines = [NewPayoutLine(f"txn_{ref}_{n:02d}_with_a_long_balance_transaction_id", LineKind.CHARGE,
                               f"pi_3QxYzAbCdEfGhIjKlMnOp{n:04d}", f"order-with-a-long-merchant-reference-{n:04d}",
                               per + 30, 30, per, "EUR") for n in range(40)]
        lines.append(NewPayoutLine(f"txn_{ref}_payout", LineKind.PAYOUT, None, None, -per * 40, 0, -per * 40, "EUR"))
        return store.store(NewPayout("stripe", "", ref, per * 40, "EUR", PayoutStatus.PAID, day, trace,
                                     "ACME LONG STATEMENT DESCRIPTOR", tuple(lines))).payout_id

    ids = {"matched": payout(LONG, 1_234_567_80, "TRACE0123456789ABCDEF"), "missing": payout("po_gone", 400_000, None)}
    config = tmp_path / "recon.toml"
    config.write_text(f'[bank.accounts.stripe-eur]\niban = "{IBAN}"\ncurrency = "EUR"\npsps = ["stripe"]\n')
    out = io.BytesIO()
    registry.writer("camt053", camt_version="08").write(out, [StatementToWrite(
        account=IBAN, currency="EUR", exponent=2, statement_id="S-390", opening=0, period_start=day,
        period_end=day, entries=[
            EntryToWrite(amount=1_234_567_80, direction="credit", booking_date=day, bank_reference="B-LONG-0001",
                         end_to_end_id="TRACE0123456789ABCDEF", remittance=f"STRIPE PAYOUT {LONG}"),
            EntryToWrite(amount=4242, direction="credit", booking_date=day, bank_reference="B-FOREIGN-0002",
                         remittance="INVOICE 2026-117 WITH A REMITTANCE TEXT LONGER THAN A PHONE IS WIDE")])])
    path = tmp_path / "s.xml"
    path.write_bytes(out.getvalue())
    assert recon("--config", str(config), "bank", "import", str(path), db_url=db_url).returncode == 0
    since, until = (day - timedelta(days=1)).isoformat(), (day + timedelta(days=1)).isoformat()
    closed = recon("--config", str(config), "close", "--psp", "stripe", "--since", since, "--until", until,
                   db_url=db_url)
    assert closed.returncode == 1, closed.stderr  # po_gone and the foreign credit
    asked = recon("psp", "pause", "sandbox", "--reason", "incident INC-2026-0042: the PSP answers 500 to every "
                  "capture since 09:00 UTC", "--by", "ann", db_url=db_url)
    assert asked.returncode == 1, asked.stderr  # a four-eyes request, pending
    return ids


@pytest.mark.parametrize("which", ["/payouts", "matched", "missing", "/payouts/exceptions", "/approvals"])
def test_browser_payouts__readable_at_390_px(db: Database, db_url: str, console: Console, page: Page,
                                             recon: Runner, tmp_path: Path, which: str) -> None:
    ids = seed(db, recon, db_url, tmp_path)
    path = which if which.startswith("/") else f"/payouts/{ids[which]}"
    page.set_viewport_size({"width": 390, "height": 844})
    response = page.goto(console.at(path))
    assert response is not None and response.status == 200
    page.screenshot(path=tmp_path / "narrow.png", full_page=True)
    assert page.locator("main table").count() >= 1  # the page shows what it is for
    # what reaches past the screen's edge outside a box that scrolls sideways itself (a table, the navigation)
    wide = page.evaluate("""(() => {
        const scrolls = e => { for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
            if (['auto', 'scroll'].includes(getComputedStyle(a).overflowX)) return true; } return false; };
        return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 391
            && getComputedStyle(e).position !== 'absolute' && !scrolls(e)).map(
            e => e.tagName + '.' + e.className + ': ' + (e.textContent || '').slice(0, 40)).slice(0, 5); })()""")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, wide
    assert wide == []
    # each table keeps within the screen and scrolls inside its own box when its content is wider
    for table in page.locator("main table").all():
        box = table.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 391, path
        overflow = table.evaluate("t => getComputedStyle(t).overflowX + ' ' + "
                                  "getComputedStyle(t.parentElement).overflowX")
        inner, outer = table.evaluate("t => [t.scrollWidth, t.clientWidth]")
        assert inner <= outer or "auto" in overflow or "scroll" in overflow, (path, overflow, inner, outer)
    nav = page.locator("header nav").bounding_box()
    assert nav is not None and nav["height"] < 40  # the navigation is one line
