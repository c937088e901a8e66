"""``Database.index_plans`` (recon.db.plan_queries): inside it, the foreign-key check PostgreSQL runs for each
payment event keeps one generic plan, and that plan is an index scan on an empty table and on a large one; outside
it every session still plans each statement afresh."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from recon.db import transition_queries as tq
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.db.transition_store import INDEX_PLANS_FROM
from recon.rows import EventSource, PaymentStatus, Transition

#: the statement PostgreSQL 15's ri_triggers.c builds for the check of payment_events_payment_id_fkey (RI_FKey_check:
#: "SELECT 1 FROM ONLY <pktable> x WHERE pkatt1 = $1 FOR KEY SHARE OF x"), prepared as it prepares it
FK_CHECK = 'SELECT 1 FROM ONLY "{schema}"."payments" x WHERE "id" OPERATOR(pg_catalog.=) $1 FOR KEY SHARE OF x'


def _generic_plan(conn: sa.Connection, name: str) -> list[str]:
    """EXPLAIN of the foreign-key check as a prepared statement's cached generic plan, in ``conn``'s session."""
    driver: Any = conn.connection.driver_connection
    schema = driver.execute("SELECT current_schema()").fetchone()[0]
    driver.execute(f"PREPARE {name}(bigint) AS " + FK_CHECK.format(schema=schema))
    try:
        return [r[0] for r in driver.execute(f"EXPLAIN (COSTS OFF) EXECUTE {name}(1)")]
    finally:
        driver.execute(f"DEALLOCATE {name}")


def _settings(conn: sa.Connection) -> tuple[str, str]:
    return (conn.exec_driver_sql("SHOW plan_cache_mode").scalar_one(),
            conn.exec_driver_sql("SHOW enable_seqscan").scalar_one())


def test_index_plans__the_foreign_key_check_is_an_index_scan_on_an_empty_and_a_100k_row_table(db: Database) -> None:
    if not db.is_postgresql:
        pytest.skip("plan caching is PostgreSQL's")
    with db.begin() as conn:  # empty (no page left by deleted rows), and known to be: the case that kept a seq scan
        conn.exec_driver_sql("TRUNCATE payments CASCADE")
        conn.exec_driver_sql("ANALYZE payments")
    with db.begin() as conn:
        # the hazard the guard is for: a plain generic plan, made now, scans the whole table for every check
        conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
        assert any("Seq Scan on payments" in line for line in _generic_plan(conn, "unguarded"))
    for rows in (0, 100_000):
        if rows:
            with db.begin() as conn:
                conn.exec_driver_sql(
                    "INSERT INTO payments (merchant_account, merchant_reference, amount, currency, psp, "
                    "psp_reference, idempotency_key, status, created_at, updated_at) "
                    "SELECT 'shop', 'plan-' || i, 1000, 'EUR', 'stripe', 'pi_plan_' || i, 'plan-key-' || i, "
                    "'processing', now(), now() FROM generate_series(1, %(n)s) AS i", {"n": rows})
                conn.exec_driver_sql("ANALYZE payments")
        with db.begin() as conn:
            assert _settings(conn) == ("force_custom_plan", "on")
            with db.index_plans(conn):
                assert _settings(conn) == ("force_generic_plan", "off")
                plan = _generic_plan(conn, "guarded")
                assert any("Index Scan using payments_pkey on payments" in line for line in plan), (rows, plan)
                assert not any("Seq Scan" in line for line in plan), (rows, plan)
                insert = conn.connection.driver_connection.execute(  # type: ignore[union-attr]
                    "EXPLAIN (COSTS OFF) " + tq.payment_event_insert_many.for_driver("postgresql"),
                    {"rows": "[]", "now": None})
                assert not [r[0] for r in insert if " Scan on " in r[0] and "Function Scan" not in r[0]]
            assert _settings(conn) == ("force_custom_plan", "on")  # restored for the rest of the transaction


def test_index_plans__a_block_that_raises_leaves_the_session_as_it_was(db: Database) -> None:
    if not db.is_postgresql:
        with db.begin() as conn, db.index_plans(conn):  # nothing to change on SQLite
            pass
        return
    with db.engine.connect() as conn:
        with pytest.raises(RuntimeError), conn.begin(), db.index_plans(conn):
            raise RuntimeError("the write failed")
        with conn.begin():
            assert _settings(conn) == ("force_custom_plan", "on")


def test_apply_many__writes_its_audit_events_under_the_guard_from_a_few_on(db: Database,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Transitions write their payment events inside ``index_plans`` from ``INDEX_PLANS_FROM`` events on (below,
    its two statements would cost more than the planning they save), and the events are all there."""
    payments = PaymentStore(db)
    with db.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO payments (merchant_account, merchant_reference, amount, currency, psp, idempotency_key, "
            "status, created_at, updated_at) VALUES " + ", ".join(
                f"('shop', 'guard-{i}', 100, 'EUR', 'stripe', 'guard-key-{i}', 'processing', "
                + ("now(), now())" if db.is_postgresql else "0, 0)") for i in range(INDEX_PLANS_FROM + 1)))
        ids = [int(i) for (i,) in conn.exec_driver_sql("SELECT id FROM payments ORDER BY id")]
    entered: list[int] = []
    real = db.index_plans

    def counted(conn: sa.Connection) -> Any:
        entered.append(1)
        return real(conn)

    monkeypatch.setattr(db, "index_plans", counted)
    moves = [Transition(i, PaymentStatus.PROCESSING, PaymentStatus.SUCCEEDED, EventSource.WEBHOOK, details={})
             for i in ids]
    with db.begin() as conn:
        assert payments.apply_many(conn, moves[:1]) == {ids[0]}
    assert entered == []
    with db.begin() as conn:
        assert payments.apply_many(conn, moves[1:]) == set(ids[1:])
    assert entered == [1]
    with db.begin() as conn:
        events = conn.exec_driver_sql("SELECT payment_id, to_status FROM payment_events ORDER BY payment_id").all()
    assert [(int(p), s) for p, s in events] == [(i, "succeeded") for i in ids]
