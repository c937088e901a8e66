"""A close's exception for a dispute whose fee its payout lines do not carry

- ``payout_exceptions.kind``: also ``dispute_fee_differs`` (the dispute fee the PSP's webhook or listing gave,
  ``disputes.fee``, is not what the payout lines linked to that dispute carry: recon.close.match.dispute_fees).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

KINDS = ("bank_missing", "amount_differs", "ambiguous", "unexplained_credit", "lines_differ", "payout_failed",
         "dispute_fee_differs")


def upgrade() -> None:
    with op.batch_alter_table("payout_exceptions") as batch:
        batch.drop_constraint("payout_exceptions_kind_valid", type_="check")
        batch.create_check_constraint("payout_exceptions_kind_valid",
                                      f"kind IN ({', '.join(repr(k) for k in KINDS)})")


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
