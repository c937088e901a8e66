"""``recon close``: for a PSP's payouts arriving in a window, their lines, the bank credit each matched, every
exception, and totals per currency.

``run_close`` reads the stored payouts (``recon payouts fetch`` or the ``payouts`` job brought them) and the
credits of the bank accounts that PSP pays into (``[bank.accounts.NAME] psps``), booked within the window
widened by the matching window, decides (``recon.close.match.decide``), stores the new matches and exceptions
(``CloseStore.record_close``: run twice, nothing new), and returns the ``CloseReport``. A payout's category is
``matched``, the kind of its first open exception, ``resolved`` (a person resolved its exceptions) or
``awaiting_bank`` (still inside its window). The day is closed when every payout is matched or resolved and
no unexplained credit is open: ``recon close`` exits 0, else 1.

Totals per currency, in minor units, from the lines: ``gross`` (charges' gross), ``fees`` (every line's fee),
``refunds`` and ``disputes`` (the nets of those lines: negative), ``net`` (every line's net but the payouts'
own), ``paid_out`` (the payouts' amounts) and ``received`` (the matched credits' amounts).
"""

from __future__ import annotations

import contextlib
import csv
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, TextIO

import orjson

from recon.close.match import MatchRules, decide, dispute_fees
from recon.db.close_store import CloseStore
from recon.db.payout_store import PayoutStore
from recon.payout_rows import Credit, ExceptionKind, ExceptionState, Payout, PayoutException
from recon.spreadsheet import safe_cell

#: the order in which a payout's open exceptions name its category
_PRECEDENCE = (ExceptionKind.PAYOUT_FAILED, ExceptionKind.LINES_DIFFER, ExceptionKind.AMOUNT_DIFFERS,
               ExceptionKind.AMBIGUOUS, ExceptionKind.BANK_MISSING, ExceptionKind.DISPUTE_FEE_DIFFERS)
EXPLAINED = ("matched", "resolved")
CSV_COLUMNS = ("record", "payout_id", "category", "amount", "currency", "status", "arrival_date", "bank_reference",
               "kind", "merchant_reference", "psp_reference", "gross", "fee", "net", "line_category", "detail")


@dataclass
class PayoutResult:
    payout: Payout
    category: str
    credits: list[Credit]
    exceptions: list[PayoutException]

    def head(self) -> dict[str, Any]:
        p = self.payout
        return {"payout_id": p.payout_ref, "id": p.id, "amount": p.amount, "currency": p.currency,
                "status": p.status.value, "arrival_date": p.arrival_date.isoformat(), "category": self.category,
                "bank_reference": _bank_ref(self.credits), "bank_entries": [c.id for c in self.credits],
                "lines_net": p.lines_net, "exceptions": [e.to_dict() for e in self.exceptions]}


@dataclass
class CloseReport:
    psp: str
    since: date
    until: date
    payouts: list[PayoutResult]
    credit_exceptions: list[PayoutException]
    totals: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def last_payout_id(self) -> int:
        """The highest id among the payouts (read by id): the reads of their lines stop there, so a payout
        stored while the close runs is in neither its decision nor its report."""
        return max((r.payout.id for r in self.payouts), default=0)

    @property
    def open_items(self) -> int:
        return sum(r.category not in EXPLAINED for r in self.payouts) + len(self.credit_exceptions)

    @property
    def closed(self) -> bool:
        return self.open_items == 0

    def categories(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for r in self.payouts:
            counts[r.category] += 1
        for e in self.credit_exceptions:  # a credit's: unexplained, or ambiguous between payouts
            counts[e.kind.value] += 1
        return dict(sorted(counts.items()))


def run_close(store: CloseStore, *, psp: str, since: date, until: date, rules: MatchRules,
              accounts: Sequence[str], exclusive_accounts: Sequence[str], as_of: date) -> CloseReport:
    """Decide and record the close of ``psp``'s payouts arriving in ``[since, until)`` (module docstring)."""
    payouts = list(store.payouts.iter_payouts(psp=psp, since=since, until=until))
    margin = timedelta(days=rules.window_days)
    credits = list(store.iter_credits(accounts, since=since - margin, until=until + margin))
    payout_ids, entry_ids = [p.id for p in payouts], [c.id for c in credits]
    stored = store.matches(payout_ids=payout_ids, entry_ids=entry_ids)
    decision = decide(payouts, credits, rules=rules, stored=stored, as_of=as_of, since=since, until=until,
                      exclusive_accounts=set(exclusive_accounts))
    findings = [*decision.findings, *dispute_fees(store.dispute_fees(payout_ids))]
    open_now = store.record_close(decision.matches, findings, payout_ids=payout_ids, entry_ids=entry_ids)
    by_payout: dict[int, list[PayoutException]] = defaultdict(list)
    credit_exceptions = []
    for e in open_now:
        if e.payout_id is not None:
            by_payout[e.payout_id].append(e)
        else:
            credit_exceptions.append(e)
    credit_by_id = {c.id: c for c in credits}
    matched: dict[int, list[Credit]] = defaultdict(list)
    for m in [*stored, *decision.matches]:
        for p in m.payout_ids:
            matched[p] += [credit_by_id[c] for c in m.entry_ids if c in credit_by_id]
    results = [PayoutResult(p, _category(p, matched[p.id], by_payout[p.id], store), matched[p.id], by_payout[p.id])
               for p in payouts]
    report = CloseReport(psp=psp, since=since, until=until, payouts=results, credit_exceptions=credit_exceptions)
    report.totals = _totals(store.payouts, report)
    return report


def _category(p: Payout, credits: list[Credit], exceptions: list[PayoutException], store: CloseStore) -> str:
    kinds = {e.kind for e in exceptions}
    for kind in _PRECEDENCE:
        if kind in kinds:
            return kind.value
    if credits or p.amount == 0:
        return "matched"
    if any(e.state is ExceptionState.RESOLVED for e in store.exceptions_of(p.id)):
        return "resolved"
    return "awaiting_bank"


def _totals(store: PayoutStore, report: CloseReport) -> dict[str, dict[str, int]]:
    keys = ("gross", "fees", "refunds", "disputes", "net", "paid_out", "received")
    totals: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(keys, 0))
    results = report.payouts
    rows = store.line_totals(psp=report.psp, since=report.since, until=report.until,
                             last_id=report.last_payout_id) if results else []
    for row in rows:
        t = totals[row["currency"]]
        t["fees"] += row["fee"]
        if row["kind"] == "charge":
            t["gross"] += row["gross"]
        elif row["kind"] == "refund":
            t["refunds"] += row["net"]
        elif row["kind"] in ("dispute", "dispute_reversal"):
            t["disputes"] += row["net"]
        if row["kind"] != "payout":
            t["net"] += row["net"]
    seen: set[int] = set()
    for r in results:
        totals[r.payout.currency]["paid_out"] += r.payout.amount
        for c in r.credits:
            if c.id not in seen:
                seen.add(c.id)
                totals[c.currency]["received"] += c.amount
    return dict(sorted(totals.items()))


def _bank_ref(credits: list[Credit]) -> str | None:
    refs = [c.bank_reference or c.end_to_end_id or str(c.id) for c in credits]
    return ", ".join(refs) if refs else None


# --- writing ----------------------------------------------------------------------------------------------


def write_json(report: CloseReport, store: PayoutStore, out: TextIO) -> None:
    """The report as one JSON document, each payout's lines read from the store as written (streamed)."""
    head = {"psp": report.psp, "since": report.since.isoformat(), "until": report.until.isoformat(),
            "closed": report.closed, "open_items": report.open_items, "categories": report.categories(),
            "totals": report.totals,
            "credit_exceptions": [e.to_dict() for e in report.credit_exceptions]}
    out.write(orjson.dumps(head).decode()[:-1] + ',"payouts":[')
    for n, (r, lines) in enumerate(_with_lines(report, store)):
        out.write(("," if n else "") + orjson.dumps({**r.head(), "lines": lines}).decode())
    out.write("]}\n")


def _with_lines(report: CloseReport, store: PayoutStore) -> Iterator[tuple[PayoutResult, list[dict[str, Any]]]]:
    """Each payout with its lines, merged from one stream of the window's lines by payout id
    (``PayoutStore.iter_report_lines``): memory holds one payout's lines, never the month's."""
    if not report.payouts:
        return
    stream = store.iter_report_lines(psp=report.psp, since=report.since, until=report.until,
                                     last_id=report.last_payout_id)
    pending: tuple[int, dict[str, Any]] | None = next(stream, None)
    for r in report.payouts:  # by id, as the stream
        lines = []
        while pending is not None and pending[0] <= r.payout.id:
            if pending[0] == r.payout.id:  # a lower id: a payout that left the window meanwhile
                lines.append(pending[1])
            pending = next(stream, None)
        yield r, lines
    stream.close()


def csv_rows(report: CloseReport, store: PayoutStore) -> Iterator[tuple[Any, ...]]:
    """One row per payout, then one per line of it; then one per credit exception and one per currency total."""
    for r, lines in _with_lines(report, store):
        h = r.head()
        detail = "; ".join(e.detail for e in r.exceptions)
        yield ("payout", h["payout_id"], h["category"], h["amount"], h["currency"], h["status"], h["arrival_date"],
               h["bank_reference"], "", "", "", "", "", "", "", detail)
        for ln in lines:
            yield ("line", h["payout_id"], h["category"], "", ln["currency"], "", "", "", ln["kind"],
                   ln["merchant_reference"], ln["psp_reference"], ln["gross"], ln["fee"], ln["net"], ln["category"],
                   "")
    for e in report.credit_exceptions:
        yield ("credit", "", e.kind.value, "", "", "", "", e.entry_id, "", "", "", "", "", "", "", e.detail)
    for currency, t in report.totals.items():
        yield ("total", "", "", t["paid_out"], currency, "", "", "", "", "", "", t["gross"], t["fees"], t["net"], "",
               f"refunds {t['refunds']}, disputes {t['disputes']}, received {t['received']}")


def write_csv(report: CloseReport, store: PayoutStore, out: TextIO) -> None:
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for row in csv_rows(report, store):
        writer.writerow([safe_cell(v) for v in row])


def write_file(report: CloseReport, store: PayoutStore, *, path: str, fmt: str) -> None:
    """The report into ``path``, through a temporary file renamed over it once complete."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".recon-close-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            (write_json if fmt == "json" else write_csv)(report, store, out)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the report gets the mode any new file would
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
