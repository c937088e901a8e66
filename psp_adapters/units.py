"""Amounts between ISO-4217 minor units and a PSP's own units.

Most PSPs count in ISO minor units; a few differ for a few currencies (Stripe: ISK two-decimal, MGA
zero-decimal; Adyen: CLP, ISK, CVE, IDR). An adapter's ``wire.py`` keeps its table of shifts (PSP exponent
minus ISO exponent) and converts only through these two functions. Integers throughout, never floats.

recon stores amounts in signed 64-bit columns (BIGINT) and adds them up: an amount a PSP sends that is outside
``-AMOUNT_MAX..AMOUNT_MAX`` once converted is malformed (PspProtocolError), and an amount the PSP's units cannot
hold in 64 bits is refused before it is sent (PspRejectedError); neither ever reaches a column or a sum.
"""

from __future__ import annotations

from collections.abc import Mapping

from psp_adapters.errors import PspProtocolError, PspRejectedError

#: the largest amount magnitude recon takes from or sends to a PSP: a signed 64-bit integer's
AMOUNT_MAX = 2**63 - 1


def to_psp_units(amount: int, currency: str, *, shifts: Mapping[str, int], psp: str, label: str) -> int:
    """ISO minor units -> the PSP's units. Raises PspRejectedError when the PSP cannot represent the amount."""
    shift = shifts.get(currency.upper(), 0)
    factor: int = 10 ** abs(shift)
    if shift >= 0:
        if abs(amount) * factor > AMOUNT_MAX:
            raise PspRejectedError(f"{psp}: {currency} amount too large for {label} (64-bit)", psp=psp)
        return amount * factor
    if amount % factor:
        raise PspRejectedError(f"{psp}: {currency} amounts must be whole units at {label}", psp=psp)
    return amount // factor


def from_psp_units(amount: int, currency: str, *, shifts: Mapping[str, int], psp: str) -> int:
    """The PSP's units -> ISO minor units. Raises PspProtocolError when the amount is not whole minor units or
    is outside 64 bits once converted."""
    shift = shifts.get(currency.upper(), 0)
    factor: int = 10 ** abs(shift)
    if shift <= 0:
        if abs(amount) * factor > AMOUNT_MAX:
            raise PspProtocolError(f"{psp}: {currency} amount outside 64 bits in minor units", psp=psp)
        return amount * factor
    if amount % factor:
        raise PspProtocolError(f"{psp}: {currency} amount {amount} is fractional", psp=psp)
    return amount // factor
