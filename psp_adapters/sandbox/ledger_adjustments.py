"""The refunds, disputes and modifications half of the sandbox's books (a mixin of ``ledger.Ledger``, which owns the
connection, the lock and the transactions; the tables are ``ledger_schema``'s).

The bound that matters: the refunds of a payment that still hold money (not failed, not canceled) never add up to
more than it captured. ``add_adjustment`` checks it inside the transaction that writes the refund, so two refunds
racing on two threads cannot both pass it.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import AbstractContextManager
from datetime import datetime

from psp_adapters.sandbox.movements import (
    ADJUSTMENT_COLUMNS,
    CAPTURE_FAILED,
    MODIFICATION_COLUMNS,
    REFUND_CANCELED,
    REFUND_FAILED,
    Adjustment,
    Modification,
)
from psp_adapters.sandbox.records import PAYMENT_COLUMNS, PaymentRecord, ts
from psp_adapters.sandbox.wire import PaymentStatus


class AdjustmentBooks:
    """Refunds and disputes (chargebacks) of succeeded payments, and Adyen's received modifications."""

    _conn: sqlite3.Connection
    _lock: threading.RLock

    def _transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def add_adjustment(self, adjustment: Adjustment) -> Adjustment | str:
        """Book a refund (``amount`` at most what is left of the capture) or a dispute (the whole capture, once)
        of a succeeded payment, atomically.

        Returns the adjustment, or why not: "resource_missing", "payment_not_succeeded", "amount_too_large"
        (more than is left to refund), "charge_already_refunded" (nothing left), "charge_disputed" (a refund
        of a disputed payment, or a second dispute).
        """
        with self._transaction():
            row = self._conn.execute(
                f"SELECT {PAYMENT_COLUMNS} FROM payments WHERE psp_reference = ?",  # nosec B608  # constant columns
                (adjustment.psp_reference,),
            ).fetchone()
            if row is None:
                return "resource_missing"
            payment = PaymentRecord._from_row(row)
            if payment.status is not PaymentStatus.SUCCEEDED:
                return "payment_not_succeeded"
            held = {kind: amount for kind, amount in self._held(adjustment.psp_reference)}
            if held.get("dispute"):
                return "charge_disputed"
            if adjustment.kind == "refund":
                left = payment.captured - held.get("refund", 0)
                if left <= 0:
                    return "charge_already_refunded"
                if not 0 < adjustment.amount <= left:
                    return "amount_too_large"
            self._conn.execute(
                f"INSERT INTO adjustments ({ADJUSTMENT_COLUMNS}) "  # nosec B608  # constant columns
                f"VALUES ({', '.join('?' * len(adjustment._params()))})",
                adjustment._params(),
            )
        return adjustment

    def refundable(self, payment: PaymentRecord) -> int:
        """What is left to refund of a succeeded payment (0 once disputed)."""
        held = dict(self._held(payment.psp_reference))
        return 0 if held.get("dispute") else max(0, payment.captured - held.get("refund", 0))

    def _held(self, psp_reference: str) -> list[tuple[str, int]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT kind, coalesce(sum(amount), 0) FROM adjustments WHERE psp_reference = ? "
                "AND coalesce(status, 'succeeded') NOT IN (?, ?) GROUP BY kind",
                (psp_reference, REFUND_FAILED, REFUND_CANCELED),
            ).fetchall()
        return [(kind, amount) for kind, amount in rows]

    def save_adjustment(self, adjustment: Adjustment) -> None:
        """Write an existing adjustment's status and metadata as ``adjustment`` has them."""
        with self._transaction():
            self._conn.execute(
                "UPDATE adjustments SET status = ?, failure_reason = ?, settle_to = ?, settle_at = ?, updated_at = ?, "
                "metadata = ? WHERE id = ?",
                (*adjustment._params()[8:14], adjustment.id),
            )

    def get_adjustment(self, adjustment_id: str) -> Adjustment | None:
        found = self._adjustments("a.id = ?", (adjustment_id,))
        return found[0] if found else None

    def due_adjustments(self, now: datetime) -> list[Adjustment]:
        """The adjustments whose scheduled status change (``settle_to``) is due by ``now``, oldest first."""
        return self._adjustments("a.settle_at IS NOT NULL AND a.settle_at <= ? ORDER BY a.settle_at, a.seq", (ts(now),))

    def adjustments_of(self, psp_references: list[str]) -> dict[str, list[Adjustment]]:
        """The refunds and disputes of these payments, oldest first, by payment."""
        found: dict[str, list[Adjustment]] = {ref: [] for ref in psp_references}
        for start in range(0, len(psp_references), 500):
            chunk = psp_references[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            for adjustment in self._adjustments(f"a.psp_reference IN ({marks}) ORDER BY a.seq", tuple(chunk)):
                found[adjustment.psp_reference].append(adjustment)
        return found

    def adjustments_page(
        self, kind: str, *, flavor: str, lo: datetime, hi: datetime, psp_reference: str | None = None
    ) -> list[Adjustment]:
        """Every ``kind`` adjustment of ``flavor`` created in ``[lo, hi)`` (of one payment), newest first."""
        where = "a.kind = ? AND a.created_at >= ? AND a.created_at < ? AND p.flavor = ? "
        args: tuple[object, ...] = (kind, ts(lo), ts(hi), flavor)
        if psp_reference is not None:
            where, args = where + "AND a.psp_reference = ? ", (*args, psp_reference)
        return self._adjustments(where + "ORDER BY a.created_at DESC, a.seq DESC", args)

    def adjustments_between(
        self, lo: datetime, hi: datetime, *, flavor: str, merchant_account: str | None = None, failed: bool = False
    ) -> list[tuple[Adjustment, PaymentRecord]]:
        """Refunds and disputes with ``lo <= created_at < hi`` and their payments, oldest first; ``failed``:
        instead, the refunds that failed after they were booked, by when they failed (``updated_at``)."""
        at = "a.updated_at" if failed else "a.created_at"
        args: tuple[object, ...] = (ts(lo), ts(hi), flavor)
        where = f"{at} >= ? AND {at} < ? AND p.flavor = ? " + ("AND a.status = 'failed' " if failed else "")
        if merchant_account is not None:
            where, args = where + "AND p.merchant_account = ? ", (*args, merchant_account)
        columns = ", ".join(f"p.{c.strip()}" for c in PAYMENT_COLUMNS.split(","))
        adjustment_columns = ", ".join(f"a.{c.strip()} AS a_{c.strip()}" for c in ADJUSTMENT_COLUMNS.split(","))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {adjustment_columns}, {columns} FROM adjustments a "
                f"JOIN payments p ON p.psp_reference = a.psp_reference WHERE {where}"  # nosec B608  # constant SQL
                f"ORDER BY {at}, a.seq",
                args,
            ).fetchall()
        return [(Adjustment._from_row(row, "a_"), PaymentRecord._from_row(row)) for row in rows]

    def _adjustments(self, where: str, args: tuple[object, ...]) -> list[Adjustment]:
        columns = ", ".join(f"a.{c.strip()}" for c in ADJUSTMENT_COLUMNS.split(","))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {columns} FROM adjustments a JOIN payments p ON p.psp_reference = a.psp_reference "
                f"WHERE {where}",  # nosec B608  # where: this module's own, values bound
                args,
            ).fetchall()
        return [Adjustment._from_row(row) for row in rows]

    # -- Adyen's modifications -----------------------------------------------------------------------------

    def add_modification(self, modification: Modification) -> None:
        with self._transaction():
            self._conn.execute(
                f"INSERT INTO modifications ({MODIFICATION_COLUMNS}) "  # nosec B608  # constant columns
                f"VALUES ({', '.join('?' * len(modification._params()))})",
                modification._params(),
            )

    def due_modifications(self, now: datetime) -> list[Modification]:
        """The modifications received and due by ``now``, in the order they were received."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {MODIFICATION_COLUMNS} FROM modifications "  # nosec B608  # constant columns
                "WHERE status = 'received' AND due_at <= ? ORDER BY due_at, seq",
                (ts(now),),
            ).fetchall()
        return [Modification._from_row(row) for row in rows]

    def finish_modification(self, modification_id: str, *, status: str, outcome: str | None) -> None:
        with self._transaction():
            self._conn.execute(
                "UPDATE modifications SET status = ?, outcome = ? WHERE id = ?", (status, outcome, modification_id)
            )

    def fail_capture(self, modification_id: str, *, reason: str) -> None:
        """A processed capture rejected after it was sent (``movements.CAPTURE_FAILED``), for ``reason``."""
        with self._transaction():
            self._conn.execute(
                "UPDATE modifications SET outcome = ?, reason = ? WHERE id = ? AND status = 'processed'",
                (CAPTURE_FAILED, reason, modification_id),
            )

    def get_modification(self, modification_id: str) -> Modification | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {MODIFICATION_COLUMNS} FROM modifications WHERE id = ?",  # nosec B608  # constant columns
                (modification_id,),
            ).fetchone()
        return None if row is None else Modification._from_row(row)

    def modifications_of(self, psp_reference: str) -> list[Modification]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {MODIFICATION_COLUMNS} FROM modifications "  # nosec B608  # constant columns
                "WHERE psp_reference = ? ORDER BY seq",
                (psp_reference,),
            ).fetchall()
        return [Modification._from_row(row) for row in rows]
