"""Hostile and careless input on the command line: every case exits 2 with one line naming what and where,
validates outputs before doing work, and writes nothing half-way."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import CHARGE_KIND, PaymentStore
from recon.reconcile.settlement import Category, CsvWriter, Item, Totals
from recon.rows import NewPayment
from recon.spreadsheet import safe_cell
from tests.cli import Result, Runner
from tests.jobs import iter_all_jobs

HEADER = "merchant_reference,amount,currency,psp\n"


def one_line(r: Result) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "needle"), [
    (("worker", "--burst", "--lease-ttl", "3000000d"), "--lease-ttl"),
    (("worker", "--burst", "--lease-ttl", "30000d"), "lease_ttl_seconds: at most 86400 seconds"),
    (("jobs", "list", "--state", "dead", "--since", "99999999999d"), "--since"),
    (("jobs", "show", "99999999999999999999999"), "JOB_ID"),
    (("jobs", "list", "--limit", "99999999999999999999999"), "--limit"),
    (("payments", "list", "--psp", "bogus"), "unknown PSP 'bogus'"),
    (("sweep", "--older-than", "99999999999d"), "--older-than"),
])
def test_cli__out_of_range_values_exit_2_naming_the_option(db_url: str, args: tuple[str, ...], needle: str,
                                                           recon: Runner) -> None:
    r = recon(*args, db_url=db_url)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_cli__an_empty_database_url_is_refused(tmp_path: Path, recon: Runner) -> None:
    r = recon("stats", db_url="", cwd=tmp_path)
    assert r.returncode == 2 and "--database-url: is empty" in one_line(r)
    assert not (tmp_path / "recon.db").exists()


def test_cli__an_old_schema_says_run_db_upgrade(tmp_path: Path, recon: Runner) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    from recon.db.database import connect, upgrade

    db = connect(url)
    upgrade(db, "0006")
    db.dispose()
    r = recon("worker", "--burst", db_url=url)
    assert r.returncode == 2 and "run `recon db upgrade`" in one_line(r) and "0006" in r.stderr
    assert recon("db", "upgrade", db_url=url).returncode == 0
    assert recon("worker", "--burst", db_url=url).returncode == 0


def test_sweep__an_unwritable_report_path_fails_before_any_work(db: Database, db_url: str, tmp_path: Path,
                                                                subprocess_env: dict[str, str], recon: Runner) -> None:
    PaymentStore(db).create([NewPayment("shop", "s-1", 100, "EUR", "sandbox")], charge=False)
    r = recon("sweep", "--older-than", "0s", "--report", str(tmp_path / "nonexistent" / "r.json"), db_url=db_url,
              env=subprocess_env)
    assert r.returncode == 2 and "--report" in one_line(r) and "does not exist" in r.stderr
    assert JobStore(db).list_jobs(kind="reconcile", limit=5) == []  # no work was done


def test_report__an_unwritable_output_fails_before_any_work(db_url: str, tmp_path: Path, recon: Runner) -> None:
    r = recon("report", "--psp", "sandbox", "--since", "2026-01-01", "--until", "2026-01-02", "--output",
              str(tmp_path), db_url=db_url)
    assert r.returncode == 2 and "is a directory" in one_line(r)


def test_csv__cells_a_spreadsheet_would_run_as_formulas_are_quoted() -> None:
    hostile = ["=HYPERLINK(\"http://evil.example\",\"x\")", "+1+1", "-2+3", "@SUM(A1)"]
    assert [safe_cell(v) for v in hostile] == ["'" + v for v in hostile]
    # a tab or carriage return first: quoted too, and written as the escape a terminal does not act on
    assert [safe_cell(v) for v in ("\tx", "\rx", "a\x1b[31mb")] == ["'\\tx", "'\\rx", "a\\x1b[31mb"]
    assert [safe_cell(v) for v in ("order-1", -1000, 0, None, "")] == ["order-1", -1000, 0, "", ""]
    out = io.StringIO()
    writer = CsvWriter(out)
    writer.write(Item(Category.MISSING_LOCALLY, "=HYPERLINK(\"http://evil.example\")", "psp_1", None, None, -500,
                      "EUR", None, "refunded", "", None, None, None))
    writer.finish(Totals())
    [row] = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert row["merchant_reference"].startswith("'=") and row["psp_amount"] == "-500"


def test_import__honours_the_charge_queues_max_depth(db: Database, db_url: str, tmp_path: Path,
                                                     subprocess_env: dict[str, str], recon: Runner) -> None:
    config = tmp_path / "recon.toml"
    config.write_text("[queues.charges]\nmax_depth = 1\n", encoding="utf-8")
    path = tmp_path / "p.csv"
    path.write_text(HEADER + "".join(f"o-{i},1.00,EUR,sandbox\n" for i in range(300)), encoding="utf-8")
    r = recon("--config", str(config), "payments", "import", str(path), db_url=db_url, env=subprocess_env)
    assert r.returncode == 2 and "charges" in one_line(r) and "max_depth 1" in r.stderr
    assert list(PaymentStore(db).iter_payments()) == []
    assert list(iter_all_jobs(JobStore(db), kind=CHARGE_KIND)) == []


def test_import__a_reimported_file_prints_twenty_problems_and_a_count(db: Database, db_url: str,
                                                                      tmp_path: Path, recon: Runner) -> None:
    path = tmp_path / "p.csv"
    path.write_text(HEADER + "".join(f"o-{i},1.00,EUR,sandbox\n" for i in range(3000)), encoding="utf-8")
    assert recon("payments", "import", str(path), "--no-charge", db_url=db_url).returncode == 0
    r = recon("payments", "import", str(path), "--no-charge", db_url=db_url)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 21
    assert lines[-1] == f"recon: {path}: 3000 problems (the first 20 shown); nothing imported"


def test_import__a_reference_taken_by_a_concurrent_import_names_it(db: Database) -> None:
    from recon.errors import DuplicateReference

    ledger = PaymentStore(db)
    ledger.create([NewPayment("shop", "raced", 100, "EUR", "sandbox")], charge=False)
    with pytest.raises(DuplicateReference, match="merchant_reference 'raced' already exists"):
        ledger.create([NewPayment("shop", "fresh", 100, "EUR", "sandbox"),
                       NewPayment("shop", "raced", 100, "EUR", "sandbox")])
    assert [p.merchant_reference for p in ledger.iter_payments()] == ["raced"]


@pytest.mark.parametrize(("flag", "needle"), [
    ("shop\x01evil", "contains a control character"),
    ("x" * 100_000, "characters long; at most 255"),
])
def test_import__a_bad_merchant_account_flag_is_refused(db_url: str, tmp_path: Path, flag: str,
                                                        needle: str, recon: Runner) -> None:
    path = tmp_path / "p.csv"
    path.write_text(HEADER + "o-1,1.00,EUR,sandbox\n", encoding="utf-8")
    r = recon("payments", "import", str(path), "--merchant-account", flag, db_url=db_url)
    assert r.returncode == 2 and "--merchant-account" in one_line(r) and needle in r.stderr


def test_config__a_typo_in_a_psp_table_fails_every_command(db_url: str, tmp_path: Path, recon: Runner) -> None:
    config = tmp_path / "recon.toml"
    config.write_text("[psp.sandbox]\nrate_limt = 5\n", encoding="utf-8")
    r = recon("--config", str(config), "stats", db_url=db_url)
    assert r.returncode == 2
    assert "psp.sandbox.rate_limt: unknown key; did you mean 'rate_limit'?" in one_line(r)
    config.write_text("[psp.strype]\napi_version = '2024-06-20'\n", encoding="utf-8")
    r = recon("--config", str(config), "stats", db_url=db_url)
    assert r.returncode == 2 and "psp.strype: unknown PSP; did you mean 'stripe'?" in one_line(r)


def test_stats__json_output_still_parses(db_url: str, recon: Runner) -> None:
    r = recon("stats", "--json", db_url=db_url)
    assert r.returncode == 0 and isinstance(json.loads(r.stdout), dict)


def test_app__close_gives_back_the_database_connections_and_the_app_still_works(db_url: str) -> None:
    from recon.app import App

    app = App(database_url=db_url)
    assert app.payments.get(1) is None  # a connection was opened and returned to the pool
    assert app.db.engine.pool.checkedin() >= 1
    app.close()
    assert app.db.engine.pool.checkedin() == 0  # disposed: nothing held open by a closed App
    assert app.payments.get(1) is None  # and a later use opens what it needs again
    app.close()
