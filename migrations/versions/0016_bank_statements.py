"""bank_statements and bank_entries: the bank's statements, imported by ``recon bank import``

- ``bank_statements``: one row per statement imported, unique on (account, statement_ref, sequence,
  period_start, period_end): a statement imported again is recognised, never stored twice. Balances are
  signed minor units of ``currency``; ``file_digest`` is the SHA-256 of the file it first came from.
- ``bank_entries``: one row per booking, unique on (account, entry_key): the bank's reference, or the
  fallback key (docs/operations.md, recon/bank/entry_key.py), so that a re-imported or overlapping statement
  adds nothing. ``amount`` is minor units, never negative; ``direction`` credit or debit. ``payout_id`` is the
  payout matching's link (NULL until a payout is matched to it); the partial index serves the unmatched
  credits that matching looks through.

Revision ID: 0016
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0013"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Day = sa.Date().with_variant(sa.Text(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "bank_statements",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("account", sa.Text(), nullable=False),
        sa.Column("statement_ref", sa.Text(), nullable=False),
        sa.Column("sequence", sa.Text(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("opening_balance", sa.BigInteger(), nullable=False),
        sa.Column("closing_balance", sa.BigInteger(), nullable=False),
        sa.Column("period_start", Day, nullable=False),
        sa.Column("period_end", Day, nullable=False),
        sa.Column("entry_count", sa.Integer(), nullable=False),
        sa.Column("format", sa.Text(), nullable=False),
        sa.Column("file_name", sa.Text(), nullable=False),
        sa.Column("file_digest", sa.Text(), nullable=False),
        sa.Column("imported_at", Timestamp, nullable=False),
        sa.UniqueConstraint("account", "statement_ref", "sequence", "period_start", "period_end",
                            name="bank_statements_identity_key"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "bank_entries",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("account", sa.Text(), nullable=False),
        sa.Column("entry_key", sa.Text(), nullable=False),
        sa.Column("statement_id", Id, sa.ForeignKey("bank_statements.id", name="bank_entries_statement_fkey"),
                  nullable=False),
        sa.Column("booking_date", Day, nullable=False),
        sa.Column("value_date", Day, nullable=True),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("direction", sa.Text(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("bank_reference", sa.Text(), nullable=True),
        sa.Column("end_to_end_id", sa.Text(), nullable=True),
        sa.Column("counterparty", sa.Text(), nullable=True),
        sa.Column("remittance", sa.Text(), nullable=True),
        sa.Column("bank_code", sa.Text(), nullable=True),
        sa.Column("payout_id", Id, nullable=True),
        sa.Column("imported_at", Timestamp, nullable=False),
        sa.CheckConstraint("amount >= 0", name="bank_entries_amount_not_negative"),
        sa.CheckConstraint("direction IN ('credit', 'debit')", name="bank_entries_direction_valid"),
        sa.UniqueConstraint("account", "entry_key", name="bank_entries_account_key"),
        sqlite_autoincrement=True,
    )
    op.create_index("bank_entries_booking", "bank_entries", ["account", "booking_date"])
    op.create_index("bank_entries_bank_reference", "bank_entries", ["bank_reference"])
    op.create_index("bank_entries_end_to_end", "bank_entries", ["end_to_end_id"])
    op.create_index("bank_entries_statement", "bank_entries", ["statement_id"])
    op.create_index("bank_entries_unmatched", "bank_entries", ["currency", "booking_date"],
                    postgresql_where=sa.text("payout_id IS NULL AND direction = 'credit'"),
                    sqlite_where=sa.text("payout_id IS NULL AND direction = 'credit'"))


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
