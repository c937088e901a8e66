"""Four eyes on both databases: what needs a second operator is requested, approved by another approver (never
the requester, never a viewer or an operator), expires, is audited; of two approvals at once one wins."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from recon import Client, Settings
from recon.app import App
from recon.clock import FixedClock
from recon.db.approval_store import ApprovalStore
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.engine.replay import job_filter
from recon.errors import ConfigError, NotAllowed, UsageError
from recon.four_eyes import FourEyesConfig
from recon.operator_rows import ApprovalState
from recon.rows import Finish, NewPayment
from tests.console import make_dead


@pytest.fixture
def app(db_url: str, staff: object) -> App:
    application = App(db_url)
    yield application  # type: ignore[misc]
    application.close()
    application.db.dispose()


def paused(app: App, psp: str) -> bool:
    return any(c.paused for c in app.controls.list_controls()[0] if c.psp == psp)


def audit(db: Database) -> list[tuple[str, str, str]]:
    with db.begin() as conn:
        return [tuple(r) for r in conn.execute(sa.text("SELECT actor, action, outcome FROM audit_log ORDER BY id"))]


def test_pause__requested_then_approved_by_another_approver_only(app: App) -> None:
    asked = app.actions.pause("sandbox", reason="incident 7", by="ann")
    assert asked.state is ApprovalState.PENDING and asked.requested_by == "ann"
    assert not paused(app, "sandbox")
    with pytest.raises(NotAllowed, match="has the role viewer"):
        app.actions.pause("sandbox", reason="x", by="vic")
    for who in ("ann", "vic"):
        with pytest.raises(NotAllowed, match="takes approver or above"):
            app.actions.approve(asked.id, by=who)
    own = app.actions.pause("stripe", reason="mine", by="bob")  # an approver may ask, and may not approve it
    with pytest.raises(NotAllowed, match="another approver must approve it"):
        app.actions.approve(own.id, by="bob")
    done = app.actions.approve(asked.id, by="bob")
    assert (done.state, done.decided_by, done.result) == (ApprovalState.APPROVED, "bob", "psp sandbox paused")
    assert paused(app, "sandbox")
    with pytest.raises(UsageError, match=r"not pending any more \(approved by bob\)"):
        app.actions.approve(asked.id, by="amy")
    rejected = app.actions.reject(own.id, by="root")
    assert rejected.state is ApprovalState.REJECTED
    assert [a.id for a in app.four_eyes.in_state(ApprovalState.PENDING)] == []
    assert audit(app.db) == [("ann", "psp.pause", "requested"), ("bob", "psp.pause", "requested"),
                             ("bob", "psp.pause", "approved"), ("bob", "psp.pause", "done"),
                             ("root", "psp.pause", "rejected")]


def test_requests__expire_and_are_audited(app: App) -> None:
    clock = FixedClock(datetime(2026, 12, 5, 9, 0, tzinfo=UTC))
    app.db.clock = clock
    asked = app.actions.pause("sandbox", reason="later", by="ann")
    assert asked.expires_at == clock.now() + timedelta(hours=24)
    clock.advance(timedelta(hours=24))
    with pytest.raises(UsageError, match=r"not pending any more \(expired\)"):
        app.actions.approve(asked.id, by="bob")
    assert [a.id for a in app.four_eyes.in_state(ApprovalState.EXPIRED)] == [asked.id]
    assert audit(app.db)[-1] == ("system:four_eyes", "psp.pause", "expired")


def test_replay__above_the_count_needs_an_approver(app: App) -> None:
    ids = [make_dead(app.jobs) for _ in range(4)]
    app.four_eyes.config = FourEyesConfig(replay_count=3)
    filters = job_filter(app.jobs)
    asked = app.actions.replay(filters, budget=2, by="ann")
    assert asked.run is None and asked.approval is not None and asked.matched == 4
    assert {j.state.value for j in app.jobs.get_many(ids)} == {"dead"}
    small = app.actions.replay(filters, budget=2, by="ann", limit=2)  # at most 3: no approval
    assert small.run is not None and small.run.replayed == ids[:2]
    done = app.actions.approve(asked.approval.id, by="amy")
    assert done.state is ApprovalState.APPROVED and done.result and done.result.startswith("replayed 2 dead jobs")
    assert {j.state.value for j in app.jobs.get_many(ids)} == {"runnable"}
    assert {r.replayed_by for i in ids[2:] for r in app.jobs.dead_letters.replays(i)} == {"ann (approved by amy)"}


def dead_for(app: App, kind: str, payment_id: int, *, queue: str = "money") -> int:
    """A charge or reconcile job on payment ``payment_id`` that ran once and died."""
    job_id = Client(app.jobs, Settings()).enqueue(kind, {"payment_id": payment_id}, queue=queue)
    [job] = app.jobs.claim(worker="w", queues=[queue], n=1, ttl=30)
    assert job.id == job_id
    app.jobs.finish(worker="w", finishes=[Finish(id=job.id, attempt=1, state="dead", outcome="dead",
                                                 error_kind="bug", error="bug on attempt 1")])
    return job_id


def test_replay__above_the_amount_in_a_currency_needs_an_approver(app: App) -> None:
    big, other, small = PaymentStore(app.db).create([
        NewPayment("default", "fe-big", 600_000, "EUR", "sandbox"),  # 6,000.00 EUR
        NewPayment("default", "fe-other", 600_001, "EUR", "sandbox"),
        NewPayment("default", "fe-yen", 5_000_000, "JPY", "sandbox")], charge=False)
    # 10,000.00 EUR; JPY has no amount threshold
    app.four_eyes.config = FourEyesConfig(replay_count=100, replay_amount={"EUR": 1_000_000})
    same = [dead_for(app, "charge", big), dead_for(app, "reconcile", big), dead_for(app, "charge", small)]
    filters = job_filter(app.jobs, queue="money")
    ran = app.actions.replay(filters, budget=2, by="ann")  # 6,000.00 EUR once (two jobs, one payment): within
    assert ran.approval is None and ran.run is not None and ran.run.replayed == same
    more = [dead_for(app, "charge", big, queue="money2"), dead_for(app, "charge", other, queue="money2")]
    asked = app.actions.replay(job_filter(app.jobs, queue="money2"), budget=2, by="bob")  # 12,000.01 EUR
    assert asked.run is None and asked.approval is not None and asked.matched == 2
    assert asked.approval.subject == "2 dead jobs worth 12,000.01 EUR over 10,000.00 EUR"
    assert {j.state.value for j in app.jobs.get_many(more)} == {"dead"}
    with pytest.raises(NotAllowed, match="another approver must approve it"):
        app.actions.approve(asked.approval.id, by="bob")
    done = app.actions.approve(asked.approval.id, by="amy")
    assert done.result == "replayed 2 dead jobs; 0 left dead (their unique key is held)"
    assert {j.state.value for j in app.jobs.get_many(more)} == {"runnable"}
    assert audit(app.db)[-3:] == [("bob", "jobs.replay", "requested"), ("amy", "jobs.replay", "approved"),
                                  ("amy", "jobs.replay", "done")]


def test_amount_over__per_currency_strictly_above() -> None:
    config = FourEyesConfig(replay_amount={"EUR": 1000, "KWD": 1000, "JPY": 0})
    assert config.amount_over({"EUR": 1000, "USD": 10**12}) is None  # at the threshold; USD has none
    assert config.amount_over({"KWD": 1001}) == "1.001 KWD over 1.000 KWD"
    assert config.amount_over({"JPY": 1, "EUR": 1001}) == "10.01 EUR over 10.00 EUR"  # the first code in order


def test_config__bounds() -> None:
    assert FourEyesConfig.load({"expires_after": "1h", "replay_count": 0}).replay_count == 0
    assert FourEyesConfig.load({"replay_amount": {"EUR": 0, "JPY": 10**15}}).replay_amount == {"EUR": 0,
                                                                                             "JPY": 10**15}
    assert FourEyesConfig.load({}).replay_amount == {"EUR": 10**6, "USD": 10**6, "GBP": 10**6, "JPY": 10**6}
    assert FourEyesConfig.load({"replay_amount": {}}).replay_amount == {}  # the amount rule off
    for bad in ({"expires_after": "1m"}, {"expires_after": "8d"}, {"replay_count": -1}, {"replay_count": True},
                {"threshold": 1}, {"replay_amount": {"eur": 100}}, {"replay_amount": {"XXY": 100}},
                {"replay_amount": {"EUR": -1}}, {"replay_amount": {"EUR": 10**15 + 1}},
                {"replay_amount": {"EUR": 1.5}}, {"replay_amount": {"EUR": "100"}}, {"replay_amount": 5}):
        with pytest.raises(ConfigError, match="four_eyes"):
            FourEyesConfig.load(bad)



def test_race__two_approvals_at_once_have_one_winner(app: App) -> None:
    """Two approvers on two connections: the second decision waits for the first's row lock (PostgreSQL) or its
    write lock (SQLite), then matches nothing."""
    asked = app.actions.pause("sandbox", reason="race", by="ann")
    store = ApprovalStore(app.db)
    first = app.db.engine.connect()
    tx = first.begin()
    try:
        if not app.db.is_postgresql:
            first.exec_driver_sql("SELECT 1")  # the SQLite connection's BEGIN IMMEDIATE was sent by begin()
        won = store.decide(first, asked.id, state=ApprovalState.APPROVED, by="bob")
        assert won is not None
        results: list[object] = []

        def second() -> None:
            try:
                with app.db.begin() as conn:
                    results.append(store.decide(conn, asked.id, state=ApprovalState.APPROVED, by="amy"))
            except Exception as exc:  # SQLite: busy past its timeout is also a loss
                results.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.5)
        assert thread.is_alive()  # waiting for the first decision
        tx.commit()
    finally:
        first.close()
    thread.join(30)
    assert results == [None]
    assert app.four_eyes.get(asked.id).decided_by == "bob"


def test_race__end_to_end_the_action_runs_once(app: App, db_url: str) -> None:
    asked = app.actions.pause("sandbox", reason="race", by="ann")
    others = [App(db_url), App(db_url)]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def approve(other: App, who: str) -> None:
        barrier.wait()
        try:
            other.actions.approve(asked.id, by=who)
            outcomes.append("won")
        except UsageError:
            outcomes.append("lost")

    threads = [threading.Thread(target=approve, args=(o, w)) for o, w in zip(others, ("bob", "amy"), strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for o in others:
        o.close()
        o.db.dispose()
    assert sorted(outcomes) == ["lost", "won"]
    assert [a for a in audit(app.db) if a[2] == "done"] == [(app.four_eyes.get(asked.id).decided_by, "psp.pause",
                                                             "done")]
