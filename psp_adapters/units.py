"""Amounts between ISO-4217 minor units and a PSP's own units.

Most PSPs count in ISO minor units; a few differ for a few currencies (Stripe: ISK two-decimal, MGA
zero-decimal; Adyen: CLP, ISK, CVE, IDR). An adapter's ``wire.py`` keeps its table of shifts (PSP exponent
minus ISO exponent) and converts only through these two functions. Integers throughout, never floats.
"""

from __future__ import annotations

from collections.abc import Mapping

from psp_adapters.errors import PspProtocolError, PspRejectedError


def to_psp_units(amount: int, currency: str, *, shifts: Mapping[str, int], psp: str, label: str) -> int:
    """ISO minor units -> the PSP's units. Raises PspRejectedError when the PSP cannot represent the amount."""
    shift = shifts.get(currency.upper(), 0)
    factor: int = 10 ** abs(shift)
    if shift >= 0:
        return amount * factor
    if amount % factor:
        raise PspRejectedError(f"{psp}: {currency} amounts must be whole units at {label}", psp=psp)
    return amount // factor


def from_psp_units(amount: int, currency: str, *, shifts: Mapping[str, int], psp: str) -> int:
    """The PSP's units -> ISO minor units. Raises PspProtocolError when the amount is not whole minor units."""
    shift = shifts.get(currency.upper(), 0)
    factor: int = 10 ** abs(shift)
    if shift <= 0:
        return amount * factor
    if amount % factor:
        raise PspProtocolError(f"{psp}: {currency} amount {amount} is fractional", psp=psp)
    return amount // factor
