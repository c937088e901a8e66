"""``recon psp-sandbox-statement``: the bank statement of the sandbox's payouts, in camt.053 (.02, .08), MT940 and
BAI2, read back by the third-party parsers the project already trusts (mt-940, bai2, ISO 20022's camt.053.001.08
schema; see tests/bank/test_writers.py), imported by ``recon bank import`` on both databases, and each bank fault
visible in the file; bad usage exits 2 and writes nothing.

The sandbox runs in this process with a clock the test moves: charges on three days make three payouts (one per
day, at the next UTC midnight) that arrive a day later. Their amounts are written here from the charges and the
documented fee (2.9 % + 30: 1000 -> 59, 2000 -> 88, 1250 -> 66).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import xmlschema
from bai2 import bai2

from psp_adapters.sandbox import SandboxServer
from recon.db.bank_store import BankStore
from recon.db.database import Database
from tests.adapters.sandbox.test_flavor_stripe import Clock
from tests.bank.samples import ISO20022, sample
from tests.cli import Result, Runner

KEY = "sk_test_statement_0000"
IBAN = "NL91ABNA0417164300"
CONFIG = f'[bank.accounts.payouts-eur]\niban = "{IBAN}"\ncurrency = "EUR"\npsps = ["stripe"]\n'
NETS = (1000 - 59, 2000 - 88, 1250 - 66)  # the payouts of 2026-03-02, -03, -04: arriving on the 4th, 5th, 6th
ARRIVALS = (date(2026, 3, 4), date(2026, 3, 5), date(2026, 3, 6))


@pytest.fixture(scope="module")
def sandbox() -> Iterator[tuple[SandboxServer, list[dict[str, object]]]]:
    """A Stripe sandbox whose three payouts have all arrived, and the payouts as its API serves them (oldest
    first)."""
    clock = Clock()  # 2026-03-02 12:00 UTC
    with SandboxServer(flavor="stripe", api_key=KEY, now_func=clock) as srv, httpx.Client(
            base_url=srv.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=5) as http:
        for amount in (1000, 2000, 1250):
            answer = http.post("/v1/payment_intents", data={"amount": amount, "currency": "eur", "confirm": "true",
                                                            "payment_method": "pm_card_visa", "off_session": "true"})
            assert answer.status_code == 200, answer.text
            clock.advance(days=1)
        clock.advance(days=3)  # 2026-03-08: everything arrived
        payouts = http.get("/v1/payouts").json()["data"][::-1]
        yield srv, payouts


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "recon.toml"
    path.write_text(CONFIG)
    return path


def statement(recon: Runner, db_url: str, server: SandboxServer, out: Path, fmt: str, *extra: str) -> Result:
    return recon("psp-sandbox-statement", "--psp", "stripe", "--format", fmt, "--iban", IBAN, "--since",
                 "2026-03-01", "--until", "2026-03-10", "--output", str(out), "--url", server.url, *extra,
                 db_url=db_url)


def mt940_credits(path: Path) -> list[tuple[Decimal, str, str, str]]:
    """(amount, value date, customer reference, details) of each :61:, as the mt-940 library reads them."""
    import mt940

    parsed = mt940.parse(str(path))
    return [(t.data["amount"].amount, t.data["date"].isoformat()[:10], t.data.get("customer_reference") or "",
             (t.data.get("transaction_details") or "").replace("\n", "")) for t in parsed.transactions]


def test_statement__mt940_carries_each_payout_with_its_trace_id_and_imports_on_both_databases(
    recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path,
    sandbox: tuple[SandboxServer, list[dict[str, object]]],
) -> None:
    server, payouts = sandbox
    path = tmp_path / "s.sta"
    result = statement(recon, db_url, server, path, "mt940")
    assert result.returncode == 0, result.stderr

    traces = [p["trace_id"]["value"] for p in payouts]  # type: ignore[index]
    assert [p["amount"] for p in payouts] == list(NETS)
    got = mt940_credits(path)
    assert [(a, d, ref) for a, d, ref, _ in got] == [
        (Decimal(n) / 100, str(day), t) for n, day, t in zip(NETS, ARRIVALS, traces, strict=True)]
    assert all(f"/REMI/STRIPE PAYOUT {p['id']}" in details for p, (*_, details) in zip(payouts, got, strict=True))

    imported = recon("--config", str(config), "bank", "import", str(path), "--json", db_url=db_url)
    assert imported.returncode == 0, imported.stderr
    stored = list(BankStore(db).iter_entries())
    assert [(e.amount, e.direction, e.booking_date, e.end_to_end_id) for e in stored] == [
        (n, "credit", day, t) for n, day, t in zip(NETS, ARRIVALS, traces, strict=True)]
    again = statement(recon, db_url, server, path, "mt940")  # written again: the same references
    assert again.returncode == 0
    reimported = recon("--config", str(config), "bank", "import", str(path), "--json", db_url=db_url)
    assert reimported.returncode == 0 and '"entries_added": 0' in reimported.stdout


@pytest.mark.parametrize(("fmt", "extra"), [
    ("camt053", ("--camt-version", "08")), ("camt053", ("--camt-version", "02")), ("bai2", ())])
def test_statement__camt053_and_bai2_read_back_by_their_parsers_and_import(
    recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path, fmt: str, extra: tuple[str, ...],
    sandbox: tuple[SandboxServer, list[dict[str, object]]],
) -> None:
    server, payouts = sandbox
    path = tmp_path / f"s.{fmt}"
    assert statement(recon, db_url, server, path, fmt, *extra).returncode == 0
    if fmt == "bai2":
        parsed = bai2.parse_from_string(path.read_text(), check_integrity=True)
        amounts = [t.amount for g in parsed.children for a in g.children for t in a.children]
        assert amounts == list(NETS)
    elif fmt == "camt053":  # ISO 20022's own schema for the version written (tests/bank/get_samples.py)
        xmlschema.XMLSchema(str(sample(ISO20022 / f"camt.053.001.{extra[1]}.xsd"))).validate(str(path))
    imported = recon("--config", str(config), "bank", "import", str(path), "--json", db_url=db_url)
    assert imported.returncode == 0, imported.stderr
    stored = list(BankStore(db).iter_entries())
    assert sorted(e.amount for e in stored) == sorted(NETS)
    texts = [str(e.remittance) for e in stored]  # BAI2 has one text: the counterparty, then the remittance
    assert all(sum(f"STRIPE PAYOUT {p['id']}" in t for t in texts) == 1 for p in payouts)


def test_statement__each_fault_shows_in_the_file(
    recon: Runner, db_url: str, tmp_path: Path, sandbox: tuple[SandboxServer, list[dict[str, object]]],
) -> None:
    server, payouts = sandbox
    faulty = tmp_path / "faulty.sta"
    result = statement(recon, db_url, server, faulty, "mt940", "--fault", "missing-credit", "--fault", "bank-fee=50",
                       "--fault", "late=2", "--fault", "foreign-credit")
    assert result.returncode == 0, result.stderr
    got = [(a, d, details) for a, d, _, details in mt940_credits(faulty)]
    assert [(a, d) for a, d, _ in got] == [
        (Decimal("42.42"), "2026-03-01"),  # foreign-credit: on the first day, from nobody we know
        (Decimal(NETS[1] - 50) / 100, "2026-03-05"),  # bank-fee=50 off the second payout (the first is missing)
        (Decimal(NETS[2]) / 100, "2026-03-08"),  # late=2: the third, two days late
    ]
    assert "ACME GMBH" in got[0][2] and str(payouts[0]["id"]) not in "".join(d for *_, d in got)

    merged = tmp_path / "merged.sta"
    assert statement(recon, db_url, server, merged, "mt940", "--fault", "two-in-one").returncode == 0
    two = mt940_credits(merged)
    assert [(a, d) for a, d, *_ in two] == [(Decimal(NETS[0] + NETS[1]) / 100, "2026-03-05"),
                                            (Decimal(NETS[2]) / 100, "2026-03-06")]
    assert "COLLECTIVE CREDIT" in two[0][3] and two[0][2] in ("", "NONREF")

    past = tmp_path / "past.sta"
    late = recon("psp-sandbox-statement", "--psp", "stripe", "--format", "mt940", "--iban", IBAN, "--since",
                 "2026-03-01", "--until", "2026-03-06", "--output", str(past), "--url", server.url, "--fault",
                 "late=5", db_url=db_url)
    assert late.returncode == 0 and "1 arriving after 2026-03-06 left for the next statement" in late.stdout
    assert len(mt940_credits(past)) == 2


@pytest.mark.parametrize("args", [
    ("--fault", "lost-credit"), ("--fault", "late=0"), ("--fault", "bank-fee"), ("--fault", "bank-fee=99999"),
    ("--fault", "missing-credit", "--fault", "missing-credit", "--fault", "missing-credit", "--fault", "late=1"),
    ("--since", "2026-03-09"), ("--currency", "XXY"), ("--psp", "adyen"),
])
def test_statement__bad_usage_exits_2_with_one_line_and_writes_nothing(
    recon: Runner, db_url: str, tmp_path: Path, sandbox: tuple[SandboxServer, list[dict[str, object]]],
    args: tuple[str, ...],
) -> None:
    server, _ = sandbox
    out = tmp_path / "never.sta"
    base = {"--psp": "stripe", "--since": "2026-03-01", "--until": "2026-03-08", "--currency": "EUR"}
    options = dict(base)
    faults: list[str] = []
    for name, value in zip(args[::2], args[1::2], strict=True):
        if name == "--fault":
            faults += [name, value]
        else:
            options[name] = value
    result = recon("psp-sandbox-statement", "--format", "mt940", "--iban", IBAN, "--output", str(out), "--url",
                   server.url, *[x for pair in options.items() for x in pair], *faults, db_url=db_url)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and "psp-sandbox-statement" in result.stderr
    assert not out.exists() and not list(tmp_path.glob("*.part"))


def test_statement__adyen_batches_carry_their_batch_number_in_the_remittance(
    recon: Runner, db_url: str, db: Database, config: Path, tmp_path: Path,
) -> None:
    clock = Clock()
    with SandboxServer(flavor="adyen", api_key="AQE_k", now_func=clock) as srv:
        body = {"amount": {"value": 2000, "currency": "EUR"}, "merchantAccount": "AcmeEU", "reference": "order-1",
                "paymentMethod": {"type": "scheme", "storedPaymentMethodId": "pm_card_visa"},
                "shopperReference": "s1", "shopperInteraction": "ContAuth", "returnUrl": "https://shop.example/r"}
        assert httpx.post(f"{srv.url}/v71/payments", json=body, headers={"X-API-Key": "AQE_k"},
                          timeout=5).status_code == 200
        clock.advance(days=3)
        path = tmp_path / "adyen.xml"
        result = recon("psp-sandbox-statement", "--psp", "adyen", "--format", "camt053", "--iban", IBAN, "--since",
                       "2026-03-01", "--until", "2026-03-10", "--output", str(path), "--url", srv.url,
                       db_url=db_url)
    assert result.returncode == 0, result.stderr
    imported = recon("--config", str(config), "bank", "import", str(path), "--json", db_url=db_url)
    assert imported.returncode == 0, imported.stderr
    [entry] = list(BankStore(db).iter_entries())
    assert (entry.amount, entry.booking_date) == (2000 - 88, date(2026, 3, 4))  # closed at CET midnight, +1 day
    assert entry.remittance == "ADYEN PAYOUT AcmeEU BATCH 1"

