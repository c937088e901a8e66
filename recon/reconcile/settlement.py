"""The settlement report (``recon report``): the PSP's settlement listing for a period against our
payments of that PSP, every row classified.

The report never heals: it reads ``payments`` and changes nothing (no status, no event); fixing is the
reconcile jobs' work (``recon sweep``) or a person's. Memory is bounded: the listing goes to the database in
batches and the classified rows are streamed (``recon.db.report_store``).

Matching: a PSP line (its lines merged by PSP reference: Adyen lists a payment once per event) matches our
payment by ``psp_reference``, else by ``merchant_reference``, and only where the merchant accounts agree
(``recon.reconcile.decide.accounts_agree``: an Adyen line of another account is not ours, whatever reference
it names). Lines for payments created before ``since`` still match (the lookup is not limited to the period);
our side of the period is payments created in ``[since, until)``. ``in window`` means created after
``until - settlement_window``. Merged lines take the latest event's status; two lines of one PSP reference at
the same time that disagree are ``conflicting`` (a ``status_mismatch``), never decided by the copy listed last.

Categories, first rule that applies:

- ``duplicate_at_psp``: a further PSP reference for a payment (or merchant reference) already stood for by
  another line; or a line found by merchant reference whose payment recorded a different PSP reference.
- ``missing_locally``: a PSP line with no payment of ours, whatever its PSP status (a failed one moved no
  money, but we still have no record of a charge made with our reference).
- ``matched`` when the PSP refunded a succeeded payment (refunded, partially_refunded) by no more than our own
  refunds that have not failed take back (``payments.refunded_amount``, recon.db.refund_store): our refunds.
- ``status_mismatch`` when the PSP reversed the payment otherwise (refunded beyond our refunds, chargeback, or a
  status we do not know): checked before amounts, because such lines carry the reversal's amount. Its detail
  names the payment's dispute as recorded (its PSP id and status: ``recon disputes``), when there is one.
- ``currency_mismatch``, then ``amount_mismatch``.
- statuses: local succeeded + PSP succeeded, and local failed + PSP failed/canceled: ``matched``. Local
  needs_review: ``status_mismatch`` (a person decides). Local unfinished (created, processing, pending), or a
  PSP still pending: ``expected`` in window (reconciliation heals it), ``status_mismatch`` past it. Anything
  else (succeeded vs failed either way): ``status_mismatch``.
- our payments no line stands for: ``expected`` in window, else ``missing_at_psp`` — except **failed**
  payments: a PSP need not list a charge that never took money (or never reached it), so they are consistent
  but not ``matched`` (nothing was matched). They are left out of items and totals, and counted apart
  (``ReportResult.unlisted_failed``).

Every line also carries what the PSP says it kept and pays out: ``psp_fee`` and ``psp_net`` in minor units
of ``settlement_currency`` (Stripe's balance transactions, Adyen's settled report rows; empty when the
listing does not say). Merged lines keep the first event's fee and net (the charge's).

Totals are per category and currency: the PSP's amount and currency for ``missing_locally`` and
``duplicate_at_psp`` (the money at the PSP), ours for the rest. Amounts are integer minor units throughout.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import Any, Protocol, TextIO

from psp_adapters.protocol import PspAdapter
from recon.clock import parse_instant
from recon.db.report_queries import CONFLICTING
from recon.db.report_store import ReportStore
from recon.errors import UsageError
from recon.payments.money import format_amount
from recon.report_rows import LineMatch, UnlistedPayment
from recon.spreadsheet import safe_cell
from recon.webhook_rows import WebhookRecord


class Category(StrEnum):
    MATCHED = "matched"  #: both sides agree
    MISSING_LOCALLY = "missing_locally"  #: a PSP charge we have no record of
    MISSING_AT_PSP = "missing_at_psp"  #: our payment is not listed, past the settlement window
    AMOUNT_MISMATCH = "amount_mismatch"  #: same currency, different amount
    CURRENCY_MISMATCH = "currency_mismatch"  #: different currency
    STATUS_MISMATCH = "status_mismatch"  #: the two sides disagree on the outcome
    DUPLICATE_AT_PSP = "duplicate_at_psp"  #: more than one PSP reference for one payment
    EXPECTED = "expected"  #: inside the settlement window: not a discrepancy yet


CONSISTENT = frozenset({Category.MATCHED, Category.EXPECTED})
COLUMNS = ("category", "merchant_reference", "psp_reference", "our_amount", "our_currency", "psp_amount",
           "psp_currency", "our_status", "psp_status", "detail", "psp_fee", "psp_net", "settlement_currency")
_PSP_FAILED = frozenset({"failed", "canceled", "cancelled"})
_UNFINISHED = frozenset({"created", "processing", "pending"})


@dataclass(frozen=True, slots=True)
class Item:
    """One classified row; ``our_*`` is None without a payment of ours, ``psp_*`` without a PSP line."""

    category: Category
    merchant_reference: str | None
    psp_reference: str | None
    our_amount: int | None
    our_currency: str | None
    psp_amount: int | None
    psp_currency: str | None
    our_status: str | None
    psp_status: str | None
    detail: str
    psp_fee: int | None = None  #: the PSP's fee, minor units of ``settlement_currency``, when it lists one
    psp_net: int | None = None  #: what the PSP pays out after fees, same units
    settlement_currency: str | None = None  #: of fee and net; the PSP's currency when it did not say

    def money(self) -> tuple[str, int]:
        """(currency, amount) for the totals."""
        psp_side = self.our_currency is None or self.category in (Category.MISSING_LOCALLY,
                                                                    Category.DUPLICATE_AT_PSP)
        if psp_side:
            return self.psp_currency or "", self.psp_amount or 0
        return self.our_currency or "", self.our_amount or 0

    def to_row(self) -> tuple[Any, ...]:
        return (str(self.category), self.merchant_reference, self.psp_reference, self.our_amount,
                self.our_currency, self.psp_amount, self.psp_currency, self.our_status, self.psp_status,
                self.detail, self.psp_fee, self.psp_net, self.settlement_currency)


def classify_line(m: LineMatch) -> Item:
    """The category of one merged PSP line (see the module docstring for the order of the rules)."""
    category, detail = _line_category(m)
    if m.lines > 1:
        detail = f"{detail}; {m.lines} PSP lines merged"
    settles_in = m.settlement_currency or (m.psp_currency if m.fee is not None or m.net is not None else None)
    return Item(category, m.merchant_reference or m.psp_merchant_reference, m.psp_reference, m.amount,
                m.currency, m.psp_amount, m.psp_currency, m.status, m.psp_status, detail, m.fee, m.net,
                settles_in)


def _line_category(m: LineMatch) -> tuple[Category, str]:
    if m.rank > 1:
        return Category.DUPLICATE_AT_PSP, "a further PSP charge for this merchant reference"
    if m.payment_id is None:
        return Category.MISSING_LOCALLY, "no payment of ours has this PSP or merchant reference"
    if m.our_psp_reference and m.our_psp_reference != m.psp_reference:
        return Category.DUPLICATE_AT_PSP, f"by merchant reference; we were charged as {m.our_psp_reference}"
    psp = m.psp_status
    if psp == CONFLICTING:
        return Category.STATUS_MISMATCH, "the PSP lists it twice at one time with different statuses"
    if (psp in ("refunded", "partially_refunded") and m.status == "succeeded" and m.psp_currency == m.currency
            and 0 < abs(m.psp_amount) <= m.refunded):
        return Category.MATCHED, f"refunded by our refunds ({m.refunded} minor units not failed)"
    if psp not in _PSP_FAILED and psp not in ("succeeded", "pending"):
        known = f"; our dispute {m.dispute}" if m.dispute else ""
        return Category.STATUS_MISMATCH, f"the PSP says {psp}{known}"
    if m.currency != m.psp_currency:
        return Category.CURRENCY_MISMATCH, f"we have {m.currency}, the PSP {m.psp_currency}"
    if m.amount != m.psp_amount:
        return Category.AMOUNT_MISMATCH, f"we have {m.amount}, the PSP {m.psp_amount} (minor units)"
    return _status_category(str(m.status), psp, in_window=m.in_window)


def _status_category(ours: str, psp: str, *, in_window: bool) -> tuple[Category, str]:
    if (ours, psp) == ("succeeded", "succeeded") or (ours == "failed" and psp in _PSP_FAILED):
        return Category.MATCHED, ""
    if ours == "needs_review":
        return Category.STATUS_MISMATCH, f"local needs_review, the PSP says {psp}: a person decides"
    if ours in _UNFINISHED or psp == "pending":
        if in_window:
            return Category.EXPECTED, f"local {ours}, the PSP says {psp}: inside the settlement window"
        return Category.STATUS_MISMATCH, f"local {ours}, the PSP says {psp}, past the settlement window"
    return Category.STATUS_MISMATCH, f"local {ours}, the PSP says {psp}"


def classify_unlisted(p: UnlistedPayment) -> Item | None:
    """The category of a payment no PSP line stands for; None for a failed one (consistent, not itemised)."""
    if p.status == "failed":
        return None
    if p.in_window:
        category, detail = Category.EXPECTED, "not listed yet; inside the settlement window"
    else:
        category = Category.MISSING_AT_PSP
        detail = f"local {p.status}, not listed by the PSP past the settlement window"
    return Item(category, p.merchant_reference, p.psp_reference, p.amount, p.currency, None, None, p.status,
                None, detail)


@dataclass(slots=True)
class Totals:
    """Count and amount per category and currency. Every category is present, empty when it had no item."""

    by: dict[Category, dict[str, list[int]]] = field(default_factory=lambda: {c: {} for c in Category})

    def add(self, item: Item) -> None:
        currency, amount = item.money()
        slot = self.by[item.category].setdefault(currency, [0, 0])
        slot[0] += 1
        slot[1] += amount

    @property
    def discrepancies(self) -> int:
        return sum(n for c, cur in self.by.items() if c not in CONSISTENT for n, _ in cur.values())

    @property
    def items(self) -> int:
        return sum(n for cur in self.by.values() for n, _ in cur.values())

    def to_dict(self) -> dict[str, dict[str, dict[str, int]]]:
        return {str(c): {cur: {"count": n, "amount": a} for cur, (n, a) in sorted(v.items())}
                for c, v in self.by.items()}

    def human(self) -> list[str]:
        lines = []
        for c, v in self.by.items():
            for cur, (n, a) in sorted(v.items()):
                lines.append(f"  {c!s:<18} {n:>9}  {format_amount(a, cur) if cur else a:>22}")
        return lines


@dataclass(frozen=True, slots=True)
class ReportResult:
    totals: Totals
    lines_read: int  #: settlement lines the PSP listed (before merging)
    unlisted_failed: int  #: failed payments of ours the PSP does not list: consistent, not itemised

    @property
    def consistent(self) -> bool:
        return self.totals.discrepancies == 0


class ItemWriter(Protocol):
    def write(self, item: Item) -> None: ...

    def finish(self, totals: Totals) -> None: ...

    def close(self) -> None: ...


class CsvWriter:
    """A header, then one row per item as it comes; empty cells for missing values. The header is written
    with the first item (or at ``finish``), so a run that fails before any item writes nothing."""

    def __init__(self, out: TextIO) -> None:
        self._csv = csv.writer(out, lineterminator="\n")
        self._started = False

    def write(self, item: Item) -> None:
        if not self._started:
            self._csv.writerow(COLUMNS)
            self._started = True
        self._csv.writerow([safe_cell(v) for v in item.to_row()])  # never a formula (recon.spreadsheet)

    def finish(self, totals: Totals) -> None:
        if not self._started:
            self._csv.writerow(COLUMNS)
            self._started = True

    def close(self) -> None:
        pass


class JsonWriter:
    """One document ``{"psp", "since", "until", "totals", "items"}``, totals before items.

    Totals are known only at the end, so items are spooled: in memory up to ``spool_bytes``, then in a
    temporary file; ``finish`` writes the head and copies the items. Memory stays bounded for any size.
    """

    def __init__(self, out: TextIO, *, psp: str, since: datetime, until: datetime,
                 spool_bytes: int = 8 << 20) -> None:
        self._out = out
        self._head = {"psp": psp, "since": since.isoformat(), "until": until.isoformat()}
        self._spool = tempfile.SpooledTemporaryFile(max_size=spool_bytes, mode="w+", encoding="utf-8")
        self._first = True

    def write(self, item: Item) -> None:
        doc = dict(zip(COLUMNS, item.to_row(), strict=True))
        self._spool.write(("\n" if self._first else ",\n") + json.dumps(doc))
        self._first = False

    def finish(self, totals: Totals) -> None:
        head = json.dumps({**self._head, "totals": totals.to_dict()})
        self._out.write(head[:-1] + ', "items": [')
        self._spool.seek(0)
        shutil.copyfileobj(self._spool, self._out)
        self._out.write("\n]}\n" if not self._first else "]}\n")
        self.close()

    def close(self) -> None:
        self._spool.close()


def run_report(store: ReportStore, adapter: PspAdapter, writer: ItemWriter, *, psp: str, since: datetime,
               until: datetime, settlement_window: timedelta,
               unknown_events: Sequence[WebhookRecord] = ()) -> ReportResult:
    """Load the PSP listing for ``[since, until)``, classify both sides, write every item, then the totals.

    ``unknown_events``: webhook events of the period for payments we do not know; each whose PSP reference the
    listing did not itemise already is a ``missing_locally`` item too.

    The listing is read completely before the first item is written, so a PspError (propagated unchanged)
    leaves no partial output. Read-only against payments: never heals. ``writer`` is closed on return.
    """
    try:
        return _run(store, adapter, writer, psp=psp, since=since, until=until,
                    cutoff=until - settlement_window, unknown_events=unknown_events)
    finally:
        writer.close()


def _run(store: ReportStore, adapter: PspAdapter, writer: ItemWriter, *, psp: str, since: datetime,
         until: datetime, cutoff: datetime, unknown_events: Sequence[WebhookRecord]) -> ReportResult:
    totals, unlisted_failed = Totals(), 0
    itemised: set[str] = set()
    with store.session(psp=psp) as session:
        accounts = session.merchant_accounts()
        lines_read = session.load(adapter.iter_settlements(since, until, merchant_accounts=accounts))
        for m in session.matched_lines(cutoff=cutoff):
            item = classify_line(m)
            writer.write(item)
            totals.add(item)
            if item.psp_reference:
                itemised.add(item.psp_reference)
        for p in session.unlisted_payments(since=since, until=until, cutoff=cutoff):
            found = classify_unlisted(p)
            if found is None:
                unlisted_failed += 1
                continue
            writer.write(found)
            totals.add(found)
    for event in unknown_events:
        if event.psp_reference in itemised:
            continue
        itemised.add(event.psp_reference or "")
        item = webhook_item(event)
        writer.write(item)
        totals.add(item)
    writer.finish(totals)
    return ReportResult(totals=totals, lines_read=lines_read, unlisted_failed=unlisted_failed)


def webhook_item(event: WebhookRecord) -> Item:
    """A webhook event for a payment we do not know: a charge at the PSP without a record of ours."""
    return Item(Category.MISSING_LOCALLY, event.merchant_reference, event.psp_reference, None, None, event.amount,
                event.currency, None, event.psp_status or event.news,
                f"a {event.event_type} webhook ({event.event_id}) received {event.received_at.isoformat()} names a "
                f"payment we have no record of")


def parse_bound(text: str, *, option: str) -> datetime:
    """``2026-11-01`` (midnight UTC) or an ISO datetime (UTC when it has no offset), as aware UTC.

    Raises UsageError naming ``option``.
    """
    raw = text.strip()
    try:
        if len(raw) == 10:
            return datetime.combine(date.fromisoformat(raw), time(), tzinfo=UTC)
        return parse_instant(raw)
    except ValueError:
        raise UsageError(f"{option} {text!r} is not an ISO date (2026-11-01) "
                         "or datetime (2026-11-01T12:00:00Z) within the years 1..9999") from None


def summary_lines(result: ReportResult, *, psp: str, since: datetime, until: datetime) -> Iterator[str]:
    """The human summary for stderr."""
    t = result.totals
    yield (f"report {psp} {since.isoformat()} .. {until.isoformat()}: {result.lines_read} PSP lines, "
           f"{t.items} items, {t.discrepancies} discrepancies")
    yield from t.human()
    if result.unlisted_failed:
        yield f"  ({result.unlisted_failed} failed payments not listed by the PSP: consistent, not itemised)"


def write_report(store: ReportStore, adapter: PspAdapter, *, psp: str, since: datetime, until: datetime, fmt: str,
                 output: str | None, settlement_window: timedelta,
                 unknown_events: Sequence[WebhookRecord] = ()) -> ReportResult:
    """Run the report into stdout, or into a temporary file renamed over ``output`` once complete (``recon
    report``, the scheduled ``report`` job): a reader never sees half a report."""
    tmp: str | None = None
    out: TextIO
    if output:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(output)), prefix=".recon-report-")
        out = os.fdopen(fd, "w", encoding="utf-8", newline="")
    else:
        out = sys.stdout
    try:
        writer: ItemWriter = JsonWriter(out, psp=psp, since=since, until=until) if fmt == "json" else CsvWriter(out)
        result = run_report(store, adapter, writer, psp=psp, since=since, until=until,
                            settlement_window=settlement_window, unknown_events=unknown_events)
        out.flush()
    except BaseException:
        if tmp:
            out.close()
            os.unlink(tmp)
        raise
    if tmp and output:
        out.close()
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the report gets the mode any new file would
        os.replace(tmp, output)
    return result
