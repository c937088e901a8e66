"""Console sessions in a browser: logging out ends the session on the server, so the cookie copied before it
opens nothing when sent again; a session left idle for 15 minutes ends, and the login form says why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from recon.clock import FixedClock
from recon.db.database import Database
from tests.console.browser.conftest import Console, submit
from tests.operators import PASSWORD

if TYPE_CHECKING:
    from playwright.sync_api import Page


def log_in(console: Console, page: Page) -> None:
    response = page.goto(console.at("/"))
    assert response is not None and response.status == 401
    page.get_by_label("Operator").fill("ann")
    page.get_by_label("Password").fill(PASSWORD)
    submit(page, page.get_by_role("button", name="Log in", exact=True), expect=303)
    assert page.url == console.at("/") and page.get_by_role("button", name="Log out").is_visible()
    assert "ann (operator)" in page.inner_text("header")


def test_browser_session__logout_ends_it_and_the_old_cookie_sent_again_is_refused(
        db: Database, token_console: Console, page: Page, tmp_path: Path) -> None:
    log_in(token_console, page)
    [old] = [c for c in page.context.cookies() if c["name"] == "recon_session"]
    assert old["httpOnly"] and old["sameSite"] == "Strict" and old["path"] == "/"

    submit(page, page.get_by_role("button", name="Log out"), expect=303)
    assert page.url == token_console.at("/login")
    assert not any(c["name"] == "recon_session" for c in page.context.cookies())

    page.context.add_cookies([old])  # the cookie someone copied before the logout, sent again
    response = page.goto(token_console.at("/psps"))
    page.screenshot(path=tmp_path / "replayed-cookie.png", full_page=True)
    assert response is not None and response.status == 401
    assert "your session has ended" in page.inner_text("main")
    assert page.get_by_label("Password").is_visible()
    assert not any(c["name"] == "recon_session" for c in page.context.cookies())  # the server cleared it
    with db.begin() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM console_sessions WHERE revoked_at IS NOT NULL").scalar() == 1


def test_browser_session__fifteen_idle_minutes_end_it_and_the_login_form_says_why(
        token_console: Console, page: Page, tmp_path: Path) -> None:
    clock = FixedClock(datetime.now(UTC))
    token_console.app.db.clock = clock  # the time every session check reads
    log_in(token_console, page)
    clock.advance(timedelta(minutes=14))
    response = page.goto(token_console.at("/psps"))
    assert response is not None and response.status == 200
    clock.advance(timedelta(minutes=15))
    response = page.goto(token_console.at("/review"))
    page.screenshot(path=tmp_path / "idle.png", full_page=True)
    assert response is not None and response.status == 401
    assert "your session ended: idle for 15 minutes; log in again" in page.inner_text("main")
    page.get_by_label("Operator").fill("ann")
    page.get_by_label("Password").fill(PASSWORD)
    submit(page, page.get_by_role("button", name="Log in", exact=True), expect=303)
    assert page.goto(token_console.at("/review")).status == 200  # type: ignore[union-attr]
