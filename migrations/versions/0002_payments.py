"""payments and payment_events: the ledger and its audit trail

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UNFINISHED = "status IN ('created', 'processing', 'pending')"


def _where(sql: str) -> dict[str, object]:
    return {"postgresql_where": sa.text(sql), "sqlite_where": sa.text(sql)}


def upgrade() -> None:
    op.create_table(
        "payments",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("merchant_account", sa.Text(), nullable=False),
        sa.Column("merchant_reference", sa.Text(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("psp", sa.Text(), nullable=False),
        sa.Column("psp_reference", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("review_reason", sa.Text(), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.CheckConstraint("amount > 0", name="payments_amount_positive"),
        sa.CheckConstraint("length(currency) = 3 AND upper(currency) = currency", name="payments_currency_iso"),
        sa.CheckConstraint(
            "status IN ('created', 'processing', 'pending', 'succeeded', 'failed', 'needs_review')",
            name="payments_status_valid",
        ),
        sa.UniqueConstraint("merchant_reference", name="payments_merchant_reference_key"),
        sa.UniqueConstraint("idempotency_key", name="payments_idempotency_key_key"),
    )
    # the sweep: stale unfinished payments by PSP and age; final payments are not in it at all
    op.create_index("payments_stale", "payments", ["psp", "updated_at"], **_where(UNFINISHED))
    # the settlement report: our payments of one PSP in a period, and lookups by the PSP's reference
    op.create_index("payments_psp_created", "payments", ["psp", "created_at"])
    op.create_index("payments_psp_reference", "payments", ["psp", "psp_reference"])

    op.create_table(
        "payment_events",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("payment_id", Id, sa.ForeignKey("payments.id"), nullable=False),
        sa.Column("from_status", sa.Text(), nullable=True),
        sa.Column("to_status", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("job_id", Id, nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("details", Json, nullable=True),
        sa.Column("at", Timestamp, nullable=False),
        sa.CheckConstraint("source IN ('charge', 'reconcile', 'manual')", name="payment_events_source_valid"),
    )
    op.create_index("payment_events_payment", "payment_events", ["payment_id", "id"])


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
