"""Adyen's settlement batches and their Settlement details report, as the sandbox forms and writes them.

docs.adyen.com/reporting/settlement-reconciliation/transaction-level/settlement-details-report: "the details of
payments that have been settled and paid out to you in one batch", one CSV file per merchant account and batch,
``settlement_detail_report_batch_N.csv``, in the time zone setting of the account; its columns (``COLUMNS``)
are the standard ones in their documented order (docs.adyen.com/developers/reporting/settlement-detail-report/
settlement-detail-report-structure, and the sample rows on the report's page, which end in ``Payment Method
Variant``, ``Modification Merchant Reference``, ``Batch Number`` and seven ``Reserved`` columns). Where each
column's meaning comes from is in docs/psps.md ("The Settlement details report").

The rule (a sandbox simplification of Adyen's payout frequency, "daily"): at each midnight of the report time
zone, per merchant account and currency, every settlement journal row of the account not yet in a batch, booked
before that midnight, goes into one batch if their net sum is positive; otherwise they wait for the next
midnight that ends a day with rows. Batch numbers count 1, 2, … per merchant account (currencies closing the
same night in alphabetical order). The batch's money reaches the bank one day after it closed (the bank credit:
``bank_credits``, the batch number in its remittance, as Adyen's payouts carry it).

Rows (amounts in major units, ``adyen_report.major_units``; gross and net in the payment's currency, ``Exchange
Rate`` 1): ``Settled`` (Gross Credit the amount captured, Net Credit less the fee, Commission the fee:
``records.sandbox_fee``), ``Refunded`` (Gross and Net Debit the refund), ``RefundedReversed`` (a refund that
failed after it was booked: the money back as a credit), ``Chargeback`` (Gross Debit the amount, Net Debit with
the dispute fee, Commission the fee: as Adyen's sample), then one ``MerchantPayout`` row (Net Debit the batch's
net, paid out). ``Modification Reference``: the refund's or dispute's own PSP reference; for ``Settled`` the
payment's (the sandbox captures without a reference of its own); for ``MerchantPayout`` ``Batch N``.

As the accounting report, the rows are derived from each payment's current state: an admin status change of a
payment already in a closed batch rewrites that batch's report (its rows no longer add up to the payout).

The batch closes with the rest of the clock-driven work (``api.tick``); a ``REPORT_AVAILABLE`` notification
names each new report (``adyen_events``). Batches are documents (``ledger_documents``, type ``adyen_batch``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from psp_adapters.sandbox.adyen_report import major_units
from psp_adapters.sandbox.bank_credits import BankCredit, bank_reference
from psp_adapters.sandbox.core import Scope
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.ledger_documents import Document
from psp_adapters.sandbox.movements import REFUND_FAILED, REFUND_SUCCEEDED, Adjustment
from psp_adapters.sandbox.records import PaymentRecord
from psp_adapters.sandbox.webhook_events import Change
from psp_adapters.sandbox.wire import PaymentStatus, format_timestamp, parse_timestamp

COLUMNS = (
    "Company Account",
    "Merchant Account",
    "Psp Reference",
    "Merchant Reference",
    "Payment Method",
    "Creation Date",
    "TimeZone",
    "Type",
    "Modification Reference",
    "Gross Currency",
    "Gross Debit (GC)",
    "Gross Credit (GC)",
    "Exchange Rate",
    "Net Currency",
    "Net Debit (NC)",
    "Net Credit (NC)",
    "Commission (NC)",
    "Markup (NC)",
    "Scheme Fees (NC)",
    "Interchange (NC)",
    "Payment Method Variant",
    "Modification Merchant Reference",
    "Batch Number",
    *(f"Reserved{n}" for n in range(4, 11)),
)
BATCH = "adyen_batch"
_STATE = "adyen_batch_state"
_STATE_ID = "sandbox_adyen_batch_state"
FLAVOR = "adyen"
#: who the bank names as the payer of Adyen's payouts
COUNTERPARTY = "ADYEN N.V."
#: the time from a batch closing to its money in the bank
CREDIT_AFTER = timedelta(days=1)
_EPOCH = datetime.fromtimestamp(0, UTC)


@dataclass(frozen=True, slots=True)
class Row:
    """One settlement journal row: booked ``at``; debit and credit in minor units (>= 0)."""

    at: datetime
    record: PaymentRecord
    type: str
    modification: str
    gross_debit: int = 0
    gross_credit: int = 0
    net_debit: int = 0
    net_credit: int = 0
    commission: int = 0

    @property
    def net(self) -> int:
        return self.net_credit - self.net_debit


def file_name(batch: int) -> str:
    return f"settlement_detail_report_batch_{batch}.csv"


def rows_of(record: PaymentRecord, adjustments: Sequence[Adjustment]) -> list[Row]:
    """The payment's settlement journal rows (see the module docstring), as it stands now."""
    found: list[Row] = []
    if record.status is PaymentStatus.SUCCEEDED:
        captured, fee = record.captured, record.booked_fee
        at = record.settled_at or record.updated_at
        found.append(Row(at, record, "Settled", record.psp_reference, gross_credit=captured,
                         net_credit=captured - fee, commission=fee))
    for adj in adjustments:
        if adj.kind != "refund":
            found.append(Row(adj.created_at, record, "Chargeback", adj.id, gross_debit=adj.amount,
                             net_debit=adj.amount + adj.fee, commission=adj.fee))
            continue
        if adj.status in (REFUND_SUCCEEDED, REFUND_FAILED):
            found.append(Row(adj.created_at, record, "Refunded", adj.id, gross_debit=adj.amount, net_debit=adj.amount))
        if adj.status == REFUND_FAILED:
            found.append(Row(adj.updated_at or adj.created_at, record, "RefundedReversed", adj.id,
                             gross_credit=adj.amount, net_credit=adj.amount))
    return found


def _account_rows(ledger: Ledger, account: str, before: datetime) -> list[Row]:
    payments = ledger.account_payments(account, flavor=FLAVOR, before=before)
    adjustments = ledger.adjustments_of([p.psp_reference for p in payments])
    rows = [row for p in payments for row in rows_of(p, adjustments.get(p.psp_reference, []))]
    rows.sort(key=lambda r: (r.at, r.record.psp_reference, r.type, r.modification))
    return rows


def batches(ledger: Ledger, account: str | None = None) -> list[dict[str, object]]:
    """The closed batches (of ``account``), newest first."""
    found = [dict(d.body) for d in ledger.documents(BATCH)]
    return [b for b in found if account in (None, b["merchant_account"])]


def batch(ledger: Ledger, account: str, number: int) -> dict[str, object] | None:
    found = ledger.get_document(f"{account}:{number}", type=BATCH)
    return dict(found.body) if found is not None else None


# -- closing batches -----------------------------------------------------------------------------------------------


def tick(ledger: Ledger, scope: Scope, zone: tzinfo) -> None:
    """Close the batches due by ``scope.now`` (inside the tick's transaction) and announce their reports."""
    local = scope.now.astimezone(zone)
    midnight = datetime.combine(local.date(), time(0), tzinfo=zone)
    through, carry, last = _load(ledger)
    if through >= midnight:
        return
    for account in ledger.merchant_accounts(flavor=FLAVOR):
        rows = _account_rows(ledger, account, midnight)
        for currency in sorted({r.record.currency for r in rows}):
            key = f"{account}|{currency}"
            since = carry.get(key, through)
            mine = [r for r in rows if r.record.currency == currency and since <= r.at < midnight]
            left = _close(ledger, scope, zone, account, currency, since, mine, last)
            if left is None:
                carry.pop(key, None)
            else:
                carry[key] = left
    _save(ledger, midnight, carry, last)


def close_now(ledger: Ledger, scope: Scope, zone: tzinfo) -> list[dict[str, object]]:
    """``POST /_admin/payouts/run``: per merchant account and currency, every unpaid row booked so far in one
    batch, closed now, its money in the bank today, when their net is positive; the daily rule goes on after."""
    tick(ledger, scope, zone)
    through, carry, last = _load(ledger)
    until = scope.now + timedelta(microseconds=1)  # what was booked at this very instant is included
    made = []
    for account in ledger.merchant_accounts(flavor=FLAVOR):
        rows = _account_rows(ledger, account, until)
        for currency in sorted({r.record.currency for r in rows}):
            key = f"{account}|{currency}"
            since = carry.get(key, through)
            net = sum(r.net for r in rows if r.record.currency == currency and since <= r.at < until)
            if net > 0:
                made.append(_batch(ledger, scope, account, currency, since, until, net, last,
                                   credit=scope.now.astimezone(zone).date()))
                carry[key] = until
    _save(ledger, through, carry, last)
    return made


def _load(ledger: Ledger) -> tuple[datetime, dict[str, datetime], dict[str, int]]:
    """The batch state: the last midnight handled, where each account|currency's unpaid rows start when not
    there, and each account's last batch number."""
    found = ledger.get_document(_STATE_ID, type=_STATE)
    state = dict(found.body) if found is not None else {}
    through = parse_timestamp(str(state["through"])) if "through" in state else _EPOCH
    kept, numbers = state.get("carry"), state.get("numbers")
    carry = {str(k): parse_timestamp(str(v)) for k, v in (kept.items() if isinstance(kept, dict) else ())}
    last = {str(k): int(str(v)) for k, v in (numbers.items() if isinstance(numbers, dict) else ())}
    return through, carry, last


def _save(ledger: Ledger, through: datetime, carry: dict[str, datetime], last: dict[str, int]) -> None:
    doc = {"through": format_timestamp(through), "carry": {k: format_timestamp(v) for k, v in carry.items()},
           "numbers": last}
    ledger.put_document(Document(_STATE_ID, _STATE, None, _EPOCH, doc))


def _close(
    ledger: Ledger, scope: Scope, zone: tzinfo, account: str, currency: str, since: datetime, rows: list[Row],
    last: dict[str, int],
) -> datetime | None:
    running, start = 0, since
    for day, day_rows in _days(rows, zone):
        running += sum(r.net for r in day_rows)
        end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone)
        if running > 0:
            _batch(ledger, scope, account, currency, start, end, running, last,
                   credit=(end + CREDIT_AFTER).astimezone(zone).date())
            running, start = 0, end
    return start if any(r.at >= start for r in rows) else None


def _batch(
    ledger: Ledger, scope: Scope, account: str, currency: str, since: datetime, until: datetime, net: int,
    last: dict[str, int], *, credit: date,
) -> dict[str, object]:
    number = last.get(account, 0) + 1
    last[account] = number
    body: dict[str, object] = {
        "merchant_account": account, "batch": number, "currency": currency, "net": net,
        "since": format_timestamp(since), "until": format_timestamp(until), "credit_date": credit.isoformat(),
        "file": file_name(number),
    }
    ledger.put_document(Document(f"{account}:{number}", BATCH, account, until, body))
    scope.tell(Change("report_available", None, document={"merchantAccount": account, "fileName": file_name(number)}))
    return body


def _days(rows: list[Row], zone: tzinfo) -> Iterator[tuple[date, list[Row]]]:
    day, batch_rows = _EPOCH.date(), list[Row]()
    for r in rows:
        d = r.at.astimezone(zone).date()
        if batch_rows and d != day:
            yield day, batch_rows
            batch_rows = []
        day = d
        batch_rows.append(r)
    if batch_rows:
        yield day, batch_rows


# -- the report and the bank -----------------------------------------------------------------------------------------


def render(ledger: Ledger, stored: dict[str, object], *, zone: tzinfo, company_account: str) -> str:
    """The CSV text of a closed batch: its rows in booking order, then the MerchantPayout row."""
    account, currency, number = str(stored["merchant_account"]), str(stored["currency"]), int(str(stored["batch"]))
    since, until = parse_timestamp(str(stored["since"])), parse_timestamp(str(stored["until"]))
    rows = [r for r in _account_rows(ledger, account, until) if r.record.currency == currency and since <= r.at < until]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        at = r.at.astimezone(zone)
        cells = {
            "Psp Reference": r.record.psp_reference, "Merchant Reference": r.record.merchant_reference,
            "Payment Method": "visa", "Creation Date": at.strftime("%Y-%m-%d %H:%M:%S"), "TimeZone": at.tzname() or "",
            "Type": r.type, "Modification Reference": r.modification, "Gross Currency": currency,
            "Exchange Rate": "1", "Net Currency": currency, "Payment Method Variant": "visa",
            **_amounts(currency, {"Gross Debit (GC)": r.gross_debit, "Gross Credit (GC)": r.gross_credit,
                                  "Net Debit (NC)": r.net_debit, "Net Credit (NC)": r.net_credit,
                                  "Commission (NC)": r.commission}),
        }  # fmt: skip
        writer.writerow(_line(cells, company_account, account, number))
    closed = until.astimezone(zone)
    payout = {"Creation Date": closed.strftime("%Y-%m-%d %H:%M:%S"), "TimeZone": closed.tzname() or "",
              "Type": "MerchantPayout", "Modification Reference": f"Batch {number}", "Net Currency": currency,
              **_amounts(currency, {"Net Debit (NC)": int(str(stored["net"]))})}
    writer.writerow(_line(payout, company_account, account, number))
    return out.getvalue()


def _amounts(currency: str, amounts: dict[str, int]) -> dict[str, str]:
    return {name: major_units(value, currency) for name, value in amounts.items() if value}


def _line(cells: dict[str, str], company: str, account: str, number: int) -> list[str]:
    full = {"Company Account": company, "Merchant Account": account, "Batch Number": str(number), **cells}
    return [full.get(name, "") for name in COLUMNS]


def bank_credits(ledger: Ledger, since: date, until: date, *, now: datetime, zone: tzinfo) -> list[BankCredit]:
    """The credits of the batches whose money reached the bank (credit date <= today) in ``[since, until]``."""
    today = now.astimezone(zone).date()
    found = []
    for stored in batches(ledger):
        day = date.fromisoformat(str(stored["credit_date"]))
        account, number, net = str(stored["merchant_account"]), str(stored["batch"]), stored["net"]
        if since <= day <= until and day <= today and isinstance(net, int):
            found.append(BankCredit(net, str(stored["currency"]), day, day, bank_reference(f"{account}:{number}"),
                                    None, COUNTERPARTY, f"ADYEN PAYOUT {account} BATCH {number}",
                                    (f"{account}:{number}",)))
    return found
