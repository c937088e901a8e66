"""The review queue as a workflow: an assignee per payment in review, and comments

- ``payments.review_assignee``: who works on the payment while it is in review (NULL: nobody); kept when it
  leaves review, so the audit trail's resolution and the last assignee can be read side by side. The partial
  index ``payments_review_assignee`` serves the queue filtered by assignee; ``payments_review_totals``
  (currency, amount) lets the unfiltered queue's totals per currency read the index alone.
- ``review_comments``: one row per comment an operator writes on a payment, and per assignment
  (``kind`` = 'assigned', ``body`` = the new assignee or "unassigned"), append-only, read per payment.

Severity and due-by are not stored: they follow from the amount, the time in review and ``[review]``
(recon.review_config), so a changed rule applies to every item at once.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("payments", sa.Column("review_assignee", sa.Text(), nullable=True))
    op.create_index("payments_review_assignee", "payments", ["review_assignee", "review_since", "id"],
                    postgresql_where=sa.text("status = 'needs_review'"),
                    sqlite_where=sa.text("status = 'needs_review'"))
    op.create_index("payments_review_totals", "payments", ["currency", "amount"],
                    postgresql_where=sa.text("status = 'needs_review'"),
                    sqlite_where=sa.text("status = 'needs_review'"))
    op.create_table(
        "review_comments",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("payment_id", Id, sa.ForeignKey("payments.id", name="review_comments_payment_fkey"),
                  nullable=False),
        sa.Column("at", Timestamp, nullable=False),
        sa.Column("author", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.CheckConstraint("kind IN ('comment', 'assigned')", name="review_comments_kind_valid"),
        sqlite_autoincrement=True,
    )
    op.create_index("review_comments_payment", "review_comments", ["payment_id", "id"])


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
