"""The enqueue path: one autocommit statement on PostgreSQL (``job_enqueue_one``, ``job_enqueue``) or the
transaction with the queue's lock when the queue has a max depth; the same answers on SQLite."""

from __future__ import annotations

import json
import os
import threading
import warnings
from dataclasses import replace

import psycopg
import pytest
import sqlalchemy as sa

from recon import Client, JobSpec, JobStore, QueueFull, Settings
from recon.config import QueueConfig
from recon.db import enqueue_queries as q
from recon.db.database import Database
from recon.errors import DatabaseUnavailable, StoreError


def make_client(db: Database, **queues: QueueConfig) -> Client:
    settings = Settings()
    if queues:
        settings = replace(settings, queues={**settings.queues, **queues})
    return Client(JobStore(db), settings)


def count_jobs(db: Database, queue: str | None = None) -> int:
    with db.begin() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM jobs WHERE CAST(:q AS text) IS NULL OR queue = :q"),
                                {"q": queue}).scalar_one())


class Listener:
    """A LISTEN connection on recon's channel (PostgreSQL), collecting payloads."""

    def __init__(self, db: Database) -> None:
        conninfo = db.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.conn.execute("LISTEN recon_jobs")

    def drain(self, wait: float = 0.5) -> list[str]:
        return [n.payload for n in self.conn.notifies(timeout=wait)]

    def close(self) -> None:
        self.conn.close()


def test_enqueue_one__held_unique_key_returns_the_holder_and_inserts_nothing(db: Database) -> None:
    client = make_client(db)
    first = client.enqueue("k", {"a": 1}, unique_key="key-1")
    assert client.enqueue("k", {"a": 2}, unique_key="key-1") == first
    assert client.enqueue("k", {"a": 3}, unique_key="key-2") != first
    assert count_jobs(db) == 2
    assert client.get(first).payload == {"a": 1}


def test_enqueue_many__held_new_and_repeated_keys_in_one_batch(db: Database) -> None:
    client = make_client(db)
    held = client.enqueue("k", unique_key="held")
    ids = client.enqueue_many([JobSpec("k", unique_key="new"), JobSpec("k"), JobSpec("k", unique_key="held"),
                               JobSpec("k", unique_key="new"), JobSpec("k")])
    assert ids[2] == held and ids[0] == ids[3]
    assert len({ids[0], ids[1], ids[4], held}) == 4 and ids[0] < ids[1] < ids[4]
    assert count_jobs(db) == 4


def test_enqueue__max_depth_single_and_batch_refuse_whole_and_accept_up_to_the_limit(db: Database) -> None:
    client = make_client(db, small=QueueConfig(max_depth=3))
    [a, b] = client.enqueue_many([JobSpec("k", queue="small"), JobSpec("k", queue="small")])
    with pytest.raises(QueueFull, match=r"queue 'small' is full: 2 unfinished jobs, max_depth 3, refusing 2 more"):
        client.enqueue_many([JobSpec("k", queue="small"), JobSpec("k", queue="other"), JobSpec("k", queue="small")])
    assert count_jobs(db) == 2  # the other queue's job was refused with the batch
    c = client.enqueue("k", queue="small")
    assert a < b < c
    with pytest.raises(QueueFull, match="refusing 1 more"):
        client.enqueue("k", queue="small")
    # a held unique key on a full queue: still refused (the depth is checked before the key, as before)
    with pytest.raises(QueueFull):
        client.enqueue("k", queue="small", unique_key="x")
    assert count_jobs(db, "small") == 3


def test_enqueue__max_depth_holds_under_concurrent_producers(db: Database) -> None:
    client = make_client(db, small=QueueConfig(max_depth=10))
    errors: list[BaseException] = []
    accepted: list[int] = []

    def produce() -> None:
        for _ in range(8):
            try:
                accepted.append(client.enqueue("k", queue="small"))
            except QueueFull:
                pass
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(accepted) == 10 and count_jobs(db, "small") == 10


def add_waiting_worker(db: Database, worker: str, queues: list[str], *, waiting: bool = True) -> None:
    """A workers row as a listening worker's presence and claim loop leave it (recon.engine.claimer)."""
    with db.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO workers (id, host, pid, queues, slots, busy_slots, started_at, last_seen_at, counters, "
            "waiting) VALUES (:id, 'h', 1, CAST(:queues AS jsonb), 1, 0, now(), now(), CAST('{}' AS jsonb), :waiting)"),
            {"id": worker, "queues": json.dumps(queues), "waiting": waiting})


def test_enqueue__notifies_once_per_queue_at_commit_and_not_when_refused(db: Database) -> None:
    if not db.is_postgresql:
        pytest.skip("SQLite workers poll: there is no NOTIFY")
    client = make_client(db, small=QueueConfig(max_depth=1))
    add_waiting_worker(db, "w1", ["default", "a", "b", "small", "tx"])
    listener = Listener(db)
    try:
        client.enqueue("k")
        assert listener.drain() == ["default"]
        client.enqueue_many([JobSpec("k", queue="b"), JobSpec("k", queue="a"), JobSpec("k", queue="b")])
        assert sorted(listener.drain()) == ["a", "b"]
        client.enqueue("k", unique_key="u")
        listener.drain()
        client.enqueue("k", unique_key="u")  # held: nothing inserted, workers are woken all the same
        assert listener.drain() == ["default"]
        client.enqueue("k", queue="small")
        assert listener.drain() == ["small"]
        with pytest.raises(QueueFull):
            client.enqueue("k", queue="small")
        assert listener.drain() == []
        # a payment and its charge job: the NOTIFY goes out when the caller's transaction commits
        store = JobStore(db)
        with db.begin() as conn:
            store.enqueue([client._row(0, JobSpec("k", queue="tx"))], max_depth={}, conn=conn)
            assert listener.drain(0.2) == []
        assert listener.drain() == ["tx"]
    finally:
        listener.close()


def test_enqueue__notifies_only_when_a_worker_of_the_queue_waits_for_work(db: Database) -> None:
    """The wake-up rule (docs/design.md): no NOTIFY while no worker of the queue waits (busy ones claim again
    without one), for the single enqueue, the batch, payments' charge jobs and webhook jobs alike."""
    if not db.is_postgresql:
        pytest.skip("SQLite workers poll: there is no NOTIFY")
    client = make_client(db)
    add_waiting_worker(db, "busy", ["default", "b"], waiting=False)
    add_waiting_worker(db, "other", ["other"])
    listener = Listener(db)
    try:
        client.enqueue("k")
        client.enqueue_many([JobSpec("k", queue="b"), JobSpec("k", queue="other")])
        assert listener.drain() == ["other"]  # only the queue a worker waits for
        with db.begin() as conn:
            conn.execute(sa.text("UPDATE workers SET waiting = true WHERE id = 'busy'"))
        client.enqueue("k")
        client.enqueue_many([JobSpec("k", queue="b")])
        assert listener.drain() == ["default", "b"]
    finally:
        listener.close()


def test_enqueue_one__a_holder_gone_before_its_lookup_means_inserting_again(db: Database,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    if not db.is_postgresql:
        pytest.skip("the one-statement path is PostgreSQL's")
    client = make_client(db)
    real = db.execute_driver
    calls: list[bool] = []

    def first_held(sql: str, params: dict[str, object], **kw: object) -> list[tuple[object, ...]]:
        calls.append(bool(kw.get("generic_plans")))
        if len(calls) == 1:  # as if the key was held, and its holder finished before the lookup
            return [(None, 1)]
        return real(sql, params, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(db, "execute_driver", first_held)
    job_id = client.enqueue("k", unique_key="brief")
    assert calls == [True, True] and count_jobs(db) == 1  # the second statement inserted it
    assert JobStore(db).get(job_id).unique_key == "brief"  # type: ignore[union-attr]


def test_enqueue_one__runs_on_sessions_that_keep_generic_plans_and_reads_no_table(db: Database) -> None:
    """The single enqueue keeps PostgreSQL's cached generic plan (planning each of its one-job statements cost
    a quarter of its throughput); every other session plans for the tables as they are
    (recon.db.database.PG_SESSION_OPTIONS). Safe because the statement reads no table: EXPLAIN shows no scan."""
    if not db.is_postgresql:
        pytest.skip("plan caching is PostgreSQL's")
    assert db.execute_driver("SHOW plan_cache_mode", {}, generic_plans=True) == [("auto",)]
    assert db.execute_driver("SHOW plan_cache_mode", {}) == [("force_custom_plan",)]
    sql = q.job_enqueue_one.for_driver("postgresql")
    params = {"queue": "q", "kind": "k", "payload": "{}", "priority": 0, "run_at": None, "delay": 0.0,
              "max_attempts": 3, "unique_key": "x", "tenant": None, "now": None}
    with db.engine.connect() as conn:
        driver = conn.connection.driver_connection
        plan = [r[0] for r in driver.execute("EXPLAIN " + sql, params)]  # type: ignore[union-attr]
        conn.rollback()
    assert not [line for line in plan if "Scan on jobs" in line], plan


def test_execute_driver__errors_are_translated_and_the_connection_goes_back(db: Database) -> None:
    if not db.is_postgresql:
        with pytest.raises(ValueError):
            db.execute_driver("SELECT 1", {})
        return
    with pytest.raises(StoreError, match=r"database: .*no_such_table"):
        db.execute_driver("SELECT * FROM no_such_table", {})
    assert db.execute_driver("SELECT 1", {}) == [(1,)]
    with db.engine.connect() as conn:  # the pool's connections are in their ordinary mode
        assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]


BACKEND = "SELECT pg_backend_pid()"


def test_execute_driver__the_producers_connection_is_held_between_calls_and_closed_by_dispose(db: Database) -> None:
    """The single enqueue's connection stays with the producer between calls (no pool checkout and return a call:
    docs/benchmarks.md); the pool still counts it (its size bounds them), and dispose() closes it."""
    if not db.is_postgresql:
        pytest.skip("the producers' connections are PostgreSQL's")
    [(first,)] = db.execute_driver(BACKEND, {}, generic_plans=True)
    assert db.execute_driver(BACKEND, {}, generic_plans=True) == [(first,)]  # the same session again
    assert db.producer_engine.pool.checkedout() == 1  # type: ignore[attr-defined]
    cursor = db._held[0].info["recon_cursor"]  # and its cursor, built once
    with pytest.raises(StoreError, match="no_such_table"):  # an error leaves both usable
        db.execute_driver("SELECT * FROM no_such_table", {}, generic_plans=True)
    assert db.execute_driver(BACKEND, {}, generic_plans=True) == [(first,)]
    assert db._held[0].info["recon_cursor"] is cursor
    held = db._held[0].driver_connection
    db.dispose()
    assert held.closed
    [(after,)] = db.execute_driver(BACKEND, {}, generic_plans=True)  # a disposed Database connects again
    assert after != first


def test_execute_driver__a_held_connection_that_died_is_dropped_once(db: Database) -> None:
    """A held connection killed on the server: the call on it is DatabaseUnavailable (one outage), the
    connection is dropped, not held again, and the next call opens a new one and ends the outage."""
    if not db.is_postgresql:
        pytest.skip("the producers' connections are PostgreSQL's")
    [(backend,)] = db.execute_driver(BACKEND, {}, generic_plans=True)
    with db.autocommit() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": backend})
    with pytest.raises(DatabaseUnavailable):
        db.execute_driver("SELECT 1", {}, generic_plans=True)
    assert not db._held and db.producer_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    [(again,)] = db.execute_driver(BACKEND, {}, generic_plans=True)
    assert again != backend and (db.outage.count, db.outage.down) == (1, False)


def test_execute_driver__a_forked_child_never_uses_the_parents_held_connection(db: Database) -> None:
    """A child forked after the parent's single enqueue opens a session of its own (a psycopg connection shared
    by two processes mixes their messages) and leaves the parent's open: the parent's next call still works."""
    if not db.is_postgresql:
        pytest.skip("the producers' connections are PostgreSQL's")
    [(parent,)] = db.execute_driver(BACKEND, {}, generic_plans=True)
    read, write = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns of fork() in a threaded process (xdist's): wanted here
        warnings.simplefilter("ignore", DeprecationWarning)
        child = os.fork()
    if child == 0:  # pragma: no cover  # the child: report its session's backend, exit without cleanup
        try:
            [(mine,)] = db.execute_driver(BACKEND, {}, generic_plans=True)
            os.write(write, str(mine).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read) as answer:
        assert int(answer.read()) not in (parent, 0)
    assert db.execute_driver(BACKEND, {}, generic_plans=True) == [(parent,)]


def test_enqueue_queries__render_for_the_driver() -> None:
    for query in (q.job_enqueue_one, q.job_enqueue):
        sql = query.for_driver("postgresql")
        assert "%(" in sql and "pg_notify" in sql
