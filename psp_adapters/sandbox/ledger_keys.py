"""The idempotency half of the sandbox's books (a mixin of ``ledger.Ledger``, which owns the connection, the lock
and the transactions; the ``idempotency`` table is created there): keys claimed, answers saved, charges counted."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from psp_adapters.sandbox.records import (
    CHARGED,
    PAYMENT_COLUMNS,
    Claimed,
    ClaimResult,
    InFlight,
    Mismatch,
    PaymentRecord,
    Replay,
    ts,
)
from psp_adapters.sandbox.wire import parse_timestamp


class KeyBooks:
    """Idempotency keys: claimed before a request executes, done with its saved answer after."""

    _conn: sqlite3.Connection
    _lock: threading.RLock

    def _transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

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
        """Save the answer of a claimed request (inside ``atomic()``, with what the request wrote)."""
        with self._transaction():
            self._finish_key(key, status_code, response)

    def insert_payment(self, payment: PaymentRecord) -> None:
        """Book a new payment (an intent created without a confirm, a charge without a key)."""
        with self._transaction():
            placeholders = ", ".join("?" * len(payment._params()))
            sql = f"INSERT INTO payments ({PAYMENT_COLUMNS}) VALUES ({placeholders})"  # nosec B608  # constant columns
            self._conn.execute(sql, payment._params())

    def save_payment(self, payment: PaymentRecord) -> None:
        """Write every field of an existing payment as ``payment`` has it (a confirm, capture, cancel, update)."""
        names = [name.strip() for name in PAYMENT_COLUMNS.split(",")]
        assignments = ", ".join(f"{name} = ?" for name in names[1:])
        with self._transaction():
            self._conn.execute(
                f"UPDATE payments SET {assignments} WHERE psp_reference = ?",  # nosec B608  # constant columns
                (*payment._params()[1:], payment.psp_reference),
            )

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
        """Charges (payment rows) per idempotency key: the proof that no key was charged twice. An intent never
        confirmed is no charge; a confirmed one counts under the key that created it.

        Key "" counts the charges created without a key. ``flavor``: only that flavour's payments.
        """
        where, args = (f"WHERE {CHARGED} AND flavor = ?", (flavor,)) if flavor else (f"WHERE {CHARGED}", ())
        with self._lock:
            rows = self._conn.execute(
                f"SELECT idempotency_key, count(*) FROM payments {where} GROUP BY idempotency_key", args  # nosec B608
            ).fetchall()
        return {key: count for key, count in rows}
