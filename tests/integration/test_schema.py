from __future__ import annotations

import warnings

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from recon.db.database import Database, upgrade
from recon.db.schema import metadata

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
