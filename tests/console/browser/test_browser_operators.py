"""Operators in a browser: ten wrong passwords lock the operator out (the right one is then refused too, and the
form says why), and a viewer's write is refused with the reason beside nothing done."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from recon.db.database import Database
from tests.cli import Runner
from tests.console.browser.conftest import Console, recon_json, sign_in, submit
from tests.operators import PASSWORD

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def test_browser_login__ten_failures_lock_the_operator_out(token_console: Console, page: Page, tmp_path: Path,
                                                           db: Database) -> None:
    for _ in range(10):
        sign_in(token_console, page, "ann", password="not the password", refused=True)
        assert "wrong operator name, password or code" in page.get_by_role("alert").inner_text() or \
            "locked" in page.get_by_role("alert").inner_text()
    sign_in(token_console, page, "ann", refused=True)  # the right password, but locked
    page.screenshot(path=tmp_path / "locked.png", full_page=True)
    assert "too many failed logins: locked for 30 minutes" in page.get_by_role("alert").inner_text()
    assert page.get_by_label("Operator").input_value() == "ann" and page.get_by_label("Password").input_value() == ""
    failed = "SELECT count(*) FROM audit_log WHERE action = 'login.failed'"
    with db.begin() as conn:
        before = conn.exec_driver_sql(failed).scalar()
    page.reload()  # a GET: the password is not posted again, no failure counted
    assert "locked for 30 minutes" in page.get_by_role("alert").inner_text()
    with db.begin() as conn:
        assert conn.exec_driver_sql(failed).scalar() == before == 11
    sign_in(token_console, page, "bob", password=PASSWORD)  # another operator is not locked
    assert "bob (approver)" in page.inner_text("header")
    with db.begin() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM audit_log WHERE action = 'login.locked'").scalar() == 1


def test_browser_roles__a_viewer_reads_but_cannot_pause(console: Console, page: Page, recon: Runner,
                                                        db_url: str, tmp_path: Path) -> None:
    sign_in(console, page, "vic")
    page.goto(console.at("/psps"))
    form = page.locator("form[action='/psps/stripe/pause']")
    form.locator("input[name=reason]").fill("I should not")
    submit(page, form.get_by_role("button"), refused=True)
    page.screenshot(path=tmp_path / "refused.png", full_page=True)
    assert "vic has the role viewer; this takes operator or above" in page.inner_text("main")
    assert recon_json(recon, db_url, "approvals", "list")["approvals"] == []
    assert not any(p["paused"] for p in recon_json(recon, db_url, "psp", "status")["psps"])
