"""webhook_events: every event a PSP pushed, stored once; payment events may come from a webhook

- ``webhook_events``: one row per verified event, unique on (psp, event_id), so a redelivery inserts nothing
  (and queues no second job). What it says about a payment is kept in columns (its references, amount,
  currency, ``news``: succeeded, failed, pending, actionrequired, reversed, unknown) and its own document in
  ``body`` (redacted). ``state`` is how applying it ended: received (its job has not run), applied,
  unknown_payment (no payment of ours matches: a ``missing_locally`` candidate in ``recon report`` and
  ``recon stats``), stale (it says nothing new: a redelivery, or older news than the payment's final state),
  ignored. The partial index serves the unknown ones.
- ``payment_events.source`` may be ``webhook``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Json = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webhook_events",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("psp", sa.Text(), nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("occurred_at", Timestamp, nullable=True),
        sa.Column("received_at", Timestamp, nullable=False),
        sa.Column("psp_reference", sa.Text(), nullable=True),
        sa.Column("merchant_reference", sa.Text(), nullable=True),
        sa.Column("merchant_account", sa.Text(), nullable=True),
        sa.Column("amount", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.Text(), nullable=True),
        sa.Column("news", sa.Text(), nullable=True),
        sa.Column("psp_status", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("report", sa.Text(), nullable=True),
        sa.Column("body", Json, nullable=True),
        sa.Column("state", sa.Text(), nullable=False, server_default="received"),
        sa.Column("payment_id", Id, nullable=True),
        sa.Column("applied_at", Timestamp, nullable=True),
        sa.CheckConstraint("state IN ('received', 'applied', 'unknown_payment', 'stale', 'ignored')",
                           name="webhook_events_state_valid"),
        sa.UniqueConstraint("psp", "event_id", name="webhook_events_psp_event_key"),
        sqlite_autoincrement=True,
    )
    op.create_index("webhook_events_unknown", "webhook_events", ["psp", "received_at"],
                    postgresql_where=sa.text("state = 'unknown_payment'"),
                    sqlite_where=sa.text("state = 'unknown_payment'"))
    with op.batch_alter_table("payment_events") as batch:
        batch.drop_constraint("payment_events_source_valid", type_="check")
        batch.create_check_constraint("payment_events_source_valid",
                                      "source IN ('charge', 'reconcile', 'manual', 'webhook')")


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
