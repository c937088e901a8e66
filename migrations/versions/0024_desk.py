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
- ``payments_review_facets`` replaces ``payments_review_totals`` (0020): the partial index over the payments in
  review on (currency, amount, review_since), on PostgreSQL INCLUDE (psp, review_assignee, review_reason), holds
  every column the queue's filters read (kind from the reason, severity from amount and age, overdue from kind
  and age, PSP, assignee), so every filter's totals are an Index Only Scan of the items in review, never the
  payments table (docs/benchmarks.md, the review queue at 100,000 items).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    op.add_column("psp_controls", sa.Column("resumed_by", sa.Text(), nullable=True))
    op.add_column("psp_controls", sa.Column("resumed_at", Timestamp, nullable=True))
    op.add_column("operators", sa.Column("totp_last_step", sa.BigInteger(), nullable=True))
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        op.execute("CREATE INDEX payments_reference_lower ON payments (lower(merchant_reference) text_pattern_ops)")
    op.create_index(
        "payments_review_facets",
        "payments",
        ["currency", "amount", "review_since"],
        postgresql_include=["psp", "review_assignee", "review_reason"],
        postgresql_where=sa.text("status = 'needs_review'"),
        sqlite_where=sa.text("status = 'needs_review'"),
    )
    op.drop_index("payments_review_totals", table_name="payments")


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
