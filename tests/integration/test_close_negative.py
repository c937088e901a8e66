"""Negative payouts on both databases and both PSPs: a payout below zero (Stripe's payout of a negative balance;
an Adyen batch that owes, its MerchantPayout row a net credit) is money the PSP takes from the bank account, and
the close matches it to a bank *debit* of the statement: by reference, by amount and date (a bank fee on top
within the tolerance), several payouts in one debit; never to a credit of the same size; a negative payout no
debit explains is bank_missing; a debit nobody explains is no exception (an account's other outgoings).

The payouts come through the PSPs' wire mappings (Stripe's canonical payout and balance transaction objects from
its fixtures3.json, changed as a negative balance's payout reads; an Adyen settlement details report in the
columns Adyen documents) and are stored as the payouts job stores them; the bank statement is camt.053 written
by recon's writer and read by ``recon bank import``. Expected values are written out here."""

from __future__ import annotations

import io
import json
from datetime import UTC, date
from pathlib import Path
from typing import Any

from psp_adapters.adyen import settlement
from psp_adapters.stripe.payouts import to_line, to_payout
from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.close.payouts import to_new_payout
from recon.db.database import Database
from recon.db.payout_store import PayoutStore
from tests.adapters.stripe_oracle import canonical
from tests.cli import Runner

STRIPE_IBAN = "NL91ABNA0417164300"
ADYEN_IBAN = "DE89370400440532013000"
CONFIG = f"""
[bank.accounts.stripe-eur]
iban = "{STRIPE_IBAN}"
currency = "EUR"
psps = ["stripe"]

[bank.accounts.adyen-eur]
iban = "{ADYEN_IBAN}"
currency = "EUR"
psps = ["adyen"]

[close]
bank_fee_tolerance = 100
"""
DAY = date(2026, 11, 10)
NOV_10 = 1794312000  # 2026-11-10 12:00 UTC


def store_stripe(db: Database, ref: str, amount: int, *, trace: str | None = None) -> None:
    """What Stripe's payouts listing and ``balance_transactions?payout=`` give for a payout of ``amount`` cents
    (negative: the balance was negative): an adjustment line and the payout's own."""
    payout = to_payout(canonical("payout", id=ref, amount=amount, currency="eur", status="paid",
                                 arrival_date=NOV_10, trace_id={"status": "supported", "value": trace}
                                 if trace else None))
    lines = [to_line(canonical("balance_transaction", id=f"txn_{ref}_a", type="adjustment",
                               reporting_category="other_adjustment", amount=amount, fee=0, net=amount,
                               currency="eur", source=None)),
             to_line(canonical("balance_transaction", id=f"txn_{ref}_p", type="payout", reporting_category="payout",
                               amount=-amount, fee=0, net=-amount, currency="eur", source=ref))]
    assert payout.amount == amount  # Stripe's sign kept
    PayoutStore(db).store(to_new_payout("stripe", payout, lines))


ADYEN_COLUMNS = ("Company Account,Merchant Account,Psp Reference,Merchant Reference,Payment Method,Creation Date,"
                 "TimeZone,Type,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC),"
                 "Exchange Rate,Net Currency,Net Debit (NC),Net Credit (NC),Commission (NC),Markup (NC),"
                 "Scheme Fees (NC),Interchange (NC),Payment Method Variant,Modification Merchant Reference,"
                 "Batch Number")


def adyen_report(batch: int, rows: list[tuple[str, str, str, str]]) -> str:
    """A settlement details report of AcmeEUR's ``batch``: rows of (type, psp reference, net debit, net
    credit), created 2026-11-10 in UTC."""
    out = [ADYEN_COLUMNS]
    for kind, psp_ref, debit, credit in rows:
        out.append(f"Acme,AcmeEUR,{psp_ref},order-{psp_ref},visa,2026-11-10 10:00:00,UTC,{kind},,EUR,,,,EUR,{debit},"
                   f"{credit},,,,,,,{batch}")
    return "\n".join(out) + "\n"


def store_adyen(db: Database, batch: int, rows: list[tuple[str, str, str, str]]) -> int:
    [parsed] = settlement.parse(adyen_report(batch, rows), account="AcmeEUR", tz=UTC)
    PayoutStore(db).store(to_new_payout("adyen", parsed.payout, parsed.lines))
    return parsed.payout.amount


def statement(tmp_path: Path, iban: str, entries: list[EntryToWrite], name: str) -> Path:
    out = io.BytesIO()
    registry.writer("camt053", camt_version="08").write(out, [StatementToWrite(
        account=iban, currency="EUR", exponent=2, statement_id=f"S-{name}", opening=100_000,
        period_start=date(2026, 11, 1), period_end=date(2026, 11, 30), entries=entries)])
    path = tmp_path / name
    path.write_bytes(out.getvalue())
    return path


def entry(amount: int, direction: str, ref: str, *, e2e: str | None = None, text: str = "") -> EntryToWrite:
    return EntryToWrite(amount=amount, direction=direction, booking_date=DAY, bank_reference=ref, end_to_end_id=e2e,
                        remittance=text or None)


def close(recon: Runner, db_url: str, config: Path, psp: str) -> tuple[int, dict[str, Any]]:
    result = recon("--config", str(config), "close", "--psp", psp, "--since", "2026-11-01", "--until", "2026-12-01",
                   db_url=db_url)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def found(doc: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    return {p["payout_id"]: (p["category"], sorted(p["bank_entries"])) for p in doc["payouts"]}


def test_close__negative_stripe_payouts_are_matched_to_bank_debits(db: Database, db_url: str, recon: Runner,
                                                                  tmp_path: Path) -> None:
    store_stripe(db, "po_neg_ref", -5000, trace="TRACE-NEG")   # by reference: the debit's end-to-end id
    store_stripe(db, "po_neg_fee", -3000)                      # amount and date: a debit of 30.50, fee 0.50
    store_stripe(db, "po_neg_n1", -1100)                       # N:1: one debit of 33.00 for both
    store_stripe(db, "po_neg_n2", -2200)
    store_stripe(db, "po_neg_gone", -4400)                     # no debit: bank_missing
    store_stripe(db, "po_pos", 7000, trace="TRACE-POS")        # a credit, as before
    config = tmp_path / "recon.toml"
    config.write_text(CONFIG)
    path = statement(tmp_path, STRIPE_IBAN, [
        entry(5000, "debit", "D-REF", e2e="TRACE-NEG", text="STRIPE"),
        entry(3050, "debit", "D-FEE", text="STRIPE DEBIT"),
        entry(3300, "debit", "D-N1", text="STRIPE DEBIT"),
        entry(7000, "credit", "C-POS", e2e="TRACE-POS"),
        entry(4400, "credit", "C-SAME-SIZE", text="REFUND FROM A SUPPLIER"),  # po_neg_gone's size, a credit
        entry(99_900, "debit", "D-RENT", text="OFFICE RENT"),  # not the close's business
    ], "stripe.xml")
    assert recon("--config", str(config), "bank", "import", str(path), db_url=db_url).returncode == 0
    code, doc = close(recon, db_url, config, "stripe")
    ids = {e["bank_reference"]: e["id"] for e in _entries(recon, db_url)}
    assert found(doc) == {"po_neg_ref": ("matched", [ids["D-REF"]]), "po_neg_fee": ("matched", [ids["D-FEE"]]),
                          "po_neg_n1": ("matched", [ids["D-N1"]]), "po_neg_n2": ("matched", [ids["D-N1"]]),
                          "po_neg_gone": ("bank_missing", []), "po_pos": ("matched", [ids["C-POS"]])}
    gone = next(p for p in doc["payouts"] if p["payout_id"] == "po_neg_gone")
    assert "no bank debit explains it" in gone["exceptions"][0]["detail"]
    # the credit of 44.00 is unexplained (a negative payout is never a credit); the rent debit is no exception
    assert [(e["kind"], e["bank_entry_id"]) for e in doc["credit_exceptions"]] == [
        ("unexplained_credit", ids["C-SAME-SIZE"])]
    assert code == 1
    eur = doc["totals"]["EUR"]
    assert (eur["paid_out"], eur["received"]) == (-5000 - 3000 - 1100 - 2200 - 4400 + 7000,
                                                  -5000 - 3050 - 3300 + 7000)
    shown = json.loads(recon("payouts", "show", "po_neg_fee", "--json", db_url=db_url).stdout)
    assert [(c["amount"], c["direction"]) for c in shown["bank_entries"]] == [(-3050, "debit")]
    assert "bank fee 50" in shown["events"][-1]["detail"]
    assert close(recon, db_url, config, "stripe") == (code, doc)  # run twice: the same answer


def test_close__a_negative_adyen_batch_is_matched_to_the_debit_naming_its_batch(db: Database, db_url: str,
                                                                                recon: Runner,
                                                                                tmp_path: Path) -> None:
    # batch 7 owes: a chargeback of 30.00 and a fee of 0.25 against nothing settled; Adyen debits 30.25
    owed = store_adyen(db, 7, [("Chargeback", "CB1", "30.00", ""), ("Fee", "", "0.25", ""),
                               ("MerchantPayout", "", "", "30.25")])
    paid = store_adyen(db, 8, [("Settled", "S1", "", "99.00"), ("MerchantPayout", "", "99.00", "")])
    missing = store_adyen(db, 9, [("Chargeback", "CB2", "12.00", ""), ("MerchantPayout", "", "", "12.00")])
    assert (owed, paid, missing) == (-3025, 9900, -1200)
    config = tmp_path / "recon.toml"
    config.write_text(CONFIG)
    path = statement(tmp_path, ADYEN_IBAN, [
        entry(3025, "debit", "D-7", text="ADYEN N.V. BATCH 7 AcmeEUR"),
        entry(9900, "credit", "C-8", text="ADYEN N.V. BATCH 8 AcmeEUR"),
        entry(1200, "credit", "C-9", text="ADYEN N.V. BATCH 9 AcmeEUR"),  # batch 9's number, but a credit
    ], "adyen.xml")
    assert recon("--config", str(config), "bank", "import", str(path), db_url=db_url).returncode == 0
    code, doc = close(recon, db_url, config, "adyen")
    ids = {e["bank_reference"]: e["id"] for e in _entries(recon, db_url)}
    assert found(doc) == {"AcmeEUR/7": ("matched", [ids["D-7"]]), "AcmeEUR/8": ("matched", [ids["C-8"]]),
                          "AcmeEUR/9": ("bank_missing", [])}
    assert [(e["kind"], e["bank_entry_id"]) for e in doc["credit_exceptions"]] == [
        ("unexplained_credit", ids["C-9"])]
    assert code == 1
    lines = next(p for p in doc["payouts"] if p["payout_id"] == "AcmeEUR/7")["lines"]
    assert [(ln["kind"], ln["net"]) for ln in lines] == [("dispute", -3000), ("fee", -25), ("payout", 3025)]
    assert doc["totals"]["EUR"]["received"] == -3025 + 9900


def _entries(recon: Runner, db_url: str) -> list[dict[str, Any]]:
    result = recon("bank", "list", "--json", db_url=db_url)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["entries"]  # type: ignore[no-any-return]
