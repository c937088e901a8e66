"""`recon payments import` checks every row against what its PSP requires for a merchant-initiated charge.

The rules are the adapters' own (``check_charge`` in psp_adapters/stripe and psp_adapters/adyen, which cite
the PSPs' documentation); here: that the import applies them per row, names file, line and field, exits 2
and writes nothing, and resolves the merchant account (column, then --merchant-account, then the PSP's
configured default), never storing the literal "default" for a PSP that sends the account.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from tests.cli import Runner

COLUMNS = "merchant_reference,amount,currency,psp,merchant_account,payment_method,customer_reference\n"


def environ(**extra: str) -> dict[str, str]:
    """This process's environment without any RECON_ setting, plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("RECON_")}, **extra}


def imported(db: Database) -> dict[str, tuple[str, str | None, str | None]]:
    return {p.merchant_reference: (p.merchant_account, p.payment_method, p.customer_reference)
            for p in PaymentStore(db).iter_payments()}


@pytest.mark.parametrize(("row", "field"), [
    ("s-1,10.00,USD,stripe,,,cus_NffrFeUfNV2Hib", "payment_method"),
    ("s-1,10.00,USD,stripe,,pm_card_visa,", "customer_reference"),
    ("s-1,10.00,USD,stripe,,card-4242,cus_NffrFeUfNV2Hib", "payment_method"),
    ("s-1,5.125,KWD,stripe,,pm_card_visa,cus_NffrFeUfNV2Hib", "amount"),  # Stripe: the last digit must be 0
    ("a-1,10.00,EUR,adyen,AcmeShopEU,,shopper-0042", "payment_method"),
    ("a-1,10.00,EUR,adyen,AcmeShopEU,8415718415172200,", "customer_reference"),
    ("a-1,10.00,EUR,adyen,AcmeShopEU,8415718415172200,ab", "customer_reference"),
    ("a-1,10.00,EUR,adyen,,8415718415172200,shopper-0042", "merchant_account"),
    ("a-1,10.00,EUR,adyen,default,8415718415172200,shopper-0042", "merchant_account"),
    (f"{'a' * 81},10.00,EUR,adyen,AcmeShopEU,8415718415172200,shopper-0042", "merchant_reference"),
])
def test_import__a_row_its_psp_would_refuse_exits_2_naming_line_and_field(
        db: Database, db_url: str, tmp_path: Path, row: str, field: str, recon: Runner) -> None:
    path = tmp_path / "p.csv"
    path.write_text(COLUMNS + "ok-1,1.00,EUR,sandbox,,,\n" + row + "\n", encoding="utf-8")
    r = recon("payments", "import", str(path), db_url=db_url, env=environ())
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"recon: {path}:3: "), r.stderr
    assert r.stderr.rstrip().endswith(f"(field {field})"), r.stderr
    assert len(r.stderr.splitlines()) == 1
    assert imported(db) == {}


def test_import__three_decimal_amounts_stripe_can_charge_are_accepted(db: Database, db_url: str,
                                                                      tmp_path: Path, recon: Runner) -> None:
    path = tmp_path / "p.csv"
    path.write_text(COLUMNS + "s-1,5.120,KWD,stripe,,pm_card_visa,cus_NffrFeUfNV2Hib\n", encoding="utf-8")
    r = recon("payments", "import", str(path), "--no-charge", db_url=db_url, env=environ())
    assert r.returncode == 0, r.stderr
    assert [p.amount for p in PaymentStore(db).iter_payments()] == [5120]


def test_import__adyen_account_from_column_then_flag_then_config_then_env(db: Database, db_url: str,
                                                                          tmp_path: Path, recon: Runner) -> None:
    config = tmp_path / "recon.toml"
    config.write_text('[psp.adyen]\nmerchant_account = "AcmeShopFromConfig"\n', encoding="utf-8")
    rows = ("a-col,10.00,EUR,adyen,AcmeShopColumn,8415718415172200,shopper-0042\n"
            "a-none,10.00,EUR,adyen,,8415718415172201,shopper-0043\n")
    path = tmp_path / "p.csv"
    path.write_text(COLUMNS + rows, encoding="utf-8")
    r = recon("--config", str(config), "payments", "import", str(path), "--no-charge", db_url=db_url,
              env=environ())
    assert r.returncode == 0, r.stderr
    assert {ref: got[0] for ref, got in imported(db).items()} == {"a-col": "AcmeShopColumn",
                                                                   "a-none": "AcmeShopFromConfig"}

    path.write_text(COLUMNS + rows.replace("a-", "b-"), encoding="utf-8")
    r = recon("--config", str(config), "payments", "import", str(path), "--no-charge",
              "--merchant-account", "AcmeShopFromFlag", db_url=db_url, env=environ())
    assert r.returncode == 0, r.stderr
    assert imported(db)["b-none"][0] == "AcmeShopFromFlag"

    path.write_text(COLUMNS + rows.replace("a-", "c-"), encoding="utf-8")
    r = recon("payments", "import", str(path), "--no-charge", db_url=db_url,
              env=environ(RECON_ADYEN_MERCHANT_ACCOUNT="AcmeShopFromEnv"))
    assert r.returncode == 0, r.stderr
    assert imported(db)["c-none"] == ("AcmeShopFromEnv", "8415718415172201", "shopper-0043")
    assert all(account != "default" for account, _, _ in imported(db).values())
