"""Dead letters in a browser: filter, preview (nothing changes), replay; the job is runnable again for
``recon jobs show``, and the jobs the filter left out are still dead."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from recon.db.database import Database
from tests.cli import Runner
from tests.console.browser.conftest import Console, make_dead, recon_json, submit

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def test_browser_dead_letters__preview_then_replay_makes_the_filtered_job_runnable(
        db: Database, db_url: str, console: Console, page: Page, recon: Runner, tmp_path: Path) -> None:
    target = make_dead(db, queue="reconcile", kind="reconcile", error_kind="psp_unavailable",
                       error="PspUnavailable: sandbox answered 503 three times")
    other = make_dead(db, queue="charges", error_kind="validation", error="ValidationError: amount")

    page.goto(console.at("/dead"))
    assert page.locator(f"tr[data-job='{target}']").count() == 1
    assert page.locator(f"tr[data-job='{other}']").count() == 1
    page.locator("form.filters input[name=error_kind]").fill("psp_unavailable")
    page.get_by_role("button", name="Preview replay").click()
    page.wait_for_url("**/dead/preview?**")
    assert page.locator("[data-stat='would-replay']").inner_text() == "1"
    assert page.locator(f"tr[data-job='{target}']").count() == 1
    assert page.locator(f"tr[data-job='{other}']").count() == 0
    assert recon_json(recon, db_url, "jobs", "show", str(target))["job"]["state"] == "dead"  # a preview changes nothing

    replay = page.locator("form[action='/dead/replay']")
    submit(page, replay.get_by_role("button"), refused=True)  # the confirmation is not ticked: refused by its form
    assert "Yes, replay these jobs" in page.locator("[data-form-error='replay']").inner_text()
    assert recon_json(recon, db_url, "jobs", "show", str(target))["job"]["state"] == "dead"
    replay = page.locator("form[action='/dead/replay']")
    replay.locator("input[name=confirm]").check()
    submit(page, replay.get_by_role("button"))
    page.screenshot(path=tmp_path / "replayed.png", full_page=True)
    assert page.locator("[data-replayed]").get_attribute("data-replayed") == str(target)
    assert "by root" in page.get_by_role("status").inner_text()  # the signed-in operator

    job = recon_json(recon, db_url, "jobs", "show", str(target))["job"]
    assert job["state"] == "runnable"
    assert recon_json(recon, db_url, "jobs", "show", str(other))["job"]["state"] == "dead"
    assert [j["id"] for j in recon_json(recon, db_url, "jobs", "list", "--state", "dead")["jobs"]] == [other]
