"""workers.waiting: a worker listening for wake-ups whose last claim drained its queues

An enqueue NOTIFYs only when a worker of the job's queue waits for work (docs/design.md, wake-ups): a NOTIFY
costs every committing enqueue the notification queue's lock, and a busy worker claims again without one. The
partial index keeps the producers' test a look at the waiting workers only (usually none, or a few).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("waiting", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index(
        "workers_waiting", "workers", ["id"], postgresql_where=sa.text("waiting"), sqlite_where=sa.text("waiting")
    )


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
