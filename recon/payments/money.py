"""Money: integer minor units plus an ISO-4217 currency. Never floats.

``MINOR_UNITS`` is the ISO-4217 list of active currency codes with their exponent (digits after the
decimal point). ``parse_amount`` converts a decimal string exactly by that exponent and refuses anything
that would need rounding.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from recon.errors import UsageError

_PLAIN = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?")

_ZERO = "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF"
_THREE = "BHD IQD JOD KWD LYD OMR TND"
_FOUR = "CLF UYW"
_TWO = (
    "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BOV BRL BSD BTN BWP BYN BZD CAD CDF "
    "CHE CHF CHW CNY COP COU CRC CUC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GTQ "
    "GYD HKD HNL HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK LBP LKR LRD LSL MAD MDL MGA MKD MMK "
    "MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB "
    "SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD "
    "USN UYU UZS VED VES WST XCD YER ZAR ZMW ZWL"
)
MINOR_UNITS: dict[str, int] = {
    **{c: 2 for c in _TWO.split()},
    **{c: 0 for c in _ZERO.split()},
    **{c: 3 for c in _THREE.split()},
    **{c: 4 for c in _FOUR.split()},
}


def check_currency(code: str) -> str:
    """The upper-case ISO-4217 code; UsageError when it is not an active currency."""
    upper = code.strip().upper()
    if upper not in MINOR_UNITS:
        raise UsageError(f"currency {code!r} is not an ISO-4217 currency code")
    return upper


def parse_amount(text: str, currency: str) -> int:
    """``"12.34"`` EUR -> 1234. Exact: ``"12.345"`` EUR or ``"1.5"`` JPY is an error, never rounded."""
    minor = exact_minor(text, currency)
    if minor <= 0:
        raise UsageError(f"amount {text!r} must be positive")
    return minor


def exact_minor(text: str, currency: str) -> int:
    """``"12.34"`` EUR -> 1234, ``"0"`` -> 0: ``parse_amount`` without the sign rule (a bank balance may be 0 or,
    with a leading ``-``, negative). Exact, never rounded; not a plain decimal number is an error."""
    exponent = MINOR_UNITS[check_currency(currency)]
    raw = text.strip()
    if not _PLAIN.fullmatch(raw):  # Decimal() alone would take "1_000", ".5", "1e3", "NaN" and non-ASCII digits
        raise UsageError(f"amount {text!r} is not a plain decimal number (digits, optionally a '.' and decimals)")
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise UsageError(f"amount {text!r} is not a decimal number") from None
    minor = value.scaleb(exponent)
    if minor != minor.to_integral_value():
        raise UsageError(f"amount {text!r} has more decimals than {currency.upper()} allows ({exponent})")
    return int(minor)


def format_amount(minor: int, currency: str, *, grouped: bool = False) -> str:
    """1234, "EUR" -> "12.34 EUR"; ``grouped``: 123456789 -> "1,234,567.89 EUR" (for people, the console)."""
    exponent = MINOR_UNITS.get(currency.upper(), 2)
    spec = f",.{exponent}f" if grouped else f".{exponent}f"
    return f"{Decimal(minor).scaleb(-exponent):{spec}} {currency.upper()}"


def group_digits(value: int | str) -> str:
    """A count for people: 2012 -> "2,012"."""
    return f"{int(value):,}"
