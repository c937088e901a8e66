"""The bank statement format protocol: all a format author needs, and all recon knows of a format.

A format reads a file into ``Entry`` and ``Statement`` items and writes statements back. It knows its own
syntax and nothing of recon: no currency table (amounts stay as the decimal text the file wrote, ``Amount``),
no accounts, no database. recon's importer (``recon.bank.importer``) converts amounts exactly, checks the
balances and the account, and stores; it asks a format only through ``StatementFormat``.

Order of ``parse``: the entries of a statement first, each naming its statement by ``statement_index``, then
that ``Statement`` (with both balances). MT940 and BAI2 write the closing balance after the entries, and a
streamed camt.053 statement cannot be held whole; this order serves all three without buffering.

Positions: every item carries where it was read (``Position``: a line, or an XML path such as
``/Document/BkToCstmrStmt/Stmt[2]/Ntry[14]``), and a format names its fields in its own words
(``field_names``: camt ``Amt``, MT940 ``:61: amount``) so that an error says file, place and field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import BinaryIO, ClassVar, Literal, Protocol

Direction = Literal["credit", "debit"]

#: the fields an error may name; a format maps each to its own name in ``field_names``
FIELDS = ("amount", "currency", "direction", "booking_date", "value_date", "bank_reference", "end_to_end_id",
          "counterparty", "remittance", "bank_code", "account", "opening_balance", "closing_balance",
          "statement_id", "status")


@dataclass(frozen=True, slots=True)
class Position:
    """Where an item was read: a 1-based ``line``, or an XML ``path`` (``/Document/…/Ntry[14]``)."""

    line: int | None = None
    path: str | None = None

    def render(self, source: str, field_name: str | None = None) -> str:
        """``stmt.xml /Document/…/Ntry[14]/Amt`` or ``stmt.sta:14`` (the field then follows the message)."""
        if self.path is not None:
            return f"{source} {self.path}" + (f"/{field_name}" if field_name else "")
        return f"{source}:{self.line}" if self.line is not None else source


@dataclass(frozen=True, slots=True)
class Amount:
    """An amount exactly as the file wrote it: unsigned decimal ``text`` (``.`` as the separator), in major
    units (``"12.34"``) or, where the format counts in minor units (BAI2), ``minor=True`` (``"1234"``)."""

    text: str
    currency: str
    minor: bool = False


@dataclass(frozen=True, slots=True)
class Balance:
    """A booked balance: ``amount`` unsigned, ``negative`` for a debit balance; ``day`` as the bank dates it."""

    amount: Amount
    negative: bool
    day: date | None


@dataclass(frozen=True, slots=True)
class Entry:
    """One booked entry. Text fields are as the bank sent them (None when absent); recon redacts them."""

    statement_index: int  #: 0-based, the ``Statement`` that follows this statement's entries
    position: Position
    amount: Amount
    direction: Direction
    booking_date: date
    value_date: date | None = None
    bank_reference: str | None = None  #: camt AcctSvcrRef, MT940 :61: after //, BAI2 16 bank reference
    end_to_end_id: str | None = None
    counterparty: str | None = None
    remittance: str | None = None
    bank_code: str | None = None  #: the bank's transaction code (camt BkTxCd, MT940 :61: type, BAI2 type)
    #: positions of single fields when they differ from ``position`` (MT940 :86: is its own line)
    field_positions: Mapping[str, Position] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement (a camt ``Stmt``, an MT940 message, a BAI2 account record), yielded after its entries."""

    index: int
    position: Position
    statement_id: str  #: camt Stmt/Id, MT940 :20:, BAI2 file id + group + account
    sequence: str  #: camt ElctrncSeqNb, MT940 :28C:, BAI2 file sequence; "" when the bank sends none
    account: str  #: as the file names it: an IBAN, an account number, MT940 :25: as written
    opening: Balance
    closing: Balance
    period_start: date
    period_end: date
    entries: int  #: the booked entries yielded for it


class FormatError(Exception):
    """The file is not valid in its format: ``message`` at ``position``, about ``field`` (one of FIELDS)."""

    def __init__(self, message: str, position: Position | None = None, field: str | None = None) -> None:
        self.message = message
        self.position = position or Position()
        self.field = field
        super().__init__(message)


# --- writing --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryToWrite:
    """An entry for a writer: ``amount`` in minor units (>= 0) of the statement's currency."""

    amount: int
    direction: Direction
    booking_date: date
    value_date: date | None = None
    bank_reference: str | None = None
    end_to_end_id: str | None = None
    counterparty: str | None = None
    remittance: str | None = None


@dataclass(frozen=True, slots=True)
class StatementToWrite:
    """A statement for a writer. ``exponent``: the currency's minor-unit digits (the caller's ISO-4217 table).
    ``closing``: None computes opening + credits - debits; set it only to write a statement that does not
    add up (a test's fault)."""

    account: str
    currency: str
    exponent: int
    statement_id: str
    opening: int  #: signed minor units
    period_start: date
    period_end: date
    entries: Sequence[EntryToWrite]
    sequence: str = "1"
    closing: int | None = None

    def closing_balance(self) -> int:
        if self.closing is not None:
            return self.closing
        return self.opening + sum(e.amount if e.direction == "credit" else -e.amount for e in self.entries)


class StatementFormat(Protocol):
    """One bank statement format. Instances are stateless; the registry holds one of each."""

    #: the name on the command line (``--format``) and in the database
    name: ClassVar[str]
    #: what the error messages call the fields (FIELDS -> the format's own names)
    field_names: ClassVar[Mapping[str, str]]
    #: None: parsed streaming, memory bounded whatever the size; else the largest file accepted, in bytes
    max_bytes: ClassVar[int | None]

    def detect(self, head: bytes) -> bool:
        """Whether a file starting with ``head`` (its first bytes, up to 4 KiB) is in this format."""
        ...

    def parse(self, path: Path) -> Iterator[Entry | Statement]:
        """The file's entries and statements (see the module docstring for the order).

        Raises FormatError naming the position and field of the first problem. Never reads beyond the file
        (no network, no external entity) and never expands entities."""
        ...

    def write(self, out: BinaryIO, statements: Sequence[StatementToWrite]) -> None:
        """The statements, in this format, to ``out``."""
        ...
