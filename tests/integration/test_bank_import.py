"""``recon bank import|list|show`` on both databases: statements written by recon.bank.formats' writers (checked
against third-party parsers in tests/bank) and published samples (tests/bank/samples.py); idempotence,
overlapping statements, and every refusal (exit 2, one line naming file, place and field, nothing written)."""

from __future__ import annotations

import io
import json
from datetime import date, timedelta
from pathlib import Path

import pytest

from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.db.bank_store import BankStore
from recon.db.database import Database
from tests.bank.samples import BAI2, CAMT, MT940, OCA_CAMT, OKANE, sample
from tests.cli import Runner

IBAN = "NL91ABNA0417164300"
CONFIG = f"""
[bank.accounts.payouts-eur]
iban = "{IBAN}"
currency = "EUR"
psps = ["stripe"]

[bank.accounts.sample-de]
iban = "DE14740618130000033626"
currency = "EUR"
"""
DAY = date(2026, 11, 2)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "recon.toml"
    path.write_text(CONFIG)
    return path


def _entry(n: int, day: date = DAY, *, ref: str | None = "auto", amount: int = 1000, **kw: str) -> EntryToWrite:
    return EntryToWrite(amount=amount + n, direction="credit" if n % 3 else "debit", booking_date=day,
                        bank_reference=f"BR{day:%m%d}{n:04d}" if ref == "auto" else ref,
                        remittance=kw.get("remittance", f"PAYOUT {n}"), end_to_end_id=kw.get("e2e"),
                        counterparty=kw.get("name"))


def _statement(entries: list[EntryToWrite], *, start: date = DAY, end: date = DAY, opening: int = 50_000,
               statement_id: str = "S1", account: str = IBAN, closing: int | None = None) -> StatementToWrite:
    return StatementToWrite(account=account, currency="EUR", exponent=2, statement_id=statement_id, opening=opening,
                            period_start=start, period_end=end, entries=entries, closing=closing)


def _file(tmp_path: Path, name: str, statements: list[StatementToWrite], fmt: str = "camt053",
          version: str = "08") -> Path:
    out = io.BytesIO()
    registry.writer(fmt, camt_version=version).write(out, statements)
    path = tmp_path / name
    path.write_bytes(out.getvalue())
    return path


def _import(recon: Runner, db_url: str, config: Path, path: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    result = recon("--config", str(config), "bank", "import", str(path), "--json", *extra, db_url=db_url)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _count(db: Database) -> int:
    return sum(1 for _ in BankStore(db).iter_entries())


@pytest.mark.parametrize(("fmt", "version"), [("camt053", "08"), ("camt053", "02"), ("mt940", ""), ("bai2", "")])
def test_bank_import__stores_every_entry_once_and_a_reimport_adds_nothing(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path, fmt: str, version: str) -> None:
    entries = [_entry(n, e2e=f"E2E{n}", name="Stripe") for n in range(1, 8)]
    path = _file(tmp_path, "s.dat", [_statement(entries)], fmt, version or "08")
    first = _import(recon, db_url, config, path)
    assert (first["format"], first["entries_added"], first["entries_known"]) == (fmt, 7, 0)
    again = _import(recon, db_url, config, path)
    assert (again["entries_added"], again["entries_known"], again["statements"][0]["known"]) == (0, 7, True)
    stored = list(BankStore(db).iter_entries())
    assert [(e.amount, e.direction, e.bank_reference) for e in stored] == [
        (e.amount, e.direction, e.bank_reference) for e in entries]
    assert stored[1].currency == "EUR" and stored[1].booking_date == DAY and stored[1].account == IBAN


def test_bank_import__an_overlapping_statement_adds_only_the_new_days(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path) -> None:
    mon, tue, wed = DAY, DAY + timedelta(days=1), DAY + timedelta(days=2)
    monday = [_entry(n, mon) for n in range(1, 4)]
    tuesday = [_entry(n, tue) for n in range(1, 3)]
    wednesday = [_entry(n, wed) for n in range(1, 5)]
    first = _file(tmp_path, "mon-tue.xml", [_statement(monday + tuesday, start=mon, end=tue, statement_id="A")])
    second_statement = _statement(tuesday + wednesday, start=tue, end=wed, statement_id="B",
                                  opening=_statement(monday, start=mon, end=mon).closing_balance())
    second = _file(tmp_path, "tue-wed.xml", [second_statement])
    assert _import(recon, db_url, config, first)["entries_added"] == 5
    result = _import(recon, db_url, config, second)
    assert (result["entries_added"], result["entries_known"]) == (4, 2)
    assert _count(db) == 9


def test_bank_import__the_fallback_key_keeps_two_identical_entries_on_one_day_across_overlaps(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path) -> None:
    same = _entry(1, ref=None, remittance="CASH DEPOSIT")
    day_only = _file(tmp_path, "day.sta", [_statement([same, same], statement_id="D1")], "mt940")
    week = _file(tmp_path, "week.sta", [_statement([same, same, same, _entry(2, DAY + timedelta(days=1), ref=None)],
                                                   end=DAY + timedelta(days=1), statement_id="W1")], "mt940")
    assert _import(recon, db_url, config, day_only)["entries_added"] == 2
    result = _import(recon, db_url, config, week)
    # the third identical deposit of that day is new; the first two are the ones already stored
    assert (result["entries_added"], result["entries_known"]) == (2, 2)
    keys = sorted(e.entry_key.rsplit(":", 1)[-1] for e in BankStore(db).iter_entries() if e.booking_date == DAY)
    assert keys == ["1", "2", "3"]


def test_bank_import__the_camt_parser_projects_sample_imports_and_masks_a_card_like_reference(
        recon: Runner, db_url: str, db: Database, config: Path) -> None:
    path = sample(CAMT / "valid_example.xml")
    assert _import(recon, db_url, config, path)["entries_added"] == 4
    stored = list(BankStore(db).iter_entries())
    # 2013122710583450000 passes the Luhn check: it is masked like a card number, and keyed by the fallback
    assert stored[0].bank_reference == "[card]" and stored[0].entry_key.startswith("fb:")
    assert stored[2].bank_reference == "2013122711085260000" and stored[2].entry_key == "ref:2013122711085260000"
    shown = recon("--config", str(config), "bank", "show", "2013122711085260000", "--json", db_url=db_url)
    assert shown.returncode == 0 and json.loads(shown.stdout)["entries"][0]["statement"]["statement_ref"] == \
        "0352C5320131227220503"


#: published statements that add up: (file, its account as the file names it, currency, entries counted in the file)
PUBLISHED = [(OKANE / "test1.xml", "XXX-IBAN", "CZK", "<Ntry>", 2), (MT940 / "jejik" / "sns.sta", "0123456789", "EUR",
             ":61:", 2), (BAI2 / "nwb_example.bai2", "88888888 600004", "GBP", "16,", 5)]


@pytest.mark.parametrize(("path", "account", "currency", "marker", "count"), PUBLISHED,
                         ids=["camt053-okane", "mt940-sns", "bai2-nwb"])
def test_bank_import__a_published_statement_imports_once(
        recon: Runner, db_url: str, db: Database, tmp_path: Path, path: Path, account: str, currency: str,
        marker: str, count: int) -> None:
    text = sample(path).read_text(encoding="latin-1")
    assert sum(line.lstrip().startswith(marker) for line in text.splitlines()) == count
    config = tmp_path / "published.toml"
    config.write_text(f'[bank.accounts.published]\nnumber = "{account}"\ncurrency = "{currency}"\n')
    first = _import(recon, db_url, config, path)
    assert (first["entries_added"], first["entries_known"]) == (count, 0)
    assert _import(recon, db_url, config, path)["entries_added"] == 0
    stored = list(BankStore(db).iter_entries())
    assert len(stored) == count and {e.currency for e in stored} == {currency}


def test_bank_import__a_published_statement_that_does_not_add_up_is_refused_and_nothing_written(
        recon: Runner, db_url: str, db: Database, tmp_path: Path) -> None:
    # the mt-940 project's ING sample: opening 0,00 and seven :61: lines (-45,59 together), closing 3,47
    path = sample(MT940 / "jejik" / "ing.sta")
    config = tmp_path / "ing.toml"
    config.write_text('[bank.accounts.ing]\nnumber = "0001234567"\ncurrency = "EUR"\n')
    line = _refused(recon, db_url, config, path)
    assert line.startswith(f"recon: {path}:4: statement 'MPBZ' does not add up: ") and "(field :62F:)" in line
    assert _count(db) == 0


def test_bank_import__a_card_number_in_remittance_text_is_never_stored(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path) -> None:
    path = _file(tmp_path, "card.xml", [_statement([_entry(1, remittance="REFUND CARD 4111 1111 1111 1111 OK")])])
    _import(recon, db_url, config, path)
    (stored,) = BankStore(db).iter_entries()
    assert stored.remittance == "REFUND CARD [card] OK"
    listed = recon("--config", str(config), "bank", "list", "--account", "payouts-eur", db_url=db_url)
    assert "4111" not in listed.stdout and "[card]" in listed.stdout


def _refused(recon: Runner, db_url: str, config: Path, path: Path, *extra: str) -> str:
    result = recon("--config", str(config), "bank", "import", str(path), *extra, db_url=db_url)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_bank_import__a_statement_that_does_not_add_up_is_refused_and_nothing_written(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path) -> None:
    good = _statement([_entry(1)], statement_id="OK")
    bad = _statement([_entry(2, DAY + timedelta(days=1))], start=DAY + timedelta(days=1), end=DAY + timedelta(days=1),
                     statement_id="BAD", closing=12_345)
    path = _file(tmp_path, "bad.xml", [good, bad])
    line = _refused(recon, db_url, config, path)
    assert "/Document/BkToCstmrStmt/Stmt[2]/Bal" in line and "'BAD' does not add up" in line
    assert "but its closing balance is 123.45 EUR" in line
    assert _count(db) == 0


def test_bank_import__a_statement_of_an_account_we_do_not_know_is_refused(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path) -> None:
    path = _file(tmp_path, "other.sta", [_statement([_entry(1)], account="DE89370400440532013000")], "mt940")
    line = _refused(recon, db_url, config, path)
    assert line.startswith(f"recon: {path}:1: ") and "'DE89370400440532013000', which is not one of ours" in line
    assert _count(db) == 0


def test_bank_import__the_same_bank_reference_twice_in_a_file_is_refused(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path) -> None:
    path = _file(tmp_path, "dup.xml", [_statement([_entry(1, ref="SAME"), _entry(2, ref="SAME")])])
    line = _refused(recon, db_url, config, path)
    assert "Stmt[1]/Ntry[2]/AcctSvcrRef" in line and "repeats bank reference 'SAME'" in line and "Ntry[1]" in line
    assert _count(db) == 0


def test_bank_import__more_decimals_than_the_currency_has_is_refused_at_its_field(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path) -> None:
    path = _file(tmp_path, "dec.xml", [_statement([_entry(1)])])
    path.write_text(path.read_text().replace('<Amt Ccy="EUR">10.01</Amt>', '<Amt Ccy="EUR">10.015</Amt>', 1))
    line = _refused(recon, db_url, config, path)
    assert "/Document/BkToCstmrStmt/Stmt[1]/Ntry[1]/Amt: amount '10.015' has more decimals than EUR allows" in line


def test_bank_import__a_stored_entry_is_never_overwritten_by_a_file_that_says_otherwise(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path) -> None:
    _import(recon, db_url, config, _file(tmp_path, "a.xml", [_statement([_entry(1, ref="R1")], statement_id="A")]))
    changed = _file(tmp_path, "b.xml", [_statement([_entry(1, ref="R1", amount=2000), _entry(2)], statement_id="B")])
    line = _refused(recon, db_url, config, changed)
    assert "ref:R1" in line and "is stored as credit 10.01 EUR" in line and "this file says credit 20.01 EUR" in line
    assert [e.amount for e in BankStore(db).iter_entries()] == [1001]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_bank_import__refusals_that_need_no_database(recon: Runner, db_url: str, config: Path, tmp_path: Path) -> None:
    v4 = sample(OCA_CAMT / "test-camt053-txdtls")
    assert "camt.053.001.04 is not supported" in _refused(recon, db_url, config, v4)
    wrong = _file(tmp_path, "s.xml", [_statement([_entry(1)])])
    assert "--format mt940: it looks like camt053" in _refused(recon, db_url, config, wrong, "--format", "mt940")
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert "not a bank statement recon reads" in _refused(recon, db_url, config, text)
    czk = sample(OKANE / "test1.xml")
    eur = tmp_path / "eur.toml"
    eur.write_text('[bank.accounts.cz]\nnumber = "XXX-IBAN"\ncurrency = "EUR"\n')
    line = _refused(recon, db_url, eur, czk)
    assert f"{czk} /Document/BkToCstmrStmt/Stmt[1]: " in line and "is in CZK, but [bank.accounts.cz] is a EUR" in line


@pytest.mark.parametrize(("args", "message"), [
    (["bank", "import", "missing.xml"], "'missing.xml' does not exist"),
    (["bank", "import", "{statement}", "--format", "csv"], "Invalid value for '--format'"),
    (["bank", "list", "--account", "nope"], "--account: 'nope' is not in [bank.accounts] (known: payouts-eur, "
                                            "sample-de)"),
    (["bank", "list", "--since", "2026-13-01"], "--since: '2026-13-01' is not a date (YYYY-MM-DD)"),
    (["bank", "list", "--limit", "0"], "Invalid value for '--limit'"),
    (["bank", "show", "R-unknown"], "no bank entry has the id, bank reference or end-to-end id 'R-unknown'"),
], ids=["import-missing-file", "import-unknown-format", "list-unknown-account", "list-bad-day", "list-limit-0",
        "show-unknown"])
def test_bank_commands__bad_usage_exits_2_with_one_line_and_writes_nothing(
        recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path, args: list[str], message: str) -> None:
    statement = _file(tmp_path, "s.xml", [_statement([_entry(1)])])
    r = recon("--config", str(config), *(a.format(statement=statement) for a in args), db_url=db_url, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr
    assert _count(db) == 0


def test_bank_commands__done_exits_0_never_1(recon: Runner, db_url: str, config: Path, tmp_path: Path) -> None:
    # nothing in an import, a listing or a lookup is for review: matching credits to payouts is the close's work
    path = _file(tmp_path, "s.xml", [_statement([_entry(1, e2e="E2E1"), _entry(2)])])
    runs = [recon("--config", str(config), *args, db_url=db_url) for args in (
        ["bank", "import", str(path)], ["bank", "import", str(path)], ["bank", "list"],
        ["bank", "list", "--account", "sample-de"], ["bank", "show", "E2E1"])]
    assert [r.returncode for r in runs] == [0, 0, 0, 0, 0], [r.stderr for r in runs]
    assert "0 entries" in runs[3].stdout and "E2E1" in runs[4].stdout
