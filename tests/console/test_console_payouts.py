"""The console's payouts pages on both databases: a day's payouts matched and open, the drill-down to the lines
and the bank entry, and an exception resolved through the page's form (what `recon payouts show` then says)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import sqlalchemy as sa

from recon.db import schema
from recon.db.close_store import CloseStore
from recon.db.database import Database
from recon.db.payout_store import PayoutStore
from recon.payout_rows import ExceptionKind, ExceptionState, Finding, LineKind, NewPayout, NewPayoutLine, PayoutStatus
from tests.cli import Runner
from tests.console import console, csrf_token, refusal


def _store(db: Database) -> tuple[int, int, int]:
    day = datetime.now(UTC).date() - timedelta(days=1)
    store = PayoutStore(db)

    def payout(ref: str, amount: int, arrival: date) -> int:
        lines = (NewPayoutLine(f"{ref}-c", LineKind.CHARGE, "pi_1", "order-1", amount + 25, 25, amount, "EUR"),
                 NewPayoutLine(f"{ref}-p", LineKind.PAYOUT, None, None, -amount, 0, -amount, "EUR"))
        return store.store(NewPayout("stripe", "", ref, amount, "EUR", PayoutStatus.PAID, arrival, None, None,
                                     lines)).payout_id

    matched, missing = payout("po_ok", 5000, day), payout("po_gone", 7000, day)
    exc = CloseStore(db).record_close([], [Finding(ExceptionKind.BANK_MISSING, missing, None, "no credit for po_gone")],
                             payout_ids=[matched, missing], entry_ids=[])
    return matched, missing, exc[0].id


def test_payouts_pages__a_day_matched_and_open_the_drill_down_and_a_resolve(db: Database, db_url: str,
                                                                           recon: Runner) -> None:
    _, missing, exception_id = _store(db)
    with console(db_url, login="ann") as client:  # the signed-in operator resolves
        listing = client.get("/payouts")
        assert listing.status_code == 200
        assert 'data-payout="po_gone" data-state="bank_missing"' in listing.text
        assert 'data-payout="po_ok" data-state="awaiting_bank"' in listing.text
        detail = client.get(f"/payouts/{missing}")
        assert detail.status_code == 200
        assert 'data-line="po_gone-c" data-category="missing_locally"' in detail.text
        assert f'action="/payouts/exceptions/{exception_id}/resolve"' in detail.text
        assert "no credit for po_gone" in client.get("/payouts/exceptions").text
        csrf = csrf_token(client, f"/payouts/{missing}")
        form = f"exception-{exception_id}"
        refused = client.post(f"/payouts/exceptions/{exception_id}/resolve", data={"csrf": csrf},
                              follow_redirects=False)  # refused: POST -> redirect -> GET, in the exception's row
        assert refusal(client, refused, to=f"/payouts/{missing}?", form=form) == "not resolved: reason is required"
        assert refused.headers["location"].endswith(f"#{form}")
        done = client.post(f"/payouts/exceptions/{exception_id}/resolve",
                           data={"csrf": csrf, "reason": "the bank booked it on the 3rd"}, follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"].startswith(f"/payouts/{missing}?")
        assert "resolved by ann" in client.get(done.headers["location"]).text
        again = client.post(f"/payouts/exceptions/{exception_id}/resolve",
                            data={"csrf": csrf, "reason": "twice"}, follow_redirects=False)
        assert refusal(client, again, to=f"/payouts/{missing}?", form=form).startswith("not resolved: ")
        assert client.post("/payouts/exceptions/999999/resolve", data={"csrf": csrf, "reason": "x"}).status_code \
            == 404
        assert client.get("/payouts/999999").status_code == 404
        assert client.get("/payouts?since=yesterday").status_code == 422
    shown = json.loads(recon("payouts", "show", str(missing), "--json", db_url=db_url).stdout)
    assert [(e["state"], e["resolved_by"], e["resolution"]) for e in shown["exceptions"]] == [
        ("resolved", "ann", "the bank booked it on the 3rd")]
    assert shown["events"][-1]["kind"] == "resolved"


def test_payouts_pages__the_resolve_goes_through_actions_a_viewer_is_refused_and_the_queue_links_them(
        db: Database, db_url: str) -> None:
    _, missing, exception_id = _store(db)
    with console(db_url, login="vic") as client:  # a viewer: the form is there, the write refused
        review = client.get("/review")
        assert review.status_code == 200
        assert 'data-stat="payout-exceptions"' in review.text and 'href="/payouts/exceptions"' in review.text
        assert 'data-payout-kind="bank_missing">1 bank missing' in review.text
        csrf = csrf_token(client, f"/payouts/{missing}")
        refused = client.post(f"/payouts/exceptions/{exception_id}/resolve", data={"csrf": csrf, "reason": "seen"},
                              follow_redirects=False)
        assert "has the role viewer" in refusal(client, refused, to=f"/payouts/{missing}?",
                                                form=f"exception-{exception_id}")
        assert 'value="seen"' in client.get(refused.headers["location"]).text  # the reason kept
    assert CloseStore(db).exception(exception_id).state is ExceptionState.OPEN  # type: ignore[union-attr]
    with console(db_url, login="ann") as client:
        csrf = csrf_token(client, f"/payouts/{missing}")
        done = client.post(f"/payouts/exceptions/{exception_id}/resolve", data={"csrf": csrf, "reason": "seen"})
        assert done.status_code == 200 and "resolved by ann" in done.text
        assert 'data-stat="payout-exceptions"' not in client.get("/review").text  # none open: no line
    with db.begin() as conn:
        rows = conn.execute(sa.select(schema.audit_log.c.actor, schema.audit_log.c.subject,
                                      schema.audit_log.c.outcome).where(
            schema.audit_log.c.action == "payouts.resolve")).all()
    assert [tuple(r) for r in rows] == [("ann", f"payout exception {exception_id}", "done")]


def test_payouts_pages__a_credits_exception_is_resolved_from_the_exceptions_page_refusals_beside_it(
        db: Database, db_url: str) -> None:
    """An exception with no payout (a credit nothing explains) has its form on the open exceptions' page: a
    refusal redirects there, shown in its row; once resolved (gone from the list) a second try is refused above
    the list."""
    store = CloseStore(db)
    store.record_close([], [Finding(ExceptionKind.UNEXPLAINED_CREDIT, None, None,
                                    "a credit of 12.00 EUR nobody explains")], payout_ids=[], entry_ids=[])
    [found] = list(store.iter_exceptions(state="open"))
    assert found.payout_id is None
    form = f"exception-{found.id}"
    with console(db_url, login="ann") as client:
        csrf = csrf_token(client, "/payouts/exceptions")
        refused = client.post(f"/payouts/exceptions/{found.id}/resolve", data={"csrf": csrf, "reason": " "},
                              follow_redirects=False)
        assert refusal(client, refused, to="/payouts/exceptions?", form=form) == "not resolved: reason is required"
        assert refused.headers["location"].endswith(f"#{form}")
        done = client.post(f"/payouts/exceptions/{found.id}/resolve", data={"csrf": csrf, "reason": "interest"},
                           follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"].startswith("/payouts/exceptions?")
        assert f"exception {found.id} (unexplained_credit) resolved by ann" in client.get(done.headers["location"]).text
        again = client.post(f"/payouts/exceptions/{found.id}/resolve", data={"csrf": csrf, "reason": "twice"},
                            follow_redirects=False)
        assert refusal(client, again, to="/payouts/exceptions?", form=form).startswith("not resolved: ")
