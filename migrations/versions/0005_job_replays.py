"""job_replays: the dead-letter replays in a job's history

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

``recon jobs replay`` moves dead jobs back to ``runnable``. It must not reset ``attempts``: that column is
the monotonic fencing token, and ``job_attempts`` is keyed by (job_id, attempt), one row per claim.
A replay is not a claim, so it gets a table of its own rather than a row in ``job_attempts``:

- a ``job_attempts`` row would need an attempt number, and every number is taken (the last claim's) or
  belongs to the next claim, which inserts it; widening the outcome CHECK with ``replayed`` would also
  make every reader of attempt rows (stats' outcome counts, "one row per claim" in tests) learn that some
  rows are not claims;
- a nullable ``replayed_at`` column on the last attempt row would rewrite history rows (they are
  otherwise written once) and could record only one replay per attempt with no before/after budget.

``job_replays`` is keyed by (job_id, attempt), ``attempt`` being the job's attempts when it was replayed:
the replay sorts between that attempt and the next claim in ``recon jobs show``. A job can only be
replayed while dead and dies again only through a new claim, so there is at most one replay per attempt;
the key makes a double replay of one death fail loudly. Each row keeps the budget before and after
(``max_attempts`` is raised to attempts + N, never reset), the error kind that killed the job, and who
replayed it.

Unlike ``job_attempts`` (no foreign key: its check cost a third of a grouped finish), ``job_replays``
references ``jobs`` with ON DELETE CASCADE: replays are rare operator actions, so the check costs nothing
on insert, and pruning (or any delete of a job) can never leave orphan replays behind. The cascade's
per-row lookup costs pruning about a tenth on PostgreSQL (measured: 150,000 jobs, 2.0 s -> 2.2 s).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "job_replays",
        sa.Column("job_id", Id, sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("attempt", sa.Integer(), primary_key=True),
        sa.Column("replayed_at", Timestamp, nullable=False),
        sa.Column("max_attempts_before", sa.Integer(), nullable=False),
        sa.Column("max_attempts_after", sa.Integer(), nullable=False),
        sa.Column("error_kind", sa.Text(), nullable=True),
        sa.Column("replayed_by", sa.Text(), nullable=True),
    )


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
