"""operators, audit_log, audit_seals, approvals: named operators with roles, the tamper-evident audit trail,
and the four-eyes requests (issue 27)

- ``operators``: one row per person (or the console's automation token): a unique name, a role (viewer,
  operator, approver, admin), an argon2id password hash (NULL for the token operator, which has no password),
  an optional TOTP secret, and the lockout's failed count and ``locked_until``. Never deleted: a disabled
  operator keeps their row, so the audit rows naming them keep meaning something.
- ``audit_log``: one row per write by a person or the system (who, what, subject, outcome, evidence), inserted
  and never updated or deleted by recon (on PostgreSQL, docs/operations.md grants recon's role INSERT and SELECT
  only). Rows are inserted unchained; the sealer chains them.
- ``audit_seals``: the hash chain, INSERT-only too. One row per sealed audit row or payment event (``stream``
  'audit' or 'payment_events', ``row_id``), in id order per stream: ``row_hash`` is SHA-256 of the row's canonical
  encoding, ``chain_hash`` SHA-256 over the previous seal's ``chain_hash`` and ``row_hash``. A ``gap`` seal records
  an id that never committed (a rolled-back sequence value), so a row later inserted under it is caught.
- ``approvals``: the four-eyes requests: what is asked (``action``, ``payload``), by whom, until when, and who
  approved, rejected or let it expire. An approval is one compare-and-set on ``state = 'pending'``.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "operators",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=True),
        sa.Column("totp_secret", sa.Text(), nullable=True),
        sa.Column("disabled_at", Timestamp, nullable=True),
        sa.Column("failed_logins", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("locked_until", Timestamp, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.CheckConstraint("role IN ('viewer', 'operator', 'approver', 'admin')", name="operators_role_valid"),
        sa.UniqueConstraint("name", name="operators_name_key"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "audit_log",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("at", Timestamp, nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("evidence", Json, nullable=True),
        sa.Index("audit_log_at", "at"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "audit_seals",
        sa.Column("stream", sa.Text(), primary_key=True),
        sa.Column("row_id", Id, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("row_hash", sa.Text(), nullable=False),
        sa.Column("chain_hash", sa.Text(), nullable=False),
        sa.Column("sealed_at", Timestamp, nullable=False),
        sa.CheckConstraint("stream IN ('audit', 'payment_events')", name="audit_seals_stream_valid"),
        sa.CheckConstraint("kind IN ('row', 'gap')", name="audit_seals_kind_valid"),
    )
    op.create_table(
        "approvals",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("payload", Json, nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.Text(), nullable=False),
        sa.Column("requested_at", Timestamp, nullable=False),
        sa.Column("expires_at", Timestamp, nullable=False),
        sa.Column("decided_by", sa.Text(), nullable=True),
        sa.Column("decided_at", Timestamp, nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.CheckConstraint("state IN ('pending', 'approved', 'rejected', 'expired', 'failed')",
                           name="approvals_state_valid"),
        sa.CheckConstraint("decided_by IS NULL OR decided_by <> requested_by", name="approvals_four_eyes"),
        sa.Index("approvals_pending", "state", "id"),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
