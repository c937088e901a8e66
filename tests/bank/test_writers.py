"""The writers, checked by what we did not write: the mt-940 and bai2 libraries read back every field, and ISO
20022's published camt.053.001.08 and .001.02 schemas validate the XML (fetched by tests/bank/get_samples.py:
tests/bank/samples.py)."""

from __future__ import annotations

import io
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from recon.bank.formats import registry
from recon.bank.formats.protocol import Entry, EntryToWrite, Statement, StatementToWrite
from tests.bank.samples import ISO20022, sample

ENTRIES = (
    EntryToWrite(amount=123456, direction="credit", booking_date=date(2026, 11, 2), value_date=date(2026, 11, 3),
                 bank_reference="BR0001", end_to_end_id="po_1Abc", counterparty="Stripe Payments Europe",
                 remittance="STRIPE PAYOUT po_1Abc"),
    EntryToWrite(amount=99, direction="debit", booking_date=date(2026, 11, 2), bank_reference="BR0002",
                 remittance="BANK FEE"),
    EntryToWrite(amount=5000, direction="credit", booking_date=date(2026, 11, 3)),
)
STATEMENT = StatementToWrite(account="NL91ABNA0417164300", currency="EUR", exponent=2, statement_id="STMT-2026-11",
                             opening=-1000, period_start=date(2026, 11, 2), period_end=date(2026, 11, 3),
                             entries=ENTRIES, sequence="7")


def _written(name: str, version: str = "08") -> bytes:
    out = io.BytesIO()
    registry.writer(name, camt_version=version).write(out, [STATEMENT])
    return out.getvalue()


def test_statement_to_write__closing_is_opening_plus_credits_minus_debits() -> None:
    assert STATEMENT.closing_balance() == -1000 + 123456 - 99 + 5000


def test_mt940_writer__the_mt940_library_reads_back_every_field(tmp_path: Path) -> None:
    import mt940

    path = tmp_path / "s.sta"
    path.write_bytes(_written("mt940"))
    parsed = mt940.parse(str(path))
    assert parsed.data["transaction_reference"] == "STMT-2026-11"
    assert parsed.data["account_identification"] == "NL91ABNA0417164300"
    assert parsed.data["final_opening_balance"].amount.amount == Decimal("-10.00")
    assert parsed.data["final_closing_balance"].amount.amount == Decimal("1273.57")
    rows = [(t.data["amount"].amount, t.data["bank_reference"], t.data["date"].isoformat()[:10])
            for t in parsed.transactions]
    assert rows == [(Decimal("1234.56"), "BR0001", "2026-11-03"), (Decimal("-0.99"), "BR0002", "2026-11-02"),
                    (Decimal("50.00"), None, "2026-11-03")]
    assert "/EREF/po_1Abc" in parsed.transactions[0].data["transaction_details"].replace("\n", "")


def test_bai2_writer__the_bai2_library_reads_it_with_every_total_checked(tmp_path: Path) -> None:
    from bai2 import bai2

    parsed = bai2.parse_from_string(_written("bai2").decode(), check_integrity=True)
    # one group per as-of day: the 2nd (two entries), then the 3rd
    days = [(g.header.as_of_date, g.children[0]) for g in parsed.children]
    assert [d for d, _ in days] == [date(2026, 11, 2), date(2026, 11, 3)]
    summaries = [{s.type_code.code: s.amount for s in a.header.summary_items} for _, a in days]
    assert summaries == [{"010": -1000, "015": -1000 + 123456 - 99}, {"010": 122357, "015": 127357}]
    rows = [(t.type_code.transaction.value, t.amount, t.bank_reference) for _, a in days for t in a.children]
    assert rows == [("credit", 123456, "BR0001"), ("debit", 99, "BR0002"), ("credit", 5000, None)]
    assert days[0][1].children[0].text == "Stripe Payments Europe STRIPE PAYOUT po_1Abc"


@pytest.mark.parametrize("version", ["08", "02"])
def test_camt053_writer__is_valid_against_iso_20022s_schema(version: str, tmp_path: Path) -> None:
    import xmlschema

    schema = xmlschema.XMLSchema(str(sample(ISO20022 / f"camt.053.001.{version}.xsd")))
    path = tmp_path / "s.xml"
    path.write_bytes(_written("camt053", version))
    schema.validate(str(path))


@pytest.mark.parametrize(("name", "version"), [("camt053", "08"), ("camt053", "02"), ("mt940", ""), ("bai2", "")])
def test_writers__our_readers_read_back_what_was_written(name: str, version: str, tmp_path: Path) -> None:
    path = tmp_path / "s"
    path.write_bytes(_written(name, version or "08"))
    fmt = registry.detect(path.read_bytes()[:4096])
    assert fmt is not None and fmt.name == name
    items = list(fmt.parse(path))
    entries = [i for i in items if isinstance(i, Entry)]
    statements = [i for i in items if isinstance(i, Statement)]
    assert [(e.direction, e.bank_reference, e.booking_date) for e in entries] == [
        (w.direction, w.bank_reference, w.booking_date) for w in ENTRIES]
    assert statements[0].opening.negative and not statements[-1].closing.negative
    if name != "bai2":
        assert [e.end_to_end_id for e in entries] == ["po_1Abc", None, None]
        assert entries[0].counterparty == "Stripe Payments Europe"


def test_writers__refuse_a_reference_the_format_cannot_hold() -> None:
    statement = StatementToWrite(
        account=STATEMENT.account, currency="EUR", exponent=2, statement_id="S", opening=0,
        period_start=date(2026, 11, 2), period_end=date(2026, 11, 2),
        entries=(EntryToWrite(amount=1, direction="credit", booking_date=date(2026, 11, 2), bank_reference="X" * 17),))
    with pytest.raises(ValueError, match="16"):
        registry.writer("mt940").write(io.BytesIO(), [statement])
