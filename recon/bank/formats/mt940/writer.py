"""Writing SWIFT MT940: one message per statement, CRLF line ends, as banks deliver them.

``:20:`` the statement id (at most 16 characters), ``:25:`` the account, ``:28C:`` the sequence, ``:60F:`` and
``:62F:`` the balances (``C``/``D``, YYMMDD, currency, amount with a decimal comma), one ``:61:`` per entry
(value date, entry date MMDD, mark, amount, ``NTRF``, the end-to-end id or ``NONREF`` as the customer
reference, ``//`` and the bank reference) and a ``:86:`` with ``/EREF/``, ``/NAME/`` and ``/REMI/`` parts
(lines of at most 65 characters). A field over its SWIFT length is an error (ValueError), never cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from typing import BinaryIO

from recon.bank.formats.protocol import EntryToWrite, StatementToWrite

LINE = 65


def write(out: BinaryIO, statements: Sequence[StatementToWrite]) -> None:
    for s in statements:
        lines = [f":20:{_limit(s.statement_id, 16, ':20:')}", f":25:{_limit(s.account, 35, ':25:')}",
                 f":28C:{_limit(s.sequence or '1', 11, ':28C:')}",
                 f":60F:{_balance(s.opening, s.period_start, s)}"]
        for e in s.entries:
            lines.append(_line_61(e, s))
            details = _details(e)
            if details:
                lines.extend(_wrapped(":86:" + details))
        lines.append(f":62F:{_balance(s.closing_balance(), s.period_end, s)}")
        lines.append("-")
        out.write(("\r\n".join(lines) + "\r\n").encode("utf-8"))


def _balance(minor: int, day: date, s: StatementToWrite) -> str:
    return f"{'D' if minor < 0 else 'C'}{day:%y%m%d}{s.currency}{_amount(abs(minor), s)}"


def _line_61(e: EntryToWrite, s: StatementToWrite) -> str:
    if e.amount < 0:
        raise ValueError(f"entry amount {e.amount} is negative; give the direction instead")
    value = e.value_date or e.booking_date
    customer = _limit(e.end_to_end_id, 16, ":61: customer reference") if e.end_to_end_id else "NONREF"
    bank = f"//{_limit(e.bank_reference, 16, ':61: bank reference')}" if e.bank_reference else ""
    mark = "C" if e.direction == "credit" else "D"
    return f":61:{value:%y%m%d}{e.booking_date:%m%d}{mark}{_amount(e.amount, s)}NTRF{customer}{bank}"


def _details(e: EntryToWrite) -> str:
    parts = []
    if e.end_to_end_id:
        parts.append(f"/EREF/{_no_slash(e.end_to_end_id)}")
    if e.counterparty:
        parts.append(f"/NAME/{_no_slash(e.counterparty)}")
    if e.remittance:
        parts.append(f"/REMI/{e.remittance}")
    return "".join(parts)


def _wrapped(text: str) -> list[str]:
    lines = [text[i:i + LINE] for i in range(0, len(text), LINE)]
    if len(lines) > 6:
        raise ValueError(f":86: {text[:40]!r}…: more than 6 lines of {LINE} characters")
    return lines


def _amount(minor: int, s: StatementToWrite) -> str:
    text = f"{Decimal(minor).scaleb(-s.exponent):.{s.exponent}f}".replace(".", ",")
    return text if "," in text else text + ","


def _limit(value: str | None, limit: int, name: str) -> str:
    text = value or ""
    if not text or len(text) > limit or "\n" in text:
        raise ValueError(f"{name} {text!r}: MT940 needs 1 to {limit} characters on one line")
    return text


def _no_slash(text: str) -> str:
    if "/" in text:
        raise ValueError(f"{text!r}: a '/' would end the :86: part early")
    return text
