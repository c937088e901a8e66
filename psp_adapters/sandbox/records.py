"""What the sandbox's books hold: payments, idempotency claims, cursors, and the fee rule (refunds, disputes and
modifications: ``movements``).

``ledger.Ledger`` reads and writes these; the flavour modules (``native_api``, ``stripe_api``, ``adyen_api``)
render them in their PSP's wire shape. Amounts are integer minor units, times aware UTC, throughout.
"""

from __future__ import annotations

import base64
import json
import secrets
import sqlite3
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from psp_adapters.protocol import ChargeRequest
from psp_adapters.sandbox.wire import PaymentStatus, format_timestamp, parse_timestamp

#: the flavours a sandbox server can speak; one per server
FLAVORS = ("native", "stripe", "adyen")
#: a dispute's fee, in minor units of the payment's currency, whatever the currency (Stripe charges a fixed
#: dispute fee; the sandbox uses 15.00 of any two-decimal currency)
DISPUTE_FEE = 1500

_ALPHANUMERIC = string.ascii_letters + string.digits


def sandbox_fee(amount: int) -> int:
    """The sandbox's processing fee for a charge of ``amount`` minor units: 2.9 % + 30, half up, in integers.

    >>> sandbox_fee(1000), sandbox_fee(1250), sandbox_fee(50)
    (59, 66, 31)
    """
    return (amount * 29 + 500) // 1000 + 30


def random_id(prefix: str, length: int = 24, *, alphabet: str = _ALPHANUMERIC) -> str:
    """``prefix`` + ``length`` random characters of ``alphabet`` (Stripe-like object ids)."""
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


@dataclass(frozen=True, slots=True, kw_only=True)
class PaymentRecord:
    """One payment as the sandbox PSP keeps it. Amounts in integer minor units; times aware UTC."""

    psp_reference: str
    idempotency_key: str  #: "" for a create sent without a key (Stripe and Adyen make keys optional)
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
    flavor: str = "native"  #: the flavour that created it
    customer_reference: str | None = None  #: Stripe ``customer`` / Adyen ``shopperReference``
    metadata: Mapping[str, str] = field(default_factory=dict)
    fee: int | None = None  #: the processing fee booked with the charge; None for payments of older files
    capture_method: str = "automatic"  #: "automatic", or "manual": an authorisation waits for its capture
    amount_captured: int | None = None  #: what a capture took (a partial capture: less); None: the whole amount
    authorized_at: datetime | None = None  #: when a manual-capture payment was authorised
    #: when its charge was attempted (a confirm); None: never (an intent created and not confirmed, or canceled so)
    charged_at: datetime | None = None

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
        psp_reference: str | None = None,
        flavor: str = "native",
        metadata: Mapping[str, str] | None = None,
        capture_method: str = "automatic",
    ) -> PaymentRecord:
        """A fresh payment for ``charge``: final now, authorised (manual capture), open (not confirmed yet), or
        pending until ``now + settle_after``."""
        pending = status is PaymentStatus.PENDING
        return cls(
            psp_reference=psp_reference or random_id("psp_", alphabet=string.hexdigits[:16]),
            idempotency_key=idempotency_key,
            merchant_reference=charge.merchant_reference,
            amount=charge.amount,
            currency=charge.currency,
            merchant_account=charge.merchant_account,
            payment_method=charge.payment_method,
            description=charge.description,
            status=status,
            failure_reason=reason,
            settle_to=settle_to if pending else None,
            settle_at=now + settle_after if pending else None,
            created_at=now,
            updated_at=now,
            settled_at=now if status.is_final else None,
            flavor=flavor,
            customer_reference=charge.customer_reference,
            metadata=dict(metadata or {}),
            fee=sandbox_fee(charge.amount),
            capture_method=capture_method,
            authorized_at=now if status is PaymentStatus.AUTHORIZED else None,
            charged_at=None if status is PaymentStatus.OPEN else now,
        )

    @property
    def booked_fee(self) -> int:
        """The processing fee: the one booked with the charge, else the fee rule on what was captured."""
        return self.fee if self.fee is not None else sandbox_fee(self.captured or self.amount)

    @property
    def captured(self) -> int:
        """The minor units taken: the amount captured once succeeded, else 0."""
        if self.status is not PaymentStatus.SUCCEEDED:
            return 0
        return self.amount if self.amount_captured is None else self.amount_captured

    @property
    def charged(self) -> bool:
        """Whether a charge was attempted (not an intent never confirmed, nor one canceled so)."""
        return self.charged_at is not None or self.status not in (PaymentStatus.OPEN, PaymentStatus.CANCELED)

    def to_json(self) -> dict[str, object]:
        """The payment in the native flavour's wire shape (see ``wire``); scheduling fields are not shown."""
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
            # a manual capture's: shown only for one (the automatic payments' shape is unchanged)
            **({"capture_method": "manual", "amount_captured": self.captured} if self.capture_method == "manual"
               else {}),
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
            ts(self.settle_at),
            ts(self.created_at),
            ts(self.updated_at),
            ts(self.settled_at),
            self.flavor,
            self.customer_reference,
            json.dumps(dict(self.metadata), sort_keys=True) if self.metadata else None,
            self.fee,
            self.capture_method,
            self.amount_captured,
            ts(self.authorized_at),
            ts(self.charged_at),
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
            settle_at=dt(row["settle_at"]),
            created_at=parse_timestamp(row["created_at"]),
            updated_at=parse_timestamp(row["updated_at"]),
            settled_at=dt(row["settled_at"]),
            flavor=row["flavor"],
            customer_reference=row["customer_reference"],
            metadata=json.loads(row["metadata"]) if row["metadata"] else {},
            fee=row["fee"],
            capture_method=row["capture_method"] or "automatic",
            amount_captured=row["amount_captured"],
            authorized_at=dt(row["authorized_at"]),
            # a row of an older file (no capture_method) was a charge, whatever its status
            charged_at=dt(row["charged_at"]) or (None if row["capture_method"] else parse_timestamp(row["created_at"])),
        )


#: SQL: the payments that were charged (``PaymentRecord.charged``)
CHARGED = "(charged_at IS NOT NULL OR status NOT IN ('open', 'canceled'))"
#: the payments columns, in ``PaymentRecord._params`` order
PAYMENT_COLUMNS = (
    "psp_reference, idempotency_key, merchant_reference, merchant_account, payment_method, description, "
    "amount, currency, status, failure_reason, settle_to, settle_at, created_at, updated_at, settled_at, "
    "flavor, customer_reference, metadata, fee, capture_method, amount_captured, authorized_at, charged_at"
)


@dataclass(frozen=True, slots=True)
class Claimed:
    """The key is ours: execute the request, then ``complete_charge``/``complete_key`` or ``release_key``."""


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


def ts(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


def dt(value: str | None) -> datetime | None:
    return parse_timestamp(value) if value is not None else None
