"""The payments list's totals from indexes alone (issue 27, the desk at 100,000 items)

- ``payments_list_facets`` (created_at, currency, amount; on PostgreSQL INCLUDE status, psp): every column the
  console's payments list filters on but the reference, so the totals of a status, PSP, currency, age or amount
  filter are an Index Only Scan of a fifth of the table's pages (an age range reads only its slice) instead of a
  scan of the payments table.
- ``payments_at_risk`` (0008) on PostgreSQL also INCLUDEs psp and merchant_reference: the unfinished payments'
  totals under any other filter (a reference prefix, a PSP) read it alone. Money at risk reads it as before.

docs/benchmarks.md, "The queue at 100,000 items, cold", has the plans and their buffer counts.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

UNFINISHED_PAYMENT = "status IN ('created', 'processing', 'pending')"


def upgrade() -> None:
    op.create_index("payments_list_facets", "payments", ["created_at", "currency", "amount"],
                    postgresql_include=["status", "psp"])
    op.drop_index("payments_at_risk", table_name="payments")
    op.create_index("payments_at_risk", "payments", ["currency", "created_at", "amount"],
                    postgresql_include=["psp", "merchant_reference"],
                    postgresql_where=sa.text(UNFINISHED_PAYMENT), sqlite_where=sa.text(UNFINISHED_PAYMENT))


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
