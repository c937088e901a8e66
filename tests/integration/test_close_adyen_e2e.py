"""End to end on both databases, Adyen's way, in each statement format: the Adyen sandbox settles a batch per day
(its clock moved by the test) and writes each batch's Settlement details report; ``recon payouts fetch --psp
adyen`` walks the reports as the report user and stores each batch with its rows; ``recon psp-sandbox-statement
--psp adyen`` writes the bank's statement (camt.053, MT940, BAI2) with the bank's faults; ``recon bank import``
reads it and ``recon close --psp adyen`` explains each batch.

Charges of 10.00 … 60.00 EUR on six days make six batches of AcmeEU (fee 2.9 % + 30, written out: 941, 1912,
2883, 3854, 4825, 5796), batch N closing at midnight CET after day N, its money in the bank the day after. The
bank names each credit's batch in its remittance text (``ADYEN PAYOUT AcmeEU BATCH N``). The faults hit the
credits in order: batch 1's is missing, batch 2's has a bank fee of 1.50 deducted, batches 3 and 4 come as one
collective credit naming neither, batch 5's five days late; batch 6's is plain; a foreign credit of 42.42
nobody expects arrives on the first day. Expected values are written out here, never computed by recon.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from psp_adapters.sandbox import SandboxServer
from tests.adapters.sandbox.test_flavor_stripe import Clock
from tests.cli import Runner

KEY = "AQE_close_e2e_0000"
REPORT_USER, REPORT_PASSWORD = "report@Company.Acme", "report-pass"
IBAN = "NL91ABNA0417164300"
CONFIG = f"""
[bank.accounts.adyen-eur]
iban = "{IBAN}"
currency = "EUR"
psps = ["adyen"]

[close]
bank_fee_tolerance = 200
"""
NETS = (941, 1912, 2883, 3854, 4825, 5796)
FEES = (59, 88, 117, 146, 175, 204)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxServer]:
    """One sandbox for the module's runs (they only read it): six days of charges, every batch paid out."""
    clock = Clock()  # 2026-03-02 12:00 UTC, 13:00 CET
    path = tmp_path_factory.mktemp("adyen") / "adyen.db"
    with SandboxServer(path, flavor="adyen", api_key=KEY, now_func=clock, report_username=REPORT_USER,
                       report_password=REPORT_PASSWORD) as srv, httpx.Client(
            base_url=srv.url, headers={"X-API-Key": KEY}, timeout=5) as http:
        for n in range(1, 7):
            answer = http.post("/v71/payments", headers={"Idempotency-Key": f"order-{n}"}, json={
                "amount": {"value": 1000 * n, "currency": "EUR"}, "merchantAccount": "AcmeEU",
                "paymentMethod": {"type": "scheme", "storedPaymentMethodId": "pm_card_visa"},
                "reference": f"order-{n}", "returnUrl": "https://shop.example/return",
                "shopperReference": "shopper-1", "shopperInteraction": "ContAuth"})
            assert answer.status_code == 200, answer.text
            clock.advance(days=1)
        clock.advance(days=4)  # 2026-03-12: every batch closed, its money in the bank
        yield srv


def run(recon: Runner, db_url: str, url: str, *args: str) -> Any:
    return recon(*args, db_url=db_url, log_level="WARNING", env={
        "RECON_ADYEN_API_KEY": KEY, "RECON_ADYEN_BASE_URL": url, "RECON_ADYEN_REPORT_BASE_URL": url,
        "RECON_ADYEN_MERCHANT_ACCOUNT": "AcmeEU", "RECON_ADYEN_REPORT_USERNAME": REPORT_USER,
        "RECON_ADYEN_REPORT_PASSWORD": REPORT_PASSWORD})


@pytest.mark.parametrize("fmt", ["camt053", "mt940", "bai2"])
def test_close__adyen_batches_against_a_faulty_statement(recon: Runner, db_url: str, tmp_path: Path, fmt: str,
                                                         sandbox: SandboxServer) -> None:
    config = tmp_path / "recon.toml"
    config.write_text(CONFIG)
    fetched = run(recon, db_url, sandbox.url, "--config", str(config), "payouts", "fetch", "--psp", "adyen",
                  "--since", "2026-03-01", "--until", "2026-03-16")
    assert fetched.returncode == 0, fetched.stderr  # every batch's rows add up
    assert "6 new, 0 changed, 0 unchanged, 12 lines" in fetched.stdout  # Settled and MerchantPayout, each
    path = tmp_path / f"march.{fmt}"
    written = run(recon, db_url, sandbox.url, "psp-sandbox-statement", "--psp", "adyen", "--format", fmt,
                  "--iban", IBAN, "--since", "2026-03-01", "--until", "2026-03-15", "--output", str(path),
                  "--url", sandbox.url, "--fault", "missing-credit", "--fault", "bank-fee=150", "--fault",
                  "two-in-one", "--fault", "late=5", "--fault", "foreign-credit")
    assert written.returncode == 0, written.stderr
    imported = run(recon, db_url, sandbox.url, "--config", str(config), "bank", "import", str(path))
    assert imported.returncode == 0, imported.stderr

    def close() -> tuple[int, dict[str, Any]]:
        result = run(recon, db_url, sandbox.url, "--config", str(config), "close", "--psp", "adyen", "--since",
                     "2026-03-01", "--until", "2026-03-16")
        assert result.returncode in (0, 1), result.stderr
        return result.returncode, json.loads(result.stdout)

    code, doc = close()
    got = {p["payout_id"]: (p["amount"], p["category"], len(p["bank_entries"])) for p in doc["payouts"]}
    assert got == {"AcmeEU/1": (941, "bank_missing", 0), "AcmeEU/2": (1912, "matched", 1),
                   "AcmeEU/3": (2883, "matched", 1), "AcmeEU/4": (3854, "matched", 1),
                   "AcmeEU/5": (4825, "matched", 1), "AcmeEU/6": (5796, "matched", 1)}
    assert code == 1
    by_id = {p["payout_id"]: p for p in doc["payouts"]}
    assert by_id["AcmeEU/3"]["bank_entries"] == by_id["AcmeEU/4"]["bank_entries"]  # the collective credit
    assert [e["kind"] for e in doc["credit_exceptions"]] == ["unexplained_credit"]  # the foreign 42.42
    assert "4242 EUR" in doc["credit_exceptions"][0]["detail"]
    eur = doc["totals"]["EUR"]
    assert (eur["paid_out"], eur["received"]) == (sum(NETS), sum(NETS[1:]) - 150)
    assert (eur["gross"], eur["fees"]) == (21000, sum(FEES))
    lines = by_id["AcmeEU/1"]["lines"]
    assert [(ln["kind"], ln["merchant_reference"], ln["net"], ln["category"]) for ln in lines] == [
        ("charge", "order-1", 941, "missing_locally"), ("payout", None, -941, "not_a_payment")]
    shown = json.loads(run(recon, db_url, sandbox.url, "payouts", "show", "AcmeEU/2", "--json").stdout)
    assert [(c["amount"], c["booking_date"]) for c in shown["bank_entries"]] == [(1912 - 150, "2026-03-05")]
    assert "bank fee 150" in shown["events"][-1]["detail"]
    late = json.loads(run(recon, db_url, sandbox.url, "payouts", "show", "AcmeEU/5", "--json").stdout)
    assert [c["booking_date"] for c in late["bank_entries"]] == ["2026-03-13"]  # five days late, by reference
    assert close() == (code, doc)  # run twice: the same answer
