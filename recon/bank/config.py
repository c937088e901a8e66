"""``[bank]``: the bank accounts recon imports statements for.

```toml
[bank.accounts.main-eur]
iban = "NL91ABNA0417164300"      # or: number = "0417164300" (an account without an IBAN, e.g. a US account)
currency = "EUR"                 # the account's currency: a statement in another is refused
name = "Payouts EUR"             # optional, shown in listings
psps = ["stripe", "adyen"]       # optional: the PSPs that pay out to it (payout matching reads this)
```

A statement names its account as the bank writes it (camt ``Acct/Id/IBAN`` or ``Othr/Id``, MT940 ``:25:``,
BAI2 ``03``); ``BankConfig.account_for`` finds ours: the identifiers compared without spaces and case, and an
MT940 ``:25:`` of the form ``BANKCODE/NUMBER`` or ``BIC/NUMBER`` matches by the part after the last ``/``. A
statement for an account not listed is refused: recon does not store statements of accounts it does not own.

Checked at load: unknown keys (with the nearest valid name), exactly one of ``iban``/``number``, an IBAN's
shape and check digits (ISO 13616 mod 97), an ISO-4217 currency, at most ``MAX_ACCOUNTS`` accounts, no
identifier listed twice, and ``psps`` a list of names (the composition root checks them against [psp.*]).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recon.config import unknown
from recon.errors import ConfigError
from recon.payments.money import MINOR_UNITS

MAX_ACCOUNTS = 1000
NAME_MAX = 100
_KEYS = {"iban", "number", "currency", "name", "psps"}
_SECTION_KEYS = {"accounts"}
_IBAN = re.compile(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}")
_NUMBER = re.compile(r"[A-Za-z0-9./-]{1,34}")
_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True, slots=True)
class BankAccount:
    """One of our bank accounts. ``identifier``: the IBAN or the number, normalised (no spaces, upper case);
    it is what the bank tables store as ``account``."""
    key: str  #: the NAME of [bank.accounts.NAME]
    identifier: str
    currency: str
    name: str | None = None
    psps: tuple[str, ...] = ()
    is_iban: bool = False


@dataclass(frozen=True, slots=True)
class BankConfig:
    accounts: Mapping[str, BankAccount]

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | None, *, source: str = "config") -> BankConfig:
        table = dict(table or {})
        where = f"{source}: bank"

        for key in table:
            if key not in _SECTION_KEYS:
                raise unknown("key", key, _SECTION_KEYS, f"{where}.")
        accounts_table = table.get("accounts", {})
        if not isinstance(accounts_table, dict):
            raise ConfigError(f"{where}.accounts: must be a table of [bank.accounts.NAME] tables")
        if len(accounts_table) > MAX_ACCOUNTS:
            raise ConfigError(f"{where}.accounts: at most {MAX_ACCOUNTS} accounts, got {len(accounts_table)}")
        accounts: dict[str, BankAccount] = {}
        seen: dict[str, str] = {}
        for key, sub in accounts_table.items():
            account = _account(key, sub, f"{where}.accounts.{key}")
            if account.identifier in seen:
                raise ConfigError(f"{where}.accounts.{key}: {account.identifier} is also [bank.accounts."
                                  f"{seen[account.identifier]}]")
            seen[account.identifier] = key
            accounts[key] = account
        return cls(accounts=accounts)

    def account_for(self, written: str) -> BankAccount | None:
        """Our account that a statement's account field names, or None."""
        wanted = normalise(written)
        tail = wanted.rsplit("/", 1)[-1]
        for account in self.accounts.values():
            if account.identifier in (wanted, tail):
                return account
        return None


def normalise(identifier: str) -> str:
    return "".join(identifier.split()).upper()


def _account(key: str, table: Any, where: str) -> BankAccount:

    if not _ACCOUNT_NAME.fullmatch(key):
        raise ConfigError(f"{where}: the account's NAME may have letters, digits, '_', '.', '-' (1 to 64)")
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table")
    for k in table:
        if k not in _KEYS:
            raise unknown("key", k, _KEYS, f"{where}.")
    if ("iban" in table) == ("number" in table):
        raise ConfigError(f"{where}: give exactly one of iban and number")
    is_iban = "iban" in table
    identifier = _identifier(table["iban" if is_iban else "number"], is_iban, where)
    currency = table.get("currency")
    if not isinstance(currency, str) or currency.strip().upper() not in MINOR_UNITS:
        raise ConfigError(f"{where}.currency: must be an ISO-4217 currency code (got {currency!r})")
    name = table.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX):
        raise ConfigError(f"{where}.name: must be a non-empty string of at most {NAME_MAX} characters")
    psps = table.get("psps", [])
    if not isinstance(psps, list) or not all(isinstance(p, str) and p.strip() for p in psps) or len(psps) > 50:
        raise ConfigError(f"{where}.psps: must be a list of PSP names (at most 50)")
    return BankAccount(key=key, identifier=identifier, currency=currency.strip().upper(),
                       name=name.strip() if name else None, psps=tuple(p.strip() for p in psps), is_iban=is_iban)


def _identifier(value: Any, is_iban: bool, where: str) -> str:
    field = "iban" if is_iban else "number"
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{field}: must be a string (got {value!r})")
    text = normalise(value)
    if is_iban and not (_IBAN.fullmatch(text) and iban_valid(text)):
        raise ConfigError(f"{where}.iban: {value!r} is not a valid IBAN (country, check digits, account)")
    if not is_iban and not _NUMBER.fullmatch(text):
        raise ConfigError(f"{where}.number: {value!r} must be 1 to 34 letters, digits, '.', '/' or '-'")
    return text


def iban_valid(iban: str) -> bool:
    """ISO 13616: the IBAN, its first four characters moved to the end and letters as 10-35, is 1 mod 97."""
    moved = iban[4:] + iban[:4]
    digits = "".join(str(int(c, 36)) for c in moved)
    return int(digits) % 97 == 1
