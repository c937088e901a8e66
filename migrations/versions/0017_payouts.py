"""payouts, payout_lines, payout_events, payout_matches, payout_exceptions: the PSPs' payouts and the close

- ``payouts``: one row per PSP payout, unique on (psp, payout_ref). ``amount`` signed minor units of
  ``currency``; ``digest`` the SHA-256 of what the PSP said (amount, currency, status, arrival, trace and lines),
  ``version`` counts the changes seen (each one a ``payout_events`` row); ``lines_net`` the sum of its lines'
  nets but its own, stored so that the close reads the invariant without the lines.
- ``payout_lines``: what a payout carries, unique on (payout_id, line_ref); ``payment_id`` our payment when
  found, else ``missing_locally`` for a line about a payment we do not know.
- ``payout_events``: a payout's history (fetched, changed, matched, reopened): evidence is never overwritten
  without a trace.
- ``payout_matches``: which bank credits explain which payouts (1:1, N:1, 1:N), with the rule.
- ``payout_exceptions``: what the close could not explain, for the review desk; one open row per ``exception_key``.
- ``bank_entries.payout_id`` gets its foreign key (on SQLite by a table copy; its partial index is rebuilt).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Day = sa.Date().with_variant(sa.Text(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UNMATCHED_CREDIT = "payout_id IS NULL AND direction = 'credit'"


def upgrade() -> None:
    op.create_table(
        "payouts",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("psp", sa.Text(), nullable=False),
        sa.Column("merchant_account", sa.Text(), nullable=False),
        sa.Column("payout_ref", sa.Text(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("arrival_date", Day, nullable=False),
        sa.Column("trace_ref", sa.Text(), nullable=True),
        sa.Column("statement_descriptor", sa.Text(), nullable=True),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("line_count", sa.Integer(), nullable=False),
        sa.Column("lines_net", sa.BigInteger(), nullable=False),
        sa.Column("fetched_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.CheckConstraint("status IN ('pending', 'in_transit', 'paid', 'failed', 'canceled')",
                           name="payouts_status_valid"),
        sa.CheckConstraint("length(currency) = 3 AND upper(currency) = currency", name="payouts_currency_iso"),
        sa.UniqueConstraint("psp", "payout_ref", name="payouts_psp_ref_key"),
        sa.Index("payouts_arrival", "psp", "arrival_date"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "payout_lines",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("payout_id", Id, sa.ForeignKey("payouts.id", name="payout_lines_payout_fkey"), nullable=False),
        sa.Column("line_ref", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("psp_reference", sa.Text(), nullable=True),
        sa.Column("merchant_reference", sa.Text(), nullable=True),
        sa.Column("gross", sa.BigInteger(), nullable=False),
        sa.Column("fee", sa.BigInteger(), nullable=False),
        sa.Column("net", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("payment_id", Id, sa.ForeignKey("payments.id", name="payout_lines_payment_fkey"), nullable=True),
        sa.Column("missing_locally", sa.Boolean(), nullable=False),
        sa.CheckConstraint("kind IN ('charge', 'refund', 'dispute', 'dispute_reversal', 'fee', 'adjustment', "
                           "'payout', 'other')", name="payout_lines_kind_valid"),
        sa.UniqueConstraint("payout_id", "line_ref", name="payout_lines_ref_key"),
        sa.Index("payout_lines_payment", "payment_id"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "payout_events",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("payout_id", Id, sa.ForeignKey("payouts.id", name="payout_events_payout_fkey"), nullable=False),
        sa.Column("at", Timestamp, nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Index("payout_events_payout", "payout_id", "id"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "payout_matches",
        sa.Column("payout_id", Id, sa.ForeignKey("payouts.id", name="payout_matches_payout_fkey"), nullable=False),
        sa.Column("bank_entry_id", Id, sa.ForeignKey("bank_entries.id", name="payout_matches_entry_fkey"),
                  nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("bank_fee", sa.BigInteger(), nullable=False),
        sa.Column("matched_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("payout_id", "bank_entry_id", name="payout_matches_pkey"),
        sa.Index("payout_matches_entry", "bank_entry_id"),
    )
    op.create_table(
        "payout_exceptions",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("exception_key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("payout_id", Id, sa.ForeignKey("payouts.id", name="payout_exceptions_payout_fkey"), nullable=True),
        sa.Column("bank_entry_id", Id, sa.ForeignKey("bank_entries.id", name="payout_exceptions_entry_fkey"),
                  nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("resolved_by", sa.Text(), nullable=True),
        sa.Column("resolution", sa.Text(), nullable=True),
        sa.Column("resolved_at", Timestamp, nullable=True),
        sa.CheckConstraint("kind IN ('bank_missing', 'amount_differs', 'ambiguous', 'unexplained_credit', "
                           "'lines_differ', 'payout_failed')", name="payout_exceptions_kind_valid"),
        sa.CheckConstraint("state IN ('open', 'resolved', 'cleared')", name="payout_exceptions_state_valid"),
        sa.Index("payout_exceptions_open_key", "exception_key", unique=True, postgresql_where=sa.text("state = 'open'"),
                 sqlite_where=sa.text("state = 'open'")),
        sa.Index("payout_exceptions_payout", "payout_id"),
        sa.Index("payout_exceptions_entry", "bank_entry_id"),
        sqlite_autoincrement=True,
    )
    # SQLite cannot add a foreign key to a table: the batch copies bank_entries; its partial index is dropped
    # first and made again after, so that its WHERE survives the copy
    op.drop_index("bank_entries_unmatched", table_name="bank_entries")
    with op.batch_alter_table("bank_entries") as batch:
        batch.create_foreign_key("bank_entries_payout_fkey", "payouts", ["payout_id"], ["id"])
    op.create_index("bank_entries_unmatched", "bank_entries", ["currency", "booking_date"],
                    postgresql_where=sa.text(UNMATCHED_CREDIT), sqlite_where=sa.text(UNMATCHED_CREDIT))


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
