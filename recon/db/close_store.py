"""CloseStore: what the close keeps (``recon.close.close``): the matches of payouts to bank entries, its
exceptions and their resolution by a person (the review desk's payout exceptions), and each close that ran; with
the bank entries and the dispute fees it reads. The only code that executes ``close_queries``. The payouts it
closes are ``recon.db.payout_store``'s (``CloseStore.payouts``); a match or a resolution is also an event of its
payout's history (``payout_store.insert_event``).

A close recorded twice on the same evidence stores nothing new (``record_close``); an exception a person resolved
stays resolved until its payout changes (the payout store's reopening clears it). Texts are redacted
(``recon.redact``) before they are stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import date
from typing import Any

import orjson
import sqlalchemy as sa

from recon.db import close_queries as q
from recon.db import payout_queries
from recon.db.database import Database
from recon.db.payout_store import PAGE, PayoutStore, from_day, insert_event, sql_day
from recon.errors import ReviewRefused
from recon.payout_rows import (
    Credit,
    DisputeFee,
    ExceptionKind,
    ExceptionState,
    Finding,
    Match,
    PayoutException,
)
from recon.redact import redact

#: rows of one kind per JSON-array statement of the close (PostgreSQL)
BATCH = 5000


class CloseStore:
    def __init__(self, db: Database, *, payouts: PayoutStore | None = None) -> None:
        self.db = db
        #: the payouts the close reads (their lines, totals and report lines)
        self.payouts = payouts or PayoutStore(db)

    # --- the close ------------------------------------------------------------------------------------------

    def iter_credits(self, accounts: Sequence[str], *, since: date, until: date, page: int = PAGE) -> Iterator[Credit]:
        """The entries of ``accounts`` booked in ``[since, until)``, credits and debits (signed), by id."""
        if not accounts:
            return
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(q.credit_list), {
                    "accounts": list(accounts), "since": self._day(since), "until": self._day(until),
                    "after_id": after, "n": page}).mappings().all()
            yield from (self._credit(r) for r in rows)
            if len(rows) < page:
                return
            after = int(rows[-1]["id"])

    def matches(self, *, payout_ids: Sequence[int] = (), entry_ids: Sequence[int] = ()) -> list[Match]:
        """The stored matches of these payouts or entries, one ``Match`` per (payout, entry) row."""
        rows: list[Any] = []
        with self.db.begin() as conn:
            for query, name, ids in ((q.match_list, "ids", payout_ids), (q.match_list_of_entries, "ids", entry_ids)):
                for start in range(0, len(ids), PAGE):
                    rows += conn.execute(self._q(query), {name: list(ids[start:start + PAGE])}).mappings().all()
        seen = {(int(r["payout_id"]), int(r["bank_entry_id"])): r for r in rows}
        return [Match((p,), (e,), rule=r["rule"], bank_fee=int(r["bank_fee"])) for (p, e), r in sorted(seen.items())]

    def record_close(self, matches: Iterable[Match], findings: Iterable[Finding], *, payout_ids: Sequence[int],
                     entry_ids: Sequence[int]) -> list[PayoutException]:
        """Store the close's new matches and its findings in one transaction; an open exception of these payouts
        or entries that no finding repeats is cleared (the evidence explains it now). Returns the open exceptions
        of the scope. Run twice on the same evidence: nothing new is stored."""
        findings = list(findings)
        keys = {f.key for f in findings}
        now = self.db.now_param()
        pairs = [{"payout_id": p, "bank_entry_id": e, "rule": m.rule, "bank_fee": m.bank_fee}
                 for m in matches for p in m.payout_ids for e in m.entry_ids]
        events = [{"payout_id": p, "kind": "matched", "detail": redact(
                   f"bank entr{'y' if len(m.entry_ids) == 1 else 'ies'} {', '.join(map(str, m.entry_ids))} by rule "
                   f"{m.rule}" + (f", bank fee {m.bank_fee}" if m.bank_fee else ""))[:2000]}
                  for m in matches for p in m.payout_ids]
        rows = [{"key": f.key, "kind": f.kind.value, "payout_id": f.payout_id, "bank_entry_id": f.entry_id,
                 "detail": redact(f.detail)[:2000]} for f in findings]
        with self.db.begin() as conn:
            self._write_many(conn, q.match_insert, pairs)
            self._write_many(conn, q.entry_link, [{"payout_id": r["payout_id"], "id": r["bank_entry_id"]}
                                                  for r in pairs])
            self._write_many(conn, payout_queries.payout_event_insert_many, events)
            self._write_many(conn, q.exception_insert, rows)
            still, explained = [], []
            for row in self._open_in_scope(conn, payout_ids, entry_ids):
                if row["exception_key"] in keys:
                    still.append(self._exception(row))
                else:
                    explained.append(int(row["id"]))
            for start in range(0, len(explained), PAGE):
                conn.execute(self._q(q.exception_clear), {"ids": explained[start:start + PAGE], "now": now,
                                                          "why": "explained by a later close"})
        return still

    def _write_many(self, conn: sa.Connection, query: Any, rows: list[dict[str, Any]]) -> None:
        """A close's rows of one kind. PostgreSQL: ``BATCH`` rows as one JSON array per statement (the
        ``postgresql`` form of ``query``); per-row statements cost a round trip each, and a month's close stores
        tens of thousands of matches. SQLite runs in process: executemany, a page at a time."""
        now = self.db.now_param()
        if self.db.is_postgresql:
            for start in range(0, len(rows), BATCH):
                conn.execute(self._q(query), {"rows": orjson.dumps(rows[start:start + BATCH]).decode(), "now": now})
            return
        for start in range(0, len(rows), PAGE):
            conn.execute(self._q(query), [{**r, "now": now} for r in rows[start:start + PAGE]])

    def _open_in_scope(self, conn: sa.Connection, payout_ids: Sequence[int], entry_ids: Sequence[int]) -> list[Any]:
        rows: dict[int, Any] = {}
        p, e = list(payout_ids) or [-1], list(entry_ids) or [-1]
        for start in range(0, max(len(p), len(e)), PAGE):
            for r in conn.execute(self._q(q.exception_open_in_scope),
                                  {"payouts": p[start:start + PAGE] or [-1],
                                   "entries": e[start:start + PAGE] or [-1]}).mappings():
                rows[int(r["id"])] = r
        return [rows[k] for k in sorted(rows)]

    def dispute_fees(self, payout_ids: Sequence[int]) -> list[DisputeFee]:
        """The disputes with a fee that lines of these payouts carry, with what their lines carry
        (``recon.close.match.dispute_fees`` decides)."""
        found: list[DisputeFee] = []
        with self.db.begin() as conn:
            for start in range(0, len(payout_ids), PAGE):
                rows = conn.execute(self._q(q.dispute_fees_of_payouts),
                                    {"ids": list(payout_ids[start:start + PAGE])}).mappings()
                found += [DisputeFee(payout_id=int(r["payout_id"]), payout_ref=r["payout_ref"],
                                     dispute_id=int(r["dispute_id"]), psp_dispute_id=r["psp_dispute_id"],
                                     fee=int(r["fee"]), currency=r["currency"], carried=int(r["carried"]),
                                     other_currency_lines=int(r["other_currency_lines"])) for r in rows]
        return found

    def matched_entries(self, payout_id: int) -> list[Credit]:
        with self.db.begin() as conn:
            return [self._credit(r) for r in conn.execute(self._q(q.credit_get), {"payout_id": payout_id}).mappings()]

    # --- the review desk's payout exceptions ----------------------------------------------------------------

    def iter_exceptions(self, *, state: str | None = "open", kind: str | None = None, psp: str | None = None,
                        page: int = PAGE) -> Iterator[PayoutException]:
        """Exceptions by id, in ``state``, of ``kind``, of a payout of ``psp`` (a credit's has no PSP)."""
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(q.exception_list), {"state": state, "kind": kind, "psp": psp,
                                                                "after_id": after, "n": page}).mappings().all()
            yield from (self._exception(r) for r in rows)
            if len(rows) < page:
                return
            after = int(rows[-1]["id"])

    def exceptions_of(self, payout_id: int) -> list[PayoutException]:
        with self.db.begin() as conn:
            return [self._exception(r)
                    for r in conn.execute(self._q(q.exception_of_payout), {"payout_id": payout_id}).mappings()]

    def exception(self, exception_id: int) -> PayoutException | None:
        with self.db.begin() as conn:
            row = conn.execute(self._q(q.exception_get), {"id": exception_id}).mappings().first()
        return None if row is None else self._exception(row)

    def resolve(self, exception_id: int, *, by: str, reason: str) -> PayoutException:
        """Resolve an open exception by hand; ReviewRefused when there is none open with that id."""
        with self.db.begin() as conn:
            done = conn.execute(self._q(q.exception_resolve), {"id": exception_id, "by": redact(by),
                                                               "reason": redact(reason), "now": self.db.now_param()})
            row = conn.execute(self._q(q.exception_get), {"id": exception_id}).mappings().first()
            if row is None:
                raise ReviewRefused(f"no payout exception {exception_id}")
            if done.rowcount != 1:
                raise ReviewRefused(f"payout exception {exception_id} is {row['state']}, not open")
            if row["payout_id"] is not None:
                insert_event(self.db, conn, int(row["payout_id"]), "resolved",
                            f"{row['kind']} resolved by {redact(by)}: {redact(reason)}")
        return self._exception(row)

    def open_by_kind(self) -> dict[str, int]:
        """The open exceptions' count per kind."""
        with self.db.begin() as conn:
            return {r["kind"]: int(r["n"]) for r in conn.execute(self._q(q.exception_open_by_kind)).mappings()}

    def open_amounts(self) -> list[dict[str, Any]]:
        """Per side (``payouts``, ``bank_entries``) and currency: what open exceptions leave unexplained, its
        count and amount in minor units (a payout's signed amount; a bank debit negative)."""
        with self.db.begin() as conn:
            return [{"side": r["side"], "currency": r["currency"], "count": int(r["n"]), "amount": int(r["amount"])}
                    for r in conn.execute(self._q(q.exception_open_amounts)).mappings()]

    # --- the runs -------------------------------------------------------------------------------------------

    def record_run(self, *, psp: str, since: date, until: date, payouts: int, open_items: int, closed: bool) -> None:
        """One close that ran: its window and what it left open (each PSP's last close in ``recon stats``)."""
        with self.db.begin() as conn:
            conn.execute(self._q(q.close_run_insert), {
                "psp": psp, "since": self._day(since), "until": self._day(until), "payouts": payouts,
                "open_items": open_items, "closed": closed, "now": self.db.now_param()})

    def last_runs(self) -> list[dict[str, Any]]:
        """Each PSP's last close: its window, when it ran, its payouts, open items and whether it closed."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(q.close_run_last)).mappings().all()
        return [{"psp": r["psp"], "since": from_day(r["since"]).isoformat(),
                 "until": from_day(r["until"]).isoformat(),
                 "ran_at": self.db.from_db(r["ran_at"]).isoformat(),  # type: ignore[union-attr]
                 "payouts": int(r["payouts"]), "open_items": int(r["open_items"]), "closed": bool(r["closed"])}
                for r in rows]

    # --- rows -----------------------------------------------------------------------------------------------

    @staticmethod
    def _credit(r: Any) -> Credit:
        return Credit(id=int(r["id"]), account=r["account"], amount=int(r["amount"]), currency=r["currency"],
                      booking_date=from_day(r["booking_date"]),
                      value_date=from_day(r["value_date"]) if r["value_date"] is not None else None,
                      bank_reference=r["bank_reference"], end_to_end_id=r["end_to_end_id"], remittance=r["remittance"],
                      payout_id=None if r["payout_id"] is None else int(r["payout_id"]), direction=r["direction"])

    def _exception(self, r: Any) -> PayoutException:
        return PayoutException(id=int(r["id"]), kind=ExceptionKind(r["kind"]),
                               payout_id=None if r["payout_id"] is None else int(r["payout_id"]),
                               entry_id=None if r["bank_entry_id"] is None else int(r["bank_entry_id"]),
                               detail=r["detail"], state=ExceptionState(r["state"]),
                               created_at=self.db.from_db(r["created_at"]),  # type: ignore[arg-type]
                               resolved_by=r["resolved_by"], resolution=r["resolution"],
                               resolved_at=self.db.from_db(r["resolved_at"]))

    def _day(self, value: date | None) -> Any:
        return sql_day(self.db, value)

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]
