"""The worker's hot path: claims and finishes on a dedicated driver connection (PostgreSQL), and prefetch."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
import sqlalchemy as sa

from recon import Client, Handlers, Job, JobSpec, JobState, JobStore, Lease, RetryPolicy, Settings, Worker
from recon.config import EngineConfig
from recon.db.database import Database, connect
from recon.db.dedicated import DedicatedConnection
from recon.errors import DatabaseTransientError, StoreError
from recon.rows import Finish

FAST = EngineConfig(lease_ttl_seconds=30, heartbeat_interval_seconds=5, watcher_interval_seconds=5,
                    poll_interval_seconds=0.02, concurrency=1, drain_timeout_seconds=5)


def test_claim__the_dedicated_path_builds_the_same_job_as_get(db: Database) -> None:
    store = JobStore(db)
    client = Client(store, Settings())
    ids = client.enqueue_many([
        JobSpec("charge", {"payment_id": 7, "nested": {"a": [1, 2]}}, queue="charges", priority=5,
                unique_key="charge:7", tenant="shop-eu", max_attempts=4),
        JobSpec("sync", {}, queue="sync"),
    ])
    via = store.dedicated()  # PostgreSQL: a psycopg connection; SQLite: a sqlite3 one (DedicatedSqlite)
    try:
        claimed = store.claim(worker="w1", queues=["charges", "sync"], n=10, ttl=30, via=via)
    finally:
        if via is not None:
            via.close()
    assert [j.id for j in claimed] == ids  # priority 5 first
    for job in claimed:
        stored = store.get(job.id)
        assert stored is not None
        for name in ("id", "queue", "kind", "payload", "state", "priority", "run_after", "attempts",
                     "max_attempts", "lease_owner", "lease_until", "unique_key", "tenant", "progress",
                     "created_at", "last_error_kind", "free_attempts"):
            assert getattr(job, name) == getattr(stored, name), name
    assert claimed[0].state is JobState.LEASED and claimed[0].lease_owner == "w1"
    assert all(j.run_after.utcoffset() == timedelta(0) and j.created_at.utcoffset() == timedelta(0) for j in claimed)
    assert claimed[0].payload == {"payment_id": 7, "nested": {"a": [1, 2]}}


def test_dedicated__a_dropped_connection_is_a_transient_error_then_reconnects(db: Database) -> None:
    store = JobStore(db)
    via = store.dedicated()
    if not isinstance(via, DedicatedConnection):
        assert not db.is_postgresql
        via.close()
        return  # SQLite's is in this process: no server can drop it
    client = Client(store, Settings())
    first, second = client.enqueue_many([JobSpec("k"), JobSpec("k")])
    try:
        [job] = store.claim(worker="w1", queues=["default"], n=1, ttl=30, via=via)
        assert job.id == first
        pid = via.execute("SELECT pg_backend_pid()", {})[0][0]
        with db.engine.begin() as conn:  # the server goes away under the worker (a restart, a kill)
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(DatabaseTransientError):
            store.finish(worker="w1", finishes=[Finish(job.id, job.attempts, "succeeded", "succeeded")], via=via)
        # the next call opens a new connection by itself
        assert store.finish(worker="w1", finishes=[Finish(job.id, job.attempts, "succeeded", "succeeded")],
                            via=via) == {first}
        assert [j.id for j in store.claim(worker="w1", queues=["default"], n=1, ttl=30, via=via)] == [second]
        assert via.execute("SELECT pg_backend_pid()", {})[0][0] != pid
    finally:
        via.close()
    done = store.get(first)
    assert done is not None and done.state is JobState.SUCCEEDED


def test_dedicated__a_statement_error_names_the_database_problem(db: Database) -> None:
    via = JobStore(db).dedicated()
    if not isinstance(via, DedicatedConnection):
        with pytest.raises(StoreError, match=r"database: .*no_such_table"):
            via.write(lambda conn: conn.execute("SELECT * FROM no_such_table"))
        assert via.write(lambda conn: conn.execute("SELECT 1").fetchall()) == [(1,)]
        via.close()
        return
    try:
        with pytest.raises(StoreError, match=r"database: .*no_such_table"):
            via.execute("SELECT * FROM no_such_table", {})
        assert via.execute("SELECT 1", {}) == [(1,)]  # the connection is still usable
    finally:
        via.close()


def test_worker__prefetch_claims_ahead_and_gives_unstarted_jobs_back_on_stop(db: Database) -> None:
    store = JobStore(db)
    ids = Client(store, Settings()).enqueue_many([JobSpec("slow", {"i": i}) for i in range(10)])
    started = threading.Event()
    release = threading.Event()
    ran: list[int] = []

    def slow(job: Job, lease: Lease) -> None:
        ran.append(job.id)
        started.set()
        release.wait(10)

    handlers = Handlers()
    handlers.register("slow", slow)
    # prefetch as set (a worker that sizes itself chooses its own: tests/integration/test_sizing.py)
    config = replace(FAST, concurrency=1, prefetch=3, claim_batch_size=10, autosize=False)
    worker = Worker(store, handlers, config=config, policy=RetryPolicy(Settings().retry))
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        assert started.wait(5)
        deadline = time.monotonic() + 5
        while worker.in_flight < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        # one running, three waiting for the thread: four leases held, never more
        time.sleep(0.1)
        assert worker.in_flight == 4
        leased = [j for j in (store.get(i) for i in ids) if j is not None and j.state is JobState.LEASED]
        assert len(leased) == 4
        worker.request_stop()
        deadline = time.monotonic() + 5
        while worker.stats.released < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert worker.stats.released == 3  # given back at once, while the running job still runs
    finally:
        release.set()
        t.join(10)
    assert not t.is_alive()
    assert ran == [ids[0]]
    states = {i: store.get(i) for i in ids}
    assert states[ids[0]] is not None and states[ids[0]].state is JobState.SUCCEEDED
    for i in ids[1:4]:
        job = states[i]
        assert job is not None and job.state is JobState.RUNNABLE and job.lease_owner is None
        assert job.max_attempts == Settings().engine.default_max_attempts + 1  # the attempt is not spent
        assert [a.outcome for a in store.attempts(i)] == ["released"]
    for i in ids[4:]:
        job = states[i]
        assert job is not None and job.attempts == 0  # never claimed


def test_worker__prefetch_drains_a_queue_with_every_job_once(db: Database) -> None:
    store = JobStore(db)
    ids = Client(store, Settings()).enqueue_many([JobSpec("k", {"i": i}) for i in range(500)])
    seen: list[int] = []
    handlers = Handlers()
    handlers.register("k", lambda job, lease: seen.append(job.id))
    config = replace(FAST, concurrency=8, prefetch=8, claim_batch_size=8)
    worker = Worker(store, handlers, config=config, policy=RetryPolicy(Settings().retry))
    worker.run(burst=True)
    assert sorted(seen) == ids
    assert worker.stats.outcomes["succeeded"] == 500 and worker.stats.stale_finishes == 0
    assert all(len(store.attempts(i)) == 1 for i in ids[:20])


@pytest.mark.parametrize("finish", [
    Finish(1, 2, "succeeded", "succeeded"),
    Finish(3, 1, "retryable", "retried", delay=1.5, error_kind="network", error='timed out "read"'),
    Finish(4, 5, "runnable", "released", delay=0.0, error="released on shutdown", bump=1),
    Finish(5, 1, "succeeded", "succeeded", error="a note"),
])
def test_finish__row_json_is_the_row_as_json_with_nulls_left_out_only_for_plain_successes(finish: Finish) -> None:
    decoded = json.loads(finish.row_json())
    expected = finish.row()
    if decoded.keys() != expected.keys():  # the plain-success fast path: absent keys read as NULL
        assert finish.error is None and finish.state == "succeeded"
        expected = {k: v for k, v in expected.items() if v is not None}
    assert decoded == expected


def test_dedicated__the_finishers_session_settings_do_not_leak_into_the_pool(db_url: str) -> None:
    db = connect(db_url, pool_size=1)
    try:
        via = JobStore(db).dedicated(finishing=True)
        if not isinstance(via, DedicatedConnection):
            assert not db.is_postgresql
            via.close()
            return
        pid = via.execute("SELECT pg_backend_pid()", {})[0][0]
        assert via.execute("SHOW enable_nestloop", {}) == [("off",)]  # the finish's hash join
        assert via.execute("SHOW TimeZone", {}) == [("UTC",)]
        via.close()
        with db.engine.connect() as conn:  # the same connection, back in the pool as it was
            assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() == pid
            assert conn.exec_driver_sql("SHOW enable_nestloop").scalar() == "on"
            assert conn.exec_driver_sql("SHOW TimeZone").scalar() == _server_timezone(db_url)
    finally:
        db.dispose()


def _server_timezone(db_url: str) -> str:
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            return str(conn.exec_driver_sql("SHOW TimeZone").scalar())
    finally:
        engine.dispose()


def test_dedicated_connection__a_database_that_refuses_connections_is_a_transient_error() -> None:
    """raw_connection() raises the driver's own error (not SQLAlchemy's) when the server is down or restarting;
    the claim loop and the finisher must see a DatabaseTransientError and retry, never crash the worker."""

    down = connect("postgresql+psycopg://postgres@127.0.0.1:1/nothing_listens_here")
    dedicated = DedicatedConnection(down)
    with pytest.raises(DatabaseTransientError, match="database:"):
        dedicated.execute("SELECT 1", {})
    down.dispose()


def test_finish__the_dedicated_path_fences_records_history_and_cancels_as_the_ordinary_one(db: Database) -> None:
    """Each database's dedicated finish (PostgreSQL's CTE; SQLite's history insert and update in one BEGIN
    IMMEDIATE) ends exactly the attempts whose lease matches, with one history row each."""
    store = JobStore(db)
    ids = Client(store, Settings()).enqueue_many([JobSpec("k", {"i": i}) for i in range(5)])
    jobs = {j.id: j for j in store.claim(worker="w1", queues=["default"], n=5, ttl=30)}
    assert store.cancel(ids[2]) == "requested"
    via = store.dedicated(finishing=True)
    try:
        matched = store.finish(worker="w1", via=via, finishes=[
            Finish(ids[0], jobs[ids[0]].attempts, "succeeded", "succeeded"),
            Finish(ids[1], jobs[ids[1]].attempts, "retryable", "retried", delay=0.0, error_kind="network",
                   error="card 4242 4242 4242 4242 declined"),
            Finish(ids[2], jobs[ids[2]].attempts, "retryable", "retried", delay=0.0, error_kind="network",
                   error="x"),
            Finish(ids[3], jobs[ids[3]].attempts + 1, "succeeded", "succeeded"),  # a stale attempt
        ])
        assert store.finish(worker="w2", via=via,  # another worker's finish: fenced out
                            finishes=[Finish(ids[4], jobs[ids[4]].attempts, "succeeded", "succeeded")]) == set()
    finally:
        via.close()
    assert matched == {ids[0], ids[1], ids[2]}
    states = {i: store.get(i) for i in ids}
    assert [states[i].state for i in ids] == [JobState.SUCCEEDED, JobState.RETRYABLE,  # type: ignore[union-attr]
                                              JobState.CANCELED, JobState.LEASED, JobState.LEASED]
    assert [a.outcome for a in store.attempts(ids[0])] == ["succeeded"]
    [retried] = store.attempts(ids[1])
    assert retried.outcome == "retried" and retried.error_kind == "network"
    assert retried.error is not None and "4242 4242 4242 4242" not in retried.error  # redacted at the boundary
    assert [a.outcome for a in store.attempts(ids[2])] == ["canceled"]
    assert store.attempts(ids[3]) == [] and store.attempts(ids[4]) == []
