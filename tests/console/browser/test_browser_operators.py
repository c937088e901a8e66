"""Operators in a browser: ten wrong passwords lock the operator out (the right one is then refused too, and the
form says why), a viewer's write is refused with the reason beside nothing done, and a TOTP-enrolled operator
logs in with a code, their sealed seed refused clearly when the console has another key."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyotp
import pytest
import sqlalchemy as sa

from recon.db.database import Database
from recon.operators import SEED_UNREADABLE, Operators
from recon.totp_key import TotpKey, write_new_key
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


def test_browser_login__a_totp_code_opens_a_session_a_foreign_key_is_named(
        totp_key: TotpKey, token_console: Console, page: Page, db: Database, tmp_path: Path) -> None:
    # totp_key before token_console: the console reads RECON_TOTP_KEY_FILE once, when it starts
    seed = Operators(db).reset_password("amy", password=PASSWORD, by="root", totp=True)
    assert seed

    def with_code(code: str, *, refused: bool = False) -> None:
        page.goto(token_console.at("/login"))
        page.get_by_label("Operator").fill("amy")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_label("Code").fill(code)
        submit(page, page.get_by_role("button", name="Log in", exact=True), expect=303, refused=refused)

    with_code(pyotp.TOTP(seed).now())
    assert "amy (approver)" in page.inner_text("header")
    other = write_new_key(tmp_path / "other.key")  # amy's seed sealed under a key the console does not have
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE operators SET totp_secret = :v WHERE name = 'amy'"),
                     {"v": other.seal(seed, operator="amy")})
    with_code(pyotp.TOTP(seed).now(), refused=True)
    page.screenshot(path=tmp_path / "totp-unreadable.png", full_page=True)
    assert SEED_UNREADABLE in page.locator("main [data-form-error]").inner_text()
