"""The worker and `recon serve` through real connection failures: connections terminated on the shared server
(``pg_terminate_backend``: admin shutdown, SQLSTATE 57P01, on this run's database only), and a primary of our
own made read-only (25006), shut down and replaced by its promoted standby (tests/pgcluster.py), over a
multi-host URL with ``target_session_attrs=read-write``. Each is transient: the worker reconnects with backoff,
spends no job's attempt, never crashes, listens again, and logs one line per outage; `recon serve` answers 503
while no primary takes its events and never a 2xx for an event no commit holds. A claim whose answer was lost
(it may have committed) gives its jobs back at the next claim round."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from typing import Any

import httpx
import psycopg
import pytest
import sqlalchemy as sa

from recon import Client, Handlers, Job, JobSpec, JobState, JobStore, Lease, RetryPolicy, Settings, Worker
from recon.app import App
from recon.classify import classify_failure
from recon.config import EngineConfig
from recon.db.availability import Outage
from recon.db.database import Database, connect, upgrade
from recon.db.listener import make_listener
from recon.engine.claimer import Claimer
from recon.engine.observe import WorkerStats
from recon.engine.slots import Slots
from recon.errors import DatabaseUnavailable
from recon.metrics import serve
from recon.webhooks.intake import Intake
from recon.webhooks.server import create_app
from tests import pgcluster
from tests.integration.test_metrics import scrape, value
from tests.integration.test_webhook_intake_batch import SECRET, signed, stripe_body

ENGINE = EngineConfig(lease_ttl_seconds=30, heartbeat_interval_seconds=1, watcher_interval_seconds=1,
                      poll_interval_seconds=0.5, concurrency=4, drain_timeout_seconds=5)
ADMIN = "recon-test-admin"
#: the outage lines (counted apart) and the test's own Database's
QUIET_LOGGERS = ("recon.db", "tests.check")  # the application_name of this test's own connections: never terminated


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Until ``check()``; a check that found the database unavailable (the test's own pooled connection to a
    server that went away) is asked again."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(DatabaseUnavailable):
            if check():
                return
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)


def spent(db: Database) -> list[tuple[int, str, int]]:
    """(id, state, attempts spent) of every job: attempts that were not free (snoozes, releases are free)."""
    with db.begin() as conn:
        return [(int(i), str(s), int(a) - int(f)) for i, s, a, f in conn.execute(sa.text(
            "SELECT id, state, attempts, free_attempts FROM jobs ORDER BY id"))]


def outcomes(db: Database) -> set[str]:
    with db.begin() as conn:
        return {str(r[0]) for r in conn.execute(sa.text("SELECT DISTINCT outcome FROM job_attempts"))}


class RunningWorker:
    """A Worker in a thread, with recon's classifier and wake-ups (its LISTEN connection); ``heard`` is every
    wake-up it was given (``"*"`` each time the LISTEN connection (re)connected, a queue for each NOTIFY)."""

    def __init__(self, db: Database, handlers: Handlers, config: EngineConfig = ENGINE) -> None:
        listen = make_listener(db)
        assert listen is not None
        self.heard: list[str] = []

        def wakeup(stop: threading.Event, on_notify: Callable[[str], None]) -> None:
            listen(stop, lambda queue: (self.heard.append(queue), on_notify(queue)))

        self.worker = Worker(JobStore(db), handlers, config=config, policy=RetryPolicy(Settings().retry),
                             classify_func=classify_failure, wakeup_func=wakeup, presence_interval=0.5)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)

    def __enter__(self) -> RunningWorker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.request_stop()
        self.thread.join(15)
        assert not self.thread.is_alive(), "the worker did not stop"


def recon_backends(admin: psycopg.Connection[Any]) -> int:
    """How many connections recon (not this test) holds to this run's database."""
    row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND application_name = 'recon'").fetchone()
    return int(row[0]) if row else 0


def unavailable_lines(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    """(outages logged, recoveries logged) at WARNING by recon.db.availability."""
    messages = [r.getMessage() for r in caplog.records if r.name == "recon.db" and r.levelno == logging.WARNING]
    return (sum(m.startswith("database unavailable (") for m in messages),
            sum(m.startswith("database available again") for m in messages))


def worker_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the worker's loops warned about, besides the outage lines themselves."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name not in QUIET_LOGGERS
            and "lease lost" not in r.getMessage()]


# --- the shared server: connections terminated under a running worker --------------------------------------


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_terminated_connections__the_worker_reconnects_spends_no_attempt_and_logs_each_outage_once(
        db: Database, caplog: pytest.LogCaptureFixture) -> None:
    """Every recon connection to this run's database terminated (57P01) three times while 160 jobs run, whose
    handler reads the database: all succeed, each having spent one attempt."""
    worker_db = connect(db.url.render_as_string(hide_password=False))
    db = connect(db.url.update_query_dict({"application_name": ADMIN}).render_as_string(hide_password=False))
    store = JobStore(worker_db)

    def reads(job: Job, lease: Lease) -> None:
        assert store.get(job.id) is not None  # the handler's own statement meets the terminations too
        time.sleep(0.03)

    handlers = Handlers()
    handlers.register("reads", reads)
    ids = Client(JobStore(db), Settings()).enqueue_many([JobSpec("reads") for _ in range(160)])
    rounds = 0
    with caplog.at_level(logging.DEBUG), psycopg.connect(
            db.url.set(drivername="postgresql").render_as_string(hide_password=False),
            autocommit=True, application_name=ADMIN) as admin, RunningWorker(worker_db, handlers) as running:

        def reconnected(after: int) -> bool:
            """The worker connected again after ``after`` rounds: its LISTEN connection, and at least one more."""
            return running.heard.count("*") > after and recon_backends(admin) >= 2

        for _ in range(3):
            # however long reconnecting takes on a loaded machine: each round meets the claim loop and the listener
            wait_for(partial(reconnected, rounds), 30, f"the worker's connections before round {rounds + 1}")
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'recon'").fetchone()
            assert killed and killed[0] >= 2  # at least the claim loop's and the LISTEN connection
            rounds += 1
        wait_for(lambda: all(s == "succeeded" for _, s, _ in spent(db)), 60, "every job to succeed")
        # the last round's outage over too (the claim loop met it and connected again), whenever the jobs ended
        wait_for(lambda: reconnected(rounds) and not worker_db.outage.down, 30, "the last outage's end")
        outage_count = worker_db.outage.count
    worker_db.dispose()
    assert [(i, n) for i, _, n in spent(db)] == [(i, 1) for i in ids]  # one attempt spent each, however they ran
    assert outcomes(db) <= {"succeeded", "snoozed", "released"}  # never retried, never expired
    db.dispose()
    started, ended = unavailable_lines(caplog)
    assert 1 <= started == outage_count <= rounds and ended == started  # one line an outage, never one a try
    assert not worker_warnings(caplog), worker_warnings(caplog)
    assert running.worker.stats.outcomes["succeeded"] >= len(ids)
    assert running.heard.count("*") > rounds  # the LISTEN connection came back after each round


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_terminated_connection__is_unavailable_once_and_the_pool_connects_again(db: Database) -> None:
    session = JobStore(db).dedicated()  # the claim loop's session: a connection checked out for good
    session.execute("SELECT 1", {})
    with db.begin() as conn:
        conn.execute(sa.text("SELECT 1"))  # another, back in the pool
    assert db.execute_driver("SELECT 1", {}, generic_plans=True) == [(1,)]  # one in the producers' pool
    with psycopg.connect(db.url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True, application_name=ADMIN) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                      "AND application_name = 'recon'")
    with pytest.raises(DatabaseUnavailable, match="terminating connection due to administrator command"):
        with db.begin() as conn:
            conn.execute(sa.text("SELECT 1"))
    with db.begin() as conn:  # the pool dropped every connection it held: this one is new
        assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
    # the producers' pool, whose connection died too, hands out a new one: no second failure, no second outage
    assert db.execute_driver("SELECT 1", {}, generic_plans=True) == [(1,)]
    with pytest.raises(DatabaseUnavailable):
        session.execute("SELECT 1", {})
    assert session.execute("SELECT 1", {}) == [(1,)]  # the claim loop's session connects again
    session.close()
    assert (db.outage.count, db.outage.down) == (1, False)


# --- a claim whose answer was lost ------------------------------------------------------------------------------


def test_claim_whose_answer_was_lost__its_jobs_are_given_back_at_the_next_round(db: Database) -> None:
    """The claim commits and its answer is lost (the connection died): those jobs are leased to this worker,
    which never heard of them. The next round gives them back, free, instead of leaving them to expire."""
    store = JobStore(db)
    ids = Client(store, Settings()).enqueue_many([JobSpec("k") for _ in range(3)])
    config = replace(ENGINE, poll_interval_seconds=0.05)
    slots = Slots.for_config(config)
    ran: list[tuple[int, int]] = []
    real_claim, lost = store.claim, [True]

    def claim_then_lose_the_answer(**kw: Any) -> list[Job]:
        jobs = real_claim(**kw)
        if lost and jobs:
            lost.pop()
            raise DatabaseUnavailable("database: server closed the connection unexpectedly")
        return jobs

    store.claim = claim_then_lose_the_answer  # type: ignore[method-assign]

    def finish(r: Any) -> None:  # a runner and the finisher at once: succeed, then free the slot
        ran.append((r.job.id, r.job.attempts))
        from recon.rows import Finish
        store.finish(worker="w1", finishes=[Finish(r.job.id, r.job.attempts, "succeeded", "succeeded")])
        slots.release([r.job])

    claimer = Claimer(store, slots, submit=finish, stats=WorkerStats(), worker="w1", config=config,
                      queues=["default"])
    claimer.run(threading.Event(), burst=True)
    assert sorted(ran) == [(i, 2) for i in ids]  # claimed again at once, not after the 30 s lease
    assert claimer.released_unknown == 3
    for job_id in ids:
        job = store.get(job_id)
        assert job is not None and job.state is JobState.SUCCEEDED
        assert job.attempts - job.free_attempts == 1  # the lost claim's attempt was not spent
        assert [a.outcome for a in store.attempts(job_id)] == ["released", "succeeded"]


# --- a primary of our own: read-only, shut down, its standby promoted ---------------------------------------


@pytest.fixture
def cluster_pair(request: pytest.FixtureRequest) -> Iterator[tuple[pgcluster.Cluster, pgcluster.Node,
                                                                   pgcluster.Node, str]]:
    """A primary ``a`` with a synchronous standby ``b``, a migrated database ``recon``, and recon's URL for
    the pair: ``b`` first, so that libpq must choose by ``target_session_attrs=read-write``."""
    reason = pgcluster.available()
    if reason:
        pytest.skip(reason)
    with pgcluster.pair(synchronous=True) as (cluster, a, b):
        a.query("CREATE DATABASE recon")
        url = (f"postgresql+psycopg://postgres@/recon?host=127.0.0.1:{b.port}&host=127.0.0.1:{a.port}"
               f"&target_session_attrs=read-write")
        db = connect(url)
        upgrade(db)
        db.dispose()
        yield cluster, a, b, url


def promote(old: pgcluster.Node, new: pgcluster.Node) -> None:
    """Promote ``new`` and clear the ``synchronous_standby_names`` it kept from its base backup (its commits
    would wait for a standby that is gone: docs/operations.md), as Patroni does outside strict mode."""
    new.promote()
    new.query("ALTER SYSTEM RESET synchronous_standby_names")
    new.query("SELECT pg_reload_conf()")


def test_failover__read_only_then_shut_down_then_promoted__the_worker_carries_on(
        cluster_pair: tuple[pgcluster.Cluster, pgcluster.Node, pgcluster.Node, str],
        caplog: pytest.LogCaptureFixture) -> None:
    """Jobs whose handler writes (a progress checkpoint) run while the primary turns read-only (25006), then
    shuts down (57P01, then refused), and its standby is promoted: every job succeeds having spent one attempt;
    one outage logged and counted (``recon_database_outages_total``); wake-ups arrive from the new primary."""
    _cluster, a, b, url = cluster_pair
    db = connect(url)
    check = connect(url)  # the test's own reads: another Database, another outage (logged apart)
    check.outage = Outage(logger=logging.getLogger("tests.check"))

    def writes(job: Job, lease: Lease) -> None:
        time.sleep(0.05)
        lease.save_progress({"step": 1})  # a fenced write inside the handler

    handlers = Handlers()
    handlers.register("writes", writes)
    client = Client(JobStore(check), Settings())
    with caplog.at_level(logging.DEBUG), RunningWorker(db, handlers) as running:
        first = client.enqueue_many([JobSpec("writes") for _ in range(40)])
        time.sleep(0.2)  # some done, most claimed or waiting
        a.query("ALTER SYSTEM SET default_transaction_read_only = on")
        a.query("SELECT pg_reload_conf()")
        wait_for(lambda: db.outage.down, 10, "the worker to find the primary read-only")
        time.sleep(0.5)
        a.stop("fast")  # a demotion restarts the server: every connection to it ends
        promote(a, b)
        wait_for(lambda: all(s == "succeeded" for _, s, _ in spent(check)), 30, "every job to succeed")
        wait_for(lambda: running.heard.count("*") >= 2, 10, "the LISTEN connection to connect to the new primary")
        heard_before = len(running.heard)
        later = client.enqueue("writes")  # after the failover: its NOTIFY comes from the new primary
        wait_for(lambda: "default" in running.heard[heard_before:], 5, "a wake-up from the new primary")
        wait_for(lambda: dict((i, s) for i, s, _ in spent(check)).get(later) == "succeeded", 5, "the last job")
        time.sleep(1.2)  # the worker's presence row tells of the outage
        metrics = serve(check, port=0, refresh=0)
        assert metrics is not None
        try:
            samples = scrape(metrics.port)
        finally:
            metrics.close()
    assert [(i, n) for i, _, n in spent(check)] == [(i, 1) for i in [*first, later]]
    assert outcomes(check) <= {"succeeded", "snoozed", "released"}
    assert unavailable_lines(caplog) == (1, 1)
    assert not worker_warnings(caplog), worker_warnings(caplog)
    worker = running.worker
    assert db.outage.count == 1 and worker.stats.outcomes["succeeded"] == len(first) + 1
    assert value(samples, "recon_database_outages_total", worker=worker.worker_id) == 1
    assert value(samples, "recon_database_outage_seconds_total", worker=worker.worker_id) > 0.5
    db.dispose()
    check.dispose()


@pytest.fixture
def serve_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_STRIPE_WEBHOOK_SECRET", SECRET)
    monkeypatch.delenv("RECON_ADYEN_HMAC_KEY", raising=False)
    monkeypatch.delenv("RECON_CONFIG", raising=False)


@pytest.mark.parametrize("grouped", [True, False], ids=["group commit", "one transaction a request"])
def test_serve__503_while_no_primary_takes_events_never_a_2xx_for_an_event_not_stored(
        cluster_pair: tuple[pgcluster.Cluster, pgcluster.Node, pgcluster.Node, str], serve_env: None,
        grouped: bool) -> None:
    """Webhooks posted before, during and after the primary's death (SIGKILL) and its standby's promotion:
    503 while no server takes them, 200 again after the promotion, and every event answered 200 is stored on
    the new primary (the standby was synchronous: a commit it did not hold was never acknowledged)."""
    _cluster, a, b, url = cluster_pair
    app = App(database_url=url)
    intake = Intake(app.webhooks, app.webhook_config, max_attempts=5, max_depth=0 if grouped else 1_000_000)
    assert (intake.writer is not None) is grouped
    asgi = create_app(app, intake=intake)
    answers: dict[int, int] = {}
    during: list[str] = []  # GET /metrics while no primary takes events

    async def post(client: httpx.AsyncClient, n: int) -> None:
        body = stripe_body(n)  # once: it carries the time, and its signature must be of these very bytes
        response = await client.post("/webhooks/stripe", content=body, headers=signed(body))
        answers[n] = response.status_code

    async def run() -> None:
        transport = httpx.ASGITransport(app=asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            n = 0
            for _ in range(20):  # before
                n += 1
                await post(client, n)
            a.kill()
            for _ in range(20):  # no primary
                n += 1
                await post(client, n)
            during.extend((await client.get("/metrics")).text.splitlines())
            promote(a, b)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # after: 200 once the writer's backoff lets it connect
                n += 1
                await post(client, n)
                if answers[n] == 200 and n > 45:
                    break
                await asyncio.sleep(0.05)
        intake.close()

    asyncio.run(run())
    app.close()
    app.db.dispose()
    ok = {n for n, status in answers.items() if status == 200}
    assert set(answers.values()) == {200, 503}
    assert all(answers[n] == 200 for n in range(1, 21)) and all(answers[n] == 503 for n in range(21, 41))
    stored = {int(r[0].removeprefix("evt_")) for r in b.query("SELECT event_id FROM webhook_events",
                                                                database="recon")}
    assert ok <= stored  # never a 2xx for an event that is not stored
    assert "recon_database_unavailable 1.0" in during and "recon_database_outages_total 1.0" in during
    assert 'recon_webhooks_total{outcome="unavailable",psp="stripe"} 20.0' in during


# --- a charge whose commits' answers were lost --------------------------------------------------------------


def test_charge__commits_whose_answer_was_lost_charge_once_and_spend_no_attempt(
        db: Database, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection dies right after the charge's ``processing`` commit, and again right after its finish
    commits (the primary died: the commits happened, their answers never came). The first is settled by the
    next claim: the job snoozes (no attempt spent) and the next run finds the payment ``processing`` and sends
    the same idempotency key; the second by fencing: the finish, tried again, matches nothing more. The PSP's
    own ledger: one charge per payment."""
    from psp_adapters.sandbox.faults import Faults
    from psp_adapters.sandbox.server import SandboxServer
    from recon.db.availability import Backoff
    from recon.payments.charge import ChargeHandler
    from tests.integration.payment_flow import admin, create, fast_settings, handlers_for, sandbox_adapter

    lost_mark: set[int] = set()
    real_mark = ChargeHandler._mark_processing

    def mark_then_lose_the_answer(self: ChargeHandler, payment: Any, job: Job, lease: Lease) -> Any:
        marked = real_mark(self, payment, job, lease)
        if payment.id not in lost_mark:
            lost_mark.add(payment.id)
            raise DatabaseUnavailable("database: server closed the connection unexpectedly")
        return marked

    monkeypatch.setattr(ChargeHandler, "_mark_processing", mark_then_lose_the_answer)
    monkeypatch.setattr(Backoff, "next", lambda self: 0.01)
    store = JobStore(db)
    real_finish, lost_finish = store.finish, [True]

    def finish_then_lose_the_answer(**kw: Any) -> set[int]:
        matched = real_finish(**kw)
        if lost_finish and kw.get("write") is not None:
            lost_finish.pop()
            raise DatabaseUnavailable("database: server closed the connection unexpectedly")
        return matched

    store.finish = finish_then_lose_the_answer  # type: ignore[method-assign]
    with SandboxServer(tmp_path / "psp.db", faults=Faults(decline_amount_suffix=None)) as sandbox:
        ids = create(db, 3)
        adapter = sandbox_adapter(sandbox.url)
        settings = fast_settings()
        worker = Worker(store, handlers_for(db, adapter), config=settings.engine,
                        policy=RetryPolicy(settings.retry), queues=["charges"], classify_func=classify_failure)
        t = threading.Thread(target=worker.run, daemon=True)
        t.start()
        try:
            wait_for(lambda: all(s == "succeeded" for _, s, _ in spent(db)), 20, "every charge job to succeed")
        finally:
            worker.request_stop()
            t.join(20)
        charges = admin(sandbox.url, "/_admin/charges")
        adapter.close()
    assert lost_mark == set(ids) and not lost_finish
    assert charges["charges"] == 3 and set(charges["per_key"].values()) == {1}  # once each, never twice
    assert [n for _, _, n in spent(db)] == [1, 1, 1]  # the lost answers cost no attempt
    from recon.db.payment_store import PaymentStore

    for pid in ids:
        payment = PaymentStore(db).get(pid)
        assert payment is not None and str(payment.status) == "succeeded"
        trail = [(e.from_status, e.to_status) for e in PaymentStore(db).events(pid)]
        assert trail == [(None, "created"), ("created", "processing"), ("processing", "succeeded")]
    assert worker.stats.stale_finishes == 1  # the finish tried again after its lost answer matched nothing
