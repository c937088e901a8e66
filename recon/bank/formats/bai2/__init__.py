"""BAI2: ``reader`` (the bai2 library, integrity checked) and ``writer``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, ClassVar

from recon.bank.formats.bai2 import reader, writer
from recon.bank.formats.protocol import Entry, Statement, StatementToWrite


class Bai2:
    name: ClassVar[str] = "bai2"
    max_bytes: ClassVar[int | None] = reader.MAX_BYTES
    field_names: ClassVar[Mapping[str, str]] = {
        "amount": "16 amount", "currency": "03 currency", "direction": "16 type code", "booking_date": "02 as-of date",
        "value_date": "02 as-of date", "bank_reference": "16 bank reference", "end_to_end_id": "16 customer reference",
        "counterparty": "16 text", "remittance": "16 text", "bank_code": "16 type code", "account": "03 account",
        "opening_balance": "03 010", "closing_balance": "03 015", "statement_id": "02", "status": "02 group status",
    }

    def detect(self, head: bytes) -> bool:
        return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"01,")

    def parse(self, path: Path) -> Iterator[Entry | Statement]:
        return reader.read(path)

    def write(self, out: BinaryIO, statements: Sequence[StatementToWrite]) -> None:
        writer.write(out, statements)
