"""The desk finished (issue 27): who resumed a PSP, TOTP codes used once, a case-insensitive reference index

- ``psp_controls.resumed_by``, ``resumed_at``: who last resumed the PSP and when (its pause's ``paused_by``,
  ``paused_at`` and ``pause_reason`` are kept after the resume, so the last pause and the resume that ended it
  read side by side; ``paused`` alone says whether traffic flows).
- ``operators.totp_last_step``: the TOTP time step (RFC 6238: Unix time // 30) of the operator's last accepted
  code; a login with a code of that step or an earlier one is refused, so a code seen over a shoulder or in a
  proxy's log cannot be used again within its window.
- ``payments_reference_lower`` (PostgreSQL only): ``lower(merchant_reference) text_pattern_ops``, so the
  console's case-insensitive reference prefix (``lower(merchant_reference) LIKE 'abc%'``) reads only the
  matching payments. SQLite's LIKE cannot use an expression index; it scans there, as before.

Revision ID: 0024
Revises: 0020
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0020"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    op.add_column("psp_controls", sa.Column("resumed_by", sa.Text(), nullable=True))
    op.add_column("psp_controls", sa.Column("resumed_at", Timestamp, nullable=True))
    op.add_column("operators", sa.Column("totp_last_step", sa.BigInteger(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE INDEX payments_reference_lower ON payments (lower(merchant_reference) text_pattern_ops)")


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
