"""What keeps the console safe, seen from a browser: a POST without the CSRF token (or from another site)
is refused and changes nothing; a non-loopback bind without a token does not start; no page shows a card
number, whether it came through recon's stores (masked on the way in) or reached the database some other way
(masked on the way out)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.rows import PaymentStatus
from tests.cli import Runner
from tests.console.browser.conftest import Console, create, make_dead, recon_json, to_review

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

CARD = "4242424242424242"
#: the same card number as people write it
CARD_GROUPED = "4242 4242 4242 4242"


def test_browser_csrf__a_post_without_the_token_is_refused_and_changes_nothing(
        db: Database, db_url: str, console: Console, page: Page, recon: Runner, tmp_path: Path) -> None:
    dead = make_dead(db, queue="reconcile", kind="reconcile", error_kind="psp_unavailable")
    [pid] = create(db, ["order-9"], charge=False)
    to_review(db, pid, "missing_at_psp: PSP has no payment pi_gone")
    events = len(PaymentStore(db).events(pid))

    page.goto(console.at("/payments/order-9"))  # logged in: the form's token is the session's
    token = page.locator("form[action$='/resolve'] input[name=csrf]").input_value()
    assert token and any(c["name"] == "recon_session" for c in page.context.cookies())
    resolve: dict[str, str | float | bool] = {"as": "failed", "reason": "forged", "operator": "mallory",
                                              "override": "1"}

    # the browser's own request context: the cookie goes along, the form's field does not
    refused = page.request.post(console.at("/payments/order-9/resolve"), form=resolve)
    assert refused.status == 403 and "CSRF" in refused.text()
    forged = page.request.post(console.at("/payments/order-9/resolve"), form={**resolve, "csrf": "0" * 32 + ".x"})
    assert forged.status == 403
    replay = page.request.post(console.at("/dead/replay"), form={"operator": "mallory", "queue": "", "kind": "",
                                                                  "error_kind": "", "since": ""})
    assert replay.status == 403

    # a page of another site posting the real form, token included: the browser sends no SameSite=Strict
    # cookie across sites, and the console refuses a cross-site POST before reading it
    fields = "".join(f'<input name="{k}" value="{v}">' for k, v in {**resolve, "csrf": token}.items())
    page.goto("about:blank")
    page.set_content(f'<form method="post" action="{console.at("/payments/order-9/resolve")}">{fields}'
                     f'<button type="submit">win a prize</button></form>')
    with page.expect_response(console.at("/payments/order-9/resolve")) as answer:
        page.get_by_role("button", name="win a prize").click()
    assert answer.value.status == 401  # no session cookie across sites: nobody is logged in for that POST
    page.screenshot(path=tmp_path / "csrf-refused.png", full_page=True)

    assert PaymentStore(db).get(pid).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]
    assert len(PaymentStore(db).events(pid)) == events
    assert recon_json(recon, db_url, "jobs", "show", str(dead))["job"]["state"] == "dead"
    assert recon_json(recon, db_url, "stats")["resolutions"]["by_day"] == []


def test_browser_console__a_non_loopback_bind_without_a_token_refuses_to_start(db_url: str, recon: Runner) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RECON_CONSOLE_TOKEN", "RECON_CONFIG")}
    r = recon("console", "--host", "0.0.0.0", "--port", "0", db_url=db_url, env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "RECON_CONSOLE_TOKEN" in r.stderr
    assert r.stdout == ""  # it never said it was serving
    short = recon("console", "--host", "0.0.0.0", "--port", "0", db_url=db_url,
                  env={**env, "RECON_CONSOLE_TOKEN": "short"})
    assert short.returncode == 2 and len(short.stderr.strip().splitlines()) == 1


def plant_behind_the_stores(db: Database, *, payment_id: int, job_id: int) -> None:
    """The card number written into the database by something other than recon's stores (an old version, a
    hand-written fix): the console must mask it on the way out."""
    with db.begin() as conn:
        conn.exec_driver_sql("UPDATE jobs SET last_error = ? WHERE id = ?",
                             (f"Declined: card {CARD} expired", job_id))
        conn.exec_driver_sql("UPDATE job_attempts SET error = ? WHERE job_id = ?", (f"card {CARD_GROUPED}", job_id))
        conn.exec_driver_sql("UPDATE payments SET review_reason = ? WHERE id = ?",
                             (f"other: the PSP quoted card {CARD}", payment_id))
        conn.exec_driver_sql(
            "UPDATE payment_events SET details = ? WHERE id = (SELECT max(id) FROM payment_events "
            "WHERE payment_id = ?)",
            (json.dumps({"psp_message": f"card {CARD} declined", "pan": CARD, "psp_outcome": "failed"}),
             payment_id))
    with db.begin() as conn:
        raw = " ".join(str(v) for v in conn.exec_driver_sql(
            "SELECT last_error FROM jobs WHERE id = ? UNION ALL SELECT review_reason FROM payments WHERE id = ?",
            (job_id, payment_id)).scalars())
    assert CARD in raw  # the test plants what it says


def test_browser_pages__show_no_planted_card_number(db: Database, db_url: str, console: Console, page: Page,
                                                     tmp_path: Path) -> None:
    # through the stores: masked on the way in
    [stored] = create(db, ["card-in-store"], charge=False)
    to_review(db, stored, f"other: PSP says card {CARD} was declined",
              details={"psp_message": f"card {CARD_GROUPED} declined", "psp_outcome": "failed", "number": CARD})
    job_stored = make_dead(db, queue="charges", error_kind="validation", error=f"card {CARD} refused",
                           payload={"payment_id": stored})
    # behind the stores: masked on the way out
    [raw] = create(db, ["card-in-db"], charge=False)
    to_review(db, raw, "other: will be overwritten")
    job_raw = make_dead(db, queue="reconcile", kind="reconcile", error_kind="bug", payload={"payment_id": raw})
    plant_behind_the_stores(db, payment_id=raw, job_id=job_raw)

    pages = ["/", "/review", "/dead", "/dead/preview?queue=&kind=&error_kind=&since=", "/payments/card-in-store",
             "/payments/card-in-db", f"/jobs/{job_stored}", f"/jobs/{job_raw}", "/search?q=card-in-db", "/psps"]
    for n, path in enumerate(pages):
        response = page.goto(console.at(path))
        assert response is not None and response.status == 200, path
        page.screenshot(path=tmp_path / f"page-{n}.png", full_page=True)
        html = page.content()
        text = page.inner_text("body")
        for shown in (html, text, " ".join(text.split())):
            assert CARD not in shown and CARD_GROUPED not in shown, path
            assert CARD not in "".join(c for c in shown if c.isdigit() or c == "\n"), path
    # the planted texts did reach the pages, masked
    page.goto(console.at("/payments/card-in-db"))
    assert "[card]" in page.inner_text("body")
    page.goto(console.at(f"/jobs/{job_raw}"))
    assert "Declined: card [card] expired" in page.inner_text("body")
