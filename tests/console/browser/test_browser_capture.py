"""Capturing and cancelling from an authorised payment's page in a real browser, at 1366 px and at 390 px: the
capture form (amount in major units, the whole authorisation by default), a refusal shown next to it, a cancel
refused until its confirmation is ticked, then the capture queued by the signed-in operator (POST -> redirect ->
GET) and listed among the payment's captures and cancels; at 390 px nothing is wider than the screen."""

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
def test_browser_capture__refused_next_to_the_form_cancel_needs_its_confirmation_then_captured(
    db: Database, db_url: str, console: Console, page: Page, recon: Runner, tmp_path: Path, width: int
) -> None:
    paid(db, "order-66", status=PaymentStatus.AUTHORISED, capture_mode="manual")
    sign_in(console, page, "ann")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(console.at("/payments/order-66"))
    section = page.locator("#captures")
    assert "up to 50.00 EUR can be captured" in section.inner_text()
    form = page.locator("form[action$='/capture']")
    assert form.get_by_label("Amount (EUR)").input_value() == "50.00"  # the whole authorisation by default
    form.get_by_label("Amount (EUR)").fill("60.00")
    submit(page, form.get_by_role("button", name="Capture"), refused=True)
    alert = page.locator("form[action$='/capture'] [data-form-error='capture']")
    assert "not captured:" in alert.inner_text() and "more than the 5000" in alert.inner_text()
    assert page.locator("form[action$='/capture'] input[name=amount]").input_value() == "60.00"

    cancel = page.locator("form[action$='/cancel']")
    submit(page, cancel.get_by_role("button", name="Cancel the authorisation"), refused=True)
    refusal = page.locator("form[action$='/cancel'] [data-form-error='cancel']")
    assert 'tick "Yes, release the whole authorisation" to confirm' in refusal.inner_text()
    assert recon_json(recon, db_url, "payments", "show", "order-66")["modifications"] == []  # nothing written

    page.locator("form[action$='/capture'] input[name=amount]").fill("30.00")
    submit(page, page.locator("form[action$='/capture']").get_by_role("button", name="Capture"))
    page.screenshot(path=tmp_path / f"capture-{width}.png", full_page=True)
    assert "/payments/order-66" in page.url
    assert "capture order-66-capture1 of 30.00 EUR queued by ann" in page.content()
    row = page.locator("tr[data-modification='order-66-capture1']")
    assert row.locator("[data-modification-status]").inner_text() == "created" and "30.00 EUR" in row.inner_text()
    assert page.locator("form[action$='/capture']").count() == 0  # one capture or cancel a payment
    assert page.locator("[data-stat='modification-under-way']").is_visible()
    [made] = recon_json(recon, db_url, "payments", "show", "order-66")["modifications"]
    assert (made["kind"], made["amount"], made["requested_by"]) == ("capture", 3000, "ann")
    assert_fits(page, width)
