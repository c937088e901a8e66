"""The overview's disputes figure in Chromium at 390 px (a phone): the figure, its count, its amount withdrawn
per currency and its "evidence due soon" link all inside the screen and tappable (each link is what a tap at
its centre hits, at least 24 px high: WCAG 2.2's minimum target), nothing wider than the screen, and each link
leads to the payments behind it (``/payments?dispute=open|due_soon``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from recon.db.database import Database
from recon.db.dispute_store import DisputeStore
from recon.db.payment_store import PaymentStore
from recon.dispute_rows import DisputeStatus, DisputeWord
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.console.browser.conftest import Console, assert_fits, sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

#: WCAG 2.2 (2.5.8, target size minimum): a target at least 24 by 24 CSS px, or spaced as much
TARGET_MIN = 24


def disputed(db: Database, ref: str, dispute_id: str, *, due_in: timedelta, amount: int = 5000) -> None:
    """A succeeded Stripe payment of ours with an open dispute whose evidence is due in ``due_in``."""
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("shop", ref, amount, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.SUCCEEDED, EventSource.CHARGE,
                                            psp_reference=f"pi_{ref}"))
        DisputeStore(db).record(conn, DisputeWord(pid, "stripe", dispute_id, DisputeStatus.OPENED, amount, "EUR", 1500,
                                                  "fraudulent", "needs_response",
                                                  (datetime.now(UTC) + due_in).replace(microsecond=0)),
                                details={}, job_id=None, attempt=None)


def tappable(page: Page, link: Locator) -> None:
    """``link`` is inside the 390 px screen, at least TARGET_MIN px high, and a tap at its centre hits it."""
    link.scroll_into_view_if_needed()
    box = link.bounding_box()
    assert box is not None, "the link is not shown"
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    assert box["height"] >= TARGET_MIN and box["width"] >= TARGET_MIN, box
    hit = page.evaluate("([x, y]) => { const e = document.elementFromPoint(x, y); return e && e.closest('a') "
                        "&& e.closest('a').getAttribute('href'); }",
                        [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2])
    assert hit == link.get_attribute("href"), f"a tap at the centre of {link.get_attribute('href')} hits {hit}"


def test_browser_overview__the_disputes_figure_fits_and_its_links_work_at_390_px(
        db: Database, console: Console, page: Page, tmp_path: Path) -> None:
    disputed(db, "order-due", "dp_due", due_in=timedelta(days=2))
    disputed(db, "order-later", "dp_later", due_in=timedelta(days=30), amount=12345)
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(console, page, "ann")  # a login clears the figures the fixture's sign-in kept; its redirect shows /
    assert page.url == console.at("/")
    page.screenshot(path=tmp_path / "overview-390.png", full_page=True)
    assert_fits(page, 390)
    figure = page.locator("[data-figure='disputes']")
    figure.scroll_into_view_if_needed()
    box = figure.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    assert page.locator("[data-stat='disputes-open']").inner_text() == "2"
    assert page.locator("[data-stat='disputes-withdrawn-EUR']").get_attribute("data-minor") == str(5000 + 12345)
    assert "1 with evidence due within" in page.locator("[data-stat='disputes-due-soon']").inner_text()
    links = figure.locator("a")
    assert links.count() == 3  # the count, the amount withdrawn in EUR, the evidence due soon
    for i in range(links.count()):
        tappable(page, links.nth(i))

    page.locator("[data-stat='disputes-due-soon']").click()
    page.wait_for_load_state()
    assert page.url.endswith("/payments?dispute=due_soon")
    assert page.locator("tr[data-payment='order-due']").count() == 1
    assert page.locator("tr[data-payment='order-later']").count() == 0
    assert_fits(page, 390)
    page.go_back()
    page.locator("[data-figure='disputes'] a").first.click()
    page.wait_for_load_state()
    assert page.url.endswith("/payments?dispute=open")
    assert page.locator("tr[data-payment='order-due']").count() == 1
    assert page.locator("tr[data-payment='order-later']").count() == 1
    assert_fits(page, 390)
