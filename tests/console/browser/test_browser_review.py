"""Resolving a payment in review through the console's form, against the PSP sandbox's real answer over HTTP:
the audit event the command line shows, and an override of the PSP's answer refused first, then recorded."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from psp_adapters.sandbox.server import SandboxServer
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.operator_rows import Role
from recon.rows import PaymentStatus
from tests.cli import Runner
from tests.console.browser.conftest import Console, charged_into_review, recon_json, sign_in, submit
from tests.operators import add_operator

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def fill_resolve(page: Page, *, to: str, reason: str, override: bool = False, refused: bool = False) -> None:
    form = page.locator("form[action$='/resolve']")
    form.locator("select[name=as]").select_option(to)
    form.locator("input[name=reason]").fill(reason)
    form.locator("input[name=override]").set_checked(override)
    submit(page, form.locator("button[type=submit]"), refused=refused)


def test_browser_review__resolve_from_the_queue_records_a_manual_event_with_operator_and_reason(
        db: Database, db_url: str, sandbox: SandboxServer, console: Console, page: Page, recon: Runner,
        tmp_path: Path) -> None:
    pid = charged_into_review(db, sandbox, "order-1042", amount=1250, psp_amount=990)
    add_operator(db, "alice", Role.OPERATOR)
    sign_in(console, page, "alice")

    page.goto(console.at("/review"))
    row = page.locator("tr[data-payment='order-1042']")
    assert row.locator("[data-kind]").get_attribute("data-kind") == "amount_mismatch"
    assert "12.50 EUR" in row.inner_text()
    row.get_by_role("link", name="order-1042").click()
    page.wait_for_url("**/payments/order-1042")
    assert page.locator("[data-stat='payment-status']").inner_text() == "needs_review"

    fill_resolve(page, to="succeeded", reason="partial capture agreed with the merchant")
    page.screenshot(path=tmp_path / "resolved.png", full_page=True)
    assert page.locator("[data-stat='payment-status']").inner_text() == "succeeded"
    assert "resolved as succeeded by alice" in page.content()

    # the audit event, as the command line shows it
    doc = recon_json(recon, db_url, "review", "show", "order-1042")
    last = doc["events"][-1]
    assert (last["from_status"], last["to_status"], last["source"]) == ("needs_review", "succeeded", "manual")
    details = last["details"]
    assert details["operator"] == "alice" and details["reason"] == "partial capture agreed with the merchant"
    assert details["override"] is False and details["review_kind"] == "amount_mismatch"
    assert details["ours"] == {"amount": 1250, "currency": "EUR"}
    assert details["psp"] == {"amount": 990, "currency": "EUR"}  # the sandbox was asked again: its amount
    shown = recon_json(recon, db_url, "payments", "show", "order-1042")
    assert shown["payment"]["status"] == "succeeded"
    assert PaymentStore(db).get(pid).status is PaymentStatus.SUCCEEDED  # type: ignore[union-attr]
    assert page.locator("tr[data-source='manual']").count() == 2  # creation and the resolution


def test_browser_review__an_override_is_refused_then_requested_and_approved_by_a_second_operator(
        db: Database, db_url: str, sandbox: SandboxServer, console: Console, page: Page, recon: Runner,
        tmp_path: Path) -> None:
    pid = charged_into_review(db, sandbox, "order-7", amount=1000, psp_amount=999)
    events_before = len(PaymentStore(db).events(pid))

    sign_in(console, page, "ann")
    page.goto(console.at("/payments/order-7"))
    fill_resolve(page, to="failed", reason="customer says it was refunded", refused=True)
    page.screenshot(path=tmp_path / "refused.png", full_page=True)
    text = page.get_by_role("alert").inner_text()
    assert "not resolved" in text and "the PSP says it succeeded" in text and "9.99 EUR taken" in text
    assert page.locator("[data-stat='payment-status']").inner_text() == "needs_review"
    assert PaymentStore(db).get(pid).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]
    assert len(PaymentStore(db).events(pid)) == events_before  # nothing written
    # what was typed is kept for the second try
    assert page.locator("input[name=reason]").input_value() == "customer says it was refunded"

    fill_resolve(page, to="failed", reason="refunded by hand, ticket 88", override=True)
    page.screenshot(path=tmp_path / "requested.png", full_page=True)
    assert "override requested by ann: approval 1 waits for another approver" in page.get_by_role(
        "status").inner_text()
    assert page.locator("[data-stat='payment-status']").inner_text() == "needs_review"  # not yet: four eyes

    page.goto(console.at("/approvals"))  # ann may not approve: an operator, and her own request
    submit(page, page.get_by_role("button", name="Approve 1"), refused=True)
    sign_in(console, page, "bob")
    page.goto(console.at("/approvals"))
    assert "refunded by hand, ticket 88" in page.inner_text("main")
    submit(page, page.get_by_role("button", name="Approve 1"))
    page.screenshot(path=tmp_path / "approved.png", full_page=True)
    assert "approved by bob" in page.get_by_role("status").inner_text()
    page.goto(console.at("/payments/order-7"))
    assert page.locator("[data-stat='payment-status']").inner_text() == "failed"

    last = recon_json(recon, db_url, "payments", "show", "order-7")["events"][-1]
    assert (last["to_status"], last["source"]) == ("failed", "manual")
    assert last["details"]["override"] is True and last["details"]["operator"] == "ann"
    assert last["details"]["approved_by"] == "bob"
    assert "the PSP says it succeeded" in last["details"]["contradicts_psp"]
    [row] = recon_json(recon, db_url, "stats")["resolutions"]["by_day"]
    assert (row["operator"], row["status"], row["count"], row["overrides"]) == ("ann", "failed", 1, 1)
