"""Every published sample tests/bank/get_samples.py fetches, through recon's readers and importer check, against
what the samples' own projects say about them (tests/bank/samples.py names the sources).

Expected values come from the files or from the third-party projects' own results, never from recon:

- MT940: each statement file of the mt-940 project's ``mt940_tests`` against that project's expected results
  (the ``.yml`` beside it: what the mt-940 parser gives); the fragments in that folder (a single tag, no ``:25:``)
  are no statement; the MT942 interim reports and a message without a closing balance are refused naming the
  line; and the importer's balance check (opening + entries = closing) is held to the arithmetic of the file.
- BAI2: each of the bai2 project's files against the bai2 parser (the reference implementation of the format).
- camt.053: the OCA Odoo importer's test statement against that importer's recorded results (``golden-*.pydata``),
  its camt.053.001.04 files refused by version, and okane's statements against the XML read here directly.
"""

from __future__ import annotations

import ast
import re
from decimal import Decimal
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import yaml  # PyYAML: the mt-940 project's expected results (it comes with the test tools: bandit needs it)
from bai2 import bai2 as reference  # the bai2 project's own parser (recon's dependency)

from recon.bank.config import BankConfig
from recon.bank.formats import registry
from recon.bank.formats.protocol import Entry, FormatError, Statement
from recon.bank.importer import read_statement_file
from recon.errors import BankImportRejected
from tests.bank.samples import BAI2, MT940, OCA_CAMT, OKANE, sample


def _read(path: Path) -> tuple[list[Entry], list[Statement]]:
    fmt = registry.detect(path.read_bytes()[: registry.HEAD_BYTES])
    assert fmt is not None, path
    items = list(fmt.parse(path))
    return [i for i in items if isinstance(i, Entry)], [i for i in items if isinstance(i, Statement)]


def _signed(text: str, negative: bool) -> Decimal:
    return -Decimal(text) if negative else Decimal(text)


def _import(path: Path, accounts: dict[str, str]) -> int:
    """The importer's checks (accounts, sums, repeats) on ``path``, with ``accounts`` (number -> currency) as
    ours; the number of entries it would store. No database: the check comes before any write."""
    config = BankConfig.from_table({"accounts": {
        f"a{n}": {"number": number, "currency": currency} for n, (number, currency) in enumerate(accounts.items())}})
    plan = read_statement_file(path, config=config)
    try:
        return len(list(plan.entries()))
    finally:
        plan.close()


# --- MT940: the mt-940 project's test statements ------------------------------------------------------------

#: single tags or lines, not statements (no :20:/:25: message): detection says so
MT940_FRAGMENTS = [
    "betterplace/amount_formats.sta", "betterplace/currency_in_25.sta", "betterplace/empty_86.sta",
    "betterplace/empty_entry_date.sta", "betterplace/empty_line.sta", "betterplace/missing_crlf_at_end.sta",
    "cmxl/account_balance_credit.sta", "cmxl/account_balance_debit.sta", "cmxl/account_identification_iban.sta",
    "cmxl/account_identification_legacy.sta", "cmxl/available_balance.sta", "cmxl/closing_balance.sta",
    "cmxl/reference.sta", "cmxl/statement_details.sta", "cmxl/statement_line.sta", "cmxl/statement_number.sta",
    "self-provided/empty_non_swift.sta", "self-provided/invalid_statement.sta", "self-provided/sparkassen.sta",
]
#: not statements recon reads: MT942 interim reports (no :60F: opening balance) and a message with no closing one
MT940_REFUSED = {
    "mBank/mt942.sta": (2, "no :60F:/:60M: opening balance"),
    "self-provided/mt942.sta": (1, "no :60F:/:60M: opening balance"),
    "self-provided/gv_codes.sta": (1, "no :62F:/:62M: closing balance"),
}
#: statements: read, and compared with the mt-940 project's expected results
MT940_STATEMENTS = [
    "betterplace/sepa_mt9401.sta", "betterplace/sepa_snippet.sta", "betterplace/sepa_snippet_broken.sta",
    "betterplace/with_binary_character.sta", "cmxl/mt940.sta", "jejik/abnamro.sta", "jejik/generic.sta",
    "jejik/ing.sta", "jejik/knab.sta", "jejik/postfinance.sta", "jejik/rabobank-iban.sta", "jejik/rabobank.sta",
    "jejik/sns.sta", "jejik/triodos.sta", "mBank/mt940.sta", "mBank/with_newline_in_tnr.sta",
    "sberbank/171011_01234945.sta", "self-provided/details_60-63.sta", "self-provided/february_30.sta",
    "self-provided/long_statement_number.sta", "self-provided/malformed_details.sta",
    "self-provided/overly_long_details.sta", "self-provided/raiffeisen-cmi.sta", "self-provided/raphaelm.sta",
    "self-provided/transaction_details_wrapped.sta", "self-provided/whitespace.sta",
    "self-provided/wrapped_timestamp.sta",
]
#: published statements whose balances do not add up (opening + the :61: amounts != closing, as the file says):
#: the importer refuses each at the message's first line, naming the statement and :62F:
MT940_UNBALANCED = {
    "betterplace/sepa_snippet.sta": (25, "T089414096000001"), "jejik/abnamro.sta": (4, "ABN AMRO BANK NV"),
    "jejik/ing.sta": (4, "MPBZ"), "jejik/knab.sta": (10, "B4G30MS9D00A003D"),
    "jejik/postfinance.sta": (15, "2014040708285928"), "jejik/rabobank.sta": (2, "940A110615"),
    "jejik/triodos.sta": (1, "1308728725026/1"), "mBank/with_newline_in_tnr.sta": (2, "ST170201CYC/1"),
    "self-provided/details_60-63.sta": (1, "STARTUMS"), "self-provided/malformed_details.sta": (1, "STARTUMS"),
    "self-provided/overly_long_details.sta": (1, "STARTUMS"), "self-provided/raiffeisen-cmi.sta": (1, "STARTUMS"),
    "self-provided/whitespace.sta": (1, "STARTUMS"),
}
#: in Deutsche Mark, which ISO 4217 no longer lists: no account of ours can be in it (config refuses 'DEM')
MT940_DEM = ["cmxl/mt940.sta", "self-provided/raphaelm.sta"]
#: the mt-940 project's deliberately broken SEPA snippet: its :25: holds :86: text, so it is no account of ours
MT940_BROKEN_ACCOUNT = "betterplace/sepa_snippet_broken.sta"
#: :61: status -> the direction the entry moves money (SWIFT: RC = reversal of a credit, a debit; RD the other way)
DIRECTION = {"C": "credit", "D": "debit", "RC": "debit", "RD": "credit"}


def _mt940_expected(path: Path) -> Any:
    # the mt-940 project's expected results are YAML of its own objects (mt940 is recon's dependency)
    return yaml.load(path.with_suffix(".yml").read_text(encoding="utf-8"), Loader=yaml.Loader)


def test_mt940_samples__every_published_file_is_classified_here() -> None:
    sample(MT940 / "jejik" / "ing.sta")
    published = {str(p.relative_to(MT940)) for p in MT940.rglob("*.sta")}
    listed = [*MT940_FRAGMENTS, *MT940_REFUSED, *MT940_STATEMENTS]
    assert len(listed) == len(set(listed)) and published == set(listed)


@pytest.mark.parametrize("name", MT940_FRAGMENTS)
def test_mt940_samples__a_fragment_is_no_statement(name: str) -> None:
    assert registry.detect(sample(MT940 / name).read_bytes()[: registry.HEAD_BYTES]) is None


@pytest.mark.parametrize("name", sorted(MT940_REFUSED))
def test_mt940_samples__an_interim_report_or_a_statement_without_a_closing_balance_is_refused_at_its_line(
        name: str) -> None:
    line, message = MT940_REFUSED[name]
    with pytest.raises(FormatError, match=re.escape(message)) as caught:
        _read(sample(MT940 / name))
    assert caught.value.position.line == line


@pytest.mark.parametrize("name", MT940_STATEMENTS)
def test_mt940_samples__entries_agree_with_the_mt940_projects_expected_results(name: str) -> None:
    entries, statements = _read(sample(MT940 / name))
    expected = _mt940_expected(MT940 / name)
    assert [(e.direction, Decimal(e.amount.text), e.amount.currency) for e in entries] == [
        (DIRECTION[t.data["status"]], abs(t.data["amount"].amount), t.data["amount"].currency) for t in expected]
    assert [(e.value_date, e.booking_date) for e in entries] == [
        (t.data["date"], t.data.get("entry_date") or t.data["date"]) for t in expected]
    lines = (MT940 / name).read_text(encoding="latin-1").splitlines()
    assert all(lines[e.position.line - 1].lstrip().startswith(":61:") for e in entries if e.position.line)
    closing = expected.data.get("final_closing_balance")
    if closing is not None:  # the mt-940 parser keeps the last :62F: (an intermediate :62M: does not replace it)
        finals = [s.closing for s in statements if s.closing.day == closing.date]
        assert finals and _signed(finals[-1].amount.text, finals[-1].negative) == closing.amount.amount


MT940_IMPORTED = [n for n in MT940_STATEMENTS if n not in MT940_DEM and n != MT940_BROKEN_ACCOUNT]


@pytest.mark.parametrize("name", MT940_IMPORTED)
def test_mt940_samples__the_importer_takes_a_statement_that_adds_up_and_refuses_one_that_does_not(
        name: str) -> None:
    path = sample(MT940 / name)
    entries, statements = _read(path)
    accounts = {s.account: s.opening.amount.currency for s in statements}
    if name not in MT940_UNBALANCED:
        assert _import(path, accounts) == len(entries)
        return
    line, statement_id = MT940_UNBALANCED[name]
    with pytest.raises(BankImportRejected) as caught:
        _import(path, accounts)
    assert str(caught.value).startswith(f"{path}:{line}: statement '{statement_id}' does not add up: ")
    assert str(caught.value).endswith("(field :62F:)")


def test_mt940_samples__the_unbalanced_ones_do_not_add_up_by_the_mt940_projects_own_figures() -> None:
    # the single-message files: the mt-940 parser's opening + its amounts against its closing (RC/RD by status)
    checked = 0
    for name in MT940_IMPORTED:
        text = sample(MT940 / name).read_text(encoding="latin-1")
        if len(re.findall(r"^:20:", text, re.MULTILINE)) != 1:
            continue
        expected = _mt940_expected(MT940 / name)
        opening, closing = expected.data.get("final_opening_balance"), expected.data.get("final_closing_balance")
        if opening is None or closing is None:
            continue
        moved = sum((abs(t.data["amount"].amount) * (1 if DIRECTION[t.data["status"]] == "credit" else -1)
                     for t in expected), Decimal(0))
        assert (opening.amount.amount + moved != closing.amount.amount) == (name in MT940_UNBALANCED), name
        checked += 1
    assert checked >= 10


def test_mt940_samples__a_statement_of_an_account_that_is_not_ours_is_refused_at_its_line() -> None:
    path = sample(MT940 / MT940_BROKEN_ACCOUNT)
    with pytest.raises(BankImportRejected, match="which is not one of ours") as caught:
        _import(path, {"NL91ABNA0417164300": "EUR"})
    assert str(caught.value).startswith(f"{path}:1: ")


# --- BAI2: the bai2 project's test files ---------------------------------------------------------------------

BAI2_FILES = ["citi_example.bai2", "nwb_example.bai2", "svb_us_example.bai2"]


@pytest.mark.parametrize("name", BAI2_FILES)
def test_bai2_samples__entries_and_accounts_agree_with_the_bai2_parser(name: str) -> None:
    path = sample(BAI2 / name)
    parsed = reference.parse_from_string(path.read_text(), check_integrity=True)
    accounts = [a for group in parsed.children for a in group.children]
    transactions = [t for a in accounts for t in a.children]
    entries, statements = _read(path)
    assert [s.account for s in statements] == [a.header.customer_account_number for a in accounts]
    assert [(e.direction, int(e.amount.text), e.bank_reference, e.amount.minor) for e in entries] == [
        (t.type_code.transaction.value, t.amount, t.bank_reference, True) for t in transactions]


def test_bai2_samples__an_account_without_ledger_balances_is_refused_at_its_line() -> None:
    path = sample(BAI2 / "account_trailer_amount_blank_example.bai2")
    with pytest.raises(FormatError, match=r"no opening \(010\) or closing \(015\) ledger balance") as caught:
        _read(path)
    assert path.read_text().splitlines()[caught.value.position.line - 1].startswith("03,")  # type: ignore[operator]


# --- camt.053: the OCA importer's and okane's test statements -------------------------------------------------


def _golden(name: str) -> tuple[str | None, str | None, list[dict[str, Any]]]:
    golden = ast.literal_eval(sample(OCA_CAMT / name).read_text(encoding="utf-8"))
    assert isinstance(golden, tuple)
    return golden


def _decimal(value: float) -> Decimal:
    return Decimal(repr(value))  # the golden files write amounts as Python floats: their shortest repr is the text


def test_camt053_samples__the_oca_statement_agrees_with_the_oca_importers_results() -> None:
    currency, account, golden = _golden("golden-camt053.pydata")
    entries, statements = _read(sample(OCA_CAMT / "test-camt053"))
    assert [s.statement_id for s in statements] == [g["name"] for g in golden]
    assert {s.account for s in statements} == {account}
    assert {e.amount.currency for e in entries} == {currency}
    for statement, g in zip(statements, golden, strict=True):
        assert _signed(statement.opening.amount.text, statement.opening.negative) == _decimal(g["balance_start"])
        assert _signed(statement.closing.amount.text, statement.closing.negative) == _decimal(
            g["balance_end_real"])
        mine = [e for e in entries if e.statement_index == statement.index]
        # the OCA importer splits a batch entry into its transaction details; the sums are the entries'
        assert sum((_signed(e.amount.text, e.direction == "debit") for e in mine), Decimal(0)) == sum(
            (_decimal(t["amount"]) for t in g["transactions"]), Decimal(0))
        assert {e.booking_date.isoformat() for e in mine} == {t["date"] for t in g["transactions"]}
    # the OCA sample's balances do not add up by its importer's own figures (15568.27 - 12.99 is not 15121.12):
    # recon's importer refuses it, naming the statement's balances
    (g,) = golden
    moved = sum((_decimal(t["amount"]) for t in g["transactions"]), Decimal(0))
    assert _decimal(g["balance_start"]) + moved != _decimal(g["balance_end_real"])
    path = OCA_CAMT / "test-camt053"
    with pytest.raises(BankImportRejected) as caught:
        _import(path, {account: currency})  # type: ignore[dict-item]
    assert str(caught.value).startswith(
        f"{path} /Document/BkToCstmrStmt/Stmt[1]/Bal: statement '{g['name']}' does not add up: ")


@pytest.mark.parametrize("name", ["test-camt053-txdtls", "test-camt053-no-ntry"])
def test_camt053_samples__the_oca_camt_053_001_04_files_are_refused_by_version(name: str) -> None:
    with pytest.raises(FormatError, match=r"camt\.053\.001\.04 is not supported") as caught:
        _read(sample(OCA_CAMT / name))
    assert caught.value.position.path == "/Document"


def _xml_statements(path: Path) -> list[dict[str, Any]]:
    """What the file says, read here with ElementTree (namespace stripped)."""
    root = ElementTree.parse(path).getroot()  # a fetched, pinned sample with no DTD
    ns = {"c": root.tag[1:].split("}")[0]}

    def text(node: ElementTree.Element, xpath: str) -> str | None:
        found = node.find(xpath, ns)
        return None if found is None else (found.text or "").strip()

    out = []
    for stmt in root.iterfind("c:BkToCstmrStmt/c:Stmt", ns):
        balances = {text(b, "c:Tp/c:CdOrPrtry/c:Cd"): (text(b, "c:Amt"), text(b, "c:CdtDbtInd"))
                    for b in stmt.iterfind("c:Bal", ns)}
        out.append({"id": text(stmt, "c:Id"), "iban": text(stmt, "c:Acct/c:Id/c:IBAN"), "balances": balances,
                    "entries": [(text(n, "c:Amt"), text(n, "c:CdtDbtInd"), text(n, "c:BookgDt/c:Dt"),
                                 text(n, "c:AcctSvcrRef")) for n in stmt.iterfind("c:Ntry", ns)]})
    return out


@pytest.mark.parametrize("name", ["test1.xml", "test2.xml"])
def test_camt053_samples__okanes_statements_read_as_the_xml_says(name: str) -> None:
    path = sample(OKANE / name)
    (expected,) = _xml_statements(path)
    entries, (statement,) = _read(path)
    assert (statement.statement_id, statement.account) == (expected["id"], expected["iban"])
    opening = expected["balances"].get("OPBD") or expected["balances"]["PRCD"]
    closing = expected["balances"]["CLBD"]
    assert (statement.opening.amount.text, statement.opening.negative) == (opening[0], opening[1] == "DBIT")
    assert (statement.closing.amount.text, statement.closing.negative) == (closing[0], closing[1] == "DBIT")
    assert [(e.amount.text, "DBIT" if e.direction == "debit" else "CRDT", e.booking_date.isoformat(),
             e.bank_reference) for e in entries] == expected["entries"]


@pytest.mark.parametrize("name", ["test1.xml", "test2.xml"])
def test_camt053_samples__the_importer_takes_okanes_statement_if_it_adds_up_by_the_xml_and_refuses_it_if_not(
        name: str) -> None:
    path = sample(OKANE / name)
    (expected,) = _xml_statements(path)
    opening = expected["balances"].get("OPBD") or expected["balances"]["PRCD"]
    closing = expected["balances"]["CLBD"]
    moved = sum((_signed(amount, indicator == "DBIT") for amount, indicator, _, _ in expected["entries"]), Decimal(0))
    accounts = {expected["iban"]: "CZK"}
    if _signed(opening[0], opening[1] == "DBIT") + moved == _signed(closing[0], closing[1] == "DBIT"):
        assert _import(path, accounts) == len(expected["entries"])
        return
    with pytest.raises(BankImportRejected) as caught:  # okane's anonymised test2.xml: 1000 + 2000 is not 2000
        _import(path, accounts)
    assert str(caught.value).startswith(
        f"{path} /Document/BkToCstmrStmt/Stmt[1]/Bal: statement '{expected['id']}' does not add up: ")
