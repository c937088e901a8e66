"""RefundStore on both databases: a refund is created with its payment's bound, its event and its job in one
transaction; the sum of a payment's refunds that have not failed never exceeds what it captured, decided by the
database under concurrency (two writers racing for the last of a capture), with a check constraint behind it.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.errors import IllegalTransition, PspReferenceConflict, RefundRefused, StoreError
from recon.refund_rows import NewRefund, RefundSource, RefundTransition
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition

P = PaymentStatus


def succeeded(db: Database, ref: str = "order-1", amount: int = 1000, *, psp_reference: str | None = "pi_1") -> int:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("default", ref, amount, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, P.CREATED, P.SUCCEEDED, EventSource.CHARGE,
                                            psp_reference=psp_reference))
    return pid


def refund(pid: int, ref: str, amount: int) -> NewRefund:
    return NewRefund(payment_id=pid, refund_reference=ref, amount=amount, reason="requested_by_customer",
                     requested_by="alice")


def test_refund_create__reserves_the_amount_and_queues_its_job(db: Database) -> None:
    pid = succeeded(db)
    store = RefundStore(db)
    [rid] = store.create([refund(pid, "rf-1", 400)], queue="charges")
    payment = PaymentStore(db).get(pid)
    assert payment is not None and (payment.captured_amount, payment.refunded_amount) == (1000, 400)
    made = store.get(rid)
    assert made is not None and (made.status, made.amount, made.currency, made.psp) == (P.CREATED, 400, "EUR",
                                                                                        "stripe")
    assert made.idempotency_key.startswith("recon-refund-") and len(made.idempotency_key) <= 64  # Adyen: 64
    [job] = JobStore(db).list_jobs(kind="refund", limit=5)
    assert job.payload == {"refund_id": rid} and job.unique_key == f"refund:{rid}" and job.queue == "charges"
    [event] = store.events(rid)
    assert (event.to_status, event.source, event.job_id) == ("created", "manual", job.id)


def test_refund_create__more_than_captured_is_refused_and_nothing_is_written(db: Database) -> None:
    pid = succeeded(db)
    store = RefundStore(db)
    store.create([refund(pid, "rf-1", 700)], queue="charges")
    with pytest.raises(RefundRefused, match=r"rf-2.*400 is more than the 200"):
        store.create([refund(pid, "rf-3", 100), refund(pid, "rf-2", 400)], queue="charges")
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.refunded_amount == 700  # rf-3 rolled back with rf-2
    assert store.by_reference("rf-3") is None and len(JobStore(db).list_jobs(kind="refund", limit=9)) == 1


@pytest.mark.parametrize("status", [P.PENDING, P.FAILED, P.NEEDS_REVIEW])
def test_refund_create__only_a_succeeded_payment_is_refunded(db: Database, status: PaymentStatus) -> None:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("default", "order-1", 1000, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, P.CREATED, status, EventSource.CHARGE, psp_reference="pi_1"))
    with pytest.raises(RefundRefused, match=f"the payment is {status}"):
        RefundStore(db).create([refund(pid, "rf-1", 100)], queue="charges")


def test_refund_create__a_payment_without_psp_reference_is_refused(db: Database) -> None:
    pid = succeeded(db, psp_reference=None)
    with pytest.raises(RefundRefused, match="no PSP reference"):
        RefundStore(db).create([refund(pid, "rf-1", 100)], queue="charges")


def test_refund_create__a_taken_reference_is_refused(db: Database) -> None:
    pid = succeeded(db)
    store = RefundStore(db)
    store.create([refund(pid, "rf-1", 100)], queue="charges")
    with pytest.raises(RefundRefused, match="'rf-1' already exists"):
        store.create([refund(pid, "rf-1", 100)], queue="charges")
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.refunded_amount == 100


def test_refund_bound__racing_writers_never_refund_more_than_captured(db: Database) -> None:
    # eight writers each ask for 300 of a 1,000 capture at once: exactly three win, whatever the interleaving
    pid = succeeded(db)
    store = RefundStore(db)
    barrier = threading.Barrier(8)
    won: list[str] = []
    refused: list[str] = []

    def writer(i: int) -> None:
        barrier.wait()
        try:
            store.create([refund(pid, f"rf-{i}", 300)], queue="charges")
            won.append(f"rf-{i}")
        except RefundRefused:
            refused.append(f"rf-{i}")
        except StoreError:  # SQLite busy past its timeout: not a win either
            refused.append(f"rf-{i}")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(won) == 3 and len(refused) == 5
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.refunded_amount == 900
    assert sorted(r.refund_reference for r in store.for_payment(pid)) == sorted(won)


def test_refund_bound__the_second_transaction_waits_then_is_refused(db: Database) -> None:
    # deterministic interleaving: A reserves 600 and holds its transaction open; B asks for 600 meanwhile, waits
    # for A's row lock (PostgreSQL) or write lock (SQLite) and, once A commits, matches no row: refused
    pid = succeeded(db)
    store = RefundStore(db)
    outcome: list[str] = []
    with db.begin() as conn:
        store._create_one(conn, refund(pid, "rf-a", 600))
        b = threading.Thread(target=lambda: outcome.append(_try(store, refund(pid, "rf-b", 600))))
        b.start()
        b.join(0.5)
        assert b.is_alive() and outcome == []  # B waits for A
    b.join(30)
    assert outcome == ["refused"]
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.refunded_amount == 600


def _try(store: RefundStore, r: NewRefund) -> str:
    try:
        store.create([r], queue="charges")
    except RefundRefused:
        return "refused"
    return "created"


def test_refund_bound__the_check_constraint_is_the_backstop(db: Database) -> None:
    pid = succeeded(db)
    with pytest.raises(sa.exc.IntegrityError), db.engine.begin() as conn:
        conn.execute(sa.text("UPDATE payments SET refunded_amount = captured_amount + 1 WHERE id = :id"), {"id": pid})


def test_refund_apply__failed_gives_the_amount_back(db: Database) -> None:
    pid = succeeded(db)
    store = RefundStore(db)
    [rid] = store.create([refund(pid, "rf-1", 1000)], queue="charges")
    with db.begin() as conn:
        assert store.apply(conn, RefundTransition(rid, P.CREATED, P.PROCESSING, RefundSource.REFUND))
        assert store.apply(conn, RefundTransition(rid, P.PROCESSING, P.FAILED, RefundSource.REFUND,
                                                  psp_refund_id="re_1", failure_reason="psp: expired_or_canceled_card"))
        assert not store.apply(conn, RefundTransition(rid, P.PROCESSING, P.FAILED, RefundSource.REFUND))  # lost CAS
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.refunded_amount == 0
    [rid2] = store.create([refund(pid, "rf-2", 1000)], queue="charges")  # the room is back
    assert [e.to_status for e in store.events(rid)] == ["created", "processing", "failed"]
    with db.begin() as conn, pytest.raises(IllegalTransition):
        store.apply(conn, RefundTransition(rid, P.FAILED, P.NEEDS_REVIEW, RefundSource.WEBHOOK))
    assert rid2 != rid


def test_refund_apply__a_stored_psp_refund_id_is_never_replaced(db: Database) -> None:
    pid = succeeded(db)
    store = RefundStore(db)
    [rid] = store.create([refund(pid, "rf-1", 100)], queue="charges")
    with db.begin() as conn:
        assert store.apply(conn, RefundTransition(rid, P.CREATED, P.PENDING, RefundSource.REFUND, psp_refund_id="re_1"))
    with pytest.raises(PspReferenceConflict), db.begin() as conn:
        store.apply(conn, RefundTransition(rid, P.PENDING, P.SUCCEEDED, RefundSource.WEBHOOK, psp_refund_id="re_2"))
    made = store.get(rid)
    assert made is not None and (made.status, made.psp_refund_id) == (P.PENDING, "re_1")
    with db.begin() as conn:
        assert not store.remember_psp_id(conn, rid, status=P.PENDING, psp_id="re_3")
        assert store.apply(conn, RefundTransition(rid, P.PENDING, P.SUCCEEDED, RefundSource.WEBHOOK,
                                                  psp_refund_id="re_1"))
