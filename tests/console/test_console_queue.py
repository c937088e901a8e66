"""The console's day of work on the review queue (issue 27 part B), on both databases: keyset pages with totals,
CSV export, the payments list behind every figure, POST -> redirect -> GET after every action (a reload
repeats nothing, a forged notice is not shown), assign and comment, bulk resolve preview then apply, and
amounts in major units with digit grouping."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from psp_adapters.sandbox.server import SandboxServer
from recon import Client, JobStore, Settings
from recon.clock import FixedClock
from recon.console.pages import review as review_page
from recon.db import schema
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.rows import EventSource, Finish, PaymentStatus, Transition
from tests.console import console, csrf_token, refusal
from tests.integration.payment_flow import create


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "psp.db") as server:
        monkeypatch.setenv("RECON_SANDBOX_BASE_URL", server.url)
        yield server


def in_review(db: Database, n: int, *, prefix: str = "lost", amount: int = 1000, currency: str = "EUR",
              reason: str = "missing_at_psp: none there") -> list[str]:
    """``n`` payments never charged, in review, the first the longest (review_since an hour apart)."""
    store = PaymentStore(db)
    refs = []
    now = datetime.now(UTC)
    for i, payment_id in enumerate(create(db, n, charge=False, prefix=prefix, amount=amount, currency=currency)):
        with db.begin() as conn:
            assert store.apply(conn, Transition(payment_id, PaymentStatus.CREATED, PaymentStatus.NEEDS_REVIEW,
                                                EventSource.RECONCILE, review_reason=reason))
            conn.execute(sa.update(schema.payments).where(schema.payments.c.id == payment_id)
                         .values(review_since=db.to_db(now - timedelta(hours=n - i))))
        refs.append(f"{prefix}-{i}")
    return refs


def listed(html: str) -> list[str]:
    return re.findall(r'<tr data-payment="([^"]+)"', html)


def link(html: str, rel: str) -> str | None:
    found = re.search(rf'href="([^"]+)" rel="{rel}"', html)
    return found.group(1).replace("&amp;", "&") if found else None


def test_review_queue__keyset_pages_totals_and_csv(db: Database, db_url: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    refs = in_review(db, 7, amount=123_456_78)
    monkeypatch.setattr(review_page, "REVIEW_LIMIT", 3)
    with console(db_url) as client:
        first = client.get("/review").text
        assert listed(first) == refs[:3]
        assert 'data-stat="review-total">7<' in first
        assert "864,197.46 EUR (7)" in first  # 7 x 123,456.78 EUR, grouped, in major units
        assert "123,456.78 EUR" in first
        seen = listed(first)
        page, pages = first, 1
        while (nxt := link(page, "next")) is not None:
            page = client.get(nxt).text
            seen += listed(page)
            pages += 1
        assert seen == refs and pages == 3
        back = client.get(link(page, "prev") or "").text
        assert listed(back) == refs[3:6]
        assert client.get("/review?after=nonsense").status_code == 422

        exported = client.get("/review?format=csv")
        assert exported.status_code == 200 and exported.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(exported.text)))
        assert [r["merchant_reference"] for r in rows] == refs
        assert rows[0]["amount"] == "123456.78" and rows[0]["currency"] == "EUR"
        assert rows[0]["kind"] == "missing_at_psp" and rows[0]["severity"] == "high"


def test_review_queue__csv_cells_a_spreadsheet_would_run_are_quoted(db: Database, db_url: str) -> None:
    in_review(db, 1, prefix="=HYPERLINK(1)")
    with console(db_url) as client:
        rows = list(csv.reader(io.StringIO(client.get("/review?format=csv").text)))
    assert rows[1][0] == "'=HYPERLINK(1)-0"


def test_payments_list__filters_lead_to_the_payments_behind_each_figure(db: Database, db_url: str) -> None:
    create(db, 2, charge=False, prefix="Shop-A", amount=500)
    create(db, 1, charge=False, prefix="shop-b", amount=250_000, currency="JPY")
    create(db, 1, charge=False, prefix="dinar", amount=7_500, currency="KWD")  # 7.500 KWD (three decimals)
    in_review(db, 1, prefix="rev")
    with console(db_url) as client:
        overview = client.get("/").text
        assert 'href="/payments?status=unfinished"' in overview
        unfinished = client.get("/payments?status=unfinished").text
        assert sorted(listed(unfinished)) == ["Shop-A-0", "Shop-A-1", "dinar-0", "shop-b-0"]
        assert 'data-stat="payments-total">4<' in unfinished
        assert sorted(listed(client.get("/payments?reference=SHOP-").text)) == ["Shop-A-0", "Shop-A-1", "shop-b-0"]
        assert listed(client.get("/payments?reference=shop-b").text) == ["shop-b-0"]
        assert listed(client.get("/payments?reference=shop_").text) == []  # "_" is a character, not a wildcard
        assert listed(client.get("/payments?currency=jpy").text) == ["shop-b-0"]
        assert "250,000 JPY" in client.get("/payments?currency=jpy").text
        assert sorted(listed(client.get("/payments?min_amount=5&max_amount=10").text)) == [
            "Shop-A-0", "Shop-A-1", "dinar-0", "rev-0"]  # 5.00 and 10.00 EUR, 7.500 KWD; 250,000 JPY is out
        assert listed(client.get("/payments?min_amount=7.5&max_amount=7.5").text) == ["dinar-0"]
        assert sorted(listed(client.get("/payments?min_amount=7.501").text)) == ["rev-0", "shop-b-0"]
        assert listed(client.get("/payments?max_amount=7.499&currency=KWD").text) == []
        assert listed(client.get("/payments?min_amount=1000").text) == ["shop-b-0"]
        assert listed(client.get("/payments?status=needs_review").text) == ["rev-0"]
        assert listed(client.get("/payments?age=gt_7d").text) == []
        assert sorted(listed(client.get("/payments?age=lt_1h&status=unfinished").text)) == [
            "Shop-A-0", "Shop-A-1", "dinar-0", "shop-b-0"]
        assert listed(client.get("/payments?status=unfinished&reference=DIN&psp=sandbox").text) == ["dinar-0"]
        assert client.get("/payments?status=nope").status_code == 422
        rows = list(csv.DictReader(io.StringIO(client.get("/payments?currency=JPY&format=csv").text)))
        assert [(r["merchant_reference"], r["amount"], r["currency"]) for r in rows] == [("shop-b-0", "250000", "JPY")]


def test_actions__redirect_to_a_page_a_reload_repeats_nothing_and_a_forged_notice_is_not_shown(
        db: Database, db_url: str) -> None:
    [ref] = in_review(db, 1)
    with console(db_url, login="ann") as client:
        csrf = csrf_token(client, f"/payments/{ref}")
        r = client.post(f"/payments/{ref}/comment", data={"comment": "called them", "csrf": csrf},
                        follow_redirects=False)
        assert r.status_code == 303
        location = r.headers["location"]
        assert location.startswith(f"/payments/{ref}?") and "notice=" in location
        page = client.get(location).text
        assert "comment added by ann" in page and "called them" in page
        client.get(location)  # a reload: a GET, nothing written again
        assert page.count("data-comment=") == client.get(f"/payments/{ref}").text.count("data-comment=") == 1
        forged = client.get(f"/payments/{ref}?notice=resolved+as+succeeded&ns=0123456789abcdef0123456789abcdef")
        assert "resolved as succeeded" not in forged.text

        r = client.post(f"/payments/{ref}/assign", data={"assignee": "bea", "csrf": csrf})
        assert r.status_code == 200 and "assigned to bea" in r.text and 'data-stat="assignee">bea<' in r.text
        assert listed(client.get("/review?assignee=bea").text) == [ref]
        assert listed(client.get("/review?unassigned=1").text) == []
        r = client.post(f"/payments/{ref}/comment", data={"comment": "", "csrf": csrf}, follow_redirects=False)
        assert refusal(client, r, to=f"/payments/{ref}?", form="comment") == "not added: comment is required"
        assert r.headers["location"].endswith("#comments")
        r = client.post(f"/payments/{ref}/assign", data={"assignee": "b" * 101, "csrf": csrf}, follow_redirects=False)
        assert refusal(client, r, to=f"/payments/{ref}?", form="assign") == \
            "not assigned: assign to is too long (at most 100 characters)"
        assert r.headers["location"].endswith("#assign")
        assert f'value="{"b" * 101}"' in client.get(r.headers["location"]).text  # kept as typed
    with console(db_url, login="vic") as viewer:  # every form of the payment page, refused beside itself
        csrf = csrf_token(viewer, f"/payments/{ref}")
        for name, data, anchor in (("resolve", {"as": "failed", "reason": "gone"}, "#resolve"),
                                   ("assign", {"assignee": "vic"}, "#assign"),
                                   ("comment", {"comment": "seen"}, "#comments"), ("recheck", {}, "#recheck")):
            r = viewer.post(f"/payments/{ref}/{name}", data={**data, "csrf": csrf}, follow_redirects=False)
            said = refusal(viewer, r, to=f"/payments/{ref}?", form=name)
            assert said.endswith(": vic has the role viewer; this takes operator or above"), said
            assert r.headers["location"].endswith(anchor)
            shown = viewer.get(r.headers["location"]).text
            for value in data.values():
                assert f'value="{value}"' in shown, (name, value)  # what was typed, kept


def test_bulk_resolve__preview_lists_exactly_what_changes_then_apply_resolves_it(
        db: Database, db_url: str, sandbox: SandboxServer) -> None:
    lost = in_review(db, 2)
    in_review(db, 1, prefix="big", amount=2_000_000)
    with console(db_url, login="ann") as client:
        preview = client.get("/review/bulk?as=failed&kind=missing_at_psp&severity=low")
        assert preview.status_code == 200
        assert 'data-stat="bulk-count">2<' in preview.text and "20.00 EUR (2)" in preview.text
        assert sorted(listed(preview.text)) == lost
        digest = re.search(r'name="digest" value="((?:[0-9a-f]{8}\.){7}[0-9a-f]{8})"', preview.text)
        assert digest
        form = {"kind": "missing_at_psp", "severity": "low", "as": "failed", "digest": digest.group(1),
                "reason": "never reached the PSP",
                "csrf": csrf_token(client, "/review/bulk?as=failed")}
        refused = client.post("/review/bulk", data=form, follow_redirects=False)
        assert refusal(client, refused, to="/review/bulk?", form="bulk") == \
            'nothing resolved: tick "Yes, resolve exactly these payments" to confirm'
        back = client.get(refused.headers["location"]).text  # the same preview, the reason kept
        assert sorted(listed(back)) == lost and 'value="never reached the PSP"' in back
        assert "kind=missing_at_psp" in refused.headers["location"] and "as=failed" in refused.headers["location"]
        done = client.post("/review/bulk", data={**form, "confirm": "1"}, follow_redirects=False)
        assert done.status_code == 303
        shown = client.get(done.headers["location"]).text
        assert "resolved 2 payments as failed by ann" in shown
        again = client.post("/review/bulk", data={**form, "confirm": "1"}, follow_redirects=False)
        assert refusal(client, again, to="/review/bulk?", form="bulk").startswith("nothing resolved: ")
    store = PaymentStore(db)
    for ref in lost:
        payment = store.by_reference(ref)
        assert payment is not None and payment.status is PaymentStatus.FAILED
    big = store.by_reference("big-0")
    assert big is not None and big.status is PaymentStatus.NEEDS_REVIEW


def test_dead_letters__show_their_payment_and_say_when_it_is_already_final(db: Database, db_url: str) -> None:
    store = PaymentStore(db)
    [pid] = create(db, 1, charge=False, prefix="paid", amount=123_456)
    with db.begin() as conn:
        for t in (Transition(pid, PaymentStatus.CREATED, PaymentStatus.PROCESSING, EventSource.CHARGE),
                  Transition(pid, PaymentStatus.PROCESSING, PaymentStatus.SUCCEEDED, EventSource.CHARGE)):
            assert store.apply(conn, t)
    jobs = JobStore(db)
    job_id = Client(jobs, Settings()).enqueue("charge", {"payment_id": pid}, queue="charges")
    [job] = jobs.claim(worker="w", queues=["charges"], n=1, ttl=30)
    jobs.finish(worker="w", finishes=[Finish(id=job.id, attempt=1, state="dead", outcome="dead",
                                             error_kind="bug", error="bug on attempt 1")])
    with console(db_url, login="ann") as client:
        listing = client.get("/dead").text
        row = listing.split(f'data-job="{job_id}"')[1].split("</tr>")[0]
        assert "paid-0" in row and "1,234.56 EUR" in row and "succeeded" in row and "already final" in row
        preview = client.get("/dead/preview").text
        assert 'data-stat="replay-final">1 of these jobs are for payments already final' in preview
        r = client.post("/dead/replay", data={"confirm": "1", "csrf": csrf_token(client)})
        assert r.status_code == 200
        assert "1 of them are for payments already final" in r.text and f'data-replayed="{job_id}"' in r.text


def figure(html: str, stat: str) -> str | None:
    """The text of the element marked ``data-stat="stat"`` (tags inside it dropped), None when there is none."""
    found = re.search(rf'data-stat="{re.escape(stat)}"[^>]*>(.*?)</span>', html, re.S)
    return re.sub(r"<[^>]+>", "", found.group(1)).strip() if found else None


def test_queue_totals__kept_for_totals_ttl_and_cleared_by_any_write_of_the_console(db: Database, db_url: str,
                                                                                   staff: object) -> None:
    refs = in_review(db, 3)
    clock = FixedClock(datetime.now(UTC))
    with console(db_url, clock=clock, login="ann") as client:
        first = client.get("/review").text
        assert figure(first, "review-total") == "3" and figure(first, "review-totals-at") is None  # computed now
        assert figure(client.get("/payments?status=needs_review").text, "payments-total") == "3"
        in_review(db, 1, prefix="late")  # a worker sends another payment to review
        kept = client.get("/review").text
        assert figure(kept, "review-total") == "3" and figure(kept, "review-totals-at")  # kept: as of when
        assert figure(client.get("/payments?status=needs_review").text, "payments-total") == "3"
        assert listed(client.get("/review").text)[-1] == "late-0"  # the rows are read fresh
        clock.advance(timedelta(seconds=10))  # [console] totals_ttl (10 s) has passed
        assert figure(client.get("/review").text, "review-total") == "4"
        in_review(db, 1, prefix="later")
        assert figure(client.get("/review").text, "review-total") == "4"
        r = client.post(f"/payments/{refs[0]}/comment", data={"comment": "on it", "csrf": csrf_token(client)},
                        follow_redirects=False)
        assert r.status_code == 303
        after = client.get("/review").text  # any write of the console clears what it kept
        assert figure(after, "review-total") == "5" and figure(after, "review-totals-at") is None
        assert figure(client.get("/payments?status=needs_review").text, "payments-total") == "5"


def test_overview__kept_for_totals_ttl_said_so_and_cleared_by_any_write_of_the_console(
        db: Database, db_url: str, staff: object, tmp_path: Path) -> None:
    refs = in_review(db, 2)
    clock = FixedClock(datetime.now(UTC))
    with console(db_url, clock=clock, login="ann") as client:
        first = client.get("/").text
        assert figure(first, "needs_review") == "2" and figure(first, "overview-kept") is None  # computed now
        in_review(db, 1, prefix="late")  # a worker sends another payment to review
        kept = client.get("/").text
        assert figure(kept, "needs_review") == "2" and figure(kept, "overview-kept")  # kept, and it says so
        clock.advance(timedelta(seconds=10))  # [console] totals_ttl (10 s) has passed
        fresh = client.get("/").text
        assert figure(fresh, "needs_review") == "3" and figure(fresh, "overview-kept") is None
        in_review(db, 1, prefix="later")
        assert figure(client.get("/").text, "needs_review") == "3"
        r = client.post(f"/payments/{refs[0]}/comment", data={"comment": "on it", "csrf": csrf_token(client)},
                        follow_redirects=False)
        assert r.status_code == 303
        after = client.get("/").text  # any write of the console clears what it kept
        assert figure(after, "needs_review") == "4" and figure(after, "overview-kept") is None
    config = tmp_path / "recon.toml"
    config.write_text('[console]\ntotals_ttl = "0s"\n', encoding="utf-8")
    with console(db_url, config_path=str(config), login="ann") as client:
        client.get("/")
        in_review(db, 1, prefix="last")
        assert figure(client.get("/").text, "needs_review") == "5"  # totals_ttl = 0s: computed for every page
