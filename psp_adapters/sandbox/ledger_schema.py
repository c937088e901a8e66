"""The sandbox's SQLite schema, and how a file written by an older sandbox is brought up to it.

The schema grows additively: ``CREATE TABLE IF NOT EXISTS`` for new tables, ``ALTER TABLE … ADD COLUMN`` for new
columns (``ADDED_COLUMNS``), then the indexes that need them. A file of an older sandbox keeps its rows: its
payments read as native, automatically captured ones, its refunds as succeeded and its disputes as open.
"""

from __future__ import annotations

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    psp_reference TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL,
    merchant_reference TEXT NOT NULL,
    merchant_account TEXT,
    payment_method TEXT,
    description TEXT,
    amount INTEGER NOT NULL,
    currency TEXT NOT NULL,
    status TEXT NOT NULL,
    failure_reason TEXT,
    settle_to TEXT,
    settle_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    settled_at TEXT
);
CREATE INDEX IF NOT EXISTS payments_merchant_reference ON payments (merchant_reference);
CREATE INDEX IF NOT EXISTS payments_idempotency_key ON payments (idempotency_key);
CREATE INDEX IF NOT EXISTS payments_settled ON payments (settled_at, seq) WHERE settled_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS payments_due ON payments (settle_at) WHERE status = 'pending';
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY,
    request_hash TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
    status_code INTEGER,
    response TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS adjustments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('refund', 'dispute')),
    psp_reference TEXT NOT NULL REFERENCES payments (psp_reference),
    amount INTEGER NOT NULL,
    currency TEXT NOT NULL,
    fee INTEGER NOT NULL,
    reason TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS adjustments_payment ON adjustments (psp_reference);
CREATE INDEX IF NOT EXISTS adjustments_created ON adjustments (created_at, seq);
CREATE TABLE IF NOT EXISTS modifications (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('capture', 'cancel', 'refund', 'reversal')),
    psp_reference TEXT NOT NULL,
    merchant_account TEXT NOT NULL,
    amount INTEGER,
    currency TEXT,
    reference TEXT,
    reason TEXT,
    created_at TEXT NOT NULL,
    due_at TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('received', 'processed', 'refused')),
    outcome TEXT
);
CREATE INDEX IF NOT EXISTS modifications_due ON modifications (due_at, seq) WHERE status = 'received';
CREATE INDEX IF NOT EXISTS modifications_payment ON modifications (psp_reference);
CREATE TABLE IF NOT EXISTS documents (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    parent TEXT,
    created_at TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_type ON documents (type, created_at, seq);
CREATE INDEX IF NOT EXISTS documents_parent ON documents (parent, type, seq) WHERE parent IS NOT NULL;
"""
#: columns added after the first release: table -> ((name, declaration), ...)
ADDED_COLUMNS = {
    "payments": (
        ("flavor", "TEXT NOT NULL DEFAULT 'native'"),
        ("customer_reference", "TEXT"),
        ("metadata", "TEXT"),  # a JSON object of strings, or NULL
        ("fee", "INTEGER"),
        ("capture_method", "TEXT"),
        ("amount_captured", "INTEGER"),
        ("authorized_at", "TEXT"),
        ("charged_at", "TEXT"),
    ),
    "adjustments": (
        ("status", "TEXT"),
        ("failure_reason", "TEXT"),
        ("settle_to", "TEXT"),
        ("settle_at", "TEXT"),
        ("updated_at", "TEXT"),
        ("metadata", "TEXT"),
        ("reference", "TEXT"),
    ),
}
AFTER_COLUMNS = (
    "CREATE INDEX IF NOT EXISTS payments_flavor_account ON payments (flavor, merchant_account, seq)",
    "CREATE INDEX IF NOT EXISTS payments_flavor_created ON payments (flavor, created_at, seq)",
    "CREATE INDEX IF NOT EXISTS payments_authorized ON payments (authorized_at) WHERE status = 'authorized'",
    "CREATE INDEX IF NOT EXISTS adjustments_due ON adjustments (settle_at) WHERE settle_at IS NOT NULL",
)


def upgrade(conn: sqlite3.Connection) -> None:
    """Bring the file's schema up to this sandbox's (inside the caller's transaction, after ``SCHEMA``)."""
    for table, columns in ADDED_COLUMNS.items():
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, declaration in columns:
            if name not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")
    for statement in AFTER_COLUMNS:
        conn.execute(statement)
