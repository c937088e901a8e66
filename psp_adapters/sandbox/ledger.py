"""The sandbox PSP's books: payments and idempotency records in one SQLite file (WAL).

Invariants:
- A charge and its stored idempotent response are written in one transaction, so after any crash a key either
  has its charge and its response, or neither.
- A key is claimed (``in_flight``) before its charge is executed; rows still in flight when the file is opened
  again belong to a request that never finished (nothing was recorded for it) and are dropped.
- ``payments.idempotency_key`` is deliberately not unique: ``charge_counts()`` counts real rows, so it would
  show a double charge rather than hide it behind a constraint.

One connection, guarded by a lock, serves all server threads; a write is one short transaction. One server
per file at a time: opening the file drops in-flight keys, which would be wrong under a live second server.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from psp_adapters.protocol import ChargeRequest
from psp_adapters.sandbox.wire import PENDING_FAILURE_REASON, PaymentStatus, format_timestamp, parse_timestamp

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
"""

_COLUMNS = (
    "psp_reference, idempotency_key, merchant_reference, merchant_account, payment_method, description, "
    "amount, currency, status, failure_reason, settle_to, settle_at, created_at, updated_at, settled_at"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PaymentRecord:
    """One payment as the sandbox PSP keeps it. Amounts in integer minor units; times aware UTC."""

    psp_reference: str
    idempotency_key: str
    merchant_reference: str
    amount: int
    currency: str
    status: PaymentStatus
    created_at: datetime
    updated_at: datetime
    merchant_account: str | None = None
    payment_method: str | None = None
    description: str | None = None
    failure_reason: str | None = None
    settle_to: PaymentStatus | None = None  #: for a pending payment: where it goes at ``settle_at``
    settle_at: datetime | None = None
    settled_at: datetime | None = None  #: when it reached a final status

    @classmethod
    def new(
        cls,
        charge: ChargeRequest,
        *,
        idempotency_key: str,
        status: PaymentStatus,
        reason: str | None,
        settle_to: PaymentStatus | None,
        settle_after: timedelta,
        now: datetime,
    ) -> PaymentRecord:
        """A fresh payment for ``charge``: final now, or pending until ``now + settle_after``."""
        final = status.is_final
        return cls(
            psp_reference=f"psp_{uuid.uuid4().hex[:24]}",
            idempotency_key=idempotency_key,
            merchant_reference=charge.merchant_reference,
            amount=charge.amount,
            currency=charge.currency,
            merchant_account=charge.merchant_account,
            payment_method=charge.payment_method,
            description=charge.description,
            status=status,
            failure_reason=reason,
            settle_to=None if final else settle_to,
            settle_at=None if final else now + settle_after,
            created_at=now,
            updated_at=now,
            settled_at=now if final else None,
        )

    def to_json(self) -> dict[str, object]:
        """The payment on the wire (see ``wire``); internal scheduling fields are not shown."""
        return {
            "object": "payment",
            "psp_reference": self.psp_reference,
            "merchant_reference": self.merchant_reference,
            "amount": self.amount,
            "currency": self.currency,
            "merchant_account": self.merchant_account,
            "payment_method": self.payment_method,
            "description": self.description,
            "status": self.status.value,
            "failure_reason": self.failure_reason,
            "created_at": format_timestamp(self.created_at),
            "updated_at": format_timestamp(self.updated_at),
            "settled_at": format_timestamp(self.settled_at) if self.settled_at else None,
        }

    def _params(self) -> tuple[object, ...]:
        return (
            self.psp_reference,
            self.idempotency_key,
            self.merchant_reference,
            self.merchant_account,
            self.payment_method,
            self.description,
            self.amount,
            self.currency,
            self.status.value,
            self.failure_reason,
            self.settle_to.value if self.settle_to else None,
            _ts(self.settle_at),
            _ts(self.created_at),
            _ts(self.updated_at),
            _ts(self.settled_at),
        )

    @classmethod
    def _from_row(cls, row: sqlite3.Row) -> PaymentRecord:
        return cls(
            psp_reference=row["psp_reference"],
            idempotency_key=row["idempotency_key"],
            merchant_reference=row["merchant_reference"],
            merchant_account=row["merchant_account"],
            payment_method=row["payment_method"],
            description=row["description"],
            amount=row["amount"],
            currency=row["currency"],
            status=PaymentStatus(row["status"]),
            failure_reason=row["failure_reason"],
            settle_to=PaymentStatus(row["settle_to"]) if row["settle_to"] else None,
            settle_at=_dt(row["settle_at"]),
            created_at=parse_timestamp(row["created_at"]),
            updated_at=parse_timestamp(row["updated_at"]),
            settled_at=_dt(row["settled_at"]),
        )


@dataclass(frozen=True, slots=True)
class Claimed:
    """The key is ours: execute the request, then ``complete_charge`` or ``release_key``."""


@dataclass(frozen=True, slots=True)
class Replay:
    """The key already has a stored answer: send it again, byte for byte."""

    status_code: int
    body: str


@dataclass(frozen=True, slots=True)
class InFlight:
    """Another request with this key is still executing."""


@dataclass(frozen=True, slots=True)
class Mismatch:
    """The key was used before with a different request body."""


ClaimResult = Claimed | Replay | InFlight | Mismatch


class Cursor(NamedTuple):
    """Keyset position in the settlement listing: the last (settled_at, seq) returned."""

    settled_at: str
    seq: int

    def encode(self) -> str:
        """The opaque ``next_cursor`` token of the settlement listing."""
        return base64.urlsafe_b64encode(json.dumps([self.settled_at, self.seq]).encode()).decode()

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """Parse a token made by ``encode``; raises ValueError on anything else."""
        try:
            settled_at, seq = json.loads(base64.urlsafe_b64decode(token.encode()))
        except (ValueError, TypeError) as exc:
            raise ValueError("bad cursor") from exc
        if not isinstance(settled_at, str) or isinstance(seq, bool) or not isinstance(seq, int):
            raise ValueError("bad cursor")
        return cls(settled_at, seq)


class Ledger:
    """SQLite persistence of the sandbox PSP. Thread-safe; every method is one short transaction."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(os.fspath(path), isolation_level=None, check_same_thread=False)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: durable across a process crash, fsync only at checkpoints
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.executescript(_SCHEMA)
        with self._transaction():
            self._conn.execute("DELETE FROM idempotency WHERE state = 'in_flight'")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- idempotency ---------------------------------------------------------------------------------------

    def claim_key(self, key: str, request_hash: str, *, now: datetime) -> ClaimResult:
        """Claim ``key`` for a request whose canonical body hashes to ``request_hash``."""
        with self._transaction():
            row = self._conn.execute(
                "SELECT request_hash, state, status_code, response FROM idempotency WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                self._conn.execute(
                    "INSERT INTO idempotency (key, request_hash, state, created_at) "
                    "VALUES (?, ?, 'in_flight', ?)",
                    (key, request_hash, _ts(now)),
                )
                return Claimed()
        if row["request_hash"] != request_hash:
            return Mismatch()
        if row["state"] == "in_flight":
            return InFlight()
        return Replay(status_code=row["status_code"], body=row["response"])

    def complete_charge(self, key: str, payment: PaymentRecord, *, status_code: int, response: str) -> None:
        """Record the charge and the answer to replay for ``key``, atomically."""
        with self._transaction():
            self._conn.execute(
                f"INSERT INTO payments ({_COLUMNS}) VALUES ({', '.join('?' * 15)})", payment._params()
            )
            self._conn.execute(
                "UPDATE idempotency SET state = 'done', status_code = ?, response = ? WHERE key = ?",
                (status_code, response, key),
            )

    def release_key(self, key: str) -> None:
        """Forget an in-flight claim whose request recorded nothing (it failed, or the server is stopping)."""
        with self._transaction():
            self._conn.execute("DELETE FROM idempotency WHERE key = ? AND state = 'in_flight'", (key,))

    def charge_counts(self) -> dict[str, int]:
        """Charges (payment rows) per idempotency key: the proof that no key was charged twice."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT idempotency_key, count(*) FROM payments GROUP BY idempotency_key"
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
                (PENDING_FAILURE_REASON, _ts(now)),
            )
            return cur.rowcount

    def get_payment(self, psp_reference: str) -> PaymentRecord | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_COLUMNS} FROM payments WHERE psp_reference = ?", (psp_reference,)
            ).fetchone()
        return PaymentRecord._from_row(row) if row else None

    def find_payments(self, merchant_reference: str) -> list[PaymentRecord]:
        """Every payment with this merchant reference, oldest first (more than one is a duplicate charge)."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_COLUMNS} FROM payments WHERE merchant_reference = ? ORDER BY seq",
                (merchant_reference,),
            ).fetchall()
        return [PaymentRecord._from_row(row) for row in rows]

    def settlements_page(
        self, since: datetime, until: datetime, *, after: Cursor | None, limit: int
    ) -> tuple[list[PaymentRecord], Cursor | None]:
        """Final payments with ``since <= settled_at < until`` in (settled_at, seq) order, after ``after``.

        Returns the page and the cursor of its last row when more rows follow, else None.
        """
        lo = after or Cursor(format_timestamp(since), 0)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT seq, {_COLUMNS} FROM payments "
                "WHERE settled_at IS NOT NULL AND settled_at >= ? AND settled_at < ? "
                "AND (settled_at > ? OR (settled_at = ? AND seq > ?)) "
                "ORDER BY settled_at, seq LIMIT ?",
                (_ts(since), _ts(until), lo.settled_at, lo.settled_at, lo.seq, limit + 1),
            ).fetchall()
        page = rows[:limit]
        more = Cursor(page[-1]["settled_at"], page[-1]["seq"]) if len(rows) > limit else None
        return [PaymentRecord._from_row(row) for row in page], more

    def set_status(
        self, psp_reference: str, status: PaymentStatus, *, reason: str | None, now: datetime
    ) -> PaymentRecord | None:
        """Force a status (admin); a final status stamps ``settled_at`` and cancels any scheduled settling."""
        settled_at = _ts(now) if status.is_final else None
        with self._transaction():
            self._conn.execute(
                "UPDATE payments SET status = ?, failure_reason = ?, settle_to = NULL, settle_at = NULL, "
                "updated_at = ?, settled_at = ? WHERE psp_reference = ?",
                (status.value, reason, _ts(now), settled_at, psp_reference),
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
                (amount, currency, _ts(now), psp_reference),
            )
        return self.get_payment(psp_reference)

    def reset(self) -> None:
        """Forget every payment and idempotency record."""
        with self._transaction():
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


def _ts(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


def _dt(value: str | None) -> datetime | None:
    return parse_timestamp(value) if value is not None else None
