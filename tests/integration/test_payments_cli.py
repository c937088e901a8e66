"""`recon payments import | show | list` on both backends, through the real command line."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from recon.config import Settings
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import CHARGE_KIND, PaymentStore
from recon.engine.client import Client
from recon.engine.jobs import JobSpec
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.cli import Runner
from tests.jobs import iter_all_jobs

HEADER = "merchant_reference,amount,currency,psp\n"


def write(tmp_path: Path, text: str | bytes, name: str = "payments.csv") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def assert_nothing_imported(db: Database) -> None:
    assert list(PaymentStore(db).iter_payments()) == []
    assert list(iter_all_jobs(JobStore(db), kind=CHARGE_KIND)) == []


def test_payments_import__amounts_exact_created_at_honoured_charge_jobs_queued(db: Database, db_url: str,
                                                                               tmp_path: Path, recon: Runner) -> None:
    path = write(tmp_path, "merchant_reference,amount,currency,psp,created_at,merchant_account,payment_method,"
                           "customer_reference\n"
                           "order-1,12.34,eur,stripe,2024-05-01T10:00:00,shop-a,pm_card_visa,cus_NffrFeUfNV2Hib\n"
                           "order-2,1000,JPY,adyen,2024-05-01T12:00:00+02:00,,8415718415172200,shopper-0042\n"
                           "order-3, 1.234 ,KWD,sandbox,,,,\n")
    r = recon("payments", "import", str(path), "--merchant-account", "shop-b", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "imported 3 payments (3 charge jobs queued)\n"
    ledger = PaymentStore(db)
    got = {p.merchant_reference: p for p in ledger.iter_payments()}
    assert {ref: (p.amount, p.currency, p.psp, p.merchant_account, p.status) for ref, p in got.items()} == {
        "order-1": (1234, "EUR", "stripe", "shop-a", PaymentStatus.CREATED),
        "order-2": (1000, "JPY", "adyen", "shop-b", PaymentStatus.CREATED),
        "order-3": (1234, "KWD", "sandbox", "shop-b", PaymentStatus.CREATED),
    }
    assert got["order-1"].created_at == got["order-2"].created_at == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert got["order-3"].created_at.year >= 2025  # no created_at: now
    listed = json.loads(recon("jobs", "list", "--kind", "charge", "--json", db_url=db_url).stdout)["jobs"]
    assert sorted(j["payload"]["payment_id"] for j in listed) == sorted(p.id for p in got.values())
    assert {(j["queue"], j["state"]) for j in listed} == {("charges", "runnable")}
    assert [e.to_status for e in ledger.events(got["order-1"].id)] == ["created"]
    assert (got["order-1"].payment_method, got["order-1"].customer_reference) == ("pm_card_visa", "cus_NffrFeUfNV2Hib")
    assert (got["order-2"].payment_method, got["order-2"].customer_reference) == ("8415718415172200", "shopper-0042")
    assert (got["order-3"].payment_method, got["order-3"].customer_reference) == (None, None)


def test_payments_import__no_charge_and_json(db: Database, db_url: str, tmp_path: Path, recon: Runner) -> None:
    path = write(tmp_path, HEADER + "a-1,0.01,EUR,sandbox\na-2,5,USD,sandbox\n")
    r = recon("payments", "import", str(path), "--no-charge", "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"file": str(path), "imported": 2, "charge_jobs_queued": 0}
    assert [p.amount for p in PaymentStore(db).iter_payments()] == [1, 500]
    assert list(iter_all_jobs(JobStore(db), kind=CHARGE_KIND)) == []


@pytest.mark.parametrize(("text", "line"), [
    (HEADER + "r-1,1.00,EUR,sandbox\nr-2,12.345,EUR,sandbox\n",
     "3: amount '12.345' has more decimals than EUR allows (2) (field amount)"),
    (HEADER + "r-1,0.1,JPY,sandbox\n", "2: amount '0.1' has more decimals than JPY allows (0) (field amount)"),
    (HEADER + "r-1,1e3,EUR,sandbox\n",
     "2: amount '1e3' is not a plain decimal number (digits, optionally '.' and decimals) (field amount)"),
    (HEADER + "r-1,0,EUR,sandbox\n", "2: amount '0' must be positive (field amount)"),
    (HEADER + "r-1,-1.00,EUR,sandbox\n", "2: amount '-1.00' must be positive (field amount)"),
    (HEADER + "r-1,1.00,EURO,sandbox\n",
     "2: currency 'EURO' is not an ISO-4217 currency code (field currency)"),
    (HEADER + "r-1,1.00,EUR,paypal\n", "2: psp 'paypal' is not one of adyen, sandbox, stripe (field psp)"),
    (HEADER + "r-1,1.00,EUR,sandbox\n\n,1.00,EUR,sandbox\n",
     "4: merchant_reference is empty (field merchant_reference)"),
    (HEADER + f"{'r' * 201},1.00,EUR,sandbox\n",
     "2: merchant_reference is 201 characters long; at most 200 are allowed (field merchant_reference)"),
    (HEADER + "r-1,1.00,EUR,sandbox\nr-2,1.00,EUR,sandbox\nr-1,1.00,EUR,sandbox\n",
     "4: merchant_reference 'r-1' is also on line 2 (field merchant_reference)"),
    ("merchant_reference,amount,currency,psp,created_at\nr-1,1.00,EUR,sandbox,tomorrow\n",
     "2: created_at 'tomorrow' is not an ISO-8601 timestamp (e.g. 2024-05-01T12:30:00Z; no offset means UTC) "
     "(field created_at)"),
    (HEADER + "r-1,1.00,EUR\n", "2: expected 4 fields as in the header, found 3"),
    ("", " the file is empty; expected a header row naming the columns "
         "merchant_reference, amount, currency, psp"),
    ("r-1,1.00,EUR,sandbox\n", "1: no header row; the first line must name the columns merchant_reference, "
                              "amount, currency, psp (optional: created_at, merchant_account, payment_method, "
                              "customer_reference, capture)"),
    ("merchant_reference,amount,psp\nr-1,1.00,sandbox\n", "1: missing required column 'currency'"),
    (HEADER.strip() + ",fee\nr-1,1.00,EUR,sandbox,0.10\n",
     "1: unknown column 'fee' "
     "(allowed: merchant_reference, amount, currency, psp, created_at, merchant_account, payment_method, "
     "customer_reference, capture)"),
])
def test_payments_import__a_bad_file_exits_2_with_file_and_line_and_imports_nothing(
        db: Database, db_url: str, tmp_path: Path, text: str, line: str, recon: Runner) -> None:
    path = write(tmp_path, text)
    r = recon("payments", "import", str(path), db_url=db_url)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr == f"recon: {path}:{line}\n"  # the empty file's ``line`` starts with a space: no number
    assert_nothing_imported(db)


def test_payments_import__not_utf8_exits_2_and_imports_nothing(db: Database, db_url: str,
                                                               tmp_path: Path, recon: Runner) -> None:
    path = write(tmp_path, HEADER.encode() + b"r-1,1.00,EUR,sandbox\nr-\xff,1.00,EUR,sandbox\n")
    r = recon("payments", "import", str(path), db_url=db_url)
    assert r.returncode == 2
    assert r.stderr == f"recon: {path}:3: not valid UTF-8 (byte 0xff at column 3); save the file as UTF-8\n"
    assert_nothing_imported(db)


def test_payments_import__several_problems_first_one_first_then_a_count(db: Database, db_url: str,
                                                                        tmp_path: Path, recon: Runner) -> None:
    path = write(tmp_path, HEADER + "r-1,1.00,EUR,sandbox\nr-2,1.001,EUR,sandbox\nr-3,1.00,XXX,sandbox\n")
    r = recon("payments", "import", str(path), "--json", db_url=db_url)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"recon: {path}:3: amount '1.001' has more decimals than EUR allows (2) (field amount)",
        f"recon: {path}:4: currency 'XXX' is not an ISO-4217 currency code (field currency)",
        f"recon: {path}: 2 problems; nothing imported",
    ]
    assert_nothing_imported(db)


def test_payments_import__reference_already_in_the_database(db: Database, db_url: str,
                                                            tmp_path: Path, recon: Runner) -> None:
    ledger = PaymentStore(db)
    ledger.create([NewPayment("default", "taken", 100, "EUR", "stripe")], charge=False)
    path = write(tmp_path, HEADER + "fresh,1.00,EUR,sandbox\ntaken,2.00,EUR,sandbox\n")
    r = recon("payments", "import", str(path), db_url=db_url)
    assert r.returncode == 2
    assert r.stderr == (f"recon: {path}:3: merchant_reference 'taken' already exists "
                        "(field merchant_reference)\n")
    assert [p.merchant_reference for p in ledger.iter_payments()] == ["taken"]
    assert list(iter_all_jobs(JobStore(db), kind=CHARGE_KIND)) == []


def test_payments_import__missing_file_exits_2(db_url: str, tmp_path: Path, recon: Runner) -> None:
    r = recon("payments", "import", str(tmp_path / "nope.csv"), db_url=db_url)
    assert r.returncode == 2 and "does not exist" in r.stderr


def _payment_with_history(db: Database) -> int:
    ledger = PaymentStore(db)
    [pid] = ledger.create([NewPayment("shop", "order-9", 1234, "KWD", "sandbox",
                                      datetime(2024, 5, 1, 10, tzinfo=UTC))], charge=False)
    with db.begin() as conn:
        assert ledger.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.PROCESSING,
                                             EventSource.CHARGE, details={"psp": "sandbox"}, job_id=77,
                                             attempt=2))
    return pid


def test_payments_show__json_has_payment_amount_and_full_history(db: Database, db_url: str, recon: Runner) -> None:
    pid = _payment_with_history(db)
    r = recon("payments", "show", "order-9", "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    p = doc["payment"]
    assert (p["id"], p["amount"], p["currency"], p["amount_formatted"], p["status"]) == (
        pid, 1234, "KWD", "1.234 KWD", "processing")
    assert p["created_at"] == "2024-05-01T10:00:00+00:00"
    assert [(e["from_status"], e["to_status"], e["source"], e["job_id"], e["attempt"], e["details"])
            for e in doc["events"]] == [(None, "created", "manual", None, None, None),
                                        ("created", "processing", "charge", 77, 2, {"psp": "sandbox"})]
    assert all(e["at"] for e in doc["events"])


def test_payments_show__human(db: Database, db_url: str, recon: Runner) -> None:
    _payment_with_history(db)
    r = recon("payments", "show", "order-9", db_url=db_url)
    assert r.returncode == 0, r.stderr
    for text in ("order-9", "1.234 KWD (1234 minor units)", "processing", "charge", "77",
                 '{"psp": "sandbox"}'):
        assert text in r.stdout


def test_payments_show__unknown_reference_exits_2(db_url: str, recon: Runner) -> None:
    r = recon("payments", "show", "no-such-ref", db_url=db_url)
    assert r.returncode == 2
    assert r.stderr == "recon: payment no-such-ref not found\n"


def test_payments_list__filters_limit_json_and_table(db: Database, db_url: str, recon: Runner) -> None:
    _payment_with_history(db)
    PaymentStore(db).create([NewPayment("shop", f"p-{i}", 100 + i, "EUR", "stripe" if i % 2 else "adyen")
                            for i in range(5)], charge=False)
    everything = json.loads(recon("payments", "list", "--json", db_url=db_url).stdout)["payments"]
    assert [p["merchant_reference"] for p in everything] == ["order-9", "p-0", "p-1", "p-2", "p-3", "p-4"]
    assert everything[1]["amount"] == 100 and everything[1]["amount_formatted"] == "1.00 EUR"
    created = json.loads(recon("payments", "list", "--status", "created", "--psp", "stripe", "--json",
                               db_url=db_url).stdout)["payments"]
    assert [p["merchant_reference"] for p in created] == ["p-1", "p-3"]
    limited = json.loads(recon("payments", "list", "--limit", "2", "--json", db_url=db_url).stdout)["payments"]
    assert [p["merchant_reference"] for p in limited] == ["order-9", "p-0"]
    processing = json.loads(recon("payments", "list", "--status", "processing", "--json", db_url=db_url).stdout)
    assert [p["merchant_reference"] for p in processing["payments"]] == ["order-9"]
    table = recon("payments", "list", "--psp", "adyen", db_url=db_url)
    assert table.returncode == 0 and "3 payments" in table.stdout and "1.04 EUR" in table.stdout
    assert "p-1" not in table.stdout


def test_payments_list__bad_status_exits_2(db_url: str, recon: Runner) -> None:
    r = recon("payments", "list", "--status", "lost", db_url=db_url)
    assert r.returncode == 2 and "Invalid value for '--status'" in r.stderr


def test_payments_import__charge_jobs_go_to_the_configured_queue_which_a_default_worker_works(
        db: Database, db_url: str, tmp_path: Path, recon: Runner, subprocess_env: dict[str, str]) -> None:
    config = tmp_path / "recon.toml"
    config.write_text('[payments]\nqueue = "pay"\n', encoding="utf-8")
    path = write(tmp_path, HEADER + "q-1,1.00,EUR,sandbox\n")
    r = recon("--config", str(config), "payments", "import", str(path), db_url=db_url)
    assert r.returncode == 0, r.stderr
    assert [(j.queue, j.kind) for j in iter_all_jobs(JobStore(db))] == [("pay", "charge")]
    # a worker started without --queues works the charge jobs' queue as configured (here a job it can run)
    log = tmp_path / "runs.log"
    [job_id] = Client(JobStore(db), Settings()).enqueue_many([JobSpec("record", {"log": str(log)}, queue="pay")])
    r = recon("--config", str(config), "worker", "--burst", "--handlers", "tests.integration.handlers",
              db_url=db_url, env={**subprocess_env, "RECON_SANDBOX_BASE_URL": "http://127.0.0.1:9"})
    assert r.returncode == 0, r.stderr
    assert [int(line.split()[0]) for line in log.read_text().splitlines()] == [job_id]
