"""A refused POST in Chromium: POST -> redirect -> GET like a write that succeeds, so the refusal's page is an
ordinary page. A reload shows it again by GET, the back and forward buttons walk pages without asking to
resubmit, and nothing is posted again: the refusals' audit rows (a re-POST would add one) and the browser's own
requests both say so."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa

from recon.db import schema
from recon.db.database import Database
from recon.rows import PaymentStatus
from tests.cli import Runner
from tests.console.browser.conftest import Console, paid, recon_json, sign_in, submit

if TYPE_CHECKING:
    from playwright.sync_api import Page, Request

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def audited(db: Database, action: str) -> list[str]:
    """The outcomes of the audit rows of ``action``, in order."""
    with db.begin() as conn:
        return list(conn.execute(sa.select(schema.audit_log.c.outcome).where(schema.audit_log.c.action == action)
                                 .order_by(schema.audit_log.c.id)).scalars())


def test_browser_refusals__a_reload_back_or_forward_after_a_refusal_posts_nothing(
        db: Database, db_url: str, console: Console, page: Page, recon: Runner) -> None:
    paid(db, "order-77", status=PaymentStatus.AUTHORISED, capture_mode="manual")
    sign_in(console, page, "ann")
    posts: list[str] = []
    dialogs: list[str] = []

    def posted(request: Request) -> None:
        if request.method == "POST":
            posts.append(request.url)

    page.on("request", posted)
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(console.at("/payments/order-77"))

    capture = page.locator("form[action$='/capture']")
    capture.get_by_label("Amount (EUR)").fill("60.00")
    submit(page, capture.get_by_role("button", name="Capture"), refused=True)
    first = page.url
    assert first.startswith(console.at("/payments/order-77?")) and first.endswith("#captures")
    assert "more than the 5000" in page.locator("[data-form-error='capture']").inner_text()
    assert audited(db, "payment.capture") == ["refused"] and len(posts) == 1

    page.reload()  # a GET of the refusal's page: the refusal and the typed amount again, nothing sent
    assert page.url == first and len(posts) == 1 and audited(db, "payment.capture") == ["refused"]
    assert "more than the 5000" in page.locator("[data-form-error='capture']").inner_text()
    assert page.locator("form[action$='/capture'] input[name=amount]").input_value() == "60.00"

    cancel = page.locator("form[action$='/cancel']")  # not confirmed: refused beside the cancel button
    submit(page, cancel.get_by_role("button", name="Cancel the authorisation"), refused=True)
    second = page.url
    assert second != first and len(posts) == 2
    assert 'tick "Yes, release the whole authorisation"' in page.locator("[data-form-error='cancel']").inner_text()
    assert page.locator("[data-form-error='capture']").count() == 0  # one refusal shown: the last one's

    page.go_back()  # the first refusal's page, by GET
    assert page.url == first and page.locator("[data-form-error='capture']").count() == 1
    page.go_forward()
    assert page.url == second and page.locator("[data-form-error='cancel']").count() == 1
    page.reload()
    assert len(posts) == 2 and dialogs == []  # no POST repeated, no "confirm form resubmission" asked
    assert audited(db, "payment.capture") == ["refused"] and audited(db, "payment.cancel") == []
    assert recon_json(recon, db_url, "payments", "show", "order-77")["modifications"] == []

    page.goto(console.at("/psps"))  # a refusal of another page's form: the same
    pause = page.locator("form[action='/psps/sandbox/pause']")
    pause.locator("input[name=reason]").fill("incident 9")
    submit(page, pause.get_by_role("button"), refused=True)
    assert page.url.endswith("#psp-sandbox") and len(posts) == 3
    assert 'tick "Yes, stop all calls to sandbox"' in page.locator("[data-form-error='sandbox']").inner_text()
    assert pause.locator("input[name=reason]").input_value() == "incident 9"
    page.reload()
    assert len(posts) == 3 and dialogs == []
    assert recon_json(recon, db_url, "approvals", "list")["approvals"] == []
