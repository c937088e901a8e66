"""PostgreSQL: the jobs' state and attempt counts checked by domains instead of table CHECK constraints

A table's CHECK constraint costs every statement that writes the table: PostgreSQL parses each constraint's stored
expression and plans it again at the start of each execution (``ExecRelCheck``), ~2.5 µs for a simple one and ~5 µs
for the state list, before it checks a single row. A domain's constraint is kept prepared in the type cache and
compiled into the statement's plan: checking it costs ~0.5 µs. On a producer's single enqueue the three CHECKs of
``jobs`` were ~17 µs of the backend's CPU a call (docs/benchmarks.md, "Single enqueue, fifth pass"); a claim or a
finish pays the same once per statement.

So ``jobs.state`` becomes ``recon_job_state`` (text, one of the job states), ``jobs.attempts`` ``recon_attempts``
(integer >= 0) and ``jobs.max_attempts`` ``recon_max_attempts`` (integer >= 1): the same rules as
``jobs_state_valid`` and ``jobs_attempts_valid``, which are dropped. ``jobs_lease_complete`` spans three columns
and stays a CHECK. Values read back are plain text and integers (PostgreSQL describes a domain column by its base
type). SQLite has no domains and keeps its CHECK constraints (its checks are compiled into the statement).

The column type change rewrites ``jobs`` and its indexes under an exclusive lock: ~2 s per million rows on the
benchmark machine. Prune finished jobs (``recon jobs prune``) before upgrading a large table.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

JOB_STATES = ("pending", "runnable", "leased", "succeeded", "retryable", "dead", "canceled")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    states = ", ".join(f"'{s}'" for s in JOB_STATES)
    op.execute(f"CREATE DOMAIN recon_job_state AS text CONSTRAINT recon_job_state_valid CHECK (VALUE IN ({states}))")
    op.execute("CREATE DOMAIN recon_attempts AS integer CONSTRAINT recon_attempts_valid CHECK (VALUE >= 0)")
    op.execute("CREATE DOMAIN recon_max_attempts AS integer CONSTRAINT recon_max_attempts_valid CHECK (VALUE >= 1)")
    op.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_state_valid, DROP CONSTRAINT jobs_attempts_valid, "
               "ALTER COLUMN state TYPE recon_job_state, ALTER COLUMN attempts TYPE recon_attempts, "
               "ALTER COLUMN max_attempts TYPE recon_max_attempts")


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
