"""ISO 20022 camt.053 (001.02, 001.08): ``reader`` (streamed; ``prolog`` refuses a DTD first) and ``writer``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, ClassVar

from recon.bank.formats.camt053 import reader, writer
from recon.bank.formats.protocol import Entry, Statement, StatementToWrite


class Camt053:
    """camt.053: XML, so any file that starts with ``<`` (after a BOM or blanks) is given to the XML reader,
    which names the version it found or refuses what is not camt.053 (a DTD included) by name."""

    name: ClassVar[str] = "camt053"
    max_bytes: ClassVar[int | None] = None  # streamed
    field_names: ClassVar[Mapping[str, str]] = {
        "amount": "Amt", "currency": "Amt/@Ccy", "direction": "CdtDbtInd", "booking_date": "BookgDt",
        "value_date": "ValDt", "bank_reference": "AcctSvcrRef", "end_to_end_id": "NtryDtls/TxDtls/Refs/EndToEndId",
        "counterparty": "NtryDtls/TxDtls/RltdPties", "remittance": "NtryDtls/TxDtls/RmtInf",
        "bank_code": "BkTxCd", "account": "Acct/Id", "opening_balance": "Bal", "closing_balance": "Bal",
        "statement_id": "Id", "status": "Sts",
    }

    def __init__(self, version: str = "08") -> None:
        self.version = version  #: what ``write`` writes; reading takes both

    def detect(self, head: bytes) -> bool:
        return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<")

    def parse(self, path: Path) -> Iterator[Entry | Statement]:
        return reader.read(path)

    def write(self, out: BinaryIO, statements: Sequence[StatementToWrite]) -> None:
        writer.write(out, statements, version=self.version)
