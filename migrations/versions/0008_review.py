"""The review workflow: when a payment entered needs_review, the manual resolutions' index, sweep runs

- ``payments.review_since``: when the payment last moved to ``needs_review`` (set by the transition itself);
  the review queue's age and ``--older-than`` read it through the partial index ``payments_review``, which
  holds only the payments in review. Existing ones take their ``updated_at``.
- ``payment_events_resolutions``: manual resolutions out of review by time, for resolutions per day and
  operator (``recon stats``, the metrics endpoint) without reading the whole audit trail (the import's creation
  events are manual too, so the predicate names the resolutions themselves).
- ``payments_at_risk``: the unfinished payments' currency, creation time and amount, so money at risk per
  currency and age (``recon stats``, the console's overview) is an index-only scan.
- ``sweep_runs``: one row per ``recon sweep`` (who, the options, the summary, the exit code), so ``recon
  stats`` and the console can show the last sweeps.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Json = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
IN_REVIEW = "status = 'needs_review'"
RESOLVED = "source = 'manual' AND from_status = 'needs_review'"
UNFINISHED = "status IN ('created', 'processing', 'pending')"


def upgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("review_since", Timestamp, nullable=True))
    op.execute(f"UPDATE payments SET review_since = updated_at WHERE {IN_REVIEW}")  # nosec B608  # constants
    op.create_index("payments_review", "payments", ["review_since", "id"], postgresql_where=sa.text(IN_REVIEW),
                    sqlite_where=sa.text(IN_REVIEW))
    op.create_index("payment_events_resolutions", "payment_events", ["at"], postgresql_where=sa.text(RESOLVED),
                    sqlite_where=sa.text(RESOLVED))
    op.create_index("payments_at_risk", "payments", ["currency", "created_at", "amount"],
                    postgresql_where=sa.text(UNFINISHED), sqlite_where=sa.text(UNFINISHED))
    op.create_table(
        "sweep_runs",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("started_at", Timestamp, nullable=False),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.Column("operator", sa.Text(), nullable=False),
        sa.Column("options", Json, nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("summary", Json, nullable=True),
        sa.CheckConstraint("outcome IN ('running', 'finished', 'failed')", name="sweep_runs_outcome_valid"),
        sqlite_autoincrement=True,
    )
    op.create_index("sweep_runs_started", "sweep_runs", ["started_at"])


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
