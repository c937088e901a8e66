"""The bank's fallback entry keys and statement file digests in dotted groups of eight hex digits

``recon.redact.grouped`` writes recon's own hex identifiers as groups of at most eight hex digits joined by dots:
a plain digest holds a Luhn-valid run of 13 or more digits now and then, which redaction (at every output, and at
the storage boundary of most stores) masks as a card number. New imports write ``fb:<8>.<8>.<8>.<8>:<n>`` keys
and dotted file digests; this rewrites the ones stored before, so that a statement imported again (or one that
overlaps an earlier one) finds its entries under the same keys and adds none twice (recon/bank/entry_key.py).
The rewrite only inserts dots: each key stays unique, and no rewritten key can meet an old one.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def _dotted(column: str, start: int, groups: int) -> str:
    """SQL (PostgreSQL and SQLite alike) for ``groups`` groups of eight characters of ``column`` from ``start``
    (1-based), joined by dots."""
    return " || '.' || ".join(f"substr({column}, {start + 8 * i}, 8)" for i in range(groups))


def upgrade() -> None:
    # fb: + 32 hex digits + : + the ordinal; positions 4..35 are the digest, 36 the colon
    op.execute(f"UPDATE bank_entries SET entry_key = 'fb:' || {_dotted('entry_key', 4, 4)} || substr(entry_key, 36) "
               "WHERE entry_key LIKE 'fb:%' AND substr(entry_key, 36, 1) = ':'")
    op.execute(f"UPDATE bank_statements SET file_digest = {_dotted('file_digest', 1, 8)} "
               "WHERE length(file_digest) = 64 AND file_digest NOT LIKE '%.%'")


def downgrade() -> None:
    raise NotImplementedError("recon migrations are forward-only")
