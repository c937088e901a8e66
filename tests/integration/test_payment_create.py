"""PaymentStore.create: payments, creation events naming their charge jobs, the jobs and the wake-up, on both
databases; on PostgreSQL one statement (``payment_create_with_charge_jobs``), in autocommit without a max depth."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from recon import JobState, JobStore, QueueFull
from recon.db.database import Database
from recon.db.payment_store import CHARGE_KIND, CHARGE_QUEUE, PaymentStore, charge_key
from recon.errors import DuplicateReference
from recon.rows import NewPayment
from tests.integration.test_enqueue_path import add_waiting_worker


def new(ref: str, amount: int = 1000) -> NewPayment:
    return NewPayment(merchant_account="shop", merchant_reference=ref, amount=amount, currency="EUR", psp="sandbox")


def table_count(db: Database, table: str) -> int:
    with db.begin() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())  # nosec B608  # test table names


def test_create__each_payment_its_charge_job_and_a_creation_event_naming_it(db: Database) -> None:
    store, jobs = PaymentStore(db), JobStore(db)
    ids = store.create([new(f"order-{i}", 100 + i) for i in range(7)], max_attempts=4)
    assert len(ids) == 7 and len(set(ids)) == 7
    for i, payment_id in enumerate(ids):
        payment = store.get(payment_id)
        assert payment is not None and payment.merchant_reference == f"order-{i}" and payment.amount == 100 + i
        [event] = store.events(payment_id)
        assert (event.from_status, event.to_status, event.source) == (None, "created", "manual")
        assert event.job_id is not None
        job = jobs.get(event.job_id)
        assert job is not None and (job.kind, job.queue, job.unique_key) == (CHARGE_KIND, CHARGE_QUEUE,
                                                                          charge_key(payment_id))
        assert job.payload == {"payment_id": payment_id} and job.tenant == "shop" and job.max_attempts == 4
        assert job.state is JobState.RUNNABLE and job.attempts == 0


def test_create__without_charge_no_jobs_and_events_name_none(db: Database) -> None:
    store = PaymentStore(db)
    [payment_id] = store.create([new("a")], charge=False)
    assert table_count(db, "jobs") == 0
    assert [e.job_id for e in store.events(payment_id)] == [None]


def test_create__a_charge_key_held_already_names_its_holder(db: Database) -> None:
    store, jobs = PaymentStore(db), JobStore(db)
    [first] = store.create([new("a")], charge=False)
    from recon import Client, Settings

    holder = Client(jobs, Settings()).enqueue("charge", {"payment_id": first + 1}, queue=CHARGE_QUEUE,
                                              unique_key=charge_key(first + 1))
    [second] = store.create([new("b")])
    assert second == first + 1
    assert [e.job_id for e in store.events(second)] == [holder]
    assert table_count(db, "jobs") == 1


def test_create__the_charge_queues_max_depth_refuses_the_whole_batch(db: Database) -> None:
    store = PaymentStore(db)
    store.create([new("a")], max_depth={CHARGE_QUEUE: 2})
    with pytest.raises(QueueFull, match="'charges' is full: 1 unfinished jobs, max_depth 2, refusing 2 more"):
        store.create([new("b"), new("c")], max_depth={CHARGE_QUEUE: 2})
    assert (table_count(db, "payments"), table_count(db, "payment_events"), table_count(db, "jobs")) == (1, 1, 1)
    assert len(store.create([new("b")], max_depth={CHARGE_QUEUE: 2})) == 1


def test_create__a_taken_reference_writes_nothing(db: Database) -> None:
    store = PaymentStore(db)
    store.create([new("a")])
    with pytest.raises(DuplicateReference, match="'a'"):
        store.create([new("z"), new("a")])
    assert (table_count(db, "payments"), table_count(db, "jobs")) == (1, 1)


def test_create__more_than_a_statement_holds_commits_together(db: Database) -> None:
    store = PaymentStore(db)
    ids = store.create([new(f"r{i}") for i in range(5003)])
    assert len(ids) == 5003 and ids == sorted(ids)
    assert (table_count(db, "payments"), table_count(db, "payment_events"), table_count(db, "jobs")) == (5003,) * 3


def test_create__wakes_the_charge_queue_at_commit(db: Database) -> None:
    if not db.is_postgresql:
        pytest.skip("SQLite workers poll: there is no NOTIFY")
    conninfo = db.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as listener:
        listener.execute("LISTEN recon_jobs")
        PaymentStore(db).create([new("z")])
        assert [n.payload for n in listener.notifies(timeout=0.5)] == []  # no worker waits for work
        add_waiting_worker(db, "w1", [CHARGE_QUEUE])
        PaymentStore(db).create([new("a"), new("b")])
        assert [n.payload for n in listener.notifies(timeout=0.5)] == [CHARGE_QUEUE]
        PaymentStore(db).create([new("c")], charge=False)
        assert [n.payload for n in listener.notifies(timeout=0.5)] == []
