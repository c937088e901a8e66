"""payments: what a merchant-initiated charge of a stored payment method needs, and idempotency key generations

- ``payment_method``: the PSP's token of the stored method (Stripe ``pm_…``, Adyen ``storedPaymentMethodId``);
  never a card number.
- ``customer_reference``: the PSP's customer (Stripe ``cus_…``) or shopper reference (Adyen ``shopperReference``).
- ``key_generation``: which idempotency key the charge sends: 0 is ``idempotency_key`` itself, N > 0 is
  ``idempotency_key-gN``. It grows only when reconciliation has proved that the PSP holds no payment for
  the current key and the PSP has forgotten that key (Stripe keeps keys 24 h).
- ``key_sent_at``: when the current key was last sent, so a charge never re-sends a key the PSP may have
  forgotten.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("payment_method", sa.Text(), nullable=True))
        batch.add_column(sa.Column("customer_reference", sa.Text(), nullable=True))
        batch.add_column(sa.Column("key_generation", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("key_sent_at", Timestamp, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
