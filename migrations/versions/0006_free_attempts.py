"""jobs.free_attempts: claims that did not spend the retry budget (snoozes, releases, replays, retries)

A snoozed job is claimed again later, so ``attempts`` (the fencing token) grows with every snooze. The
per-error-kind budget must count only the attempts that failed or could have: ``attempts - free_attempts``.
Without this, a job snoozed twenty times while its PSP was paused died on its first real error.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("free_attempts", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
