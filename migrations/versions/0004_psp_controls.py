"""psp_controls: per-PSP pause switch, 429 cool-down, circuit breaker and shared rate-limit bucket

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

One row per PSP, created on first use (``recon.db.control_store``). Every worker on every host reads and
changes it with single conditional statements, so the row is the PSP-wide truth:

- ``paused`` (with who, when and why): ``recon psp pause``; jobs for the PSP snooze instead of calling it.
- ``cooldown_until``: set from a 429's Retry-After (bounded); every worker backs off until it passes.
- the breaker: ``breaker_state`` closed | open | half_open, ``failures`` (consecutive transient failures,
  PSP-wide), ``opened_at``, ``probe_at`` (open: when one half-open probe may go; half_open: when the
  probe's slot expires, which is also the probe's fencing token) and ``breaker_reason``.
- the token bucket of the PSP's rate limit: ``tokens`` as of ``tokens_at``; ``last_grant`` is how many the
  last admission took (the statement returns it: RETURNING sees only the new row).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "psp_controls",
        sa.Column("psp", sa.Text(), primary_key=True),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("paused_by", sa.Text(), nullable=True),
        sa.Column("paused_at", Timestamp, nullable=True),
        sa.Column("pause_reason", sa.Text(), nullable=True),
        sa.Column("cooldown_until", Timestamp, nullable=True),
        sa.Column("breaker_state", sa.Text(), nullable=False, server_default="closed"),
        sa.Column("failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("opened_at", Timestamp, nullable=True),
        sa.Column("probe_at", Timestamp, nullable=True),
        sa.Column("breaker_reason", sa.Text(), nullable=True),
        sa.Column("tokens", sa.Float(), nullable=False, server_default="0"),
        sa.Column("tokens_at", Timestamp, nullable=True),
        sa.Column("last_grant", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.CheckConstraint("breaker_state IN ('closed', 'open', 'half_open')",
                           name="psp_controls_breaker_valid"),
        sa.CheckConstraint("failures >= 0", name="psp_controls_failures_valid"),
    )


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
