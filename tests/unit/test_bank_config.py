"""``[bank]``: our accounts, checked at load (recon.bank.config), and how a statement's account field finds one."""

from __future__ import annotations

import pytest

from recon.bank.config import BankConfig, iban_valid
from recon.errors import ConfigError


def _load(accounts: dict[str, object]) -> BankConfig:
    return BankConfig.from_table({"accounts": accounts}, source="recon.toml")


@pytest.mark.parametrize(("table", "message"), [
    ({"accounts": {}, "acounts": {}}, "bank.acounts: unknown key; did you mean 'accounts'?"),
    ({"accounts": {"a": {"iban": "NL91ABNA0417164300", "currency": "EUR", "curency": "EUR"}}},
     "bank.accounts.a.curency: unknown key; did you mean 'currency'?"),
    ({"accounts": {"a": {"iban": "NL91ABNA0417164301", "currency": "EUR"}}}, "is not a valid IBAN"),
    ({"accounts": {"a": {"number": "12345", "iban": "NL91ABNA0417164300", "currency": "EUR"}}},
     "exactly one of iban and number"),
    ({"accounts": {"a": {"number": "12345", "currency": "EURO"}}}, "must be an ISO-4217 currency code"),
    ({"accounts": {"a": {"number": "12345", "currency": "EUR", "psps": "stripe"}}}, "a list of PSP names"),
    ({"accounts": {"a": {"number": "12345", "currency": "EUR"}, "b": {"number": "123 45", "currency": "EUR"}}},
     "12345 is also [bank.accounts.a]"),
    ({"accounts": {f"a{i}": {"number": str(i), "currency": "EUR"} for i in range(1001)}}, "at most 1000 accounts"),
])
def test_bank_config__refuses_a_bad_table_naming_the_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BankConfig.from_table(table, source="recon.toml")
    assert message in str(caught.value)


def test_bank_config__iban_check_digits_follow_iso_13616() -> None:
    # the examples of the IBAN registry (SWIFT) and a one-digit change of each
    for iban in ("NL91ABNA0417164300", "DE89370400440532013000", "GB29NWBK60161331926819"):
        assert iban_valid(iban)
        assert not iban_valid(iban[:-1] + str((int(iban[-1]) + 1) % 10))


@pytest.mark.parametrize(("written", "found"), [
    ("NL91ABNA0417164300", "eur"), ("nl91 abna 0417 1643 00", "eur"), ("50880050/0194804000888", "legacy"),
    ("0194804000888", "legacy"), ("DE89370400440532013000", None), ("194804000888", None),
])
def test_bank_config__finds_our_account_from_a_statements_account_field(written: str, found: str | None) -> None:
    config = _load({"eur": {"iban": "NL91 ABNA 0417 1643 00", "currency": "EUR", "psps": ["stripe"]},
                    "legacy": {"number": "0194804000888", "currency": "EUR"}})
    account = config.account_for(written)
    assert (account.key if account else None) == found
    assert config.accounts["eur"].psps == ("stripe",)
