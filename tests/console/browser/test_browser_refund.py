"""Refunding from a payment's page in a real browser, at 1366 px and at 390 px: the form (amount in major units,
the PSP's reason codes), a refusal shown next to it (after a redirect, so a reload sends nothing), then the
refund queued by the signed-in operator (POST -> redirect -> GET) and listed; at 390 px nothing is wider than the
screen."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from recon.db.database import Database
from recon.rows import PaymentStatus
from tests.cli import Runner
from tests.console.browser.conftest import Console, assert_fits, paid, recon_json, sign_in, submit

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.mark.parametrize("width", [1366, 390])
def test_browser_refund__refused_next_to_the_form_then_queued_by_the_operator(
    db: Database, db_url: str, console: Console, page: Page, recon: Runner, tmp_path: Path, width: int
) -> None:
    paid(db, "order-55", status=PaymentStatus.SUCCEEDED)
    sign_in(console, page, "ann")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(console.at("/payments/order-55"))
    form = page.locator("form[action$='/refund']")
    assert "50.00 EUR can still be refunded" in page.locator("#refunds").inner_text()
    form.get_by_label("Amount (EUR)").fill("60.00")
    form.locator("select[name=reason]").select_option("requested_by_customer")
    submit(page, form.get_by_role("button", name="Refund"))  # refused: POST -> redirect -> GET all the same
    alert = page.locator("form[action$='/refund'] [data-form-error='refund']")
    assert "not refunded: amount: amount 60.00 is more than the 50.00 EUR" in alert.inner_text()
    assert page.locator("form[action$='/refund'] input[name=amount]").input_value() == "60.00"
    assert recon_json(recon, db_url, "payments", "show", "order-55")["refunds"] == []  # nothing written
    page.reload()  # a GET: no resubmission, the refusal still shown, still nothing written
    assert "amount 60.00 is more than" in page.locator("[data-form-error='refund']").inner_text()
    assert recon_json(recon, db_url, "payments", "show", "order-55")["refunds"] == []

    page.locator("form[action$='/refund'] input[name=amount]").fill("12.50")
    submit(page, page.locator("form[action$='/refund']").get_by_role("button", name="Refund"))
    page.screenshot(path=tmp_path / f"refund-{width}.png", full_page=True)
    assert "/payments/order-55" in page.url
    assert "refund order-55-r1 of 12.50 EUR queued by ann" in page.content()
    row = page.locator("tr[data-refund='order-55-r1']")
    assert row.locator("[data-refund-status]").inner_text() == "created" and "12.50 EUR" in row.inner_text()
    [made] = recon_json(recon, db_url, "payments", "show", "order-55")["refunds"]
    assert (made["amount"], made["requested_by"], made["reason"]) == (1250, "ann", "requested_by_customer")
    assert_fits(page, width)
