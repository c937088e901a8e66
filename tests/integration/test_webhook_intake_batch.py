"""The webhook intake's group commit on PostgreSQL (recon.webhooks.intake.GroupWriter and
WebhookStore.intake_batch, one statement for several requests) and the paths that keep their own
transaction (a queue with max_depth; SQLite)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import stripe

import recon.redact as redact_mod
from psp_adapters.protocol import Succeeded, WebhookEvent
from recon.app import App
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.listener import make_listener
from recon.redact import redact, redact_value
from recon.webhooks.intake import Intake
from recon.webhooks.server import create_app
from tests.integration.test_enqueue_path import add_waiting_worker

SECRET = "whsec_" + secrets.token_hex(16)


@pytest.fixture
def app(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("RECON_STRIPE_WEBHOOK_SECRET", SECRET)
    monkeypatch.delenv("RECON_ADYEN_HMAC_KEY", raising=False)
    monkeypatch.delenv("RECON_CONFIG", raising=False)
    application = App(database_url=db_url)
    yield application
    application.close()
    application.db.dispose()


def event(n: int, *, event_id: str | None = None) -> WebhookEvent:
    news = Succeeded(psp_reference=f"pi_{n}", merchant_reference=f"order-{n}", amount=1000, currency="EUR",
                     raw_status="succeeded")
    return WebhookEvent(psp="stripe", event_id=event_id or f"evt_{n}", event_type="payment_intent.succeeded",
                        occurred_at=datetime(2026, 12, 1, 12, 0, tzinfo=UTC), news=news,
                        body={"id": f"pi_{n}", "description": "paid with 4242424242424242"})


def stripe_body(n: int) -> bytes:
    obj = {"object": "payment_intent", "id": f"pi_{n}", "status": "succeeded", "amount": 1000,
           "amount_received": 1000, "currency": "eur", "metadata": {"merchant_reference": f"order-{n}"}}
    return json.dumps({"object": "event", "id": f"evt_{n}", "type": "payment_intent.succeeded",
                       "created": int(time.time()), "data": {"object": obj}}).encode()


def signed(body: bytes) -> dict[str, str]:
    return {"Stripe-Signature": stripe.WebhookSignature.generate_signature_header(body.decode(), SECRET),
            "Content-Type": "application/json"}


def rows(db: Database, sql: str) -> list[Any]:
    with db.begin() as conn:
        return list(conn.execute(sa.text(sql)).all())


async def post_all(asgi: Any, bodies: list[bytes]) -> list[int]:
    transport = httpx.ASGITransport(app=asgi)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        answers = await asyncio.gather(*(client.post("/webhooks/stripe", content=b, headers=signed(b))
                                         for b in bodies))
    return [a.status_code for a in answers]


def test_batch__one_statement_stores_each_new_event_once_with_its_job_and_a_redelivery_is_nothing(
        app: App, db: Database) -> None:
    if not db.is_postgresql:
        pytest.skip("the single-statement batch is PostgreSQL's")
    store = app.webhooks

    async def run() -> list[list[Any]]:
        session = store.async_session()
        try:
            first = await store.intake_batch([[event(1)]], queue="webhooks", max_attempts=7, session=session)
            # the same event twice in one batch, an already stored one, and a new one beside it
            again = await store.intake_batch([[event(2)], [event(2), event(1)], [event(3)]], queue="webhooks",
                                             max_attempts=7, session=session)
            return [first[0], *again]
        finally:
            await session.close()

    first, second, dup, third = asyncio.run(run())
    assert [r.stored for r in first + second + dup + third] == [True, True, False, False, True]
    events = rows(db, "SELECT id, event_id, state, body FROM webhook_events ORDER BY id")
    assert [e[1] for e in events] == ["evt_1", "evt_2", "evt_3"]
    assert all(e[2] == "received" for e in events)
    assert "4242424242424242" not in json.dumps([e[3] for e in events])  # redacted before it is stored
    jobs = rows(db, "SELECT id, queue, kind, payload, state, unique_key, max_attempts FROM jobs ORDER BY id")
    assert [(j[1], j[2], j[4], j[6]) for j in jobs] == [("webhooks", "webhook", "runnable", 7)] * 3
    assert [j[3] for j in jobs] == [{"webhook_id": e[0]} for e in events]
    assert [j[5] for j in jobs] == [f"webhook:{e[0]}" for e in events]
    assert [(r.webhook_id, r.job_id) for r in first + second + third] == [(e[0], j[0]) for e, j in zip(events, jobs,
                                                                                                        strict=True)]


def test_group_writer__concurrent_requests_share_commits_and_each_is_stored_and_applied(
        app: App, db: Database) -> None:
    asgi = create_app(app)
    statuses = asyncio.run(post_all(asgi, [stripe_body(n) for n in range(40)] + [stripe_body(0)]))
    assert statuses == [200] * 41
    assert rows(db, "SELECT count(*) FROM webhook_events")[0][0] == 40
    assert rows(db, "SELECT count(*) FROM jobs WHERE kind = 'webhook'")[0][0] == 40
    intake = asgi.endpoints["/webhooks/stripe"].func.__self__  # type: ignore[attr-defined]
    if db.is_postgresql:
        writer = intake.writer
        assert writer is not None and writer.requests == 41 and 1 <= writer.batches <= 41
    else:
        assert intake.writer is None  # SQLite: a transaction per request


def test_group_writer__requests_gather_for_commit_wait_and_share_one_commit(app: App, db: Database) -> None:
    if not db.is_postgresql:
        pytest.skip("the group commit is PostgreSQL's")
    config = dataclasses.replace(app.webhook_config, commit_wait=timedelta(milliseconds=300))
    intake = Intake(app.webhooks, config, max_attempts=5)
    began = time.monotonic()
    statuses = asyncio.run(post_all(create_app(app, intake=intake), [stripe_body(n) for n in range(20)]))
    assert statuses == [200] * 20
    assert time.monotonic() - began >= 0.3  # the first request waited for company, as long as configured
    assert intake.writer is not None and (intake.writer.batches, intake.writer.requests) == (1, 20)
    assert rows(db, "SELECT count(*) FROM webhook_events")[0][0] == 20


def test_group_writer__a_full_batch_is_written_without_waiting_out_commit_wait(app: App, db: Database) -> None:
    if not db.is_postgresql:
        pytest.skip("the group commit is PostgreSQL's")
    config = dataclasses.replace(app.webhook_config, commit_wait=timedelta(seconds=1))
    intake = Intake(app.webhooks, config, max_attempts=5)
    assert intake.writer is not None
    intake.writer.max_batch = 5
    began = time.monotonic()
    statuses = asyncio.run(post_all(create_app(app, intake=intake), [stripe_body(n) for n in range(10)]))
    assert statuses == [200] * 10
    assert (intake.writer.batches, intake.writer.requests) == (2, 10)  # two full batches
    assert time.monotonic() - began < 1.0  # neither waited for the second that commit_wait allows


def test_group_writer__the_statement_wakes_listening_workers(app: App, db: Database) -> None:
    if not db.is_postgresql:
        pytest.skip("NOTIFY is PostgreSQL's")
    add_waiting_worker(db, "w1", ["webhooks"])  # a worker of the queue waits for work (docs/design.md, wake-ups)
    heard: list[str] = []
    stop = threading.Event()
    listener = threading.Thread(target=make_listener(db), args=(stop, heard.append), daemon=True)
    listener.start()
    try:
        deadline = time.monotonic() + 10
        while "*" not in heard and time.monotonic() < deadline:  # listening
            time.sleep(0.01)
        assert asyncio.run(post_all(create_app(app), [stripe_body(1)])) == [200]
        while "webhooks" not in heard and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "webhooks" in heard
    finally:
        stop.set()
        listener.join(timeout=5)


def test_max_depth__keeps_a_transaction_per_request_and_a_full_queue_answers_503(app: App, db: Database) -> None:
    intake = Intake(app.webhooks, app.webhook_config, max_attempts=5, max_depth=2)
    assert intake.writer is None  # the depth check's lock and count need the request's own transaction
    statuses = []
    for n in range(3):
        statuses += asyncio.run(post_all(create_app(app, intake=intake), [stripe_body(n)]))
    statuses += asyncio.run(post_all(create_app(app, intake=intake), [stripe_body(0)]))  # a stored one: 200
    assert statuses == [200, 200, 503, 200]
    assert rows(db, "SELECT count(*) FROM webhook_events")[0][0] == 2
    assert rows(db, "SELECT count(*) FROM jobs")[0][0] == 2
    assert intake.counts.counts[("stripe", "unavailable")] == 1


@pytest.mark.parametrize("value", [
    {"password": "p", "cvc": 123, "nested": {"token": None, "api_key": True, "card_number": "4242424242424242",
                                             "note": "sk_test_abc and 4242 4242 4242 4242", "empty": ""}},
    ["whsec_abc", 1, 2.5, None, {"number": ""}, {"Number": "5"}, ("cvv: 123", "x" * 300 + " 4242424242424242")],
    "Bearer abc.def", 42,
])
def test_redact_value__remembering_clean_strings_changes_no_answer_and_keeps_no_secret(value: Any) -> None:
    def uncached(v: Any) -> Any:  # the rule as recon.redact documents it, every string through redact()
        if isinstance(v, str):
            return redact(v)
        if isinstance(v, dict):
            return {k: "***" if redact_mod._SECRET_KEYS.match(k) and v2 not in (None, "") and not isinstance(v2, bool)
                    else uncached(v2) for k, v2 in v.items()}
        return [uncached(x) for x in v] if isinstance(v, list | tuple) else v

    assert redact_value(value) == uncached(value)
    assert redact_value(value) == uncached(value)  # the clean strings remembered the second time
    def strings(v: Any) -> list[str]:
        if isinstance(v, str):
            return [v]
        items = v.values() if isinstance(v, dict) else v if isinstance(v, list | tuple) else []
        return [s for x in items for s in strings(x)]

    assert not {s for s in strings(value) if redact(s) != s} & redact_mod._CLEAN  # what had a secret is not kept


def test_every_postgresql_session_plans_each_statement_for_the_tables_as_they_are(app: App, db: Database) -> None:
    """A generic plan kept from a worker's first claims on an empty queue would seq-scan ``jobs`` forever
    (recon.db.database.PG_SESSION_OPTIONS): the pool's sessions and the worker's dedicated ones force custom
    plans. The intake writer's connection keeps the default: its statement scans no table (GroupWriter)."""
    if not db.is_postgresql:
        pytest.skip("plan caching is PostgreSQL's")
    with db.begin() as conn:
        assert conn.exec_driver_sql("SHOW plan_cache_mode").scalar_one() == "force_custom_plan"
    dedicated = JobStore(db).dedicated(finishing=True)
    try:
        assert dedicated.execute("SHOW plan_cache_mode", {}) == [("force_custom_plan",)]
        assert dedicated.execute("SHOW enable_nestloop", {}) == [("off",)]  # its own setting kept beside it
    finally:
        dedicated.close()
    intake = Intake(app.webhooks, app.webhook_config, max_attempts=5)
    assert intake.writer is not None

    async def writer_setting() -> str:
        session = app.webhooks.async_session()  # the intake writer's (GroupWriter._run)
        try:
            conn = await session.connection()
            return str((await (await conn.execute("SHOW plan_cache_mode")).fetchone())[0])  # type: ignore[index]
        finally:
            await session.close()

    assert asyncio.run(writer_setting()) == "auto"
