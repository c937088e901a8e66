"""webhook_events keeps each event's stored body out of line (PostgreSQL)

Applying an event rewrites its row (its state, payment and applied_at), and PostgreSQL's update copies the
whole row: with the body (about 2 KB of JSON for a Stripe event) compressed inline, that was about 1.5 KB of
heap and WAL per event applied, and the table doubled. ``toast_tuple_target = 128`` moves the body to the
TOAST table when the event is stored; the update then copies a pointer to it. bench/webhooks.py: the closed
loop's PostgreSQL CPU fell 8 % (docs/benchmarks.md). SQLite has no such setting; nothing changes there.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE webhook_events SET (toast_tuple_target = 128)")


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
