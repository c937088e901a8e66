"""Reading BAI2 (the BAI Cash Management Balance Reporting Specification, version 2) with the ``bai2`` library.

The library parses the whole file into its tree (file, groups, accounts, transactions), joining ``88``
continuations and checking every control total and record count of the ``49``, ``98`` and ``99`` trailers
(``check_integrity``): a truncated or edited file fails there. The file is read whole, so its size is capped
(``MAX_BYTES``).

Each account record (``03`` … ``49``) is one statement: the account number as written, the currency of the
account (else of the group, else USD as the specification says), opening ledger ``010`` and closing ledger
``015`` as the balances, the group's as-of date as the period and the booking date of every entry. The
statement id is the group's originator and as-of date (a bank that re-sends a day's file sends the same).
Only groups with status 1 (update) are read; a deletion, correction or test group is refused by name.

Per ``16`` record: the type code's side (credit 100-399, debit 400-699 per the specification's table, as the
library knows it), the amount in minor units as written (BAI2 has no decimal point), the bank reference, the
customer reference as the end-to-end id, the text as remittance. A non-monetary record (no side) with amount
0 is skipped; with an amount it is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bai2 import bai2 as bai2_parser
from bai2.constants import GroupStatus, TypeCodeTransaction
from bai2.exceptions import IntegrityException, NotSupportedYetException, ParsingException

from recon.bank.formats.protocol import Amount, Balance, Direction, Entry, FormatError, Position, Statement

MAX_BYTES = 64 * 1024 * 1024
DEFAULT_CURRENCY = "USD"
_OPENING, _CLOSING = "010", "015"


def read(path: Path) -> Iterator[Entry | Statement]:
    """Entries and statements of the BAI2 file at ``path`` (recon.bank.formats.protocol's order)."""
    raw = path.read_bytes()
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise FormatError(f"byte 0x{raw[exc.start]:02x} is not ASCII (BAI2 is ASCII)", Position(line=line)) from None
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    try:
        parsed = bai2_parser.parse_from_lines([line for _, line in lines], check_integrity=True)
    except (ParsingException, IntegrityException, NotSupportedYetException, ValueError, IndexError,
            KeyError) as exc:
        raise FormatError(f"BAI2 parser: {type(exc).__name__}: {str(exc)[:200]}", Position()) from None
    yield from _statements(parsed, _record_lines(lines, "03"), _record_lines(lines, "16"))


def _record_lines(lines: list[tuple[int, str]], code: str) -> Iterator[int]:
    return (n for n, line in lines if line.startswith(code + ","))


def _statements(parsed: Any, account_lines: Iterator[int], entry_lines: Iterator[int]) -> Iterator[Entry | Statement]:
    index = 0
    for group in parsed.children:
        header = group.header
        if header.group_status is not GroupStatus.update:
            raise FormatError(f"group status {header.group_status.name}: only update groups (1) are statements",
                              Position(), "status")
        for account in group.children:
            where = Position(line=next(account_lines))
            currency = account.header.currency or header.currency or DEFAULT_CURRENCY
            count = 0
            for transaction in account.children:
                entry = _entry(index, transaction, Position(line=next(entry_lines)), currency, header.as_of_date)
                if entry is not None:
                    count += 1
                    yield entry
            yield _statement(index, group, account, where, currency, count)
            index += 1
    if index == 0:
        raise FormatError("has no account record (03): not a statement", Position(line=1))


def _entry(index: int, t: Any, where: Position, currency: str, day: Any) -> Entry | None:
    side = t.type_code.transaction
    amount = int(t.amount or 0)
    if side not in (TypeCodeTransaction.credit, TypeCodeTransaction.debit):
        if amount == 0:
            return None
        raise FormatError(f"type code {t.type_code.code} is neither a credit nor a debit", where, "bank_code")
    direction: Direction = "credit" if side is TypeCodeTransaction.credit else "debit"
    if amount < 0:
        raise FormatError(f"amount {amount} is negative; the type code gives the side", where, "amount")
    return Entry(statement_index=index, position=where, amount=Amount(text=str(amount), currency=currency, minor=True),
                 direction=direction, booking_date=day, bank_reference=_text(t.bank_reference),
                 end_to_end_id=_text(t.customer_reference), remittance=_text(t.text),
                 bank_code=t.type_code.code)


def _statement(index: int, group: Any, account: Any, where: Position, currency: str, entries: int) -> Statement:
    summaries = {item.type_code.code: item for item in account.header.summary_items or []}
    if _OPENING not in summaries or _CLOSING not in summaries or summaries[_OPENING].amount is None \
            or summaries[_CLOSING].amount is None:
        raise FormatError("account record has no opening (010) or closing (015) ledger balance", where,
                          "opening_balance")
    day = group.header.as_of_date
    number = _text(account.header.customer_account_number)
    if number is None:
        raise FormatError("account record has no account number", where, "account")
    return Statement(index=index, position=where, statement_id=f"{group.header.originator_id}:{day:%Y%m%d}",
                     sequence="", account=number, opening=_balance(summaries[_OPENING].amount, currency, day),
                     closing=_balance(summaries[_CLOSING].amount, currency, day), period_start=day, period_end=day,
                     entries=entries)


def _balance(amount: int, currency: str, day: Any) -> Balance:
    return Balance(amount=Amount(text=str(abs(int(amount))), currency=currency, minor=True),
                   negative=int(amount) < 0, day=day)


def _text(value: Any) -> str | None:
    text = " ".join(str(value or "").split())
    return text or None
