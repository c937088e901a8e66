"""A day of work on the review queue in Chromium (issue 27 part B): paging the queue by its links with the
totals in view, bulk resolve previewed then applied, a CSV export downloaded, POST -> redirect -> GET (a reload
repeats nothing), and the pages readable at 390 px (nothing wider than the screen)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from psp_adapters.sandbox.server import SandboxServer
from recon.console.pages import review as review_page
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.rows import PaymentStatus
from tests.cli import Runner
from tests.console.browser.conftest import (
    ACTION_TIMEOUT_MS,
    CHROMIUM,
    CHROMIUM_ARGS,
    VIEWPORT,
    Console,
    create,
    recon_json,
    sign_in,
    submit,
    to_review,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page, Playwright

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def queue_of(db: Database, n: int, *, prefix: str = "lost", amount: int = 1000) -> list[str]:
    refs = [f"{prefix}-{i}" for i in range(n)]
    for pid in create(db, refs, amount=amount, charge=False):
        to_review(db, pid, "missing_at_psp: the PSP has no such payment")
    return refs


def listed(page: Page) -> list[str]:
    return [row.get_attribute("data-payment") or "" for row in page.locator("table.queue tbody tr").all()]


def test_browser_queue__pages_by_its_links_with_the_totals_in_view(
        db: Database, console: Console, page: Page, monkeypatch: pytest.MonkeyPatch) -> None:
    refs = queue_of(db, 7, amount=123_456_78)
    monkeypatch.setattr(review_page, "REVIEW_LIMIT", 3)
    page.goto(console.at("/review"))
    assert page.locator("[data-stat='review-total']").inner_text() == "7"
    assert "864,197.46 EUR (7)" in page.locator("[data-stat='review-totals']").inner_text()
    seen = listed(page)
    while page.locator("a[data-page='next']").count():
        page.locator("a[data-page='next']").click()
        page.wait_for_load_state()
        seen += listed(page)
        assert page.locator("[data-stat='review-total']").inner_text() == "7"
    assert seen == refs  # every item once, longest in review first
    page.locator("a[data-page='previous']").click()
    page.wait_for_load_state()
    assert listed(page) == refs[3:6]


def test_browser_queue__bulk_resolve_previews_then_applies_exactly_that_set_and_a_reload_repeats_nothing(
        db: Database, db_url: str, sandbox: SandboxServer, console: Console, page: Page, recon: Runner,
        tmp_path: Path) -> None:
    lost = queue_of(db, 3)
    sign_in(console, page, "ann")  # an operator: the bulk resolve is theirs
    page.goto(console.at("/review"))
    bulk = page.locator("form[action='/review/bulk']")
    bulk.locator("select[name=as]").select_option("failed")
    bulk.get_by_role("button", name="Preview").click()
    page.wait_for_url("**/review/bulk?**")
    assert page.locator("[data-stat='bulk-count']").inner_text() == "3"
    assert "30.00 EUR (3)" in page.locator("[data-stat='bulk-summary']").inner_text()
    assert sorted(r.get_attribute("data-payment") or "" for r in page.locator("tr[data-payment]").all()) == lost
    assert all(PaymentStore(db).by_reference(r).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]
               for r in lost)  # a preview changes nothing

    form = page.locator("form[action='/review/bulk'][method=post]")
    form.locator("input[name=reason]").fill("never reached the PSP")
    submit(page, form.get_by_role("button"), refused=True)  # the confirmation is not ticked
    assert "Yes, resolve exactly these payments" in page.locator("[data-form-error='bulk']").inner_text()
    page.goto(console.at("/review/bulk?as=failed"))  # the preview again, by GET
    form = page.locator("form[action='/review/bulk'][method=post]")
    form.locator("input[name=reason]").fill("never reached the PSP")
    form.locator("input[name=confirm]").check()
    submit(page, form.get_by_role("button"))
    page.screenshot(path=tmp_path / "bulk-resolved.png", full_page=True)
    assert "/review/bulk" not in page.url and "/review" in page.url
    assert "resolved 3 payments as failed by ann" in page.get_by_role("status").inner_text()
    events = {r: len(recon_json(recon, db_url, "review", "show", r)["events"]) for r in lost}
    page.reload()  # a GET: nothing is resolved again, no resubmission asked
    page.go_back()  # the preview, by GET: it now finds nothing to resolve
    assert page.locator("[data-stat='bulk-count']").inner_text() == "0"
    page.go_forward()
    assert {r: len(recon_json(recon, db_url, "review", "show", r)["events"]) for r in lost} == events
    for ref in lost:
        last = recon_json(recon, db_url, "review", "show", ref)["events"][-1]
        assert last["to_status"] == "failed" and last["details"]["bulk"]["size"] == 3


def test_browser_queue__a_bulk_resolve_above_the_threshold_is_requested_then_approved_in_another_browser(
        db: Database, db_url: str, sandbox: SandboxServer, console: Console, page: Page, playwright: Playwright,
        recon: Runner, tmp_path: Path) -> None:
    lost = queue_of(db, 11)  # more than [four_eyes] bulk_resolve_count (10): four eyes
    sign_in(console, page, "bob")  # an approver asks: the refusal of his own approval is the four-eyes rule's
    page.goto(console.at("/review/bulk?as=failed"))
    assert page.locator("[data-stat='bulk-count']").inner_text() == "11"
    form = page.locator("form[action='/review/bulk'][method=post]")
    form.locator("input[name=reason]").fill("never reached the PSP, ticket 12")
    form.locator("input[name=confirm]").check()
    submit(page, form.get_by_role("button"))
    page.screenshot(path=tmp_path / "bulk-requested.png", full_page=True)
    assert "bulk resolve of 11 payments in review requested by bob: approval 1 waits for another approver" in \
        page.get_by_role("status").inner_text()
    assert {PaymentStore(db).by_reference(r).status for r in lost} == {  # type: ignore[union-attr]
        PaymentStatus.NEEDS_REVIEW}  # nothing resolved yet
    page.goto(console.at("/approvals"))
    submit(page, page.get_by_role("button", name="Approve 1"), refused=True)  # his own request
    assert "another approver must approve it (four eyes)" in page.get_by_role("alert").inner_text()
    assert {PaymentStore(db).by_reference(r).status for r in lost} == {  # type: ignore[union-attr]
        PaymentStatus.NEEDS_REVIEW}

    other = playwright.chromium.launch_persistent_context(  # a second person: another browser, its own session
        tmp_path / "amy-profile", executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
        viewport=VIEWPORT)  # type: ignore[arg-type]
    try:
        other.set_default_timeout(ACTION_TIMEOUT_MS)
        amy = other.pages[0] if other.pages else other.new_page()
        sign_in(console, amy, "amy")
        amy.goto(console.at("/approvals"))
        assert "never reached the PSP, ticket 12" in amy.inner_text("main")
        submit(amy, amy.get_by_role("button", name="Approve 1"))
        amy.screenshot(path=tmp_path / "bulk-approved.png", full_page=True)
        assert "approval 1 (review.bulk_resolve of 11 payments in review) approved by amy: resolved 11 payments " \
               "as failed (approved by amy)" in amy.get_by_role("status").inner_text()
    finally:
        other.close()
    assert {PaymentStore(db).by_reference(r).status for r in lost} == {  # type: ignore[union-attr]
        PaymentStatus.FAILED}
    for ref in lost:
        last = recon_json(recon, db_url, "review", "show", ref)["events"][-1]
        assert (last["to_status"], last["details"]["operator"]) == ("failed", "bob")
        assert last["details"]["bulk"]["size"] == 11
    page.reload()  # bob's approvals page, by GET: the request is decided, nothing left to approve
    assert page.get_by_role("button", name="Approve 1").count() == 0


def test_browser_queue__csv_export_downloads_the_filtered_list(
        db: Database, console: Console, page: Page) -> None:
    refs = queue_of(db, 2, amount=61570)
    page.goto(console.at("/review?kind=missing_at_psp"))
    with page.expect_download() as download:
        page.locator("a[data-export='csv']").click()
    text = Path(download.value.path()).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["merchant_reference"] for r in rows] == refs
    assert {r["amount"] for r in rows} == {"615.70"} and {r["kind"] for r in rows} == {"missing_at_psp"}


def test_browser_queue__a_resolve_redirects_to_the_payment_page_and_a_reload_repeats_nothing(
        db: Database, db_url: str, sandbox: SandboxServer, console: Console, page: Page, recon: Runner) -> None:
    [ref] = queue_of(db, 1)
    sign_in(console, page, "ann")
    page.goto(console.at(f"/payments/{ref}"))
    form = page.locator("form[action$='/resolve']")
    form.locator("select[name=as]").select_option("failed")
    form.locator("input[name=reason]").fill("no such payment at the PSP")
    submit(page, form.locator("button[type=submit]"))
    assert page.url.startswith(console.at(f"/payments/{ref}?"))
    assert "resolved as failed by ann" in page.get_by_role("status").inner_text()
    before = len(recon_json(recon, db_url, "review", "show", ref)["events"])
    # the console's one script (allowed by its hash) put the browser's own time beside each UTC time
    assert page.locator("time[datetime] + small.local").count() >= 3
    page.reload()
    assert page.locator("[data-stat='payment-status']").inner_text() == "failed"
    assert len(recon_json(recon, db_url, "review", "show", ref)["events"]) == before


@pytest.mark.parametrize("path", ["/", "/review", "/payments", "/payments/lost-0", "/dead", "/psps"])
def test_browser_queue__readable_at_390_px(db: Database, console: Console, page: Page, path: str,
                                           tmp_path: Path) -> None:
    queue_of(db, 2, amount=123_456_789)
    create(db, ["open-1"], amount=5000)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(console.at(path))
    page.screenshot(path=tmp_path / "narrow.png", full_page=True)
    # nothing is wider than the screen: wide tables scroll inside their own box, the chart scales
    wide = page.evaluate("""[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 391
        && getComputedStyle(e).position !== 'absolute').map(e => e.tagName + '.' + e.className).slice(0, 5)""")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, wide
    nav = page.locator("header nav").bounding_box()
    assert nav is not None and nav["height"] < 40  # the navigation is one line
    chart = page.locator("svg.chart")
    if chart.count():
        box = chart.bounding_box()
        assert box is not None and box["width"] <= 390
