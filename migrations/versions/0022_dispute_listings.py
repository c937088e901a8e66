"""disputes from the PSPs' listings, and payout lines linked to the refunds and disputes they carry

- ``dispute_events.source``: also ``listing`` (a dispute read from the PSP's listing: Stripe's ``GET
  /v1/disputes``, Adyen's Payment accounting report; ``recon disputes fetch`` and the ``disputes`` job).
- ``payout_lines.movement_reference``: the PSP's id of the movement a line carries when it is not the payment
  itself (Stripe's balance transaction source ``re_…``/``dp_…``; Adyen's ``Modification Reference``), stored
  exactly; ``refund_id`` and ``dispute_id``: our refund or dispute it is, when we know it (else NULL).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("dispute_events") as batch:
        batch.drop_constraint("dispute_events_source_valid", type_="check")
        batch.create_check_constraint("dispute_events_source_valid", "source IN ('webhook', 'manual', 'listing')")
    with op.batch_alter_table("payout_lines") as batch:
        batch.add_column(sa.Column("movement_reference", sa.Text(), nullable=True))
        batch.add_column(sa.Column("refund_id", Id, nullable=True))
        batch.add_column(sa.Column("dispute_id", Id, nullable=True))
        batch.create_foreign_key("payout_lines_refund_fkey", "refunds", ["refund_id"], ["id"])
        batch.create_foreign_key("payout_lines_dispute_fkey", "disputes", ["dispute_id"], ["id"])


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
