"""The overview in a browser shows what ``recon stats --json`` says for the same database, on both backends."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recon.db.database import Database
from tests.cli import Runner
from tests.console.browser.conftest import Console, create, make_dead, recon_json, sign_in, to_review

if TYPE_CHECKING:
    from playwright.sync_api import Page

BUCKETS = ("lt_1h", "1h_1d", "1d_7d", "gt_7d")


def seed(db: Database, db_url: str, recon: Runner) -> None:
    """Unfinished payments in three currencies and every age bucket, some in review, others finished; dead
    jobs in two queues (made first: each claims its queue's first job); one PSP paused."""
    make_dead(db, queue="charges", error_kind="validation")
    make_dead(db, queue="reconcile", kind="reconcile", error_kind="psp_unavailable")
    make_dead(db, queue="reconcile", kind="reconcile", error_kind="psp_unavailable")
    create(db, [f"eur-new-{i}" for i in range(3)], amount=1250)
    create(db, [f"eur-day-{i}" for i in range(2)], amount=9999, age=timedelta(hours=5))
    create(db, ["eur-old-0"], amount=420_00, age=timedelta(days=10))
    create(db, [f"usd-{i}" for i in range(4)], amount=5000, currency="USD", psp="stripe", age=timedelta(days=2))
    create(db, ["jpy-0", "jpy-1"], amount=12000, currency="JPY", psp="adyen", age=timedelta(minutes=30))
    review = create(db, ["review-0", "review-1", "review-2"], amount=777, charge=False, age=timedelta(days=3))
    to_review(db, review[0], "amount_mismatch: ours 777 EUR, PSP 700")
    to_review(db, review[1], "missing_at_psp: PSP has no payment pi_gone")
    to_review(db, review[2], "no_final_answer: after 3 checks: PSP still says pending")
    asked = recon("psp", "pause", "stripe", "--reason", "incident 42", "--by", "ann", db_url=db_url,
                  log_level="WARNING")
    assert asked.returncode == 1, asked.stderr  # four eyes: requested, then approved by another
    paused = recon("approvals", "approve", "1", "--by", "bob", db_url=db_url, log_level="WARNING")
    assert paused.returncode == 0, paused.stderr


def stat(page: Page, name: str) -> str:
    return page.locator(f'[data-stat="{name}"]').inner_text().strip()


def attr(page: Page, name: str, attribute: str) -> str | None:
    return page.locator(f'[data-stat="{name}"]').get_attribute(attribute)


def expected_money(doc: dict[str, Any]) -> dict[tuple[str, str], tuple[int, int]]:
    """(currency, bucket) -> (count, minor units), from ``payments.unfinished`` of ``recon stats --json``."""
    out: dict[tuple[str, str], tuple[int, int]] = defaultdict(lambda: (0, 0))
    for row in doc["payments"]["unfinished"]:
        count, amount = out[(row["currency"], row["age"])]
        out[(row["currency"], row["age"])] = (count + row["count"], amount + row["amount"])
    return dict(out)


def test_browser_overview__every_figure_equals_recon_stats_json(db: Database, db_url: str, recon: Runner,
                                                                console: Console, page: Page,
                                                                tmp_path: Path) -> None:
    seed(db, db_url, recon)
    before = recon_json(recon, db_url, "stats")
    # the sign-in's redirect showed the overview before the seed, and the console keeps its figures
    # [console] totals_ttl; a login is a write of the console, which clears them: its redirect shows them anew
    sign_in(console, page, "root")
    assert page.url == console.at("/")
    assert page.locator('[data-stat="overview-kept"]').count() == 0  # computed for this page
    after = recon_json(recon, db_url, "stats")
    page.screenshot(path=tmp_path / "overview.png", full_page=True)

    # nothing moved while the page was rendered (no worker runs): the two documents agree on every count
    assert {q: e["depth"] for q, e in before["queues"].items()} == {q: e["depth"] for q, e in after["queues"].items()}
    assert before["payments"]["unfinished"] == after["payments"]["unfinished"]
    assert before["review"]["needs_review"] == after["review"]["needs_review"]
    doc = after

    # the seed is what the document says, so the comparison below compares something (needs_review is not
    # unfinished: it is out of the machine's hands)
    assert doc["payments"]["money_at_risk"] == {"EUR": 3 * 1250 + 2 * 9999 + 420_00, "USD": 4 * 5000,
                                                "JPY": 2 * 12000}
    assert doc["review"]["needs_review"] == 3

    # the headline figures
    assert int(stat(page, "unfinished")) == sum(doc["payments"]["unfinished_by_age"].values())
    assert int(stat(page, "needs_review")) == doc["review"]["needs_review"]
    oldest = float(attr(page, "needs_review-oldest", "data-seconds") or "nan")
    assert abs(oldest - doc["review"]["oldest_age_seconds"]) < 30
    assert int(stat(page, "dead")) == sum(q["depth"].get("dead", 0) for q in doc["queues"].values()) == 3
    assert int(stat(page, "workers-live")) == doc["workers"]["live"]
    assert int(stat(page, "psps-paused")) == sum(1 for p in doc["psp_controls"] if p["paused"]) == 1
    assert int(stat(page, "psps-unhealthy")) == sum(
        1 for p in doc["psp_controls"] if p["cooling_down"] or p["breaker_state"] != "closed")

    # money at risk, per currency and age bucket: count and minor units
    money = expected_money(doc)
    assert {c for c, _ in money} == {"EUR", "USD", "JPY"}
    for currency, total in doc["payments"]["money_at_risk"].items():
        assert int(attr(page, f"at-risk-{currency}", "data-minor") or -1) == total
        for bucket in BUCKETS:
            count, amount = money.get((currency, bucket), (0, 0))
            cell = f"at-risk-{currency}-{bucket}"
            assert (int(attr(page, cell, "data-count") or -1), int(attr(page, cell, "data-minor") or -1)) == \
                (count, amount), cell
    assert money[("EUR", "gt_7d")] == (1, 420_00) and money[("USD", "1d_7d")] == (4, 20_000)
    assert page.locator("svg.chart g[data-currency='JPY'][data-bucket='lt_1h']").count() == 1

    # queue depth per queue and state: the unfinished and dead jobs (finished ones are `recon stats`' alone)
    for queue, entry in doc["queues"].items():
        for state, n in entry["depth"].items():
            if state in ("succeeded", "canceled"):
                assert page.locator(f"[data-stat='queue-depth-{queue}-{state}']").count() == 0
                continue
            assert int(stat(page, f"queue-depth-{queue}-{state}")) == n, (queue, state)
    assert doc["queues"]["reconcile"]["depth"]["dead"] == 2

    # PSP health (no Stripe or Adyen key in the tests' environment: those two cannot be called)
    for control in doc["psp_controls"]:
        shown = attr(page, f"psp-{control['psp']}-paused", "data-value")
        expected = "paused" if control["paused"] else "flowing" if control["psp"] == "sandbox" else "not configured"
        assert shown == expected, control["psp"]
        assert stat(page, f"psp-{control['psp']}-breaker") == control["breaker_state"]
