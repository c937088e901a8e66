"""The refunds and disputes half of the sandbox's books (a mixin of ``ledger.Ledger``, which owns the
connection, the lock and the transactions; the ``adjustments`` table is created there)."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import AbstractContextManager
from datetime import datetime

from psp_adapters.sandbox.records import ADJUSTMENT_COLUMNS, PAYMENT_COLUMNS, Adjustment, PaymentRecord, ts
from psp_adapters.sandbox.wire import PaymentStatus


class AdjustmentBooks:
    """Refunds and disputes (chargebacks) of succeeded payments, made through the admin API."""

    _conn: sqlite3.Connection
    _lock: threading.Lock

    def _transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def add_adjustment(
        self,
        kind: str,
        adjustment_id: str,
        psp_reference: str,
        *,
        amount: int | None,
        fee: int,
        now: datetime,
        reason: str | None = None,
    ) -> Adjustment | str:
        """Refund (``amount`` None: what is left) or dispute (the whole amount) a succeeded payment, atomically.

        Returns the adjustment, or why not: "resource_missing", "payment_not_succeeded", "amount_invalid"
        (more than is left to refund), "charge_already_refunded" or "charge_disputed" (a second dispute).
        """
        with self._transaction():
            row = self._conn.execute(
                "SELECT amount, currency, status FROM payments WHERE psp_reference = ?", (psp_reference,)
            ).fetchone()
            if row is None:
                return "resource_missing"
            if row["status"] != PaymentStatus.SUCCEEDED.value:
                return "payment_not_succeeded"
            done = {
                k: n
                for k, n in self._conn.execute(
                    "SELECT kind, coalesce(sum(amount), 0) FROM adjustments WHERE psp_reference = ? GROUP BY kind",
                    (psp_reference,),
                )
            }
            if kind == "dispute":
                if done.get("dispute"):
                    return "charge_disputed"
                amount = row["amount"]
            else:
                left = row["amount"] - done.get("refund", 0)
                if left <= 0:
                    return "charge_already_refunded"
                amount = left if amount is None else amount
                if not 0 < amount <= left:
                    return "amount_invalid"
            adjustment = Adjustment(
                id=adjustment_id,
                kind=kind,
                psp_reference=psp_reference,
                amount=amount,
                currency=row["currency"],
                fee=fee,
                reason=reason,
                created_at=now,
            )
            self._conn.execute(
                f"INSERT INTO adjustments ({ADJUSTMENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",  # nosec B608
                (adjustment.id, kind, psp_reference, amount, adjustment.currency, fee, reason, ts(now)),
            )
        return adjustment

    def adjustments_of(self, psp_references: list[str]) -> dict[str, list[Adjustment]]:
        """The refunds and disputes of these payments, oldest first, by payment."""
        found: dict[str, list[Adjustment]] = {ref: [] for ref in psp_references}
        for start in range(0, len(psp_references), 500):
            chunk = psp_references[start : start + 500]
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT {ADJUSTMENT_COLUMNS} FROM adjustments WHERE psp_reference IN "
                    f"({', '.join('?' * len(chunk))}) ORDER BY seq",  # nosec B608  # constant SQL, values bound
                    chunk,
                ).fetchall()
            for row in rows:
                found[row["psp_reference"]].append(Adjustment._from_row(row))
        return found

    def adjustments_between(
        self, lo: datetime, hi: datetime, *, flavor: str, merchant_account: str | None = None
    ) -> list[tuple[Adjustment, PaymentRecord]]:
        """Refunds and disputes with ``lo <= created_at < hi`` and their payments, oldest first."""
        args: tuple[object, ...] = (ts(lo), ts(hi), flavor)
        account = ""
        if merchant_account is not None:
            account, args = "AND p.merchant_account = ?", (*args, merchant_account)
        columns = ", ".join(f"p.{c.strip()}" for c in PAYMENT_COLUMNS.split(","))
        adjustment_columns = ", ".join(f"a.{c.strip()} AS a_{c.strip()}" for c in ADJUSTMENT_COLUMNS.split(","))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {adjustment_columns}, {columns} FROM adjustments a "
                "JOIN payments p ON p.psp_reference = a.psp_reference "
                f"WHERE a.created_at >= ? AND a.created_at < ? AND p.flavor = ? {account} "  # nosec B608
                "ORDER BY a.created_at, a.seq",
                args,
            ).fetchall()
        return [(Adjustment._from_row(row, "a_"), PaymentRecord._from_row(row)) for row in rows]
