"""The wire format of Adyen's Settlement details report: a CSV file per merchant account and payout batch.

Adyen generates it "every time we make a payout to your bank account": the details of the payments settled and
paid out in one batch (docs.adyen.com/reporting/settlement-reconciliation/transaction-level/settlement-details-
report; the columns: docs.adyen.com/developers/reporting/settlement-detail-report/settlement-detail-report-
structure). File name ``settlement_detail_report_batch_N.csv``, downloaded like the payment accounting report
(``/reports/download/MerchantAccount/ACCOUNT/FILE``, as the report user). Times are in the account's time zone
setting (``TimeZone`` column; ``report.booking_time`` reads it).

Columns read (by header name; merchants may add or reorder columns): ``Merchant Account``, ``Psp Reference``,
``Merchant Reference``, ``Creation Date``, ``TimeZone``, ``Type``, ``Modification Reference``, ``Gross Currency``,
``Gross Debit (GC)``, ``Gross Credit (GC)``, ``Net Currency``, ``Net Debit (NC)``, ``Net Credit (NC)``,
``Commission (NC)``, ``Markup (NC)``, ``Scheme Fees (NC)``, ``Interchange (NC)``, ``Batch Number``.

A row's net is ``Net Credit (NC) - Net Debit (NC)`` (what it adds to the batch); its gross is ``Gross Credit (GC)
- Gross Debit (GC)`` when given in the net currency, else net plus fee; its fee the size of the sum
of the four fee columns. ``Type`` (the journal types) -> line kind: Settled ``charge``; Refunded and
RefundedReversed ``refund``; Chargeback and SecondChargeback ``dispute``; ChargebackReversed
``dispute_reversal``; Fee, MiscCosts, PaymentCost, InvoiceDeduction ``fee``; MerchantPayout ``payout``;
Balancetransfer, DepositCorrection, ManualCorrected, MatchedStatement ``adjustment``; anything else ``other``.

The payout of a batch: its ``MerchantPayout`` rows (their net debit is the amount paid out; the payout's
currency theirs, its arrival day their creation day in the account's zone); a batch without one (a negative
balance carried to the next batch) pays out zero. Status ``in_transit``: the report says Adyen paid out, not
that the bank booked it (the close's matching says that). The payout id is ``ACCOUNT/N``; the trace reference
the batch number, which "in the settlement to your bank corresponds to the batch number in the Settlement
details report" (Adyen).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, tzinfo

from psp_adapters.adyen.report import PSP_NAME, booking_time, major_to_minor
from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import PspPayout, PspPayoutLine

REQUIRED_COLUMNS = ("Merchant Account", "Psp Reference", "Merchant Reference", "Creation Date", "Type",
                    "Net Currency", "Net Debit (NC)", "Net Credit (NC)", "Batch Number")
FEE_COLUMNS = ("Commission (NC)", "Markup (NC)", "Scheme Fees (NC)", "Interchange (NC)")
KINDS = {"Settled": "charge", "Refunded": "refund", "RefundedReversed": "refund", "Chargeback": "dispute",
         "SecondChargeback": "dispute", "ChargebackReversed": "dispute_reversal", "Fee": "fee", "MiscCosts": "fee",
         "PaymentCost": "fee", "InvoiceDeduction": "fee", "MerchantPayout": "payout", "Balancetransfer": "adjustment",
         "DepositCorrection": "adjustment", "ManualCorrected": "adjustment", "MatchedStatement": "adjustment"}
_FILE = re.compile(r"settlement_detail_report_batch_([0-9]{1,12})\.csv")


@dataclass(frozen=True, slots=True)
class Batch:
    """One merchant account's batch of a report: its payout and its lines."""

    payout: PspPayout
    lines: tuple[PspPayoutLine, ...]


def file_name(batch: int) -> str:
    return f"settlement_detail_report_batch_{batch}.csv"


def batch_of(name: str) -> int | None:
    """The batch number a report file's name carries, or None when it is not a Settlement details report."""
    found = _FILE.fullmatch(name.strip().rsplit("/", 1)[-1])
    return int(found[1]) if found else None


def parse(text: str, *, account: str, tz: tzinfo) -> list[Batch]:
    """The batches of ``account`` in a report (rows of other accounts are not this download's business).
    PspProtocolError names the row and field of anything malformed."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise PspProtocolError(f"{PSP_NAME}: settlement details report lacks column(s) {', '.join(missing)}",
                               psp=PSP_NAME)
    rows: dict[str, list[tuple[int, Mapping[str, str]]]] = {}
    for n, row in enumerate(reader, start=2):
        clean = {k: (v or "").strip() for k, v in row.items() if isinstance(k, str)}
        if clean["Merchant Account"] and clean["Merchant Account"] != account:
            continue
        rows.setdefault(clean["Batch Number"], []).append((n, clean))
    return [_batch(account, number, items, tz) for number, items in rows.items()]


def _batch(account: str, number: str, items: list[tuple[int, Mapping[str, str]]], tz: tzinfo) -> Batch:
    if not number.isdigit():
        raise PspProtocolError(f"{PSP_NAME}: settlement details line {items[0][0]}: Batch Number {number[:20]!r} "
                               "is not a number", psp=PSP_NAME)
    lines, payout_rows = [], []
    for n, row in items:
        line = _line(n, row)
        lines.append(line)
        if line.kind == "payout":
            payout_rows.append((line, _created(n, row, tz)))
    currency = payout_rows[0][0].currency if payout_rows else lines[0].currency
    arrival = (payout_rows[-1][1] if payout_rows else max(_created(n, r, tz) for n, r in items)).date()
    payout = PspPayout(payout_id=f"{account}/{int(number)}", currency=currency, status="in_transit",
                       amount=-sum(line.net for line, _ in payout_rows if line.currency == currency),
                       arrival_date=arrival, trace_ref=str(int(number)), merchant_account=account)
    return Batch(payout, tuple(lines))


def _line(n: int, row: Mapping[str, str]) -> PspPayoutLine:
    currency = row["Net Currency"].upper()
    if not re.fullmatch(r"[A-Z]{3}", currency):
        raise PspProtocolError(f"{PSP_NAME}: settlement details line {n}: Net Currency {currency[:10]!r}",
                               psp=PSP_NAME)
    net = _amount(n, row, "Net Credit (NC)", currency) - _amount(n, row, "Net Debit (NC)", currency)
    fee = abs(sum(_amount(n, row, name, currency) for name in FEE_COLUMNS))
    gross_given = row.get("Gross Credit (GC)") or row.get("Gross Debit (GC)")
    gross = (_amount(n, row, "Gross Credit (GC)", currency) - _amount(n, row, "Gross Debit (GC)", currency)
             if gross_given and row.get("Gross Currency", "").upper() == currency else net + fee)
    kind = KINDS.get(row["Type"], "other")
    reference = row.get("Modification Reference") or row["Psp Reference"]
    moved = row.get("Modification Reference") if kind in ("refund", "dispute", "dispute_reversal") else None
    return PspPayoutLine(line_id=f"{n}:{row['Type']}:{reference}"[:200], kind=kind, gross=gross, fee=fee, net=net,
                         currency=currency, psp_reference=row["Psp Reference"] or None,
                         merchant_reference=row["Merchant Reference"] or None, movement_reference=moved or None)


def _amount(n: int, row: Mapping[str, str], name: str, currency: str) -> int:
    text = row.get(name, "")
    if not text:
        return 0
    try:
        return major_to_minor(text, currency)
    except PspProtocolError as exc:
        raise PspProtocolError(f"{PSP_NAME}: settlement details line {n}: {name}: {exc}", psp=PSP_NAME) from None


def _created(n: int, row: Mapping[str, str], tz: tzinfo) -> datetime:
    try:
        naive = datetime.strptime(row["Creation Date"], "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise PspProtocolError(f"{PSP_NAME}: settlement details line {n}: bad Creation Date "
                               f"{row['Creation Date'][:30]!r}", psp=PSP_NAME) from None
    return booking_time(naive, row.get("TimeZone", ""), default=tz).astimezone(tz)
