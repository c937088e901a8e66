"""What refunds (``recon.refund_rows``) and captures and cancels (``recon.modification_rows``) share: a movement of
a payment's money after its charge, with the states of a charge, its own job, its own idempotency key, the PSP's
id of it stored once known and never replaced, and an audit trail. A leaf, like ``recon.rows``.

``MovementKind`` names what tells the two kinds apart where their logic is the same (one generic store,
``recon.db.movement_store``; its statements, ``recon.db.movement_queries``; one reconcile handler,
``recon.reconcile.movement``; one sweep step, ``recon.reconcile.movement_sweep``): the table and its audit table,
the column names, the jobs' kinds and keys, the state machine. What really differs stays with each kind: a
refund's bound by the payment's captured amount (``recon.db.refund_store``), a capture's partial amount and its
claim on the authorisation (``recon.db.modification_store``), the authorisation's expiry
(``recon.reconcile.capture_sweep``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from recon.rows import PaymentStatus


@dataclass(frozen=True, slots=True)
class MovementKind:
    """One kind of movement, as its table and jobs name it."""

    noun: str  #: how messages name one ("refund", "modification")
    table: str  #: its rows ("refunds", "modifications")
    events_table: str  #: its audit trail ("refund_events", "modification_events")
    id_field: str  #: the audit rows' column and the jobs' payload key ("refund_id", "modification_id")
    reference_field: str  #: our unique reference's column ("refund_reference", "modification_reference")
    psp_id_field: str  #: the PSP's id's column ("psp_refund_id", "psp_modification_id")
    columns: str  #: every column a row is read from, in ``MovementStore._row``'s names
    job_key: str  #: the prefix of its own job's unique key ("refund", "modification")
    reconcile_kind: str  #: its reconcile job's kind, also the prefix of that job's unique key
    transitions: dict[PaymentStatus, frozenset[PaymentStatus]]  #: its state machine

    def job_unique_key(self, movement_id: int) -> str:
        """The unique key of the movement's own job (the refund, capture or cancel job)."""
        return f"{self.job_key}:{movement_id}"

    def reconcile_key(self, movement_id: int) -> str:
        """The unique key of the movement's reconcile job: overlapping sweeps and rechecks share it."""
        return f"{self.reconcile_kind}:{movement_id}"


class Movement(Protocol):
    """What the generic code reads of a refund or a modification."""

    @property
    def id(self) -> int: ...
    @property
    def payment_id(self) -> int: ...
    @property
    def psp(self) -> str: ...
    @property
    def status(self) -> PaymentStatus: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def updated_at(self) -> datetime: ...
    @property
    def reference(self) -> str: ...
    @property
    def psp_id(self) -> str | None: ...


class MovementTransition(Protocol):
    """What the generic store reads of a refund's or a modification's compare-and-set transition."""

    @property
    def movement_id(self) -> int: ...
    @property
    def psp_id(self) -> str | None: ...
    @property
    def from_status(self) -> PaymentStatus: ...
    @property
    def to_status(self) -> PaymentStatus: ...
    @property
    def source(self) -> StrEnum: ...
    @property
    def details(self) -> dict[str, Any] | None: ...
    @property
    def job_id(self) -> int | None: ...
    @property
    def attempt(self) -> int | None: ...
    @property
    def failure_reason(self) -> str | None: ...
    @property
    def review_reason(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class MovementEvent:
    """One entry of a refund's or a modification's audit trail (``MovementStore.events``): one row type for both
    kinds, whose events tables differ only in the name of the movement's id column (``MovementKind.id_field``)."""

    id: int
    movement_id: int  #: the refund's or the modification's id
    from_status: str | None
    to_status: str
    source: str
    at: datetime
    job_id: int | None = None
    attempt: int | None = None
    details: dict[str, Any] | None = None

    def to_dict(self, kind: MovementKind) -> dict[str, Any]:
        """JSON-ready fields (``row_dict``), the movement's id named as ``kind``'s events table names it
        (``refund_id``, ``modification_id``), second, as ``recon refunds show --json`` prints it."""
        out = row_dict(self)
        return {"id": out.pop("id"), kind.id_field: out.pop("movement_id"), **out}


def row_dict(row: Any) -> dict[str, Any]:
    """A slotted row as JSON-ready fields, in slot order: datetimes as ISO 8601, enums as their values."""
    out: dict[str, Any] = {}
    for name in row.__slots__:
        value = getattr(row, name)
        out[name] = value.isoformat() if isinstance(value, datetime) else str(value) if isinstance(
            value, StrEnum) else value
    return out

