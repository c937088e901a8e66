"""Reading SWIFT MT940 with the ``mt-940`` library, one statement (message) at a time.

The file is cut into messages at each ``:20:`` line (SWIFT block headers and bank preambles before the first
are skipped) and each message is given to ``mt940.models.Transactions`` alone: the library keeps one set of
statement fields per parse, so a file of several statements must not be parsed in one piece. Memory is the
file (at most ``MAX_BYTES``) plus one message's objects.

Per message: ``:20:`` is the statement id, ``:25:`` the account as written, ``:28C:`` the sequence, ``:60F:``
or ``:60M:`` the opening and ``:62F:`` or ``:62M:`` the closing balance (a statement sent in pages has a
message per page, each balanced on its own). Per ``:61:``: the mark (C and RD are credits, D and RC debits),
the amount exactly as written (the library's Decimal, built from the text, printed back without exponent),
the booking date (the entry date when given, else the value date), the bank reference after ``//``
(``NONREF`` counts as none), the transaction type as the bank code; the following ``:86:`` is the remittance,
from which an end-to-end id (``EREF+`` or ``/EREF/``) and a name (``/NAME/`` or ``?32``/``?33``) are read.

The text is UTF-8 when it decodes as such, else ISO-8859-1 (what many banks send); every byte decodes then.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import mt940

from recon.bank.formats.protocol import Amount, Balance, Direction, Entry, FormatError, Position, Statement

#: the library holds a message's text and objects; the file is read whole
MAX_BYTES = 64 * 1024 * 1024
_NO_REFERENCE = {"", "NONREF", "NOREF"}
_EREF = re.compile(r"(?:EREF\+|/EREF/)([^/?\n]+)")
_NAME = re.compile(r"/NAME/([^/\n]+)")
_SUBFIELD = re.compile(r"\?(\d\d)([^?]*)")
# The library logs each line it cannot match, quoting it: recon's log boundary (with its redaction) prints
# those when configured; without a configured handler they would reach stderr through logging's last resort.
logging.getLogger("mt940").addHandler(logging.NullHandler())
_CREDIT_MARKS = {"C": "credit", "RD": "credit", "D": "debit", "RC": "debit"}


@dataclass
class _Message:
    """One message's lines, with the file's line number of its ``:20:`` and of each ``:61:`` / ``:86:``."""

    start: int
    lines: list[str] = field(default_factory=list)
    line_61: list[int] = field(default_factory=list)
    line_86: dict[int, int] = field(default_factory=dict)  #: index of the :61: -> line of its :86:


def read(path: Path) -> Iterator[Entry | Statement]:
    """Entries and statements of the MT940 file at ``path`` (recon.bank.formats.protocol's order)."""
    text = _decode(path.read_bytes())
    count = 0
    for index, message in enumerate(_messages(text)):
        yield from _read_message(index, message)
        count += 1
    if not count:
        raise FormatError("has no :20: line: not an MT940 statement", Position(line=1))


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _messages(text: str) -> Iterator[_Message]:
    current: _Message | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith(":20:"):
            if current is not None:
                yield current
            current = _Message(start=number)
        if current is None:
            continue
        if line.startswith(":61:"):
            current.line_61.append(number)
        elif line.startswith(":86:") and current.line_61:
            current.line_86[len(current.line_61) - 1] = number
        current.lines.append(line)
    if current is not None:
        yield current


def _read_message(index: int, message: _Message) -> Iterator[Entry | Statement]:
    where = Position(line=message.start)
    parsed = mt940.models.Transactions()
    try:
        parsed.parse("\n".join(message.lines))
    except Exception as exc:  # the library raises bare RuntimeError/ValueError/KeyError on bad input
        raise FormatError(f"MT940 parser: {type(exc).__name__}: {str(exc)[:200]}", where) from None
    if len(parsed.transactions) != len(message.line_61):
        raise FormatError(f"{len(message.line_61)} :61: lines but {len(parsed.transactions)} could be read; "
                          "a :61: line is malformed", where, "amount")
    for number, transaction in enumerate(parsed.transactions):
        line_86 = message.line_86.get(number)
        yield _entry(index, transaction.data, Position(line=message.line_61[number]),
                     Position(line=line_86) if line_86 else None)
    yield _statement(index, parsed.data, where, entries=len(parsed.transactions))


def _entry(index: int, data: dict[str, Any], where: Position, details_at: Position | None) -> Entry:
    mark = str(data.get("status") or "")
    direction: Direction = _CREDIT_MARKS.get(mark.upper(), "") or _fail(  # type: ignore[assignment]
        f":61: mark {mark!r} is none of C, D, RC, RD", where, "direction")
    amount = data.get("amount")
    if amount is None or not isinstance(amount.amount, Decimal):
        raise FormatError(":61: has no amount", where, "amount")
    value_date = data.get("date")
    booking = data.get("entry_date") or value_date
    if booking is None:
        raise FormatError(":61: has no date", where, "booking_date")
    details = _clean(data.get("transaction_details"))
    reference = (data.get("bank_reference") or "").strip()
    return Entry(statement_index=index, position=where,
                 amount=Amount(text=_plain(amount.amount), currency=str(amount.currency or "")),
                 direction=direction, booking_date=_as_date(booking), value_date=_as_date(value_date),
                 bank_reference=None if reference.upper() in _NO_REFERENCE else reference,
                 end_to_end_id=_end_to_end(details), counterparty=_name(details), remittance=details,
                 bank_code=(data.get("id") or "").strip() or None,
                 field_positions={"remittance": details_at} if details_at else {})


def _statement(index: int, data: dict[str, Any], where: Position, *, entries: int) -> Statement:
    reference = str(data.get("transaction_reference") or "").strip()
    account = str(data.get("account_identification") or "").strip()
    if not reference or not account:
        raise FormatError("message has no :20: reference or no :25: account", where, "account")
    opening = data.get("final_opening_balance") or data.get("intermediate_opening_balance")
    closing = data.get("final_closing_balance") or data.get("intermediate_closing_balance")
    if opening is None or closing is None:
        missing = ":60F:/:60M: opening" if opening is None else ":62F:/:62M: closing"
        raise FormatError(f"message has no {missing} balance", where, "opening_balance")
    start, end = _balance(opening), _balance(closing)
    number, sequence = data.get("statement_number"), data.get("sequence_number")
    return Statement(index=index, position=where, statement_id=reference,
                     sequence="/".join(str(p) for p in (number, sequence) if p), account=account,
                     opening=start, closing=end, period_start=start.day or end.day,  # type: ignore[arg-type]
                     period_end=end.day or start.day, entries=entries)  # type: ignore[arg-type]


def _balance(balance: Any) -> Balance:
    amount = balance.amount
    return Balance(amount=Amount(text=_plain(amount.amount), currency=str(amount.currency)),
                   negative=str(balance.status).upper().endswith("D"), day=_as_date(balance.date))


def _plain(value: Decimal) -> str:
    """The unsigned amount as plain decimal text, exactly: Decimal('25.03') -> '25.03', never '2.503E+1'."""
    return f"{abs(value):f}"


def _as_date(value: Any) -> Any:
    return None if value is None else date(value.year, value.month, value.day)


def _clean(text: Any) -> str | None:
    joined = " ".join(str(text or "").split())
    return joined or None


def _end_to_end(details: str | None) -> str | None:
    found = _EREF.search(details or "")
    value = found.group(1).strip() if found else ""
    return None if value in ("", "NOTPROVIDED") else value


def _name(details: str | None) -> str | None:
    found = _NAME.search(details or "")
    if found:
        return found.group(1).strip() or None
    parts = {code: value for code, value in _SUBFIELD.findall(details or "")}
    name = (parts.get("32", "") + parts.get("33", "")).strip()
    return name or None


def _fail(message: str, where: Position, field_name: str) -> str:
    raise FormatError(message, where, field_name)
