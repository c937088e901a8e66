"""console_sessions: the console's logins, kept by the server so that logout and timeouts end them

A login opens one row; the browser's ``recon_session`` cookie carries the session id (256 random bits), and
the row keeps only its SHA-256 (``sid_hash``, the 32 bytes), so reading the table gives no working cookie. A request
is served only while the row is neither revoked (logout, a new login from the same browser) nor past its idle
or absolute deadline (recon.console.session). ``principal`` says who logged in: today the holder of the
console's access token (``access-token/`` and a fingerprint of the token, so a session opened with a token the
console no longer has is refused); ``operator_id`` is for named operators (issue 27), NULL until they exist.
Ended rows are deleted at the next login.

Revision ID: 0013
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0011"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("sid_hash", sa.LargeBinary(), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("operator_id", Id, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("last_seen_at", Timestamp, nullable=False),
        sa.Column("expires_at", Timestamp, nullable=False),
        sa.Column("revoked_at", Timestamp, nullable=True),
        sa.CheckConstraint("expires_at > created_at AND last_seen_at >= created_at",
                           name="console_sessions_times_valid"),
        sa.UniqueConstraint("sid_hash", name="console_sessions_sid_hash_key"),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
