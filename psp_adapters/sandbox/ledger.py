"""The sandbox PSP's books: payments, refunds/disputes and idempotency records in one SQLite file (WAL).

Invariants:
- A charge and its stored idempotent response are written in one transaction, so after any crash a key either
  has its charge and its response, or neither.
- A key is claimed (``in_flight``) before its charge is executed; rows still in flight when the file is opened
  again belong to a request that never finished (nothing was recorded for it) and are dropped.
- ``payments.idempotency_key`` is deliberately not unique: ``charge_counts()`` counts real rows, so it would
  show a double charge rather than hide it behind a constraint.
- The ledger is the only writer. The schema grows additively: a file written by an older sandbox is upgraded
  in place (``CREATE TABLE IF NOT EXISTS``, ``ALTER TABLE … ADD COLUMN``), its payments read as native ones.

One connection, guarded by a lock, serves all server threads; a write is one short transaction. One server
per file at a time: opening the file drops in-flight keys, which would be wrong under a live second server.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from psp_adapters.sandbox.ledger_adjustments import AdjustmentBooks
from psp_adapters.sandbox.records import (
    PAYMENT_COLUMNS,
    Adjustment,
    Claimed,
    ClaimResult,
    Cursor,
    InFlight,
    Mismatch,
    PaymentRecord,
    Replay,
    ts,
)
from psp_adapters.sandbox.wire import PENDING_FAILURE_REASON, PaymentStatus, format_timestamp, parse_timestamp

# the record types are re-exported: older code imports them from here
__all__ = [
    "Adjustment",
    "ClaimResult",
    "Claimed",
    "Cursor",
    "InFlight",
    "Ledger",
    "Mismatch",
    "PaymentRecord",
    "Replay",
]

_SCHEMA = """
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
"""
#: columns added to ``payments`` after the first release: (name, declaration)
_ADDED_COLUMNS = (
    ("flavor", "TEXT NOT NULL DEFAULT 'native'"),
    ("customer_reference", "TEXT"),
    ("metadata", "TEXT"),  # a JSON object of strings, or NULL
    ("fee", "INTEGER"),
)
_AFTER_COLUMNS = (
    "CREATE INDEX IF NOT EXISTS payments_flavor_account ON payments (flavor, merchant_account, seq);"
    "CREATE INDEX IF NOT EXISTS payments_flavor_created ON payments (flavor, created_at, seq);"
)


class Ledger(AdjustmentBooks):
    """SQLite persistence of the sandbox PSP. Thread-safe; every method is one short transaction."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        """Open (or create) the books in the SQLite file ``path``; None: in memory, gone when closed."""
        self._lock = threading.Lock()
        where = ":memory:" if path is None else os.fspath(path)
        self._conn = sqlite3.connect(where, isolation_level=None, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: durable across a process crash, fsync only at checkpoints
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.executescript(_SCHEMA)
        with self._transaction():
            present = {row["name"] for row in self._conn.execute("PRAGMA table_info(payments)")}
            for name, declaration in _ADDED_COLUMNS:
                if name not in present:
                    self._conn.execute(f"ALTER TABLE payments ADD COLUMN {name} {declaration}")
            for statement in _AFTER_COLUMNS.split(";"):
                if statement.strip():
                    self._conn.execute(statement)
            self._conn.execute("DELETE FROM idempotency WHERE state = 'in_flight'")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- idempotency ---------------------------------------------------------------------------------------

    def claim_key(
        self,
        key: str,
        request_hash: str,
        *,
        now: datetime,
        retention: timedelta | None = None,
        compare: bool = True,
    ) -> ClaimResult:
        """Claim ``key`` for a request whose canonical body hashes to ``request_hash``.

        ``retention``: a finished key older than this (by ``now``) is forgotten and claimed afresh; None keeps
        keys for ever. ``compare=False``: a finished key replays whatever the new request's body (Adyen).
        """
        with self._transaction():
            row = self._conn.execute(
                "SELECT request_hash, state, status_code, response, created_at FROM idempotency WHERE key = ?",
                (key,),
            ).fetchone()
            expired = (
                row is not None
                and retention is not None
                and row["state"] == "done"
                and parse_timestamp(row["created_at"]) <= now - retention
            )
            if row is None or expired:
                self._conn.execute(
                    "INSERT OR REPLACE INTO idempotency (key, request_hash, state, created_at) "
                    "VALUES (?, ?, 'in_flight', ?)",
                    (key, request_hash, ts(now)),
                )
                return Claimed()
        if compare and row["request_hash"] != request_hash:
            return Mismatch()
        if row["state"] == "in_flight":
            return InFlight()
        return Replay(status_code=row["status_code"], body=row["response"])

    def complete_charge(self, key: str | None, payment: PaymentRecord, *, status_code: int, response: str) -> None:
        """Record the charge and the answer to replay for the claimed ``key`` (None: no key), atomically."""
        with self._transaction():
            placeholders = ", ".join("?" * len(payment._params()))
            sql = f"INSERT INTO payments ({PAYMENT_COLUMNS}) VALUES ({placeholders})"  # nosec B608  # constant columns
            self._conn.execute(sql, payment._params())
            if key is not None:
                self._finish_key(key, status_code, response)

    def complete_key(self, key: str, *, status_code: int, response: str) -> None:
        """Save the answer of a claimed request that charged nothing (an error once execution began)."""
        with self._transaction():
            self._finish_key(key, status_code, response)

    def _finish_key(self, key: str, status_code: int, response: str) -> None:
        self._conn.execute(
            "UPDATE idempotency SET state = 'done', status_code = ?, response = ? WHERE key = ?",
            (status_code, response, key),
        )

    def release_key(self, key: str) -> None:
        """Forget an in-flight claim whose request recorded nothing (it failed, or the server is stopping)."""
        with self._transaction():
            self._conn.execute("DELETE FROM idempotency WHERE key = ? AND state = 'in_flight'", (key,))

    def charge_counts(self, flavor: str | None = None) -> dict[str, int]:
        """Charges (payment rows) per idempotency key: the proof that no key was charged twice.

        Key "" counts the charges created without a key. ``flavor``: only that flavour's payments.
        """
        where, args = ("WHERE flavor = ?", (flavor,)) if flavor else ("", ())
        with self._lock:
            rows = self._conn.execute(
                f"SELECT idempotency_key, count(*) FROM payments {where} GROUP BY idempotency_key", args  # nosec B608
            ).fetchall()
        return {key: count for key, count in rows}

    # -- payments ------------------------------------------------------------------------------------------

    def settle_due(self, *, now: datetime) -> int:
        """Move pending payments whose time has come to their final status; return how many moved."""
        with self._transaction():
            cur = self._conn.execute(
                "UPDATE payments SET status = settle_to, updated_at = settle_at, settled_at = settle_at, "
                "failure_reason = CASE WHEN settle_to = 'failed' THEN coalesce(failure_reason, ?) END, "
                "settle_to = NULL "
                "WHERE status = 'pending' AND settle_at <= ?",
                (PENDING_FAILURE_REASON, ts(now)),
            )
            return cur.rowcount

    def get_payment(self, psp_reference: str) -> PaymentRecord | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE psp_reference = ?", (psp_reference,)  # nosec B608
            ).fetchone()
        return PaymentRecord._from_row(row) if row else None

    def find_payments(self, merchant_reference: str, *, flavor: str = "native") -> list[PaymentRecord]:
        """Every payment with this merchant reference, oldest first (more than one is a duplicate charge)."""
        return self._payments("merchant_reference = ? AND flavor = ? ORDER BY seq", (merchant_reference, flavor))

    def search_metadata(self, key: str, value: str, *, flavor: str) -> list[PaymentRecord]:
        """The payments whose metadata has ``key`` = ``value``, newest first."""
        return self._payments(
            "flavor = ? AND metadata IS NOT NULL AND EXISTS "
            "(SELECT 1 FROM json_each(payments.metadata) AS m WHERE m.key = ? AND m.value = ?) "
            "ORDER BY seq DESC",
            (flavor, key, value),
        )

    def account_payments(self, merchant_account: str, *, flavor: str, before: datetime) -> list[PaymentRecord]:
        """The payments of a merchant account created before ``before``, oldest first."""
        return self._payments(
            "flavor = ? AND merchant_account = ? AND created_at < ? ORDER BY seq",
            (flavor, merchant_account, ts(before)),
        )

    def has_account(self, merchant_account: str, *, flavor: str) -> bool:
        with self._lock:
            row = self._conn.execute(
                "SELECT 1 FROM payments WHERE flavor = ? AND merchant_account = ? LIMIT 1", (flavor, merchant_account)
            ).fetchone()
        return row is not None

    def succeeded_between(self, lo: datetime, hi: datetime, *, flavor: str) -> list[PaymentRecord]:
        """The succeeded payments with ``lo <= settled_at < hi``."""
        return self._payments(
            "flavor = ? AND status = 'succeeded' AND settled_at >= ? AND settled_at < ? ORDER BY settled_at, seq",
            (flavor, ts(lo), ts(hi)),
        )

    def _payments(self, where: str, args: tuple[object, ...]) -> list[PaymentRecord]:
        with self._lock:
            sql = f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE {where}"  # nosec B608  # where: this module's own
            rows = self._conn.execute(sql, args).fetchall()
        return [PaymentRecord._from_row(row) for row in rows]

    def position(self, psp_reference: str, *, flavor: str) -> Cursor | None:
        """Where a payment sits in creation order (its ``created_at`` and ``seq``): a listing's cursor."""
        with self._lock:
            row = self._conn.execute(
                "SELECT created_at, seq FROM payments WHERE psp_reference = ? AND flavor = ?", (psp_reference, flavor)
            ).fetchone()
        return Cursor(row["created_at"], row["seq"]) if row else None

    def created_page(
        self, since: datetime, until: datetime, *, flavor: str, after: Cursor | None, limit: int, newest_first: bool
    ) -> tuple[list[PaymentRecord], Cursor | None]:
        """Payments with ``since <= created_at < until`` in (created_at, seq) order, newest first or oldest
        first, after the cursor ``after`` (the last row of the previous page). Returns the page and the
        cursor of its last row when more rows follow, else None. Reads the index payments_flavor_created.

        (The cursor's ``settled_at`` field carries a ``created_at`` here: the same shape, another column.)
        """
        order, beyond = ("DESC", "<") if newest_first else ("ASC", ">")
        cursor = (
            f"AND (created_at {beyond} ? OR (created_at = ? AND seq {beyond} ?)) " if after is not None else ""
        )
        args: tuple[object, ...] = (flavor, ts(since), ts(until))
        if after is not None:
            args += (after.settled_at, after.settled_at, after.seq)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT seq, {PAYMENT_COLUMNS} FROM payments "
                f"WHERE flavor = ? AND created_at >= ? AND created_at < ? {cursor}"
                f"ORDER BY created_at {order}, seq {order} LIMIT ?",  # nosec B608  # constant SQL, values bound
                (*args, limit + 1),
            ).fetchall()
        page = rows[:limit]
        more = Cursor(page[-1]["created_at"], page[-1]["seq"]) if len(rows) > limit else None
        return [PaymentRecord._from_row(row) for row in page], more

    def import_payments(self, records: list[PaymentRecord]) -> None:
        """Book payments as if charged without an idempotency record, in one transaction: a bench's or a
        test's bulk set-up (100,000 payments in seconds). The server never calls it."""
        placeholders = ", ".join("?" * len(PAYMENT_COLUMNS.split(",")))
        sql = f"INSERT INTO payments ({PAYMENT_COLUMNS}) VALUES ({placeholders})"  # nosec B608  # constant columns
        with self._transaction():
            self._conn.executemany(sql, [record._params() for record in records])

    def settlements_page(
        self, since: datetime, until: datetime, *, after: Cursor | None, limit: int, flavor: str = "native"
    ) -> tuple[list[PaymentRecord], Cursor | None]:
        """Final payments with ``since <= settled_at < until`` in (settled_at, seq) order, after ``after``.

        Returns the page and the cursor of its last row when more rows follow, else None.
        """
        lo = after or Cursor(format_timestamp(since), 0)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT seq, {PAYMENT_COLUMNS} FROM payments "
                "WHERE settled_at IS NOT NULL AND settled_at >= ? AND settled_at < ? AND flavor = ? "
                "AND (settled_at > ? OR (settled_at = ? AND seq > ?)) "
                "ORDER BY settled_at, seq LIMIT ?",  # nosec B608  # constant SQL, values bound
                (ts(since), ts(until), flavor, lo.settled_at, lo.settled_at, lo.seq, limit + 1),
            ).fetchall()
        page = rows[:limit]
        more = Cursor(page[-1]["settled_at"], page[-1]["seq"]) if len(rows) > limit else None
        return [PaymentRecord._from_row(row) for row in page], more

    def set_status(
        self, psp_reference: str, status: PaymentStatus, *, reason: str | None, now: datetime
    ) -> PaymentRecord | None:
        """Force a status (admin); a final status stamps ``settled_at`` and cancels any scheduled settling."""
        settled_at = ts(now) if status.is_final else None
        with self._transaction():
            self._conn.execute(
                "UPDATE payments SET status = ?, failure_reason = ?, settle_to = NULL, settle_at = NULL, "
                "updated_at = ?, settled_at = ? WHERE psp_reference = ?",
                (status.value, reason, ts(now), settled_at, psp_reference),
            )
        return self.get_payment(psp_reference)

    def set_amount(
        self, psp_reference: str, *, amount: int, currency: str | None, now: datetime
    ) -> PaymentRecord | None:
        """Change the PSP-side amount (and currency) of a payment, to construct a mismatch (admin)."""
        with self._transaction():
            self._conn.execute(
                "UPDATE payments SET amount = ?, currency = coalesce(?, currency), updated_at = ? "
                "WHERE psp_reference = ?",
                (amount, currency, ts(now), psp_reference),
            )
        return self.get_payment(psp_reference)

    def reset(self) -> None:
        """Forget every payment, refund, dispute and idempotency record."""
        with self._transaction():
            self._conn.execute("DELETE FROM adjustments")
            self._conn.execute("DELETE FROM payments")
            self._conn.execute("DELETE FROM idempotency")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
