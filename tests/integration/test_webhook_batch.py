"""Webhook events applied many at once (``WebhookHandler.apply_events``, the finisher's batch write) end exactly
as the same events applied one at a time, in order (``WebhookHandler._apply``, the path test_webhooks.py checks
against the PSPs' documented behaviour): payments in every status, every kind of news, several events for one
payment in one batch, events for payments we do not know, by either reference. On both databases."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from psp_adapters.protocol import ActionRequired, Failed, Pending, Reversed, Succeeded, Unknown, WebhookEvent
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.db.webhook_store import WebhookStore
from recon.reconcile.webhook import WebhookHandler, news_of
from recon.rows import EventSource, Job, NewPayment, PaymentStatus, Transition
from recon.webhook_rows import WebhookState

P = PaymentStatus
STATUSES = [P.CREATED, P.PROCESSING, P.PENDING, P.SUCCEEDED, P.FAILED, P.NEEDS_REVIEW]
QUEUE = "webhooks"


class Universe:
    """One copy of the payments, under its own prefix: ``a`` is applied one at a time, ``b`` in batches."""

    def __init__(self, db: Database, prefix: str) -> None:
        self.db, self.prefix = db, prefix
        self.payments, self.webhooks = PaymentStore(db), WebhookStore(db)
        self.handler = WebhookHandler(self.payments, self.webhooks)

    def ref(self, i: int) -> str:
        return f"{self.prefix}-order-{i}"

    def pi(self, i: int) -> str:
        return f"pi_{self.prefix}_{i}"

    def seed(self, rng: random.Random, n: int) -> list[tuple[P, bool]]:
        plan = [(rng.choice(STATUSES), rng.random() < 0.6) for _ in range(n)]
        ids = self.payments.create([NewPayment("shop", self.ref(i), 1000, "EUR", "stripe") for i in range(n)],
                                   charge=False)
        with self.db.begin() as conn:
            for pid, (i, (target, has_ref)) in zip(ids, enumerate(plan), strict=True):
                if target is not P.CREATED or has_ref:
                    to = target if target is not P.CREATED else P.PROCESSING
                    assert self.payments.apply(conn, Transition(pid, P.CREATED, to, EventSource.CHARGE,
                                                                psp_reference=self.pi(i) if has_ref else None,
                                                                review_reason="seeded" if to is P.NEEDS_REVIEW
                                                                else None))
        return plan

    def store(self, specs: list[tuple[str, int, dict[str, Any]]]) -> list[tuple[Job, int]]:
        """Store the events (kind, payment index, fields) in order and claim their jobs."""
        events = [self.event(n, *spec) for n, spec in enumerate(specs)]
        taken = self.webhooks.intake(events, queue=QUEUE, max_attempts=5)
        jobs = {j.id: j for j in JobStore(self.db).claim(worker="w", queues=[QUEUE], n=len(events), ttl=300)}
        return [(jobs[t.job_id], t.webhook_id) for t in taken]  # type: ignore[index,misc]

    def event(self, n: int, kind: str, i: int, how: dict[str, Any]) -> WebhookEvent:
        refs = {"psp_reference": self.pi(i) if how["by_pi"] else None,
                "merchant_reference": self.ref(i) if how["by_ref"] else None,
                "amount": how["amount"], "currency": how["currency"], "raw_status": kind}
        news: Any = {"succeeded": lambda: Succeeded(**refs), "failed": lambda: Failed(**refs, reason="card_declined"),
                "pending": lambda: Pending(**refs), "action": lambda: ActionRequired(**refs),
                "refund": lambda: Reversed(**refs, kind="refund"), "dispute": lambda: Reversed(**refs, kind="dispute"),
                "unknown": lambda: Unknown(**refs), "none": lambda: None}[kind]()
        return WebhookEvent("stripe", f"evt_{self.prefix}_{n}", f"test.{kind}", datetime(2026, 12, 1, tzinfo=UTC),
                            news=news, merchant_account="shop")

    def one_at_a_time(self, items: list[tuple[Job, int]]) -> None:
        for job, webhook_id in items:
            with self.db.begin() as conn:
                record = self.webhooks.get(webhook_id, conn)
                assert record is not None
                news = news_of(record)
                if news is None:
                    self.webhooks.mark(conn, record.id, WebhookState.IGNORED, payment_id=None)
                else:
                    self.handler._apply(conn, record, news, job)

    def in_batches(self, items: list[tuple[Job, int]], rng: random.Random) -> list[int]:
        sizes, at = [], 0
        while at < len(items):
            size = rng.randint(1, 40)
            with self.db.begin() as conn:
                self.handler.apply_events(conn, items[at:at + size])
            sizes.append(size)
            at += size
        return sizes

    def outcome(self) -> dict[str, Any]:
        """Everything the events did, with this universe's prefix taken out."""
        cut = self.prefix

        def norm(text: Any) -> Any:
            return text.replace(f"{cut}-", "").replace(f"_{cut}_", "_") if isinstance(text, str) else text

        with self.db.begin() as conn:
            pays = conn.execute(sa.text(
                "SELECT id, merchant_reference, status, psp_reference, failure_reason, review_reason FROM payments "
                "WHERE merchant_reference LIKE :p ORDER BY id"), {"p": f"{cut}-%"}).all()
            hooks = conn.execute(sa.text(
                "SELECT w.event_id, w.state, p.merchant_reference FROM webhook_events w "
                "LEFT JOIN payments p ON p.id = w.payment_id WHERE w.event_id LIKE :p ORDER BY w.id"),
                {"p": f"evt_{cut}_%"}).all()
        events = {}
        for p in pays:
            events[norm(p[1])] = [(e.from_status, e.to_status, e.source,
                                   norm(((e.details or {}).get("webhook") or {}).get("event_id")))
                                  for e in self.payments.events(p[0])]
        return {"payments": [tuple(norm(v) for v in p[1:]) for p in pays], "events": events,
                "webhooks": [tuple(norm(v) for v in h) for h in hooks]}


def random_events(rng: random.Random, n_payments: int, n: int) -> list[tuple[str, int, dict[str, Any]]]:
    kinds = ["succeeded"] * 4 + ["failed", "pending", "action", "refund", "dispute", "unknown", "none"]
    hot = rng.sample(range(n_payments), 4)  # a few payments get many events, so batches hold several of one
    out = []
    for _ in range(n):
        i = rng.choice(hot) if rng.random() < 0.3 else rng.randrange(n_payments + 5)  # >= n_payments: unknown
        by_pi = rng.random() < 0.7
        amount, currency = 1000, "EUR"
        roll = rng.random()
        if roll < 0.08:
            amount = 999
        elif roll < 0.12:
            currency = "USD"
        out.append((rng.choice(kinds), i, {"by_pi": by_pi, "by_ref": not by_pi or rng.random() < 0.5,
                                           "amount": amount, "currency": currency}))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_batch__many_events_at_once_end_exactly_as_one_at_a_time(db: Database, seed: int) -> None:
    rng = random.Random(seed)
    a, b = Universe(db, f"a{seed}"), Universe(db, f"b{seed}")
    plan = a.seed(random.Random(seed), 40)
    assert b.seed(random.Random(seed), 40) == plan
    specs = random_events(rng, 40, 160)
    a.one_at_a_time(a.store(specs))
    sizes = b.in_batches(b.store(specs), rng)
    assert max(sizes) > 20  # real batches, not one event each
    got, want = b.outcome(), a.outcome()
    assert got == want
    states = {h[1] for h in want["webhooks"]}
    assert {"applied", "stale", "unknown_payment", "ignored"} <= states  # the draw reached every ending


def test_batch__a_payment_that_changes_after_the_batch_read_it_is_decided_again(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    u = Universe(db, "c")
    u.seed(random.Random(0), 0)
    ids = u.payments.create([NewPayment("shop", u.ref(i), 1000, "EUR", "stripe") for i in range(3)], charge=False)
    with db.begin() as conn:
        for i, pid in enumerate(ids):
            assert u.payments.apply(conn, Transition(pid, P.CREATED, P.PROCESSING, EventSource.CHARGE,
                                                     psp_reference=u.pi(i)))
    how = {"by_pi": True, "by_ref": False, "amount": 1000, "currency": "EUR"}
    items = u.store([("succeeded", i, how) for i in range(3)])
    real = u.payments.for_psp_events

    changed: list[bool] = []

    def read_then_someone_fails_payment_1(conn: sa.Connection, keys: Any) -> Any:
        found = real(conn, keys)
        if not changed:  # the batch's read; what a concurrent transaction could commit before its CAS
            changed.append(True)
            assert u.payments.apply(conn, Transition(ids[1], P.PROCESSING, P.FAILED, EventSource.RECONCILE,
                                                     failure_reason="psp: expired"))
        return found

    monkeypatch.setattr(u.payments, "for_psp_events", read_then_someone_fails_payment_1)
    with db.begin() as conn:
        u.handler.apply_events(conn, items)
    got = [u.payments.get(pid) for pid in ids]
    assert [p.status for p in got] == [P.SUCCEEDED, P.NEEDS_REVIEW, P.SUCCEEDED]  # type: ignore[union-attr]
    assert (got[1].review_reason or "").startswith("status_mismatch")  # type: ignore[union-attr]
    with db.begin() as conn:
        states = [r[0] for r in conn.execute(sa.text(
            "SELECT state FROM webhook_events WHERE event_id LIKE 'evt_c_%' ORDER BY id"))]
    assert states == ["applied", "applied", "applied"]


def test_batch__a_first_event_decided_again_still_goes_before_the_second_for_its_payment(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    u = Universe(db, "e")
    [pid] = u.payments.create([NewPayment("shop", u.ref(0), 1000, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        assert u.payments.apply(conn, Transition(pid, P.CREATED, P.PROCESSING, EventSource.CHARGE,
                                                 psp_reference=u.pi(0)))
    how = {"by_pi": True, "by_ref": False, "amount": 1000, "currency": "EUR"}
    items = u.store([("succeeded", 0, how), ("refund", 0, how)])
    real = u.payments.for_psp_events

    changed: list[bool] = []

    def read_then_it_goes_pending(conn: sa.Connection, keys: Any) -> Any:
        found = real(conn, keys)
        if not changed:  # the batch's read only
            changed.append(True)
            assert u.payments.apply(conn, Transition(pid, P.PROCESSING, P.PENDING, EventSource.RECONCILE))
        return found

    monkeypatch.setattr(u.payments, "for_psp_events", read_then_it_goes_pending)
    with db.begin() as conn:
        u.handler.apply_events(conn, items)
    p = u.payments.get(pid)
    assert p is not None and p.status is P.NEEDS_REVIEW
    assert "while ours was succeeded" in (p.review_reason or "")  # the success first, then the refund of it
    assert [(e.from_status, e.to_status, e.source) for e in u.payments.events(pid)][-2:] == [
        ("pending", "succeeded", "webhook"), ("succeeded", "needs_review", "webhook")]


def test_batch__an_event_applied_already_or_gone_is_skipped(db: Database, caplog: pytest.LogCaptureFixture) -> None:
    u = Universe(db, "d")
    [pid] = u.payments.create([NewPayment("shop", u.ref(0), 1000, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        assert u.payments.apply(conn, Transition(pid, P.CREATED, P.PROCESSING, EventSource.CHARGE,
                                                 psp_reference=u.pi(0)))
    items = u.store([("succeeded", 0, {"by_pi": True, "by_ref": False, "amount": 1000, "currency": "EUR"})])
    with db.begin() as conn:
        u.handler.apply_events(conn, items)
    with db.begin() as conn:  # an attempt whose finish committed, run again; and a job whose event is gone
        u.handler.apply_events(conn, [*items, (items[0][0], 10**9)])
    assert [(e.from_status, e.to_status) for e in u.payments.events(pid)] == [
        (None, "created"), ("created", "processing"), ("processing", "succeeded")]
    assert "does not exist; nothing to apply" in caplog.text
