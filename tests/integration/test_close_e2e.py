"""End to end on both databases: the Stripe sandbox pays out (its clock moved by the test), ``recon payouts
fetch`` stores the payouts with their balance transactions, ``recon psp-sandbox-statement`` writes the bank
statement with the bank's faults, ``recon bank import`` reads it and ``recon close`` explains each payout; a
payout the bank returns afterwards (``payout.failed``) reopens the close.

Charges of 10.00 … 60.00 EUR on six days make six payouts (fee 2.9 % + 30, written out: 941, 1912, 2883, 3854, 4825,
5796) arriving 2026-03-04 … 03-09. The faults hit them in order: the first credit is missing, the second has a bank
fee of 1.50 deducted, the third and fourth come as one collective credit, the fifth five days late; the sixth is
plain; a foreign credit nobody expects arrives on the first day.
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

KEY = "sk_test_close_e2e_0000"
IBAN = "NL91ABNA0417164300"
CONFIG = f"""
[bank.accounts.payouts-eur]
iban = "{IBAN}"
currency = "EUR"
psps = ["stripe"]

[close]
bank_fee_tolerance = 200
"""
NETS = (941, 1912, 2883, 3854, 4825, 5796)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[tuple[SandboxServer, list[dict[str, Any]]]]:
    clock = Clock()  # 2026-03-02 12:00 UTC
    with SandboxServer(tmp_path / "stripe.db", flavor="stripe", api_key=KEY, now_func=clock) as srv, httpx.Client(
            base_url=srv.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=5) as http:
        for n in range(1, 7):
            answer = http.post("/v1/payment_intents", data={
                "amount": 1000 * n, "currency": "eur", "confirm": "true", "payment_method": "pm_card_visa",
                "off_session": "true", "metadata[merchant_reference]": f"order-{n}"})
            assert answer.status_code == 200, answer.text
            clock.advance(days=1)
        clock.advance(days=4)  # 2026-03-12: every payout has arrived
        payouts = http.get("/v1/payouts").json()["data"][::-1]
        yield srv, payouts


def run(recon: Runner, db_url: str, url: str, *args: str) -> Any:
    return recon(*args, db_url=db_url, env={"RECON_STRIPE_API_KEY": KEY, "RECON_STRIPE_BASE_URL": url},
                 log_level="WARNING")


def test_close__sandbox_payouts_a_faulty_statement_and_a_late_failure(
        recon: Runner, db_url: str, tmp_path: Path, sandbox: tuple[SandboxServer, list[dict[str, Any]]]) -> None:
    server, payouts = sandbox
    assert [p["amount"] for p in payouts] == list(NETS)
    config = tmp_path / "recon.toml"
    config.write_text(CONFIG)
    fetched = run(recon, db_url, server.url, "--config", str(config), "payouts", "fetch", "--psp", "stripe",
                  "--since", "2026-03-01", "--until", "2026-03-16")
    assert fetched.returncode == 0, fetched.stderr  # every payout's lines add up
    assert "6 new, 0 changed, 0 unchanged, 12 lines" in fetched.stdout  # a charge and the payout's own, each
    path = tmp_path / "march.sta"
    written = run(recon, db_url, server.url, "psp-sandbox-statement", "--psp", "stripe", "--format", "mt940",
                  "--iban", IBAN, "--since", "2026-03-01", "--until", "2026-03-15", "--output", str(path),
                  "--url", server.url, "--fault", "missing-credit", "--fault", "bank-fee=150", "--fault",
                  "two-in-one", "--fault", "late=5", "--fault", "foreign-credit")
    assert written.returncode == 0, written.stderr
    assert run(recon, db_url, server.url, "--config", str(config), "bank", "import", str(path)).returncode == 0

    def close() -> tuple[int, dict[str, Any]]:
        result = run(recon, db_url, server.url, "--config", str(config), "close", "--psp", "stripe", "--since",
                     "2026-03-01", "--until", "2026-03-16")
        assert result.returncode in (0, 1), result.stderr
        return result.returncode, json.loads(result.stdout)

    code, doc = close()
    got = {p["payout_id"]: (p["category"], len(p["bank_entries"])) for p in doc["payouts"]}
    ids = [p["id"] for p in payouts]
    assert got == {ids[0]: ("bank_missing", 0), ids[1]: ("matched", 1), ids[2]: ("matched", 1),
                   ids[3]: ("matched", 1), ids[4]: ("matched", 1), ids[5]: ("matched", 1)}
    assert code == 1
    assert [e["kind"] for e in doc["credit_exceptions"]] == ["unexplained_credit"]  # the foreign 42.42
    assert "4242 EUR" in doc["credit_exceptions"][0]["detail"]
    eur = doc["totals"]["EUR"]
    assert (eur["paid_out"], eur["received"]) == (sum(NETS), sum(NETS[1:]) - 150)
    assert (eur["gross"], eur["fees"]) == (21000, 59 + 88 + 117 + 146 + 175 + 204)
    lines = next(p for p in doc["payouts"] if p["payout_id"] == ids[0])["lines"]
    assert [(ln["kind"], ln["merchant_reference"], ln["net"], ln["category"]) for ln in lines] == [
        ("charge", "order-1", 941, "missing_locally"), ("payout", None, -941, "not_a_payment")]
    assert close() == (code, doc)  # run twice: the same answer

    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=5) as http:
        failed = http.post(f"/_admin/payouts/{ids[5]}/fail", json={"failure_code": "account_closed"})
        assert failed.status_code == 200, failed.text
    again = run(recon, db_url, server.url, "--config", str(config), "payouts", "fetch", "--psp", "stripe",
                "--since", "2026-03-01", "--until", "2026-03-16")
    assert again.returncode == 0, again.stderr
    assert f"changed: {ids[5]}: status paid -> failed" in again.stdout
    code, doc = close()
    late = next(p for p in doc["payouts"] if p["payout_id"] == ids[5])
    assert (code, late["category"], late["bank_entries"]) == (1, "payout_failed", [])
    assert sorted(e["kind"] for e in doc["credit_exceptions"]) == ["unexplained_credit", "unexplained_credit"]
    shown = json.loads(run(recon, db_url, server.url, "payouts", "show", ids[5], "--json").stdout)
    assert [e["kind"] for e in shown["events"]] == ["fetched", "matched", "changed", "reopened"]
