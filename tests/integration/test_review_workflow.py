"""The review queue as a workflow (issue 27), on both databases: severity from amount and age, due-by per
reason, assignees and comments, the queue's keyset pages and totals, the overdue metric, and bulk resolve
(preview, digest, all or nothing) against the PSP sandbox over real HTTP.

Expected severities, due-bys and totals are worked out by hand from the defaults in config/recon.toml
(high: 1000 major units or 3 days; medium: 100 or 1 day; SLA 1 day for amount_mismatch, 2 days otherwise).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from psp_adapters.sandbox.server import SandboxServer
from recon import review_bulk
from recon.app import App
from recon.db import schema
from recon.db.database import Database, connect
from recon.db.payment_store import PaymentStore
from recon.errors import ReviewRefused, UsageError
from recon.operator_rows import Role
from recon.review_rows import QueueFilter
from recon.rows import PaymentStatus
from tests.cli import Runner
from tests.integration.payment_flow import create
from tests.integration.test_review import charged, env, into_review_by_amount, sandbox, to_review
from tests.operators import add_operator, add_staff

__all__ = ["env", "sandbox"]  # the fixtures test_review defines, used here too

#: reference -> (amount in minor units, currency, reason, hours in review)
QUEUE = {
    "big": (200_000, "EUR", "amount_mismatch: ours 200000 EUR, PSP 199000", 1),  # high by amount
    "mid": (15_000, "EUR", "amount_mismatch: ours 15000 EUR, PSP 14000", 25),  # medium; overdue (1d SLA)
    "aged": (500, "EUR", "missing_at_psp: PSP has none", 50),  # medium by age; overdue (2d SLA)
    "old": (500, "EUR", "no_final_answer: still pending", 100),  # high by age; overdue
    "small": (500, "EUR", "missing_at_psp: PSP has none", 1),  # low
    "yen": (1_500, "JPY", "missing_at_psp: PSP has none", 1),  # 1,500 JPY: high by amount (exponent 0)
    "dinar": (150_000, "KWD", "missing_at_psp: PSP has none", 1),  # 150.000 KWD: medium (exponent 3)
}


def seed_queue(db: Database) -> dict[str, int]:
    """QUEUE's payments in review, each since its hours ago (review_since set back by hand)."""
    ids: dict[str, int] = {}
    now = datetime.now(UTC)
    for ref, (amount, currency, reason, hours) in QUEUE.items():
        [pid] = create(db, 1, amount=amount, currency=currency, charge=False, prefix=ref)
        to_review(db, pid, reason)
        with db.begin() as conn:
            conn.execute(sa.update(schema.payments).where(schema.payments.c.id == pid)
                         .values(review_since=db.to_db(now - timedelta(hours=hours))))
        ids[ref] = pid
    return ids


def listed(recon: Runner, db_url: str, *args: str) -> dict[str, dict[str, object]]:
    r = recon("review", "list", "--json", *args, db_url=db_url)
    assert r.returncode == 0, r.stderr
    return {row["merchant_reference"].removesuffix("-0"): row for row in json.loads(r.stdout)["payments"]}


@pytest.fixture(autouse=True)
def _operators(db_url: str) -> None:
    """Who these tests act as (``--by``): the staff of tests/operators.py and alice, an operator."""
    db = connect(db_url)
    try:
        add_staff(db)
        add_operator(db, "alice", Role.OPERATOR)
    finally:
        db.dispose()


def test_review_list__severity_due_by_and_overdue_follow_amount_age_and_reason(
        db: Database, db_url: str, recon: Runner) -> None:
    seed_queue(db)
    rows = listed(recon, db_url)
    assert {ref: row["severity"] for ref, row in rows.items()} == {
        "big": "high", "mid": "medium", "aged": "medium", "old": "high", "small": "low", "yen": "high",
        "dinar": "medium"}
    assert {ref for ref, row in rows.items() if row["overdue"]} == {"mid", "aged", "old"}
    since = datetime.fromisoformat(str(rows["mid"]["since"]))
    assert datetime.fromisoformat(str(rows["mid"]["due_at"])) == since + timedelta(days=1)
    assert datetime.fromisoformat(str(rows["small"]["due_at"])) == \
        datetime.fromisoformat(str(rows["small"]["since"])) + timedelta(days=2)

    # the SQL filters agree with what each row says
    assert set(listed(recon, db_url, "--severity", "high")) == {"big", "old", "yen"}
    assert set(listed(recon, db_url, "--severity", "medium")) == {"mid", "aged", "dinar"}
    assert set(listed(recon, db_url, "--severity", "low")) == {"small"}
    assert set(listed(recon, db_url, "--overdue")) == {"mid", "aged", "old"}
    assert set(listed(recon, db_url, "--overdue", "--reason", "missing_at_psp")) == {"aged"}

    doc = json.loads(recon("review", "list", "--json", "--overdue", db_url=db_url).stdout)
    assert doc["total"] == 3 and doc["by_currency"] == [{"currency": "EUR", "count": 3, "amount": 16_000}]
    stats = json.loads(recon("stats", "--json", db_url=db_url).stdout)
    assert stats["review"]["needs_review"] == 7 and stats["review"]["overdue"] == 3


def test_review_config__a_stricter_sla_and_thresholds_apply_to_the_whole_queue_at_once(
        tmp_path: Path, db: Database, db_url: str, recon: Runner) -> None:
    seed_queue(db)
    config = f"{tmp_path}/recon.toml"
    with open(config, "w", encoding="utf-8") as f:
        f.write('[review]\nhigh_amount = "10"\nmedium_amount = "1"\n[review.sla]\ndefault = "30m"\n')
    r = recon("--config", config, "review", "list", "--json", "--severity", "low", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["payments"] == []  # 5.00 EUR is medium now
    r = recon("--config", config, "review", "list", "--json", "--overdue", db_url=db_url)
    assert json.loads(r.stdout)["total"] == 7  # every item is past 30 minutes
    with open(config, "w", encoding="utf-8") as f:
        f.write('[review.sla]\namount_mismatc = "1d"\n')
    bad = recon("--config", config, "review", "list", db_url=db_url)
    assert bad.returncode == 2 and "amount_mismatc" in bad.stderr and "amount_mismatch" in bad.stderr


def test_review_assign_and_comment__filter_by_assignee_and_show_the_history(
        db: Database, db_url: str, recon: Runner) -> None:
    seed_queue(db)
    r = recon("review", "assign", "big-0", "--to", "alice", "--by", "bob", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert "assigned to alice" in r.stdout
    assert recon("review", "assign", "yen-0", "--to", "alice", "--by", "bob", db_url=db_url).returncode == 0
    assert recon("review", "comment", "big-0", "--text", "called the PSP, ticket 77", "--by", "alice",
                 db_url=db_url).returncode == 0

    assert set(listed(recon, db_url, "--assignee", "alice")) == {"big", "yen"}
    assert set(listed(recon, db_url, "--unassigned")) == {"mid", "aged", "old", "small", "dinar"}
    assert listed(recon, db_url)["big"]["assignee"] == "alice"

    assert recon("review", "assign", "yen-0", "--nobody", "--by", "bob", db_url=db_url).returncode == 0
    assert set(listed(recon, db_url, "--assignee", "alice")) == {"big"}

    shown = json.loads(recon("review", "show", "big-0", "--json", db_url=db_url).stdout)
    assert [(c["author"], c["kind"], c["body"]) for c in shown["comments"]] == [
        ("bob", "assigned", "alice"), ("alice", "comment", "called the PSP, ticket 77")]
    text = recon("review", "show", "big-0", db_url=db_url).stdout
    assert "bob assigned it to alice" in text and "alice wrote: called the PSP, ticket 77" in text

    create(db, 1, charge=False, prefix="fresh")
    refused = recon("review", "assign", "fresh-0", "--to", "alice", "--by", "bob", db_url=db_url)
    assert refused.returncode == 2 and "not needs_review" in refused.stderr
    both = recon("review", "assign", "big-0", "--to", "x", "--nobody", "--by", "bob", db_url=db_url)
    assert both.returncode == 2 and "exactly one" in both.stderr


def test_review_queue__keyset_pages_cover_the_filter_once_in_order_with_its_totals(db: Database, db_url: str) -> None:
    ids = seed_queue(db)
    app = App(database_url=db_url)
    try:
        where = QueueFilter()
        seen: list[int] = []
        page = app.review.queue(where, limit=3)
        pages = [page]
        while page.next_cursor is not None:
            page = app.review.queue(where, after=page.next_cursor, limit=3)
            pages.append(page)
        seen = [i.payment.id for p in pages for i in p.items]
        # longest in review first: old (100h), aged (50h), mid (25h), then the four of 1h in id order
        by_ref = {v: k for k, v in ids.items()}
        assert [by_ref[i] for i in seen[:3]] == ["old", "aged", "mid"]
        assert sorted(seen) == sorted(ids.values()) and len(seen) == 7
        assert [len(p.items) for p in pages] == [3, 3, 1]
        assert pages[0].previous_cursor is None and pages[1].previous_cursor is not None
        assert all(p.totals.count == 7 for p in pages)
        assert {(t.currency, t.count, t.amount) for t in pages[0].totals.by_currency} == {
            ("EUR", 5, 200_000 + 15_000 + 500 * 3), ("JPY", 1, 1_500), ("KWD", 1, 150_000)}
        back = app.review.queue(where, before=pages[2].previous_cursor, limit=3)
        assert [i.payment.id for i in back.items] == [i.payment.id for i in pages[1].items]
        assert back.next_cursor is not None
    finally:
        app.close()


def test_bulk_resolve__preview_then_apply_exactly_that_set_all_or_nothing(
        db: Database, db_url: str, sandbox: SandboxServer, env: dict[str, str], recon: Runner,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_SANDBOX_BASE_URL", sandbox.url)
    [a] = charged(db, sandbox, 1, amount=1250, prefix="a")
    into_review_by_amount(db, sandbox, a, psp_amount=990)
    [b] = charged(db, sandbox, 1, amount=1250, prefix="b")  # charged after the first sweep: still pending
    into_review_by_amount(db, sandbox, b, psp_amount=1000)

    shown = recon("review", "bulk-resolve", "--kind", "amount_mismatch", "--as", "succeeded", "--json",
                  db_url=db_url, env=env)
    assert shown.returncode == 0, shown.stderr
    preview = json.loads(shown.stdout)
    assert preview["applied"] is False and preview["count"] == 2
    assert preview["by_currency"] == [{"currency": "EUR", "count": 2, "amount": 2500}]
    assert sorted(preview["payments"]) == ["a-0", "b-0"]
    assert PaymentStore(db).get(a).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]

    stale = recon("review", "bulk-resolve", "--kind", "amount_mismatch", "--as", "succeeded", "--apply", "0" * 64,
                  "--by", "alice", "--reason", "agreed", db_url=db_url, env=env)
    assert stale.returncode == 2

    r = recon("review", "bulk-resolve", "--kind", "amount_mismatch", "--as", "succeeded", "--apply",
              preview["digest"], "--by", "alice", db_url=db_url, env=env)
    assert r.returncode == 2 and "--apply needs --reason and --by" in r.stderr
    app = App(database_url=db_url)
    try:
        where = app.review.where(kind="amount_mismatch")
        done = review_bulk.apply(app.review, where, to="succeeded", reason="partial captures agreed", by="alice",
                                 expect=preview["digest"])
    finally:
        app.close()
    assert done.count == 2
    for pid, psp_amount in ((a, 990), (b, 1000)):
        assert PaymentStore(db).get(pid).status is PaymentStatus.SUCCEEDED  # type: ignore[union-attr]
        details = PaymentStore(db).events(pid)[-1].details or {}
        assert details["operator"] == "alice" and details["bulk"] == {"size": 2, "digest": preview["digest"]}
        assert details["difference"]["amount"] == 1250 - psp_amount
        assert details["difference"]["treatment"] == "written_off"


def test_bulk_resolve__a_changed_set_or_one_contradicting_payment_resolves_nothing(
        db: Database, db_url: str, sandbox: SandboxServer, env: dict[str, str], recon: Runner) -> None:
    [a] = charged(db, sandbox, 1, amount=1250)
    into_review_by_amount(db, sandbox, a, psp_amount=990)
    [lost] = create(db, 1, charge=False, prefix="lost")
    to_review(db, lost, "amount_mismatch: ours 1000 EUR, PSP 900")  # the sandbox has no such payment

    shown = json.loads(recon("review", "bulk-resolve", "--as", "succeeded", "--json", db_url=db_url,
                             env=env).stdout)
    assert shown["count"] == 2
    r = recon("review", "bulk-resolve", "--as", "succeeded", "--apply", shown["digest"], "--reason", "ok",
              "--by", "alice", db_url=db_url, env=env)
    assert r.returncode == 2
    assert "1 of 2 payments cannot be resolved as succeeded" in r.stderr and "lost-0" in r.stderr
    assert "the PSP has no such payment" in r.stderr
    for pid in (a, lost):
        assert PaymentStore(db).get(pid).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]

    # the set changes after the preview: the digest no longer matches, nothing is resolved
    preview = json.loads(recon("review", "bulk-resolve", "--as", "succeeded", "--psp", "sandbox", "--json",
                               db_url=db_url, env=env).stdout)
    [extra] = create(db, 1, charge=False, prefix="late")
    to_review(db, extra, "missing_at_psp: none")
    late = recon("review", "bulk-resolve", "--as", "succeeded", "--psp", "sandbox", "--apply", preview["digest"],
                 "--reason", "ok", "--by", "alice", db_url=db_url, env=env)
    assert late.returncode == 2 and "the queue changed since the preview" in late.stderr
    assert PaymentStore(db).get(extra).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]


def test_resolve__at_another_amount_records_what_happens_to_the_difference(
        db: Database, db_url: str, sandbox: SandboxServer, env: dict[str, str], recon: Runner) -> None:
    [pid] = charged(db, sandbox, 1, amount=61570)
    into_review_by_amount(db, sandbox, pid, psp_amount=55413)
    r = recon("review", "resolve", "order-0", "--as", "succeeded", "--reason", "short capture", "--by", "ann",
              "--difference", "to_collect", db_url=db_url, env=env)
    assert r.returncode == 0, r.stderr
    assert "the difference of 61.57 EUR (ours is more) is to be collected from the customer" in r.stdout
    details = PaymentStore(db).events(pid)[-1].details or {}
    assert details["difference"] == {
        "amount": 6157, "currency": "EUR", "treatment": "to_collect",
        "sentence": "the difference of 61.57 EUR (ours is more) is to be collected from the customer"}


def test_bulk_apply__an_approval_hook_that_refuses_writes_nothing(
        db: Database, db_url: str, sandbox: SandboxServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_SANDBOX_BASE_URL", sandbox.url)
    [pid] = charged(db, sandbox, 1, amount=1250)
    into_review_by_amount(db, sandbox, pid, psp_amount=990)
    app = App(database_url=db_url)
    try:
        where = app.review.where()
        shown = review_bulk.preview(app.review, where, to="succeeded")

        def four_eyes(preview: review_bulk.BulkPreview, by: str) -> None:
            raise ReviewRefused(f"{preview.count} payments by {by}: a second operator must approve")

        try:
            review_bulk.apply(app.review, where, to="succeeded", reason="r", by="ann", expect=shown.digest,
                              approval_func=four_eyes)
        except ReviewRefused as exc:
            assert "a second operator must approve" in str(exc)
        else:
            raise AssertionError("the approval hook's refusal did not stop the bulk resolve")
        try:
            review_bulk.apply(app.review, where, to="failed", reason="r", by="ann", expect=shown.digest)
        except UsageError as exc:
            assert "the queue changed since the preview" in str(exc)  # another target: another digest
        else:
            raise AssertionError("a digest of another target was accepted")
    finally:
        app.close()
    assert PaymentStore(db).get(pid).status is PaymentStatus.NEEDS_REVIEW  # type: ignore[union-attr]


def test_bulk_resolve__above_bulk_resolve_count_needs_four_eyes_and_runs_as_previewed_once_approved(
        tmp_path: Path, db: Database, db_url: str, sandbox: SandboxServer, env: dict[str, str], recon: Runner,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_SANDBOX_BASE_URL", sandbox.url)
    [a] = charged(db, sandbox, 1, amount=1250, prefix="a")
    into_review_by_amount(db, sandbox, a, psp_amount=990)
    [b] = charged(db, sandbox, 1, amount=1250, prefix="b")
    into_review_by_amount(db, sandbox, b, psp_amount=1000)
    config = f"{tmp_path}/recon.toml"
    with open(config, "w", encoding="utf-8") as f:
        f.write("[four_eyes]\nbulk_resolve_count = 1\n")
    shown = recon("--config", config, "review", "bulk-resolve", "--kind", "amount_mismatch", "--as", "succeeded",
                  "--json", db_url=db_url, env=env)
    digest = json.loads(shown.stdout)["digest"]
    apply = ("--config", config, "review", "bulk-resolve", "--kind", "amount_mismatch", "--as", "succeeded",
             "--apply", digest, "--reason", "partial captures agreed")
    viewer = recon(*apply, "--by", "vic", db_url=db_url, env=env)
    assert viewer.returncode == 2 and "vic" in viewer.stderr and "operator or above" in viewer.stderr
    r = recon(*apply, "--by", "ann", db_url=db_url, env=env)
    assert r.returncode == 1, r.stderr  # two payments, more than one: a request, nothing resolved yet
    assert "review.bulk_resolve of 2 payments in review needs a second operator: approval 1" in r.stdout
    assert {PaymentStore(db).get(p).status for p in (a, b)} == {PaymentStatus.NEEDS_REVIEW}  # type: ignore[union-attr]
    own = recon("--config", config, "approvals", "approve", "1", "--by", "ann", db_url=db_url, env=env)
    assert own.returncode == 2
    ok = recon("--config", config, "approvals", "approve", "1", "--by", "bob", db_url=db_url, env=env)
    assert ok.returncode == 0, ok.stderr
    for pid in (a, b):
        assert PaymentStore(db).get(pid).status is PaymentStatus.SUCCEEDED  # type: ignore[union-attr]
        details = PaymentStore(db).events(pid)[-1].details or {}
        assert details["operator"] == "ann" and details["bulk"] == {"size": 2, "digest": digest}
    with db.begin() as conn:
        audit = conn.execute(sa.select(schema.audit_log.c.actor, schema.audit_log.c.outcome).where(
            schema.audit_log.c.action == "review.bulk_resolve").order_by(schema.audit_log.c.id)).all()
    assert [tuple(row) for row in audit] == [("ann", "requested"), ("bob", "approved"), ("bob", "done")]
