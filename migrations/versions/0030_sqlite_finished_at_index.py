"""SQLite: ``jobs_finished_at`` keyed on finished_at alone

SQLite keeps an index whose WHERE names a column the statement changes up to date row by row: with the predicate
``state IN ('succeeded', 'dead', 'canceled')`` every claim (state -> leased) and every finish evaluated it for
each job, old row and new, though a claim never finishes anything. ``finished_at IS NOT NULL`` holds exactly for
the same rows (every statement that finishes a job sets finished_at, every one that makes it unfinished again
clears it) and names only the column the finish sets: the claim no longer touches the index. Pruning's
``finished_at < :cutoff`` implies the predicate, so SQLite still walks this index (docs/benchmarks.md, "SQLite
drain, CPU per job (fourth pass)": the claim and finish statements ~2 us a job cheaper). PostgreSQL's index is
unchanged (HOT updates and its own bookkeeping make no such difference there).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.drop_index("jobs_finished_at", table_name="jobs")
    op.create_index("jobs_finished_at", "jobs", ["finished_at"], sqlite_where=sa.text("finished_at IS NOT NULL"))


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
