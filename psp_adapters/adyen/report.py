"""The wire format of Adyen's daily Payment accounting report: a CSV file, one row per lifecycle event.

File ``payments_accounting_report_YYYY_MM_DD.csv``: a header line, then one row per journal entry of a
payment (Received, Authorised, SentForSettle, Settled, Refused, Refunded, …). ``REPORT_COLUMNS`` are the
report's standard columns in their documented order (docs.adyen.com/reporting/invoice-reconciliation/
payment-accounting-report, "Standard columns"); merchants may add columns or reorder them, so cells are read
by header name, and only ``REQUIRED_COLUMNS`` must be present. What a ``Record Type`` means is
``wire.RecordType``'s business.

Amounts are decimals in major units ("12.50", "-0.35"), converted exactly to ISO-4217 minor units; a cell that
is not a plain decimal (``1e3``, ``NaN``, ``1_000``, other scripts' digits) or whose minor units fall outside a
signed 64-bit integer is malformed. ``Booking Date`` is
``YYYY-MM-DD HH:MM:SS`` and ``TimeZone`` is "the time zone of the Booking Date column … the ISO code for your
time zone setting" (4 characters at most: an abbreviation such as ``CET``, ``CEST`` or ``BST``; the
Settlement details report's page lists "BST, CET, CEST, etc."). ``booking_time`` turns the pair into aware
UTC; see there for how abbreviations are read.

Fees (Settled rows): ``Payable (SC)`` is what Adyen will pay out for the row, in ``Settlement Currency``;
``Commission (SC)`` is the fee withheld, which Adyen splits into ``Markup (SC)``, ``Scheme Fees (SC)`` and
``Interchange (SC)`` when the acquirer reports at interchange level (Interchange++ pricing). ``ReportRow.fee``
is therefore the size of the sum of those four columns. The docs do not state the sign of these cells, so
the fee is taken as the magnitude of that sum (a withheld amount is never a credit to the merchant).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import PspRef
from psp_adapters.units import AMOUNT_MAX

#: the name in this adapter's errors, defined here and re-exported by ``wire``: wire reads the rows parsed
#: here, so this module sits below it and imports nothing of it (no import cycle)
PSP_NAME = "adyen"

#: the report's standard columns, in the documented order
REPORT_COLUMNS = (
    "Company Account",
    "Merchant Account",
    "Psp Reference",
    "Merchant Reference",
    "Payment Method",
    "Booking Date",
    "TimeZone",
    "Main Currency",
    "Main Amount",
    "Record Type",
    "Payment Currency",
    "Received (PC)",
    "Authorised (PC)",
    "Captured (PC)",
    "Settlement Currency",
    "Payable (SC)",
    "Commission (SC)",
    "Markup (SC)",
    "Scheme Fees (SC)",
    "Interchange (SC)",
    "Processing Fee Currency",
    "Processing Fee (FC)",
    "User Name",
    "Payment Method Variant",
    "Modification Merchant Reference",
)
#: columns without which a row cannot be read
REQUIRED_COLUMNS = ("Psp Reference", "Merchant Reference", "Booking Date", "Main Currency", "Main Amount",
                    "Record Type")
#: the fee columns whose sum is the fee withheld from a Settled row
FEE_COLUMNS = ("Commission (SC)", "Markup (SC)", "Scheme Fees (SC)", "Interchange (SC)")

# Abbreviations that name one UTC offset. A ``TimeZone`` cell is the abbreviation in effect at the booking
# (the docs list CET and CEST as distinct values), so "CET" is UTC+01:00 even in July: tzdata's zone named
# "CET" observes summer time and would add an hour, so it is deliberately not used for the abbreviation.
# Ambiguous abbreviations (CST: US Central or China; IST: India, Ireland or Israel) are not listed: they are
# read through the configured ``report_timezone`` (see ``booking_time``).
_FIXED_OFFSETS: Mapping[str, float] = {
    "UTC": 0, "GMT": 0, "WET": 0, "WEST": 1, "BST": 1, "CET": 1, "CEST": 2, "MET": 1, "MEST": 2,
    "EET": 2, "EEST": 3, "MSK": 3, "EST": -5, "EDT": -4, "CDT": -5, "MST": -7, "MDT": -6, "PST": -8,
    "PDT": -7, "AKST": -9, "AKDT": -8, "HST": -10, "BRT": -3, "HKT": 8, "SGT": 8, "AWST": 8, "JST": 9,
    "KST": 9, "ACST": 9.5, "ACDT": 10.5, "AEST": 10, "AEDT": 11, "NZST": 12, "NZDT": 13,
}
# ISO-4217 minor-unit exponents that are not 2 (the common case)
_ISO_ZERO = frozenset("BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF".split())
_ISO_THREE = frozenset("BHD IQD JOD KWD LYD OMR TND".split())


@dataclass(frozen=True, slots=True)
class ReportRow:
    """One row of a Payment accounting report, amounts in ISO minor units, time aware UTC.

    ``settlement_currency``, ``payable`` and ``fee`` are None when the row leaves their columns empty (every
    row but Settled and its later movements); ``payable`` and ``fee`` are minor units of
    ``settlement_currency``.
    """

    psp_reference: str
    merchant_reference: str | None
    record_type: str  #: the raw ``Record Type``; ``wire.RecordType`` when recognised
    booked_at: datetime
    currency: str
    amount: int
    raw: Mapping[str, str]
    merchant_account: str | None = None
    settlement_currency: str | None = None
    payable: int | None = None
    fee: int | None = None


def report_file_name(day: date) -> str:
    """The daily report's file name: ``payments_accounting_report_YYYY_MM_DD.csv``."""
    return f"payments_accounting_report_{day:%Y_%m_%d}.csv"


def parse_report(text: str, *, tz: tzinfo) -> list[ReportRow]:
    """The rows of a report; ``tz`` is the account's time zone setting, used for rows without ``TimeZone``.

    Raises PspProtocolError when a required column is missing or a row is malformed.
    """
    reader = csv.DictReader(io.StringIO(text))
    missing = [name for name in REQUIRED_COLUMNS if name not in (reader.fieldnames or ())]
    if missing:
        raise PspProtocolError(f"{PSP_NAME}: report lacks column(s) {', '.join(missing)}", psp=PSP_NAME)
    return [_report_row(row, tz=tz) for row in reader]


def row_matches(row: ReportRow, ref: PspRef, *, account: str | None = None) -> bool:
    """Whether ``row`` belongs to the payment ``ref`` names (PSP reference first, else ours) in merchant
    ``account``: a row whose ``Merchant Account`` cell names another account is never ours (two accounts of one
    company may both use a merchant reference)."""
    if account and row.merchant_account and row.merchant_account != account:
        return False
    if ref.psp_reference:
        return row.psp_reference == ref.psp_reference
    return row.merchant_reference == ref.merchant_reference


def booking_time(naive: datetime, zone: str, *, default: tzinfo) -> datetime:
    """The aware UTC instant of a ``Booking Date`` written in ``zone`` (the row's ``TimeZone`` cell).

    In order: an empty cell means ``default`` (the configured ``report_timezone``); an abbreviation that
    ``default`` uses at that wall time (either side of a DST change, e.g. "CST" under America/Chicago) is read
    through ``default``, which also settles ambiguous abbreviations; an abbreviation of one fixed offset
    (``_FIXED_OFFSETS``: "CET" is +01:00, "CEST" +02:00, "EET" +02:00) is that offset; any other value is an
    IANA zone name ("UTC", "Europe/Amsterdam"). Raises PspProtocolError for a zone it cannot place, naming the
    setting that fixes it.
    """
    name = zone.strip()
    if not name:
        return naive.replace(tzinfo=default).astimezone(UTC)
    for fold in (0, 1):
        local = naive.replace(tzinfo=default, fold=fold)
        if local.tzname() == name:
            return local.astimezone(UTC)
    offset = _FIXED_OFFSETS.get(name.upper())
    if offset is not None:
        return naive.replace(tzinfo=timezone(timedelta(hours=offset))).astimezone(UTC)
    try:
        return naive.replace(tzinfo=ZoneInfo(name)).astimezone(UTC)
    except (ZoneInfoNotFoundError, ValueError):
        raise PspProtocolError(
            f"{PSP_NAME}: report TimeZone {name!r} is not a known zone; set report_timezone "
            "(RECON_ADYEN_REPORT_TIMEZONE) to the account's IANA time zone",
            psp=PSP_NAME,
        ) from None


def major_to_minor(text: str, currency: str) -> int:
    """A report amount in major units ("10.00") -> ISO minor units, exactly (Decimal, never float).

    Raises PspProtocolError when it is not a plain decimal, has more decimals than the currency, or is outside
    a signed 64-bit integer in minor units.
    """
    exponent = 0 if currency in _ISO_ZERO else 3 if currency in _ISO_THREE else 2
    raw = text.strip()
    if len(raw) > _AMOUNT_CHARS or not _PLAIN_DECIMAL.fullmatch(raw):
        raise PspProtocolError(f"{PSP_NAME}: amount {raw[:40]!r} is not a plain decimal number", psp=PSP_NAME)
    try:
        scaled = Decimal(raw) * 10**exponent
    except InvalidOperation as exc:
        raise PspProtocolError(f"{PSP_NAME}: amount {raw!r} is not a number", psp=PSP_NAME) from exc
    if scaled != scaled.to_integral_value():
        raise PspProtocolError(
            f"{PSP_NAME}: amount {raw!r} is not whole {currency} minor units", psp=PSP_NAME
        )
    return _bounded(int(scaled), raw)


#: a report amount: digits, an optional sign and decimals (Decimal() alone takes 1e3, NaN, 1_000, other digits)
_PLAIN_DECIMAL = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?")
#: longer than any 64-bit amount with its decimals
_AMOUNT_CHARS = 40


def _bounded(minor: int, text: str) -> int:
    if abs(minor) > AMOUNT_MAX:
        raise PspProtocolError(f"{PSP_NAME}: amount {text!r} is outside 64 bits in minor units", psp=PSP_NAME)
    return minor


def _report_row(row: Mapping[str, str | None], *, tz: tzinfo) -> ReportRow:
    def cell(name: str) -> str:
        value = row.get(name)
        if value is None:
            raise PspProtocolError(f"{PSP_NAME}: report row lacks {name!r}", psp=PSP_NAME)
        return value.strip()

    def optional(name: str) -> str:
        return (row.get(name) or "").strip()

    try:
        naive = datetime.strptime(cell("Booking Date"), "%Y-%m-%d %H:%M:%S")
    except ValueError as exc:
        raise PspProtocolError(
            f"{PSP_NAME}: bad Booking Date {cell('Booking Date')!r}", psp=PSP_NAME
        ) from exc
    try:
        booked = booking_time(naive, optional("TimeZone"), default=tz)
    except OverflowError:  # 0001-01-01 00:30 CET, 9999-12-31 23:30 in a zone behind UTC
        raise PspProtocolError(f"{PSP_NAME}: Booking Date {cell('Booking Date')!r} is outside the years 1..9999 "
                               "in UTC", psp=PSP_NAME) from None
    currency = cell("Main Currency").upper()
    if not cell("Psp Reference") or len(currency) != 3:
        raise PspProtocolError(f"{PSP_NAME}: report row without Psp Reference or currency", psp=PSP_NAME)
    settlement_currency = optional("Settlement Currency").upper() or None
    return ReportRow(
        psp_reference=cell("Psp Reference"),
        merchant_reference=cell("Merchant Reference") or None,
        record_type=cell("Record Type"),
        booked_at=booked,
        currency=currency,
        amount=major_to_minor(cell("Main Amount"), currency),
        raw={key: value or "" for key, value in row.items() if isinstance(key, str)},
        merchant_account=optional("Merchant Account") or None,
        settlement_currency=settlement_currency,
        payable=_settlement_amount(optional("Payable (SC)"), settlement_currency),
        fee=_fee(row, settlement_currency),
    )


def _settlement_amount(text: str, currency: str | None) -> int | None:
    if not text or currency is None:
        return None
    return major_to_minor(text, currency)


def _fee(row: Mapping[str, str | None], currency: str | None) -> int | None:
    cells = [(row.get(name) or "").strip() for name in FEE_COLUMNS]
    given = [text for text in cells if text]
    if not given or currency is None:
        return None
    return _bounded(abs(sum(major_to_minor(text, currency) for text in given)), "+".join(given))
