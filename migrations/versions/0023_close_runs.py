"""The closes that ran: one row per ``recon close`` (and each run of a ``kind = "close"`` schedule)

- ``close_runs``: the PSP, the arrival window ``[since, until)``, when it ran, how many payouts it read, how many
  items it left open and whether the window closed. ``recon stats`` and the metrics show each PSP's last close
  (``close_runs_psp``: the latest per PSP by index); the rows are the history of who closed what, when.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Day = sa.Date().with_variant(sa.Text(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "close_runs",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("psp", sa.Text(), nullable=False),
        sa.Column("since", Day, nullable=False),
        sa.Column("until", Day, nullable=False),
        sa.Column("ran_at", Timestamp, nullable=False),
        sa.Column("payouts", sa.Integer(), nullable=False),
        sa.Column("open_items", sa.Integer(), nullable=False),
        sa.Column("closed", sa.Boolean(), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("close_runs_psp", "close_runs", ["psp", "id"])


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
