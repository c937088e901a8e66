"""Hostile and careless input on the command line: every case exits 2 with one line naming what and where,
validates outputs before doing work, and writes nothing half-way."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from recon.db.database import Database
from recon.db.jobs_store import JobStore, iter_all_jobs
from recon.db.payment_store import CHARGE_KIND, NewPayment, PaymentStore
from recon.reconcile.settlement import Category, CsvWriter, Item, Totals
from recon.spreadsheet import safe_cell

HEADER = "merchant_reference,amount,currency,psp\n"


def recon(url: str | None, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    head = ["--database-url", url] if url is not None else []
    return subprocess.run([sys.executable, "-m", "recon", *head, *args], capture_output=True, text=True, timeout=60,
                          env=env)


def one_line(r: subprocess.CompletedProcess[str]) -> str:
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
def test_cli__out_of_range_values_exit_2_naming_the_option(db_url: str, args: tuple[str, ...], needle: str) -> None:
    r = recon(db_url, *args)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_cli__an_empty_database_url_is_refused(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "recon", "--database-url", "", "stats"], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and "--database-url: is empty" in one_line(r)
    assert not (tmp_path / "recon.db").exists()


def test_cli__an_old_schema_says_run_db_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    from recon.db.database import connect, upgrade

    db = connect(url)
    upgrade(db, "0006")
    db.dispose()
    r = recon(url, "worker", "--burst")
    assert r.returncode == 2 and "run `recon db upgrade`" in one_line(r) and "0006" in r.stderr
    assert recon(url, "db", "upgrade").returncode == 0
    assert recon(url, "worker", "--burst").returncode == 0


def test_sweep__an_unwritable_report_path_fails_before_any_work(db: Database, db_url: str, tmp_path: Path,
                                                                subprocess_env: dict[str, str]) -> None:
    PaymentStore(db).create([NewPayment("shop", "s-1", 100, "EUR", "sandbox")], charge=False)
    r = subprocess.run([sys.executable, "-m", "recon", "--database-url", db_url, "sweep", "--older-than", "0s",
                        "--report", str(tmp_path / "nonexistent" / "r.json")], capture_output=True, text=True,
                       timeout=60, env=subprocess_env)
    assert r.returncode == 2 and "--report" in one_line(r) and "does not exist" in r.stderr
    assert JobStore(db).list_jobs(kind="reconcile", limit=5) == []  # no work was done


def test_report__an_unwritable_output_fails_before_any_work(db_url: str, tmp_path: Path) -> None:
    r = recon(db_url, "report", "--psp", "sandbox", "--since", "2026-01-01", "--until", "2026-01-02",
              "--output", str(tmp_path))
    assert r.returncode == 2 and "is a directory" in one_line(r)


def test_csv__cells_a_spreadsheet_would_run_as_formulas_are_quoted() -> None:
    hostile = ["=HYPERLINK(\"http://evil.example\",\"x\")", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]
    assert [safe_cell(v) for v in hostile] == ["'" + v for v in hostile]
    assert [safe_cell(v) for v in ("order-1", -1000, 0, None, "")] == ["order-1", -1000, 0, "", ""]
    out = io.StringIO()
    writer = CsvWriter(out)
    writer.write(Item(Category.MISSING_LOCALLY, "=HYPERLINK(\"http://evil.example\")", "psp_1", None, None, -500,
                      "EUR", None, "refunded", "", None, None, None))
    writer.finish(Totals())
    [row] = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert row["merchant_reference"].startswith("'=") and row["psp_amount"] == "-500"


def test_import__honours_the_charge_queues_max_depth(db: Database, db_url: str, tmp_path: Path,
                                                     subprocess_env: dict[str, str]) -> None:
    config = tmp_path / "recon.toml"
    config.write_text("[queues.charges]\nmax_depth = 1\n", encoding="utf-8")
    path = tmp_path / "p.csv"
    path.write_text(HEADER + "".join(f"o-{i},1.00,EUR,sandbox\n" for i in range(300)), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "recon", "--database-url", db_url, "--config", str(config),
                        "payments", "import", str(path)], capture_output=True, text=True, timeout=60,
                       env=subprocess_env)
    assert r.returncode == 2 and "charges" in one_line(r) and "max_depth 1" in r.stderr
    assert list(PaymentStore(db).iter_payments()) == []
    assert list(iter_all_jobs(JobStore(db), kind=CHARGE_KIND)) == []


def test_import__a_reimported_file_prints_twenty_problems_and_a_count(db: Database, db_url: str,
                                                                      tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text(HEADER + "".join(f"o-{i},1.00,EUR,sandbox\n" for i in range(3000)), encoding="utf-8")
    assert recon(db_url, "payments", "import", str(path), "--no-charge").returncode == 0
    r = recon(db_url, "payments", "import", str(path), "--no-charge")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 21
    assert lines[-1] == f"recon: {path}: 3000 problems (the first 20 shown); nothing imported"


def test_import__a_reference_taken_by_a_concurrent_import_names_it(db: Database) -> None:
    from recon.db.payment_store import DuplicateReference

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
                                                        needle: str) -> None:
    path = tmp_path / "p.csv"
    path.write_text(HEADER + "o-1,1.00,EUR,sandbox\n", encoding="utf-8")
    r = recon(db_url, "payments", "import", str(path), "--merchant-account", flag)
    assert r.returncode == 2 and "--merchant-account" in one_line(r) and needle in r.stderr


def test_config__a_typo_in_a_psp_table_fails_every_command(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "recon.toml"
    config.write_text("[psp.sandbox]\nrate_limt = 5\n", encoding="utf-8")
    r = recon(db_url, "--config", str(config), "stats")
    assert r.returncode == 2
    assert "psp.sandbox.rate_limt: unknown key; did you mean 'rate_limit'?" in one_line(r)
    config.write_text("[psp.strype]\napi_version = '2024-06-20'\n", encoding="utf-8")
    r = recon(db_url, "--config", str(config), "stats")
    assert r.returncode == 2 and "psp.strype: unknown PSP; did you mean 'stripe'?" in one_line(r)


def test_stats__json_output_still_parses(db_url: str) -> None:
    r = recon(db_url, "stats", "--json")
    assert r.returncode == 0 and isinstance(json.loads(r.stdout), dict)
