"""Cells of the CSV files recon writes (``recon report``, ``recon sweep --report``), safe to open in a spreadsheet.

A cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read by spreadsheet programs as
a formula (CSV injection: a merchant reference such as ``=HYPERLINK(...)`` would run when the report is
opened). Such text cells get a leading single quote, as OWASP recommends ("CSV Injection"), which spreadsheets
show as text. Numbers are written as numbers: a negative amount stays ``-1000``.

Characters a terminal acts on (an escape sequence, a carriage return, a newline in a PSP's reference) are written
as their escapes (``recon.terminal.shown``), as everywhere recon prints: the report is printed to a terminal
when it has no ``--output``, and no cell of a reconciliation report means anything by them.
"""

from __future__ import annotations

from typing import Any

from recon.terminal import shown

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """``value`` for a CSV cell: None as empty, text that a spreadsheet would take for a formula quoted, control
    characters escaped."""
    if value is None:
        return ""
    if isinstance(value, str):
        return ("'" if value.startswith(_FORMULA_START) else "") + shown(value)
    return value
