"""The sandbox PSP's books: payments, refunds/disputes, modifications, documents and idempotency records in one
SQLite file (WAL), or in memory.

Invariants:
- A charge and its stored idempotent response are written in one transaction, so after any crash a key either
  has its charge and its response, or neither. Any other write and its saved answer go together the same way:
  the dispatcher runs them inside ``atomic()``.
- A key is claimed (``in_flight``) before its charge is executed; rows still in flight when the file is opened
  again belong to a request that never finished (nothing was recorded for it) and are dropped.
- ``payments.idempotency_key`` is deliberately not unique: ``charge_counts()`` counts real rows, so it would
  show a double charge rather than hide it behind a constraint.
- The ledger is the only writer. The schema grows additively (``ledger_schema``).

One connection, guarded by a reentrant lock, serves all server threads; a write is one short transaction, and
``atomic()`` makes several one (it nests). One server per file at a time: opening the file drops in-flight keys,
which would be wrong under a live second server.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from psp_adapters.sandbox.ledger_adjustments import AdjustmentBooks
from psp_adapters.sandbox.ledger_documents import DocumentBooks
from psp_adapters.sandbox.ledger_keys import KeyBooks
from psp_adapters.sandbox.ledger_schema import SCHEMA, upgrade
from psp_adapters.sandbox.movements import Adjustment
from psp_adapters.sandbox.records import (
    CHARGED,
    PAYMENT_COLUMNS,
    Claimed,
    ClaimResult,
    Cursor,
    InFlight,
    Mismatch,
    PaymentRecord,
    Replay,
    ts,
)
from psp_adapters.sandbox.wire import PENDING_FAILURE_REASON, PaymentStatus, format_timestamp

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


class Ledger(KeyBooks, AdjustmentBooks, DocumentBooks):
    """SQLite persistence of the sandbox PSP. Thread-safe; every method is one short transaction."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        """Open (or create) the books in the SQLite file ``path``; None: in memory, gone when closed."""
        self._lock = threading.RLock()
        self._depth = 0  # nesting of atomic() in the thread holding the lock
        where = ":memory:" if path is None else os.fspath(path)
        self._conn = sqlite3.connect(where, isolation_level=None, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: durable across a process crash, fsync only at checkpoints
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.executescript(SCHEMA)
        with self._transaction():
            upgrade(self._conn)
            self._conn.execute("DELETE FROM idempotency WHERE state = 'in_flight'")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- payments ------------------------------------------------------------------------------------------

    def settle_due(self, *, now: datetime) -> list[PaymentRecord]:
        """Move pending payments whose time has come to their status (final, or authorised for a manual capture);
        return them as they are now."""
        with self._transaction():
            due = self._payments("status = 'pending' AND settle_at <= ? ORDER BY settle_at, seq", (ts(now),))
            if due:
                self._conn.execute(
                    "UPDATE payments SET status = settle_to, updated_at = settle_at, "
                    "settled_at = CASE WHEN settle_to = 'authorized' THEN NULL ELSE settle_at END, "
                    "authorized_at = CASE WHEN settle_to = 'authorized' THEN settle_at END, "
                    "failure_reason = CASE WHEN settle_to = 'failed' THEN coalesce(failure_reason, ?) END, "
                    "settle_to = NULL "
                    "WHERE status = 'pending' AND settle_at <= ?",
                    (PENDING_FAILURE_REASON, ts(now)),
                )
            return [self.get_payment(record.psp_reference) or record for record in due]

    def expire_authorizations(self, *, flavor: str, authorized_before: datetime, now: datetime) -> list[PaymentRecord]:
        """Cancel the authorisations of ``flavor`` left uncaptured since before ``authorized_before`` (the PSP
        releases them: Stripe after 7 days for most cards); return them as they are now."""
        with self._transaction():
            expired = self._payments(
                "status = 'authorized' AND flavor = ? AND authorized_at < ? ORDER BY seq",
                (flavor, ts(authorized_before)),
            )
            self._conn.executemany(
                "UPDATE payments SET status = 'canceled', failure_reason = 'expired', updated_at = ?, settled_at = ? "
                "WHERE psp_reference = ?",
                [(ts(now), ts(now), record.psp_reference) for record in expired],
            )
        return [self.get_payment(record.psp_reference) or record for record in expired]

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

    def merchant_accounts(self, *, flavor: str) -> list[str]:
        """The merchant accounts of the flavour's payments, in order of name."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT DISTINCT merchant_account FROM payments WHERE flavor = ? AND merchant_account IS NOT NULL "
                "ORDER BY merchant_account", (flavor,)
            ).fetchall()
        return [row[0] for row in rows]

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
        self,
        since: datetime,
        until: datetime,
        *,
        flavor: str,
        after: Cursor | None,
        limit: int,
        newest_first: bool,
        customer: str | None = None,
        psp_reference: str | None = None,
        charged_only: bool = False,
    ) -> tuple[list[PaymentRecord], Cursor | None]:
        """Payments with ``since <= created_at < until`` in (created_at, seq) order, newest first or oldest
        first, after the cursor ``after`` (the last row of the previous page). Returns the page and the
        cursor of its last row when more rows follow, else None. Reads the index payments_flavor_created.
        ``customer``, ``psp_reference``: only those; ``charged_only``: no intent that was never confirmed.

        (The cursor's ``settled_at`` field carries a ``created_at`` here: the same shape, another column.)
        """
        order, beyond = ("DESC", "<") if newest_first else ("ASC", ">")
        where = "flavor = ? AND created_at >= ? AND created_at < ? "
        args: tuple[object, ...] = (flavor, ts(since), ts(until))
        if after is not None:
            where += f"AND (created_at {beyond} ? OR (created_at = ? AND seq {beyond} ?)) "
            args += (after.settled_at, after.settled_at, after.seq)
        for column, value in (("customer_reference", customer), ("psp_reference", psp_reference)):
            if value is not None:
                where, args = where + f"AND {column} = ? ", (*args, value)
        if charged_only:
            where += f"AND {CHARGED} "
        with self._lock:
            rows = self._conn.execute(
                f"SELECT seq, {PAYMENT_COLUMNS} FROM payments WHERE {where}"
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
        """Forget every payment, refund, dispute, modification, document and idempotency record."""
        with self._transaction():
            self._conn.execute("DELETE FROM documents")
            self._conn.execute("DELETE FROM modifications")
            self._conn.execute("DELETE FROM adjustments")
            self._conn.execute("DELETE FROM payments")
            self._conn.execute("DELETE FROM idempotency")

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One transaction for everything inside (nested calls join the outer one); rolled back on an exception.
        Other threads wait for it: keep it short."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            self._conn.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield
            except BaseException:
                self._depth = 0
                self._conn.execute("ROLLBACK")
                raise
            self._depth = 0
            self._conn.execute("COMMIT")

    _transaction = atomic
