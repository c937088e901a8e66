"""refunds: money given back, each refund a job of its own, never more than the payment captured

- ``payments.captured_amount``: what the PSP captured (the whole amount once the payment succeeded; existing
  succeeded payments get theirs here). ``payments.refunded_amount``: the sum of the payment's refunds that have
  not failed. The check ``payments_refunds_within_capture`` is the backstop of the bound the refund store
  keeps with one conditional UPDATE in the refund's own transaction (recon.db.refund_store).
- ``refunds``: one row per refund, unique on our ``refund_reference`` and on its ``idempotency_key``; the
  PSP's ``psp_refund_id`` is stored once known and never replaced; statuses as a payment's.
- ``refund_events``: the audit trail of every refund change, with the PSP's evidence.
- ``webhook_events.movement_reference``: the PSP's id of the movement an event is about when it is not the payment
  itself (a refund's or a dispute's id), stored exactly, as the PSP's references are; ``due_by`` and ``fee``: a
  dispute's evidence deadline and the PSP's dispute fee, when the event says.
- ``disputes``: a payment's chargebacks, unique on (psp, psp_dispute_id), status opened, won, lost or reversed,
  the amount withdrawn, the fee, the evidence deadline; ``dispute_events``: their audit trail.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Json = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
STATUSES = "status IN ('created', 'processing', 'pending', 'succeeded', 'failed', 'needs_review')"
UNFINISHED = "status IN ('created', 'processing', 'pending')"


def upgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("captured_amount", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("refunded_amount", sa.BigInteger(), nullable=False, server_default="0"))
    op.execute("UPDATE payments SET captured_amount = amount WHERE status = 'succeeded'")
    with op.batch_alter_table("payments") as batch:
        batch.create_check_constraint(
            "payments_refunds_within_capture",
            "refunded_amount >= 0 AND refunded_amount <= captured_amount AND captured_amount <= amount")
    op.create_table(
        "refunds",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("payment_id", Id, sa.ForeignKey("payments.id", name="refunds_payment_fkey"), nullable=False),
        sa.Column("refund_reference", sa.Text(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("psp", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("psp_refund_id", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.Text(), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("review_reason", sa.Text(), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.Column("sent_at", Timestamp, nullable=True),
        sa.CheckConstraint("amount > 0", name="refunds_amount_positive"),
        sa.CheckConstraint(STATUSES, name="refunds_status_valid"),
        sa.UniqueConstraint("refund_reference", name="refunds_refund_reference_key"),
        sa.UniqueConstraint("idempotency_key", name="refunds_idempotency_key_key"),
        sqlite_autoincrement=True,
    )
    op.create_index("refunds_payment", "refunds", ["payment_id", "id"])
    op.create_index("refunds_psp_refund_id", "refunds", ["psp", "psp_refund_id"])
    op.create_index("refunds_stale", "refunds", ["psp", "updated_at"], postgresql_where=sa.text(UNFINISHED),
                    sqlite_where=sa.text(UNFINISHED))
    op.create_table(
        "refund_events",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("refund_id", Id, sa.ForeignKey("refunds.id", name="refund_events_refund_fkey"), nullable=False),
        sa.Column("from_status", sa.Text(), nullable=True),
        sa.Column("to_status", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("job_id", Id, nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("details", Json, nullable=True),
        sa.Column("at", Timestamp, nullable=False),
        sa.CheckConstraint("source IN ('refund', 'reconcile', 'manual', 'webhook')", name="refund_events_source_valid"),
        sqlite_autoincrement=True,
    )
    op.create_index("refund_events_refund", "refund_events", ["refund_id", "id"])
    with op.batch_alter_table("webhook_events") as batch:
        batch.add_column(sa.Column("movement_reference", sa.Text(), nullable=True))
        batch.add_column(sa.Column("due_by", Timestamp, nullable=True))
        batch.add_column(sa.Column("fee", sa.BigInteger(), nullable=True))
    op.create_table(
        "disputes",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("payment_id", Id, sa.ForeignKey("payments.id", name="disputes_payment_fkey"), nullable=False),
        sa.Column("psp", sa.Text(), nullable=False),
        sa.Column("psp_dispute_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.Text(), nullable=True),
        sa.Column("fee", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("psp_status", sa.Text(), nullable=True),
        sa.Column("evidence_due_by", Timestamp, nullable=True),
        sa.Column("opened_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.CheckConstraint("status IN ('opened', 'won', 'lost', 'reversed')", name="disputes_status_valid"),
        sa.UniqueConstraint("psp", "psp_dispute_id", name="disputes_psp_dispute_key"),
        sqlite_autoincrement=True,
    )
    op.create_index("disputes_payment", "disputes", ["payment_id", "id"])
    op.create_index("disputes_open_due", "disputes", ["evidence_due_by"],
                    postgresql_where=sa.text("status = 'opened'"), sqlite_where=sa.text("status = 'opened'"))
    op.create_table(
        "dispute_events",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("dispute_id", Id, sa.ForeignKey("disputes.id", name="dispute_events_dispute_fkey"),
                  nullable=False),
        sa.Column("from_status", sa.Text(), nullable=True),
        sa.Column("to_status", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("job_id", Id, nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("details", Json, nullable=True),
        sa.Column("at", Timestamp, nullable=False),
        sa.CheckConstraint("source IN ('webhook', 'manual')", name="dispute_events_source_valid"),
        sqlite_autoincrement=True,
    )
    op.create_index("dispute_events_dispute", "dispute_events", ["dispute_id", "id"])


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
