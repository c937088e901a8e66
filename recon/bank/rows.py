"""What the bank store takes and returns (a leaf: it imports nothing of recon). Amounts are integer minor units
of ``currency``; entry amounts are never negative (``direction`` says which way), balances are signed."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date, datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class NewStatement:
    index: int  #: its place in the file, which its entries name
    account: str
    statement_ref: str
    sequence: str
    currency: str
    opening_balance: int
    closing_balance: int
    period_start: date
    period_end: date
    entry_count: int
    format: str
    file_name: str
    file_digest: str
    position: str  #: where in the file, for messages


@dataclass(frozen=True, slots=True)
class NewEntry:
    statement_index: int
    account: str
    entry_key: str
    booking_date: date
    value_date: date | None
    amount: int
    direction: str
    currency: str
    bank_reference: str | None
    end_to_end_id: str | None
    counterparty: str | None
    remittance: str | None
    bank_code: str | None
    position: str

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> NewEntry:
        """From ``orjson.dumps(entry)`` loaded (orjson writes a dataclass as an object, dates as ISO text)."""
        value = doc["value_date"]
        return cls(**{**doc, "booking_date": date.fromisoformat(doc["booking_date"]),
                      "value_date": date.fromisoformat(value) if value else None})


@dataclass(frozen=True, slots=True)
class BankStatement:
    id: int
    account: str
    statement_ref: str
    sequence: str
    currency: str
    opening_balance: int
    closing_balance: int
    period_start: date
    period_end: date
    entry_count: int
    format: str
    file_name: str
    file_digest: str
    imported_at: datetime


@dataclass(frozen=True, slots=True)
class BankEntry:
    id: int
    account: str
    entry_key: str
    statement_id: int
    booking_date: date
    value_date: date | None
    amount: int
    direction: str
    currency: str
    bank_reference: str | None
    end_to_end_id: str | None
    counterparty: str | None
    remittance: str | None
    bank_code: str | None
    payout_id: int | None
    imported_at: datetime

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        for key in ("booking_date", "value_date", "imported_at"):
            doc[key] = doc[key].isoformat() if doc[key] is not None else None
        return doc


@dataclass(frozen=True, slots=True)
class StatementOutcome:
    """One statement of an import: ``known`` when the same statement was imported before."""

    statement_ref: str
    account: str
    period_start: date
    period_end: date
    known: bool
    entries_added: int
    entries_known: int


@dataclass(frozen=True, slots=True)
class ImportResult:
    statements: tuple[StatementOutcome, ...]

    @property
    def entries_added(self) -> int:
        return sum(s.entries_added for s in self.statements)

    @property
    def entries_known(self) -> int:
        return sum(s.entries_known for s in self.statements)
