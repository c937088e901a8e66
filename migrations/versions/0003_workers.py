"""the workers table: live pool state and counters for metrics and recon stats

One row per worker process, upserted every few seconds by the process itself (recon.engine.worker's
presence thread); the metrics endpoint and ``recon stats`` aggregate the rows (see recon/metrics.py).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.Text(), primary_key=True),  # the lease owner id: host:pid:random
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", Json, nullable=False),  # a JSON array of queue names
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("busy_slots", sa.Integer(), nullable=False),
        sa.Column("started_at", Timestamp, nullable=False),
        sa.Column("last_seen_at", Timestamp, nullable=False),
        sa.Column("stopped_at", Timestamp, nullable=True),  # set by a clean shutdown
        sa.Column("counters", Json, nullable=False),  # cumulative since the process started
        sa.CheckConstraint("slots >= 0 AND busy_slots >= 0", name="workers_slots_valid"),
    )
    # live workers (last_seen_at within a window) and pruning of long-gone ones
    op.create_index("workers_last_seen", "workers", ["last_seen_at"])


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
