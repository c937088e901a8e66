"""``Database.run_in``: a query straight through the driver inside a transaction (the webhook jobs' finish)
returns the rows the database holds, as plain tuples in the statement's column order; an expanding parameter
takes any number of items but not none (the caller says what none means); a driver error is a ``StoreError``
naming the database and rolls the caller's transaction back. On both databases."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from recon.db import payment_queries as lq
from recon.db.database import Database
from recon.db.sql import Query
from recon.errors import StoreError

COLUMNS = [c.strip() for c in lq.PAYMENT_COLUMNS.split(",")]


def seed(db: Database) -> None:
    with db.begin() as conn:
        for i, (status, ref) in enumerate([("processing", "pi_a"), ("succeeded", "pi_b"), ("pending", None)]):
            conn.execute(sa.text(
                "INSERT INTO payments (merchant_account, merchant_reference, amount, currency, psp, psp_reference, "
                "idempotency_key, status, created_at, updated_at) VALUES ('shop', :ref, :amount, 'EUR', 'stripe', "
                ":pi, :key, :status, :now, :now)"),
                {"ref": f"order-{i}", "amount": 1000 + i, "pi": ref, "key": f"k-{i}", "status": status,
                 "now": 1_780_000_000_000_000 if not db.is_postgresql else "2026-12-05T12:00:00+00:00"})


def test_rows_are_the_databases_as_plain_tuples_in_column_order(db: Database) -> None:
    seed(db)
    with db.begin() as conn:
        rows = db.run_in(conn, lq.payment_get_by_references, {"refs": ["order-2", "order-0", "order-9"]})
    assert all(type(r) is tuple and len(r) == len(COLUMNS) for r in rows)
    got = sorted((dict(zip(COLUMNS, r, strict=True)) for r in rows), key=lambda m: m["merchant_reference"])
    assert [(m["merchant_reference"], m["amount"], m["currency"], m["psp_reference"], m["status"]) for m in got] == [
        ("order-0", 1000, "EUR", "pi_a", "processing"), ("order-2", 1002, "EUR", None, "pending")]


def test_an_expanding_parameter_with_one_or_many_items_and_none_refused(db: Database) -> None:
    seed(db)
    with db.begin() as conn:
        one = db.run_in(conn, lq.payment_get_by_psp_references, {"psp": "stripe", "refs": ["pi_b"]})
        many = db.run_in(conn, lq.payment_get_by_psp_references, {"psp": "stripe", "refs": ["pi_a", "pi_b", "pi_x"]})
        with pytest.raises(ValueError, match="without items"):
            db.run_in(conn, lq.payment_get_by_psp_references, {"psp": "stripe", "refs": []})
        other = db.run_in(conn, lq.payment_get_by_psp_references, {"psp": "adyen", "refs": ["pi_a"]})
    status = COLUMNS.index("status")
    assert [r[status] for r in one] == ["succeeded"]
    assert sorted(r[status] for r in many) == ["processing", "succeeded"]
    assert other == []


def test_a_driver_error_is_a_store_error_and_the_transaction_is_rolled_back(db: Database) -> None:
    seed(db)
    broken = Query("test_broken", "a statement naming a table that does not exist",
                   sql="SELECT id FROM no_such_table WHERE id = :id")
    with pytest.raises(StoreError, match=r"^database: "), db.begin() as conn:
        conn.execute(sa.text("UPDATE payments SET amount = 1 WHERE merchant_reference = 'order-0'"))
        db.run_in(conn, broken, {"id": 1})
    with db.begin() as conn:  # the update went with the transaction; the pool's connection still serves
        assert conn.execute(sa.text("SELECT amount FROM payments WHERE merchant_reference = 'order-0'")
                            ).scalar_one() == 1000
