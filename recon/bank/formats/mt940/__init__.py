"""SWIFT MT940: ``reader`` (the mt-940 library, a message at a time) and ``writer``."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, ClassVar

from recon.bank.formats.mt940 import reader, writer
from recon.bank.formats.protocol import Entry, Statement, StatementToWrite

#: a SWIFT block header, or a :20: tag on a line of its own within the first lines
_HEAD = re.compile(rb"(?:^|[\r\n])(?:\{1:|:20:)")


class Mt940:
    name: ClassVar[str] = "mt940"
    max_bytes: ClassVar[int | None] = reader.MAX_BYTES
    field_names: ClassVar[Mapping[str, str]] = {
        "amount": ":61: amount", "currency": ":60F: currency", "direction": ":61: mark",
        "booking_date": ":61: entry date", "value_date": ":61: value date", "bank_reference": ":61: bank reference",
        "end_to_end_id": ":86: EREF", "counterparty": ":86: NAME", "remittance": ":86:",
        "bank_code": ":61: type", "account": ":25:", "opening_balance": ":60F:", "closing_balance": ":62F:",
        "statement_id": ":20:", "status": ":61: mark",
    }

    def detect(self, head: bytes) -> bool:
        return _HEAD.search(head) is not None and b":25:" in head

    def parse(self, path: Path) -> Iterator[Entry | Statement]:
        return reader.read(path)

    def write(self, out: BinaryIO, statements: Sequence[StatementToWrite]) -> None:
        writer.write(out, statements)
