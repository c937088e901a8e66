"""recon.bank.importer's check for an entry key seen twice in one file: it keeps only each key's ``hash()`` and
reads the temporary file back when a hash comes again, so a repeat is refused naming both places, and two keys
whose hashes collide are both kept. No database: the file is read and checked before anything is written."""

from __future__ import annotations

import io
from datetime import date, timedelta
from pathlib import Path

import pytest

import recon.bank.importer as importer
from recon.bank.config import BankConfig
from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.bank.importer import read_statement_file
from recon.errors import BankImportRejected

IBAN = "NL91ABNA0417164300"
CONFIG = BankConfig.from_table({"accounts": {"main": {"iban": IBAN, "currency": "EUR"}}})
DAY = date(2026, 11, 2)


def _statement(refs: list[str | None], *, statement_id: str, day: date = DAY) -> StatementToWrite:
    return StatementToWrite(account=IBAN, currency="EUR", exponent=2, statement_id=statement_id, opening=0,
                            period_start=day, period_end=day, entries=[
                                EntryToWrite(amount=100 + n, direction="credit", booking_date=day, bank_reference=ref,
                                             remittance=f"PAYOUT {n}") for n, ref in enumerate(refs)])


def _file(tmp_path: Path, statements: list[StatementToWrite], fmt: str = "camt053") -> Path:
    out = io.BytesIO()
    registry.writer(fmt).write(out, statements)
    path = tmp_path / f"statement.{fmt}"
    path.write_bytes(out.getvalue())
    return path


def _keys(path: Path) -> list[str]:
    plan = read_statement_file(path, config=CONFIG)
    try:
        return [e.entry_key for e in plan.entries()]
    finally:
        plan.close()


def test_importer__overlapping_statements_of_one_account_in_one_file_are_refused_naming_both(tmp_path: Path) -> None:
    monday = _statement(["A1", "A2", "A3"], statement_id="MON")
    overlap = _statement(["B1", "A2"], statement_id="MON-TUE", day=DAY + timedelta(days=1))
    path = _file(tmp_path, [monday, overlap])
    with pytest.raises(BankImportRejected) as caught:
        read_statement_file(path, config=CONFIG)
    assert str(caught.value) == (
        f"{path} /Document/BkToCstmrStmt/Stmt[2]/Ntry[2]/AcctSvcrRef: entry repeats bank reference 'A2' of the "
        f"entry at {path} /Document/BkToCstmrStmt/Stmt[1]/Ntry[2] (the same account's statements overlap "
        "within the file)")


@pytest.mark.parametrize("fmt", ["camt053", "mt940"])
def test_importer__keys_whose_hashes_collide_are_both_kept_and_a_real_repeat_is_still_refused(
        fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importer, "hash", lambda _key: 7, raising=False)  # every key collides with every other
    refs: list[str | None] = ["R1", "R2", None, None, "R3"]  # two fallback keys: the same day, other texts
    first = _statement(refs, statement_id="S1")
    second = _statement(["R4", "R5"], statement_id="S2", day=DAY + timedelta(days=1))
    assert len(set(_keys(_file(tmp_path, [first, second], fmt)))) == 7
    repeated = _statement(["R1", "R2", "R1"], statement_id="S1")
    with pytest.raises(BankImportRejected, match="entry repeats bank reference 'R1' of the entry at "):
        read_statement_file(_file(tmp_path, [repeated], fmt), config=CONFIG)
    across = _statement(["R9", "R2"], statement_id="S2", day=DAY + timedelta(days=1))
    with pytest.raises(BankImportRejected, match=r"bank reference 'R2' .* statements overlap within the file"):
        read_statement_file(_file(tmp_path, [first, across], fmt), config=CONFIG)
