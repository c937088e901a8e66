from __future__ import annotations

import warnings

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from recon.db.database import Database, upgrade
from recon.db.schema import metadata
from recon.errors import StoreError

# Alembic cannot compare expression indexes (jobs_claimable has "priority DESC"; payments_reference_lower,
# PostgreSQL only, lower(merchant_reference)): they are left out of the diff and checked by name and, on
# PostgreSQL, by the query plans below.
EXPRESSION_INDEXES = {"jobs_claimable", "payments_reference_lower"}


def _skip_expression_indexes(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    return not (type_ == "index" and name in EXPRESSION_INDEXES)


def test_schema__migrations_match_schema_module(db: Database) -> None:
    import sqlalchemy as sa

    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True,
                                                     "include_object": _skip_expression_indexes})
        with warnings.catch_warnings():  # Alembic says it skips the expression index it cannot reflect
            warnings.filterwarnings("ignore", message=".*index 'payments_reference_lower'")
            diff = compare_metadata(ctx, metadata)
        indexes = {i["name"] for i in sa.inspect(conn).get_indexes("jobs")}
    assert diff == []
    assert indexes == {i.name for i in metadata.tables["jobs"].indexes}


def test_schema__upgrade_is_idempotent(db: Database) -> None:
    upgrade(db)
    upgrade(db)
    with db.engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() is not None


def test_schema__claim_uses_the_partial_index_on_postgresql(db: Database) -> None:
    if not db.is_postgresql:
        return
    import sqlalchemy as sa

    with db.begin() as conn:
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(r[0] for r in conn.execute(sa.text(
            "EXPLAIN SELECT id FROM jobs WHERE state IN ('pending', 'runnable', 'retryable') "
            "AND queue IN ('default') AND run_after <= now() ORDER BY priority DESC, run_after, id LIMIT 10")))
    assert "jobs_claimable" in plan


def test_schema__reference_prefix_uses_its_index_on_postgresql(db: Database) -> None:
    if not db.is_postgresql:
        return
    import sqlalchemy as sa

    with db.begin() as conn:
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(r[0] for r in conn.execute(sa.text(
            "EXPLAIN SELECT currency, count(*) FROM payments WHERE lower(merchant_reference) LIKE 'order-12%' "
            "GROUP BY currency")))
        indexes = {r[0] for r in conn.execute(sa.text("SELECT indexname FROM pg_indexes WHERE tablename = 'payments'"))}
    assert "payments_reference_lower" in plan
    assert "payments_reference_lower" in indexes


def test_schema__finished_at_is_set_exactly_while_a_job_is_finished(db: Database) -> None:
    """SQLite's ``jobs_finished_at`` holds the rows whose finished_at is set (migration 0030), PostgreSQL's the rows
    in a finished state: the same rows only while every statement that finishes a job sets finished_at and every
    one that makes it unfinished clears it. Each way in and out of a finished state, checked on every row."""
    from datetime import UTC, datetime

    import sqlalchemy as sa

    from recon import Client, FixedClock, JobSpec, JobStore, Settings
    from recon.rows import Finish, JobFilter

    db.clock = FixedClock(datetime(2026, 1, 1, 12, tzinfo=UTC))
    store = JobStore(db)
    Client(store, Settings()).enqueue_many([JobSpec("k", {"i": i}, max_attempts=2) for i in range(8)])

    def check() -> None:
        with db.begin() as conn:
            rows = conn.execute(sa.text("SELECT id, state, finished_at FROM jobs")).all()
        assert [(i, s) for i, s, at in rows if (at is not None) != (s in ("succeeded", "dead", "canceled"))] == []

    jobs = store.claim(worker="w", queues=["default"], n=8, ttl=5)
    check()
    a, b, c, d, e, f, g, _h = (j.id for j in sorted(jobs, key=lambda j: j.id))
    store.finish_succeeded(worker="w", ids=[a], attempts=[1])
    store.finish(worker="w", finishes=[Finish(b, 1, "dead", "dead", error_kind="bug", error="x"),
                                       Finish(c, 1, "retryable", "retried", delay=0.0, error_kind="net", error="y"),
                                       Finish(d, 1, "pending", "snoozed", delay=0.0, bump=1)])
    assert store.cancel(e) == "requested"  # a cancel while it runs: its retry ends canceled
    store.finish(worker="w", finishes=[Finish(e, 1, "retryable", "retried", delay=0.0, error_kind="net", error="z")])
    check()
    db.clock.advance(6)  # type: ignore[attr-defined]  # f, g and h's leases expire: f has one attempt left
    store.rescue_expired(limit=10)
    check()
    assert store.retry_now(c)
    replayed = store.dead_letters.replay_dead(filters=JobFilter(), after_id=0, limit=10, budget=1)
    assert b in replayed.replayed
    check()
    store.claim(worker="w", queues=["default"], n=10, ttl=5)
    db.clock.advance(6)  # type: ignore[attr-defined]
    store.rescue_expired(limit=10)  # attempts spent: dead
    check()
    with db.begin() as conn:
        states = dict(conn.execute(sa.text("SELECT id, state FROM jobs")).all())
    assert states[f] == states[g] == "dead" and states[a] == "succeeded" and states[e] == "canceled"


def test_schema__sqlite_pruning_walks_the_finished_at_index(db: Database) -> None:
    if db.is_postgresql:
        return
    import re

    import sqlalchemy as sa

    from recon.db import dead_letter_queries as dq

    with db.begin() as conn:
        [created] = conn.execute(sa.text("SELECT sql FROM sqlite_master WHERE name = 'jobs_finished_at'")).one()
        sql = dq.job_select_prunable.for_driver("sqlite")
        plan = [r[3] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql,
                                                   {p: 1 for p in re.findall(r":(\w+)", sql)})]
    assert created.endswith("WHERE finished_at IS NOT NULL")
    assert plan == ["SEARCH jobs USING INDEX jobs_finished_at (finished_at<?)"]


def test_schema__a_job_row_breaking_the_rules_is_refused_on_both_backends(db: Database) -> None:
    """The rules on a job row (a known state, attempts >= 0, max_attempts >= 1, a lease with its owner and
    expiry) hold whatever statement writes it: the table's CHECK constraints, on both backends."""
    import pytest
    import sqlalchemy as sa

    now = "now()" if db.is_postgresql else "0"
    insert = ("INSERT INTO jobs (queue, kind, payload, state, run_after, attempts, max_attempts, lease_owner, "
              f"lease_until, created_at) VALUES ('q', 'k', '{{}}', :state, {now}, :attempts, :max_attempts, "
              f":owner, {now}, {now})")  # nosec B608  # constant SQL, values bound
    good = {"state": "runnable", "attempts": 0, "max_attempts": 1, "owner": None}
    with db.begin() as conn:
        conn.execute(sa.text(insert), good)
    for bad in ({"state": "bogus"}, {"state": "Runnable"}, {"attempts": -1}, {"max_attempts": 0},
                {"state": "leased", "owner": None}):
        with pytest.raises(StoreError, match="constraint"), db.begin() as conn:
            conn.execute(sa.text(insert), good | bad)
    with pytest.raises(StoreError, match="constraint"), db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET state = 'finished'"))
    with db.begin() as conn:
        assert conn.execute(sa.text("SELECT state, attempts, max_attempts FROM jobs")).all() == [("runnable", 0, 1)]
