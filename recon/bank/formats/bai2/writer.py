"""Writing BAI2: one file, one group per as-of day (``_days``), one account record per group, every trailer's control
total and record count computed as the specification defines them (algebraic sum of the amounts in the
``03`` and ``16`` records; records counted from the header through the trailer, ``88`` included).

Entries are written as type 195 (incoming money transfer, a credit) or 495 (outgoing money transfer, a
debit), the amount in minor units, the bank and customer references (no ``,`` or ``/``: an error), and the
text as the record's last field, continued on ``88`` records past 80 characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import BinaryIO

from recon.bank.formats.protocol import EntryToWrite, StatementToWrite

WIDTH = 80
SENDER = "RECON"


def write(out: BinaryIO, statements: Sequence[StatementToWrite]) -> None:
    lines: list[str] = []
    file_total = 0
    groups = 0
    created = f"{statements[0].period_end:%y%m%d}" if statements else "700101"
    lines.append(f"01,{SENDER},{SENDER},{created},0000,1,,,2/")
    for s in statements:
        originator = _field(s.statement_id.split(":")[0], "originator")
        for day, opening, closing, entries in _days(s):
            group_start = len(lines)
            lines.append(f"02,{SENDER},{originator},1,{day:%y%m%d},,{s.currency},2/")
            account_total, account_lines = _account(s, opening, closing, entries)
            lines.extend(account_lines)
            lines.append(f"98,{account_total},1,{len(lines) - group_start + 1}/")
            file_total += account_total
            groups += 1
    lines.append(f"99,{file_total},{groups},{len(lines) + 1}/")
    out.write(("\n".join(lines) + "\n").encode("ascii"))


def _days(s: StatementToWrite) -> list[tuple[date, int, int, list[EntryToWrite]]]:
    """BAI2 reports one as-of day per group: a statement of several days becomes one group per booking day
    (its first day when it has no entry), each day's closing the next one's opening; the statement's closing
    (``closing``, when set to write a fault) is the last day's."""
    by_day: dict[date, list[EntryToWrite]] = {}
    for e in s.entries:
        by_day.setdefault(e.booking_date, []).append(e)
    days = sorted(by_day) or [s.period_end]
    out, balance = [], s.opening
    for n, day in enumerate(days):
        entries = by_day.get(day, [])
        closing = balance + sum(e.amount if e.direction == "credit" else -e.amount for e in entries)
        if n == len(days) - 1:
            closing = s.closing_balance()
        out.append((day, balance, closing, entries))
        balance = closing
    return out


def _account(s: StatementToWrite, opening: int, closing: int, entries: list[EntryToWrite]) -> tuple[int, list[str]]:
    lines = [f"03,{_field(s.account, 'account')},{s.currency},010,{opening},,,015,{closing},,/"]
    total = opening + closing
    for e in entries:
        lines.extend(_entry(e))
        total += e.amount
    lines.append(f"49,{total},{len(lines) + 1}/")
    return total, lines


def _entry(e: EntryToWrite) -> list[str]:
    if e.amount < 0:
        raise ValueError(f"entry amount {e.amount} is negative; give the direction instead")
    code = "195" if e.direction == "credit" else "495"
    bank = _field(e.bank_reference or "", "bank reference")
    customer = _field(e.end_to_end_id or "", "customer reference")
    text = " ".join(p for p in (e.counterparty, e.remittance) if p)
    if not text:
        return [f"16,{code},{e.amount},,{bank},{customer},/"]
    record = f"16,{code},{e.amount},,{bank},{customer},{text}"
    lines = [record[:WIDTH]]
    rest = record[WIDTH:]
    while rest:
        lines.append("88," + rest[:WIDTH - 3])
        rest = rest[WIDTH - 3:]
    return lines


def _field(value: str, name: str) -> str:
    if "," in value or "/" in value or "\n" in value:
        raise ValueError(f"BAI2 {name} {value!r}: no ',' '/' or line break in a field")
    return value
