"""jobs and job_attempts: the lease engine's tables

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

CLAIMABLE = "state IN ('pending', 'runnable', 'retryable')"
FINISHED = "state IN ('succeeded', 'dead', 'canceled')"


def _where(sql: str) -> dict[str, object]:
    return {"postgresql_where": sa.text(sql), "sqlite_where": sa.text(sql)}


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("payload", Json, nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("run_after", Timestamp, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_until", Timestamp, nullable=True),
        sa.Column("heartbeat_at", Timestamp, nullable=True),
        sa.Column("attempted_at", Timestamp, nullable=True),
        sa.Column("unique_key", sa.Text(), nullable=True),
        sa.Column("last_error_kind", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("tenant", sa.Text(), nullable=True),
        sa.Column("progress", Json, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.CheckConstraint(
            "state IN ('pending', 'runnable', 'leased', 'succeeded', 'retryable', 'dead', 'canceled')",
            name="jobs_state_valid",
        ),
        sa.CheckConstraint("attempts >= 0 AND max_attempts >= 1", name="jobs_attempts_valid"),
        sa.CheckConstraint(
            "state <> 'leased' OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL)", name="jobs_lease_complete"
        ),
        # SQLite: AUTOINCREMENT, so a deleted (pruned) job's id is never reused and old history rows never
        # collide with a new job's attempts.
        sqlite_autoincrement=True,
    )
    # the claim reads only claimable rows: its cost does not grow with finished jobs
    op.create_index("jobs_claimable", "jobs", ["queue", sa.text("priority DESC"), "run_after", "id"],
                    **_where(CLAIMABLE))
    # the stuck watcher reads only leased rows (lease_until is set exactly while a job is leased). The
    # predicate is deliberately not "state = 'leased'": fenced finishes say that, and with stale statistics
    # the planner would drive them from this index (whose dead entries grow between vacuums) instead of
    # the primary key.
    op.create_index("jobs_leased_expiry", "jobs", ["lease_until"], **_where("lease_until IS NOT NULL"))
    # enqueue's ON CONFLICT arbiter: one unfinished job per unique key
    op.create_index("jobs_unique_key_unfinished", "jobs", ["unique_key"], unique=True,
                    **_where(f"unique_key IS NOT NULL AND NOT {FINISHED}"))
    # pruning walks finished jobs by age
    op.create_index("jobs_finished_at", "jobs", ["finished_at"], **_where(FINISHED))
    # the dead-letter set, listed and replayed by queue and kind
    op.create_index("jobs_dead", "jobs", ["queue", "kind"], **_where("state = 'dead'"))

    op.create_table(
        "job_attempts",
        # No foreign key to jobs: its check costs a third of a grouped finish on PostgreSQL. Rows are
        # only inserted from a fenced UPDATE of their job in the same statement or transaction, and
        # pruning deletes a job's attempts with the job.
        sa.Column("job_id", Id, primary_key=True),
        sa.Column("attempt", sa.Integer(), primary_key=True),
        sa.Column("worker", sa.Text(), nullable=False),
        sa.Column("started_at", Timestamp, nullable=True),
        sa.Column("finished_at", Timestamp, nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("error_kind", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "outcome IN ('succeeded', 'retried', 'snoozed', 'dead', 'canceled', 'lease_expired', 'released')",
            name="job_attempts_outcome_valid",
        ),
    )


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
