"""The camt.053 reader's prolog check (recon.bank.formats.camt053.prolog): a DTD, an entity declaration or an
external reference is refused before a parser exists, wherever in the prolog it stands, and what the check lets
through is parsed with the encoding it checked. Hostile files from defusedxml's own test suite
(tests/bank/samples.py), and variants written here for each place a prolog can hide a declaration in."""

from __future__ import annotations

import io
import time
from datetime import date
from pathlib import Path
from xml.etree.ElementTree import ParseError, XMLParser

import pytest

from recon.bank.formats import registry
from recon.bank.formats.camt053 import prolog, reader
from recon.bank.formats.protocol import Entry, EntryToWrite, FormatError, StatementToWrite
from tests.bank.samples import OKANE, XML_HOSTILE, sample
from tests.bank.test_readers import LAUGHS

DEFUSEDXML_HOSTILE = ["xmlbomb", "xmlbomb2", "quadratic", "cyclic", "external", "external_file", "dtd", "dtd_element"]
ROOT = '<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt/></Document>\n'


def _read(path: Path) -> list[object]:
    return list(reader.read(path))


def _statement_bytes(counterparty: str = "Stripe") -> bytes:
    day = date(2026, 11, 2)
    entry = EntryToWrite(amount=1234, direction="credit", booking_date=day, bank_reference="R1",
                         counterparty=counterparty)
    out = io.BytesIO()
    registry.writer("camt053").write(out, [StatementToWrite(
        account="NL91ABNA0417164300", currency="EUR", exponent=2, statement_id="S1", opening=0, period_start=day,
        period_end=day, entries=[entry])])
    return out.getvalue()


@pytest.mark.parametrize("name", DEFUSEDXML_HOSTILE)
def test_camt053_reader__refuses_defusedxmls_hostile_files_at_their_doctype(name: str) -> None:
    path = sample(XML_HOSTILE / f"{name}.xml")
    started = time.monotonic()
    with pytest.raises(FormatError, match=r"has a DTD \(<!DOCTYPE>\)") as caught:
        _read(path)
    assert time.monotonic() - started < 1.0
    lines = path.read_text(encoding="utf-8").splitlines()
    assert caught.value.position.line == next(n for n, line in enumerate(lines, 1) if "<!DOCTYPE" in line)


@pytest.mark.parametrize("name", ["simple", "simple-ns"])
def test_camt053_reader__lets_a_prolog_of_comments_and_instructions_through_to_the_parser(name: str) -> None:
    # defusedxml's harmless files: the check passes their comment and processing instruction, and the reader
    # then refuses them for what they are (not ISO 20022), naming their root element
    with pytest.raises(FormatError, match="the root element is root, not Document"):
        _read(sample(XML_HOSTILE / f"{name}.xml"))


@pytest.mark.parametrize(("text", "line", "message"), [
    ("<!-- a statement -->\n<!DOCTYPE d [<!ENTITY x 'y'>]>\n" + ROOT, 2, "has a DTD"),
    ('<?xml version="1.0"?>\n<?bank export?>\n\n<!DOCTYPE Document SYSTEM "http://127.0.0.1:9/d">\n' + ROOT, 4,
     "has a DTD"),
    ("\ufeff<!DOCTYPE d>" + ROOT, 1, "has a DTD"),
    ("<!ENTITY x 'y'>\n" + ROOT, 1, "declares an XML entity"),
    ("<!doctype d>\n" + ROOT, 1, "has the declaration"),
    ("<![CDATA[x]]>\n" + ROOT, 1, "has the declaration"),
], ids=["after-a-comment", "after-instructions", "after-a-bom", "entity-alone", "lower-case", "cdata"])
def test_camt053_reader__refuses_a_declaration_wherever_the_prolog_hides_it(
        text: str, line: int, message: str, tmp_path: Path) -> None:
    path = tmp_path / "hostile.xml"
    path.write_bytes(text.encode("utf-8"))
    with pytest.raises(FormatError, match=message) as caught:
        _read(path)
    assert caught.value.position.line == line


@pytest.mark.parametrize(("body", "reason"), [
    ('<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><!DOCTYPE d [<!ENTITY x "y">]>'
     "<BkToCstmrStmt>&x;</BkToCstmrStmt></Document>", r"\(not well-formed \(invalid token\), column \d+\)"),
    ('<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt>&x;</BkToCstmrStmt></Document>',
     r"\(undefined entity, column \d+\)"),
], ids=["dtd-after-the-root", "undeclared-entity"])
def test_camt053_reader__after_the_root_a_declaration_or_an_entity_is_not_well_formed(
        body: str, reason: str, tmp_path: Path) -> None:
    path = tmp_path / "hostile.xml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(FormatError, match="not well-formed XML " + reason):
        _read(path)


def test_camt053_reader__a_doctype_inside_a_comment_is_no_dtd(tmp_path: Path) -> None:
    original = sample(OKANE / "test1.xml").read_bytes()
    declaration_end = original.index(b"?>") + 2
    path = tmp_path / "commented.xml"
    comment = b"\n<!-- <!DOCTYPE d [<!ENTITY x 'y'>]> -->"
    path.write_bytes(original[:declaration_end] + comment + original[declaration_end:])
    plain = tmp_path / "plain.xml"
    plain.write_bytes(original)
    amounts = [[e.amount for e in _read(p) if isinstance(e, Entry)] for p in (path, plain)]
    assert amounts[0] == amounts[1] and amounts[0]


@pytest.mark.parametrize(("encode", "message"), [
    (lambda text: text.encode("utf-16"), "UTF-16 or UTF-32"),
    (lambda text: text.encode("utf-16-le"), "UTF-16 or UTF-32"),
    (lambda text: text.encode("utf-32"), "UTF-16 or UTF-32"),
    (lambda text: text.replace('encoding="UTF-8"', 'encoding="windows-1252"').encode("cp1252"),
     "declares encoding 'windows-1252'"),
    (lambda text: b"\xef\xbb\xbf" + text.replace('encoding="UTF-8"', 'encoding="ISO-8859-1"').encode("latin-1"),
     "byte order mark but declares encoding 'ISO-8859-1'"),
], ids=["utf-16", "utf-16-without-bom", "utf-32", "windows-1252", "bom-and-latin-1"])
def test_camt053_reader__refuses_an_encoding_it_cannot_check_by_name(encode: object, message: str,
                                                                      tmp_path: Path) -> None:
    path = tmp_path / "encoded.xml"
    path.write_bytes(encode(_statement_bytes().decode("utf-8")))  # type: ignore[operator]
    with pytest.raises(FormatError, match=message):
        _read(path)


@pytest.mark.parametrize("variant", ["latin-1", "utf-8-bom", "no-declaration"])
def test_camt053_reader__reads_the_encodings_it_checks_as_declared(variant: str, tmp_path: Path) -> None:
    text = _statement_bytes("Müller Zahlungsdienste").decode("utf-8")
    data = {"latin-1": text.replace('encoding="UTF-8"', 'encoding="ISO-8859-1"').encode("latin-1"),
            "utf-8-bom": b"\xef\xbb\xbf" + text.encode("utf-8"),
            "no-declaration": text[text.index("?>") + 2:].lstrip().encode("utf-8")}[variant]
    path = tmp_path / "statement.xml"
    path.write_bytes(data)
    (entry,) = [e for e in _read(path) if isinstance(e, Entry)]
    assert entry.counterparty == "Müller Zahlungsdienste"


def test_camt053_reader__refuses_a_prolog_longer_than_it_reads(tmp_path: Path) -> None:
    path = tmp_path / "long.xml"
    path.write_bytes(b"<!--" + b"x" * prolog.HEAD_MAX + b"-->\n" + ROOT.encode())
    with pytest.raises(FormatError, match="no root element in its first 64 KiB"):
        _read(path)


def test_expat__bounds_entity_amplification_by_itself() -> None:
    """The second line the prolog module names: expat (>= 2.4) stops a billion laughs even when asked to parse it
    (the reader never asks: the prolog check refuses it first)."""
    parser = XMLParser()  # a billion laughs parsed on purpose, to see expat refuse it
    started = time.monotonic()
    with pytest.raises(ParseError, match="amplification"):
        parser.feed(LAUGHS)
        parser.close()
    assert time.monotonic() - started < 5.0
