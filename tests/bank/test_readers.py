"""The readers against files we did not write: the mt-940 project's and the bai2 project's test files, the OCA
importer's and okane's camt.053 statements, and (where the hand-made ../shared/samples copy is present) the
camt_parser project's examples (tests/bank/samples.py; every published file: test_published_samples.py). Expected
values are read off the files themselves (or the mt-940 project's own expected-results YAML), not off our code."""

from __future__ import annotations

import time
from datetime import date
from pathlib import Path

import pytest

from recon.bank.formats import registry
from recon.bank.formats.protocol import Entry, FormatError, Statement
from tests.bank.samples import BAI2, CAMT, MT940, OCA_CAMT, OKANE, sample


def _read(path: Path) -> tuple[list[Entry], list[Statement]]:
    fmt = registry.detect(path.read_bytes()[: registry.HEAD_BYTES])
    assert fmt is not None, path
    items = list(fmt.parse(path))
    return [i for i in items if isinstance(i, Entry)], [i for i in items if isinstance(i, Statement)]


@pytest.mark.parametrize(("path", "name"), [
    (OCA_CAMT / "test-camt053", "camt053"), (OKANE / "test1.xml", "camt053"),
    (CAMT / "valid_example_v8.xml", "camt053"),
    (MT940 / "jejik" / "ing.sta", "mt940"), (MT940 / "cmxl" / "mt940.sta", "mt940"),
    (BAI2 / "svb_us_example.bai2", "bai2"), (BAI2 / "nwb_example.bai2", "bai2"),
])
def test_registry__detects_the_format_from_the_content(path: Path, name: str, tmp_path: Path) -> None:
    # the same bytes under a misleading name: detection reads the content only
    renamed = tmp_path / "statement.csv"
    renamed.write_bytes(sample(path).read_bytes())
    fmt = registry.detect(renamed.read_bytes()[: registry.HEAD_BYTES])
    assert fmt is not None and fmt.name == name


def test_camt053_reader__reads_the_camt_parser_projects_001_02_example() -> None:
    entries, statements = _read(sample(CAMT / "valid_example.xml"))
    (statement,) = statements
    assert statement.statement_id == "0352C5320131227220503"
    assert statement.account == "DE14740618130000033626"
    assert (statement.opening.amount.text, statement.closing.amount.text) == ("33.06", "23.06")
    assert [(e.direction, e.amount.text) for e in entries] == [
        ("debit", "2.00"), ("debit", "3.00"), ("credit", "1.00"), ("debit", "6.00")]
    assert entries[0].bank_reference == "2013122710583450000"
    assert entries[0].end_to_end_id == "EndToEndReference"
    assert entries[0].position.path == "/Document/BkToCstmrStmt/Stmt[1]/Ntry[1]"
    assert entries[0].booking_date == date(2013, 12, 27)


def test_camt053_reader__reads_the_001_08_status_and_party_structure() -> None:
    entries, statements = _read(sample(CAMT / "valid_example_v8.xml"))
    assert statements[0].account == "CH1111111111111111111"
    assert entries[0].bank_reference == "9999171ZC0173078"
    assert entries[0].amount.text == "474.4" and entries[0].direction == "credit"


@pytest.mark.parametrize("name", ["valid_example_v4.xml", "valid_example_with_datetime.xml"])
def test_camt053_reader__refuses_other_versions_by_name(name: str) -> None:
    with pytest.raises(FormatError, match=r"camt\.053\.001\.(04|10) is not supported"):
        _read(sample(CAMT / name))


def test_mt940_reader__agrees_with_the_mt940_projects_expected_results() -> None:
    import yaml  # the mt-940 project's expected results are YAML (PyYAML comes with the test tools)

    path = sample(MT940 / "jejik" / "ing.sta")
    expected = yaml.load(sample(MT940 / "jejik" / "ing.yml").read_text(), Loader=yaml.Loader)
    entries, statements = _read(path)
    assert [abs(t.data["amount"].amount) for t in expected] == [
        __import__("decimal").Decimal(e.amount.text) for e in entries]
    assert statements[0].account == "0001234567"


def test_mt940_reader__cuts_a_file_into_its_messages() -> None:
    entries, statements = _read(sample(MT940 / "jejik" / "abnamro.sta"))
    assert len(statements) >= 2
    assert {e.statement_index for e in entries} <= {s.index for s in statements}
    text = (MT940 / "jejik" / "abnamro.sta").read_text(encoding="latin-1").splitlines()
    assert all(text[e.position.line - 1].startswith(":61:") for e in entries if e.position.line)


def test_bai2_reader__reads_the_bai2_projects_svb_example() -> None:
    entries, statements = _read(sample(BAI2 / "svb_us_example.bai2"))
    assert statements[0].account == "1234567890"
    assert (statements[0].opening.amount.text, statements[0].closing.amount.text) == ("34726979", "35217175")
    assert entries[0].amount.text == "490196" and entries[0].amount.minor
    assert entries[0].bank_reference == "172629"
    assert entries[0].remittance == "SOME PAYMENT ACH OFFSET"


def test_bai2_reader__refuses_an_edited_control_total(tmp_path: Path) -> None:
    text = sample(BAI2 / "svb_us_example.bai2").read_text()
    edited = tmp_path / "edited.bai2"
    edited.write_text(text.replace("16,142,490196,", "16,142,490197,", 1))
    with pytest.raises(FormatError, match="BAI2 parser"):
        _read(edited)


# --- hostile XML ------------------------------------------------------------------------------------------

LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol">""" + "".join(
    f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10)) + """]>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt>&lol9;</BkToCstmrStmt></Document>
"""
EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt>&x;</BkToCstmrStmt></Document>
"""
DTD_ONLY = """<?xml version="1.0"?>
<!DOCTYPE Document SYSTEM "http://127.0.0.1:9/camt.dtd">
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"/>
"""


@pytest.mark.parametrize("body", [LAUGHS, EXTERNAL, DTD_ONLY], ids=["billion-laughs", "external-entity", "dtd"])
def test_camt053_reader__refuses_a_dtd_and_entities_quickly_never_expanding_them(body: str, tmp_path: Path) -> None:
    path = tmp_path / "hostile.xml"
    path.write_text(body)
    started = time.monotonic()
    with pytest.raises(FormatError, match=r"DTD|entity"):
        _read(path)
    assert time.monotonic() - started < 1.0


def test_camt053_reader__names_the_line_of_a_truncated_file(tmp_path: Path) -> None:
    text = sample(OCA_CAMT / "test-camt053").read_text()
    path = tmp_path / "cut.xml"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(FormatError, match="truncated") as caught:
        _read(path)
    assert caught.value.position.line is not None and caught.value.position.line > 10
