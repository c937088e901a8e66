"""PaymentStore's transitions on both databases: a PSP reference, once stored, is never replaced.

The rule (docs/design.md, "Evidence never overwrites what we know") is held by the SQL itself
(``payment_transition_if_status``, ``payment_transition_many_if_status``), so that no caller, present or future,
can move a payment on evidence naming another PSP reference: such a transition raises PspReferenceConflict and
writes nothing, a lost compare-and-set still returns False, and a transition naming the stored reference, or
none, moves the payment as before.
"""

from __future__ import annotations

import pytest

from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.errors import PspReferenceConflict
from recon.rows import EventSource, NewPayment, Payment, PaymentStatus, Transition

P = PaymentStatus


def pending(db: Database, ref: str, psp_reference: str | None) -> int:
    store = PaymentStore(db)
    [pid] = store.create([NewPayment("default", ref, 1000, "EUR", "stripe")], charge=False)
    with db.begin() as conn:
        assert store.apply(conn, Transition(pid, P.CREATED, P.PENDING, EventSource.CHARGE,
                                            psp_reference=psp_reference))
    return pid


def snapshot(db: Database, pid: int) -> tuple[Payment | None, int]:
    store = PaymentStore(db)
    return store.get(pid), len(store.events(pid))


def heal(pid: int, psp_reference: str | None, *, to: PaymentStatus = P.SUCCEEDED,
         source: EventSource = EventSource.WEBHOOK) -> Transition:
    return Transition(pid, P.PENDING, to, source, details={"psp_reference": psp_reference},
                      psp_reference=psp_reference)


def test_apply__a_transition_naming_another_psp_reference_raises_and_moves_nothing(db: Database) -> None:
    pid = pending(db, "order-1", "pi_A")
    before = snapshot(db, pid)
    store = PaymentStore(db)
    with pytest.raises(PspReferenceConflict, match=r"pi_B.*pi_A"), db.begin() as conn:
        store.apply(conn, heal(pid, "pi_B"))
    assert snapshot(db, pid) == before
    with db.begin() as conn:  # to review, too: whatever the target, never with another reference
        with pytest.raises(PspReferenceConflict):
            store.apply(conn, heal(pid, "pi_B", to=P.NEEDS_REVIEW))
    assert snapshot(db, pid) == before


def test_apply__the_stored_reference_or_none_moves_and_keeps_it(db: Database) -> None:
    store = PaymentStore(db)
    same, unnamed, fresh = pending(db, "order-1", "pi_A"), pending(db, "order-2", "pi_C"), pending(db, "order-3", None)
    with db.begin() as conn:
        assert store.apply(conn, heal(same, "pi_A"))
        assert store.apply(conn, heal(unnamed, None, to=P.FAILED))
        assert store.apply(conn, heal(fresh, "pi_D"))
    assert [(p.status, p.psp_reference) for p in store.get_many([same, unnamed, fresh])] == [
        (P.SUCCEEDED, "pi_A"), (P.FAILED, "pi_C"), (P.SUCCEEDED, "pi_D")]


def test_apply__a_lost_compare_and_set_is_still_false_not_a_conflict(db: Database) -> None:
    pid = pending(db, "order-1", "pi_A")
    store = PaymentStore(db)
    with db.begin() as conn:
        assert store.apply(conn, heal(pid, "pi_A", to=P.FAILED))
    with db.begin() as conn:  # the payment left pending: whatever the reference, the CAS lost
        assert store.apply(conn, heal(pid, "pi_B")) is False
        assert store.apply(conn, heal(pid, "pi_A")) is False
    assert store.get(pid).status is P.FAILED  # type: ignore[union-attr]


def test_apply_many__one_transition_naming_another_reference_refuses_the_batch(db: Database) -> None:
    store = PaymentStore(db)
    ok, other, gone = pending(db, "order-1", "pi_A"), pending(db, "order-2", "pi_B"), pending(db, "order-3", "pi_C")
    with db.begin() as conn:
        assert store.apply(conn, heal(gone, "pi_C", to=P.FAILED))
    before = [snapshot(db, pid) for pid in (ok, other, gone)]
    with pytest.raises(PspReferenceConflict, match="pi_X"), db.begin() as conn:
        store.apply_many(conn, [heal(ok, "pi_A"), heal(other, "pi_X"), heal(gone, "pi_C")])
    assert [snapshot(db, pid) for pid in (ok, other, gone)] == before  # the caller's transaction rolled back
    with db.begin() as conn:  # without it: the right ones move, the lost one is left out, nothing raises
        assert store.apply_many(conn, [heal(ok, "pi_A"), heal(other, None, to=P.FAILED),
                                       heal(gone, "pi_Z")]) == {ok, other}
    assert [(p.status, p.psp_reference) for p in store.get_many([ok, other, gone])] == [
        (P.SUCCEEDED, "pi_A"), (P.FAILED, "pi_B"), (P.FAILED, "pi_C")]


def test_remember_psp_reference__only_where_none_is_stored(db: Database) -> None:
    store = PaymentStore(db)
    held, fresh = pending(db, "order-1", "pi_A"), pending(db, "order-2", None)
    with db.begin() as conn:
        assert not store.remember_psp_reference(conn, payment_id=held, status=P.PENDING, psp_reference="pi_B")
        assert store.remember_psp_reference(conn, payment_id=fresh, status=P.PENDING, psp_reference="pi_C")
    assert [p.psp_reference for p in store.get_many([held, fresh])] == ["pi_A", "pi_C"]
