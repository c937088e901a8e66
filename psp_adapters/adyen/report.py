"""The wire format of Adyen's daily Payment accounting report: a CSV file, one row per lifecycle event.

File ``payments_accounting_report_YYYY_MM_DD.csv``: a header line, then one row per journal entry of a
payment (Received, Authorised, SentForSettle, Settled, Refused, Refunded, …). Columns read here are
``REPORT_COLUMNS`` (the report has more, and merchants may add columns). Amounts are decimals in major units
("12.50"), converted exactly to ISO-4217 minor units; ``Booking Date`` is ``YYYY-MM-DD HH:MM:SS`` in the
account's time zone setting. What a ``Record Type`` means is ``wire.RecordType``'s business.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, tzinfo
from decimal import Decimal, InvalidOperation

from psp_adapters.adyen.wire import PSP_NAME
from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import PspRef

#: report columns this module reads
REPORT_COLUMNS = (
    "Psp Reference",
    "Merchant Reference",
    "Booking Date",
    "Main Currency",
    "Main Amount",
    "Record Type",
)
# ISO-4217 minor-unit exponents that are not 2 (the common case)
_ISO_ZERO = frozenset("BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF".split())
_ISO_THREE = frozenset("BHD IQD JOD KWD LYD OMR TND".split())


@dataclass(frozen=True, slots=True)
class ReportRow:
    """One row of a Payment accounting report, amounts in ISO minor units, time aware UTC."""

    psp_reference: str
    merchant_reference: str | None
    record_type: str  #: the raw ``Record Type``; ``wire.RecordType`` when recognised
    booked_at: datetime
    currency: str
    amount: int
    raw: Mapping[str, str]


def report_file_name(day: date) -> str:
    """The daily report's file name: ``payments_accounting_report_YYYY_MM_DD.csv``."""
    return f"payments_accounting_report_{day:%Y_%m_%d}.csv"


def parse_report(text: str, *, tz: tzinfo) -> list[ReportRow]:
    """The rows of a report; ``tz`` is the account's time zone setting (the Booking Date's zone).

    Raises PspProtocolError when a required column is missing or a row is malformed.
    """
    reader = csv.DictReader(io.StringIO(text))
    missing = [name for name in REPORT_COLUMNS if name not in (reader.fieldnames or ())]
    if missing:
        raise PspProtocolError(f"{PSP_NAME}: report lacks column(s) {', '.join(missing)}", psp=PSP_NAME)
    return [_report_row(row, tz=tz) for row in reader]


def row_matches(row: ReportRow, ref: PspRef) -> bool:
    """Whether ``row`` belongs to the payment ``ref`` names (PSP reference first, else ours)."""
    if ref.psp_reference:
        return row.psp_reference == ref.psp_reference
    return row.merchant_reference == ref.merchant_reference


def major_to_minor(text: str, currency: str) -> int:
    """A report amount in major units ("10.00") -> ISO minor units, exactly (Decimal, never float).

    Raises PspProtocolError when it is not a number or has more decimals than the currency.
    """
    exponent = 0 if currency in _ISO_ZERO else 3 if currency in _ISO_THREE else 2
    try:
        scaled = Decimal(text.strip()) * 10**exponent
    except InvalidOperation as exc:
        raise PspProtocolError(f"{PSP_NAME}: amount {text!r} is not a number", psp=PSP_NAME) from exc
    if not scaled.is_finite() or scaled != scaled.to_integral_value():
        raise PspProtocolError(
            f"{PSP_NAME}: amount {text!r} is not whole {currency} minor units", psp=PSP_NAME
        )
    return int(scaled)


def _report_row(row: Mapping[str, str | None], *, tz: tzinfo) -> ReportRow:
    def cell(name: str) -> str:
        value = row.get(name)
        if value is None:
            raise PspProtocolError(f"{PSP_NAME}: report row lacks {name!r}", psp=PSP_NAME)
        return value.strip()

    try:
        booked = datetime.strptime(cell("Booking Date"), "%Y-%m-%d %H:%M:%S").replace(tzinfo=tz)
    except ValueError as exc:
        raise PspProtocolError(
            f"{PSP_NAME}: bad Booking Date {cell('Booking Date')!r}", psp=PSP_NAME
        ) from exc
    currency = cell("Main Currency").upper()
    if not cell("Psp Reference") or len(currency) != 3:
        raise PspProtocolError(f"{PSP_NAME}: report row without Psp Reference or currency", psp=PSP_NAME)
    return ReportRow(
        psp_reference=cell("Psp Reference"),
        merchant_reference=cell("Merchant Reference") or None,
        record_type=cell("Record Type"),
        booked_at=booked.astimezone(UTC),
        currency=currency,
        amount=major_to_minor(cell("Main Amount"), currency),
        raw={key: value or "" for key, value in row.items() if isinstance(key, str)},
    )
