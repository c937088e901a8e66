"""schedule_slots: each slot of each `[schedule.NAME]` claimed once, by whichever scheduler comes first

Every `recon worker` runs the scheduler. The primary key (schedule, slot_at) is the whole guarantee: the
first scheduler to insert a slot queues its job in the same transaction; every other one inserts nothing.
The row stays after the job finished, so a slot never runs twice; ``job_id`` is NULL for a slot skipped
after downtime (``catch_up = "skip"``). ``lag`` (enqueued_at - slot_at) is the schedule-lag metric.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "schedule_slots",
        sa.Column("schedule", sa.Text(), primary_key=True),
        sa.Column("slot_at", Timestamp, primary_key=True),
        sa.Column("enqueued_at", Timestamp, nullable=False),
        sa.Column("job_id", Id, nullable=True),
        sa.Column("scheduler", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
