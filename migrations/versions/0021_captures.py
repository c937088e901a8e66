"""captures and cancels: authorise now, capture later (issue 25, item 3)

- ``payments.capture_mode``: ``automatic`` (the PSP captures with the charge) or ``manual`` (the charge only
  authorises; ``recon capture`` takes the money, ``recon cancel`` releases it). ``payments.status`` gains
  ``authorised``: a manual payment the PSP authorised and holds for capture; nothing captured yet.
- ``payments.authorised_at``: when it became authorised (its expiry counts from it: ``[psp.NAME]
  authorisation_validity``). ``payments.authorisation_claimed``: the sum of the payment's captures and cancels
  that have not failed (a cancel claims the whole amount), kept by one conditional UPDATE in the modification's
  own transaction (recon.db.modification_store); the check ``payments_claims_within_authorisation`` is its
  backstop: never more captured than authorised, and a capture and a cancel racing have one winner.
- ``modifications``: one row per capture or cancel, unique on our ``modification_reference`` and on its
  ``idempotency_key``; the PSP's ``psp_modification_id`` stored once known, never replaced; statuses as a
  refund's. ``modification_events``: their audit trail with the PSP's evidence.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Json = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
PAYMENT_STATUSES = ("status IN ('created', 'processing', 'pending', 'authorised', 'succeeded', 'failed', "
                    "'needs_review')")
STATUSES = "status IN ('created', 'processing', 'pending', 'succeeded', 'failed', 'needs_review')"
UNFINISHED = "status IN ('created', 'processing', 'pending')"


def upgrade() -> None:
    with op.batch_alter_table("payments") as batch:
        batch.add_column(sa.Column("capture_mode", sa.Text(), nullable=False, server_default="automatic"))
        batch.add_column(sa.Column("authorised_at", Timestamp, nullable=True))
        batch.add_column(sa.Column("authorisation_claimed", sa.BigInteger(), nullable=False, server_default="0"))
        batch.drop_constraint("payments_status_valid", type_="check")
    with op.batch_alter_table("payments") as batch:
        batch.create_check_constraint("payments_status_valid", PAYMENT_STATUSES)
        batch.create_check_constraint("payments_capture_mode_valid", "capture_mode IN ('automatic', 'manual')")
        batch.create_check_constraint("payments_claims_within_authorisation",
                                      "authorisation_claimed >= 0 AND authorisation_claimed <= amount")
    op.create_index("payments_authorised", "payments", ["psp", "authorised_at", "id"],
                    postgresql_where=sa.text("status = 'authorised'"), sqlite_where=sa.text("status = 'authorised'"))
    op.create_table(
        "modifications",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("payment_id", Id, sa.ForeignKey("payments.id", name="modifications_payment_fkey"), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("modification_reference", sa.Text(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("psp", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("psp_modification_id", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.Text(), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("review_reason", sa.Text(), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.Column("sent_at", Timestamp, nullable=True),
        sa.CheckConstraint("amount > 0", name="modifications_amount_positive"),
        sa.CheckConstraint("kind IN ('capture', 'cancel')", name="modifications_kind_valid"),
        sa.CheckConstraint(STATUSES, name="modifications_status_valid"),
        sa.UniqueConstraint("modification_reference", name="modifications_reference_key"),
        sa.UniqueConstraint("idempotency_key", name="modifications_idempotency_key_key"),
        sqlite_autoincrement=True,
    )
    op.create_index("modifications_payment", "modifications", ["payment_id", "id"])
    op.create_index("modifications_psp_id", "modifications", ["psp", "psp_modification_id"])
    op.create_index("modifications_stale", "modifications", ["psp", "updated_at"],
                    postgresql_where=sa.text(UNFINISHED), sqlite_where=sa.text(UNFINISHED))
    op.create_table(
        "modification_events",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("modification_id", Id, sa.ForeignKey("modifications.id", name="modification_events_fkey"),
                  nullable=False),
        sa.Column("from_status", sa.Text(), nullable=True),
        sa.Column("to_status", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("job_id", Id, nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("details", Json, nullable=True),
        sa.Column("at", Timestamp, nullable=False),
        sa.CheckConstraint("source IN ('modification', 'reconcile', 'manual', 'webhook')",
                           name="modification_events_source_valid"),
        sqlite_autoincrement=True,
    )
    op.create_index("modification_events_modification", "modification_events", ["modification_id", "id"])


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
