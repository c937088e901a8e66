"""Adyen's Payment accounting report, as the sandbox writes it from its books.

docs.adyen.com/reporting/invoice-reconciliation/payment-accounting-report: a CSV file
``payments_accounting_report_YYYY_MM_DD.csv`` per merchant account and day, one journal row per lifecycle event
of a payment ("Record Type": Received, Authorised, SentForSettle, Settled, Refused, Cancelled, Expired,
SentForRefund, Refunded, RefundFailed, Chargeback), booked in the day of the account's time zone setting.
``Booking Date`` is
``YYYY-MM-DD HH:MM:SS`` in that zone and ``TimeZone`` names it as a 4-character abbreviation in effect at that
instant (CET in winter, CEST in summer for the default "CET"), so a client must read the zone from the column.

Columns are the report's standard ones in their documented order, then the additional column ``Modification Psp
Reference`` (``COLUMNS``): a refund's rows name the refund by its pspReference there and by the merchant's refund
``reference`` in ``Modification Merchant Reference``; so do a manual capture's SentForSettle and Settled rows (the
capture's), a capture failed after it was sent (SentForSettle, then CaptureFailed: ``admin_movements``) and a
cancelled authorisation's Cancelled row (the cancel's, or the reversal's); other rows leave both empty. Amounts are
in major units ("12.50"; "1250" for JPY). Register columns move as Adyen's journal does: Received (PC) +amount,
Authorised moves it from Received to Authorised (PC), SentForSettle from Authorised to Captured (PC), Settled from
Captured (PC) to Payable (SC) net of the fee in Commission (SC) (``records.sandbox_fee``); Refunded and Chargeback
take Payable (SC) back (a chargeback also costs ``records.DISPUTE_FEE`` in Commission (SC)); a won chargeback adds
ChargebackReversed (the money back), one lost after that SecondChargeback; a reversed refund RefundedReversed.

Sandbox simplifications: the journal is derived from each payment's current state (an admin status change
rewrites its history); a captured payment is settled at once (automatic capture: when it is authorised; manual:
when it is captured, for the amount captured); and files exist for any past day
and for today (the rows so far), where Adyen writes a day's file the next morning, so that tests and demos
finish in seconds. A day in the future, or an account that never had a payment, is 404.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta, tzinfo

from psp_adapters.sandbox.cards import AUTHENTICATION_REQUIRED
from psp_adapters.sandbox.movements import (
    CAPTURE_FAILED,
    DISPUTE_LOST,
    REFUND_FAILED,
    REFUND_SUCCEEDED,
    Adjustment,
    Modification,
)
from psp_adapters.sandbox.records import PaymentRecord
from psp_adapters.sandbox.wire import PaymentStatus

COLUMNS = (
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
    "Modification Psp Reference",
)
# ISO-4217 minor-unit exponents that are not 2 (docs.adyen.com/development-resources/currency-codes)
_EXPONENT_0 = frozenset("BIF CLP CVE DJF GNF IDR ISK JPY KMF KRW PYG RWF UGX VND VUV XAF XOF XPF".split())
_EXPONENT_3 = frozenset("BHD IQD JOD KWD LYD OMR TND".split())


def file_name(day: date) -> str:
    return f"payments_accounting_report_{day:%Y_%m_%d}.csv"


def major_units(amount: int, currency: str) -> str:
    """Minor units -> the report's decimal text, exactly (integers only)."""
    exponent = 0 if currency in _EXPONENT_0 else 3 if currency in _EXPONENT_3 else 2
    sign, whole = ("-" if amount < 0 else ""), abs(amount)
    if exponent == 0:
        return f"{sign}{whole}"
    return f"{sign}{whole // 10**exponent}.{whole % 10**exponent:0{exponent}d}"


def day_window(day: date, zone: tzinfo) -> tuple[datetime, datetime]:
    """The instants ``[start, end)`` of ``day`` in ``zone``."""
    start = datetime.combine(day, time(0), tzinfo=zone)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone)
    return start, end


def journal(
    record: PaymentRecord, adjustments: Sequence[Adjustment], modifications: Sequence[Modification] = ()
) -> list[tuple[datetime, str, dict[str, object]]]:
    """The payment's journal rows: (booked at, Record Type, {column: amount in minor units | text});
    ``modifications``: its captures and cancels (Adyen's ``/captures``, ``/cancels``, ``/reversals``), whose rows
    they name."""
    a = record.amount
    done = record.settled_at or record.created_at
    authorized = record.authorized_at or done
    rows: list[tuple[datetime, str, dict[str, object]]] = [(record.created_at, "Received", {"Received (PC)": a})]
    if record.status in (PaymentStatus.SUCCEEDED, PaymentStatus.AUTHORIZED) or (
        record.status is PaymentStatus.CANCELED and record.authorized_at is not None
    ):
        rows.append((authorized, "Authorised", {"Received (PC)": -a, "Authorised (PC)": a}))
    if record.status is PaymentStatus.SUCCEEDED:
        captured, fee = record.captured, record.booked_fee
        names = _names(_last(modifications, "capture", status="processed"))
        rows += [
            (done, "SentForSettle", {"Main Amount": captured, "Authorised (PC)": -a, "Captured (PC)": captured,
                                     **names}),
            (done, "Settled", {"Main Amount": captured, "Captured (PC)": -captured, "Payable (SC)": captured - fee,
                               "Commission (SC)": fee, **names}),
        ]
    elif record.status is PaymentStatus.AUTHORIZED:
        rows += _failed_capture_rows(record, _last(modifications, CAPTURE_FAILED, status="processed"))
    elif record.status is PaymentStatus.FAILED and record.failure_reason != AUTHENTICATION_REQUIRED:
        rows.append((done, "Refused", {"Received (PC)": -a}))  # (a RedirectShopper never comes back: no row)
    elif record.status is PaymentStatus.CANCELED:
        kind = "Expired" if record.failure_reason == "expired" else "Cancelled"
        held = "Authorised (PC)" if record.authorized_at is not None else "Received (PC)"
        names = _names(_last(modifications, "cancel", status="processed")) if kind == "Cancelled" else {}
        rows.append((done, kind, {held: -a, **names}))
    for adj in adjustments:
        rows += _adjustment_rows(adj)
    return rows


def _last(modifications: Sequence[Modification], did: str, *, status: str) -> Modification | None:
    """The latest modification in ``status`` whose ``outcome`` is ``did`` (a reversal of an authorisation: cancel)."""
    found = [m for m in modifications if m.outcome == did and m.status == status]
    return found[-1] if found else None


def _names(modification: Modification | None) -> dict[str, object]:
    if modification is None:
        return {}
    return {"Modification Psp Reference": modification.id,
            "Modification Merchant Reference": modification.reference or ""}


def _failed_capture_rows(record: PaymentRecord,
                         capture: Modification | None) -> list[tuple[datetime, str, dict[str, object]]]:
    """A capture the scheme rejected after it was sent: SentForSettle when it was processed, CaptureFailed when it
    failed (the payment authorised again); no rows without one."""
    if capture is None:
        return []
    amount, names = capture.amount or record.amount, _names(capture)
    return [
        (capture.due_at, "SentForSettle", {"Main Amount": amount, "Authorised (PC)": -amount,
                                           "Captured (PC)": amount, **names}),
        (record.updated_at, "CaptureFailed", {"Main Amount": amount, "Captured (PC)": -amount,
                                              "Authorised (PC)": amount, **names}),
    ]


def _adjustment_rows(adj: Adjustment) -> list[tuple[datetime, str, dict[str, object]]]:
    """A refund: SentForRefund, then Refunded once it succeeded (and RefundFailed, the money back, if it failed
    after); a chargeback: one Chargeback row, with its fee."""
    main: dict[str, object] = {"Main Amount": adj.amount}
    if adj.kind != "refund":
        return _dispute_rows(adj, main)
    main.update({"Modification Psp Reference": adj.id, "Modification Merchant Reference": adj.reference or ""})
    rows: list[tuple[datetime, str, dict[str, object]]] = [(adj.created_at, "SentForRefund", dict(main))]
    if adj.status in (REFUND_SUCCEEDED, REFUND_FAILED):
        rows.append((adj.created_at, "Refunded", {**main, "Payable (SC)": -adj.amount}))
    if adj.status == REFUND_FAILED:
        kind = "RefundedReversed" if adj.metadata.get("reversed") == "true" else "RefundFailed"
        rows.append((adj.updated_at or adj.created_at, kind, {**main, "Payable (SC)": adj.amount}))
    return rows


def _dispute_rows(adj: Adjustment, main: dict[str, object]) -> list[tuple[datetime, str, dict[str, object]]]:
    """Chargeback (with its fee); ChargebackReversed when it was won (the money back); SecondChargeback when a won
    one was lost after all."""
    moved = {**main, "Payable (SC)": -adj.amount - adj.fee, "Commission (SC)": adj.fee}
    rows: list[tuple[datetime, str, dict[str, object]]] = [(adj.created_at, "Chargeback", moved)]
    won_at = adj.metadata.get("won_at")
    if won_at:
        rows.append((datetime.fromisoformat(won_at), "ChargebackReversed", {**main, "Payable (SC)": adj.amount}))
        if adj.status == DISPUTE_LOST:
            rows.append((adj.updated_at or adj.created_at, "SecondChargeback", {**main, "Payable (SC)": -adj.amount}))
    return rows


def render(
    payments: Sequence[PaymentRecord],
    adjustments: dict[str, list[Adjustment]],
    *,
    start: datetime,
    end: datetime,
    zone: tzinfo,
    company_account: str,
    modifications: dict[str, list[Modification]] | None = None,
) -> str:
    """The CSV text of the rows booked in ``[start, end)``: the header, then the rows in booking order
    (``modifications``: the captures and cancels of the payments, by payment)."""
    modifications = modifications or {}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    booked = [
        (at, n, record, kind, moved)
        for n, record in enumerate(payments)
        for at, kind, moved in journal(record, adjustments.get(record.psp_reference, []),
                                       modifications.get(record.psp_reference, []))
        if start <= at < end
    ]
    booked.sort(key=lambda row: (row[0], row[1]))
    for at, _, record, kind, moved in booked:
        writer.writerow(_row(record, at.astimezone(zone), kind, moved, company_account))
    return out.getvalue()


def _row(record: PaymentRecord, at: datetime, kind: str, moved: dict[str, object], company: str) -> list[str]:
    currency = record.currency
    settles = any(name.endswith("(SC)") for name in moved)
    main = moved.get("Main Amount", record.amount)
    cells: dict[str, str] = {
        "Company Account": company,
        "Merchant Account": record.merchant_account or "",
        "Psp Reference": record.psp_reference,
        "Merchant Reference": record.merchant_reference,
        "Payment Method": "visa",
        "Booking Date": at.strftime("%Y-%m-%d %H:%M:%S"),
        "TimeZone": at.tzname() or "",
        "Main Currency": currency,
        "Main Amount": major_units(main, currency) if isinstance(main, int) else "",
        "Record Type": kind,
        "Payment Currency": currency,
        "Settlement Currency": currency if settles else "",
        "User Name": f"ws@Company.{company}",
        "Payment Method Variant": "visa",
    }
    for name, value in moved.items():
        if name != "Main Amount" and isinstance(value, int):
            cells[name] = major_units(value, currency)
        elif isinstance(value, str):
            cells[name] = value
    return [cells.get(name, "") for name in COLUMNS]
