"""Where each PSP's dispute listing was last read to: the ``disputes`` job's and ``recon sweep --disputes``'s cursor

- ``dispute_reads``: one row per PSP, ``read_until`` the end of the last window its listing was read over without
  an error, ``read_at`` when. The next rolling read starts no later than there (nor than the oldest open dispute's
  opening), so a run that failed for longer than its ``days_back`` leaves no gap (recon.reconcile.disputes).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "dispute_reads",
        sa.Column("psp", sa.Text(), primary_key=True),
        sa.Column("read_until", Timestamp, nullable=False),
        sa.Column("read_at", Timestamp, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
