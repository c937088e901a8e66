"""PayoutStore: the PSPs' payouts, their lines and history. The only code that executes ``payout_queries`` (but
for the events ``recon.db.close_store`` adds to a payout's history, through ``insert_event``); the close's matches
and exceptions are ``recon.db.close_store``'s.

``store`` keeps one row per (psp, payout id) and evidence never overwrites what we know without a trace: a
payout that comes back the same is only touched (``fetched_at``); one that comes back changed (its amount, its
status turning ``failed``, its lines) is updated by compare-and-set on its ``version`` with a ``changed`` event
naming each change, old and new, and when it had been matched or had exceptions it is **reopened**: its matches
are removed (the bank entries are unmatched again), its open exceptions cleared, and a ``reopened`` event says
so; the next close decides it again. Lines are stored once per (payout, line id); each is linked to our
payment (PSP reference first, then merchant reference within the payout's merchant account) or marked
``missing_locally`` when it is about a payment (a charge, refund or dispute) we do not have. A refund's or
dispute's line keeps the PSP's id of that movement (``movement_reference``) and is linked to our refund (by its
PSP refund id) or dispute (by its PSP id, or for Adyen's one dispute per payment the payment's PSP reference) as
they are known when the payout is stored.

Texts from the PSP are redacted here (``recon.redact``) but for its own identifiers (payout id, line id, PSP
reference, movement reference), stored exactly because they are compared. The trace reference is masked like the
bank's texts it is compared with (``recon.bank.importer`` masks those), so that the two still meet.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Iterator
from datetime import date
from typing import Any

import orjson
import sqlalchemy as sa

from recon.db import payout_queries as q
from recon.db.database import Database
from recon.payout_rows import (
    LineKind,
    NewPayout,
    Payout,
    PayoutEvent,
    PayoutLine,
    PayoutStatus,
    StoreOutcome,
)
from recon.redact import redact, redact_optional

PAGE = 500
#: line kinds about a payment of ours: a line of these kinds we cannot find is ``missing_locally``
PAYMENT_KINDS = frozenset({LineKind.CHARGE, LineKind.REFUND, LineKind.DISPUTE, LineKind.DISPUTE_REVERSAL})
#: the line kinds about a dispute: linked to our dispute by its PSP id (Adyen's: the payment's PSP reference)
DISPUTE_KINDS = frozenset({LineKind.DISPUTE, LineKind.DISPUTE_REVERSAL})


def digest(payout: NewPayout) -> str:
    """What a payout says, hashed: a different digest is a changed payout."""
    doc = [payout.amount, payout.currency, payout.status.value, payout.arrival_date.isoformat(), payout.trace_ref,
           sorted((ln.line_ref, ln.kind.value, ln.gross, ln.fee, ln.net, ln.currency) for ln in payout.lines)]
    return hashlib.sha256(orjson.dumps(doc)).hexdigest()


def insert_event(db: Database, conn: sa.Connection, payout_id: int, kind: str, detail: str) -> None:
    """One event of a payout's history (fetched, changed, reopened; the close's resolved), its detail redacted."""
    conn.execute(q.payout_event_insert.for_dialect(db.dialect), {
        "payout_id": payout_id, "kind": kind, "detail": redact(detail)[:2000], "now": db.now_param()})


def sql_day(db: Database, value: date | None) -> Any:
    """A day as a statement's parameter: a ``date`` on PostgreSQL, ISO text on SQLite."""
    return value if db.is_postgresql or value is None else value.isoformat()


class PayoutStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- the payouts job ----------------------------------------------------------------------------------

    def store(self, payout: NewPayout) -> StoreOutcome:
        """Store one fetched payout with its lines (see the module docstring); one transaction."""
        with self.db.begin() as conn:
            row = conn.execute(self._q(q.payout_get_by_ref),
                               {"psp": payout.psp, "payout_ref": payout.payout_ref}).mappings().first()
            params = self._payout_params(payout)
            if row is None:
                new_id = conn.execute(self._q(q.payout_insert), params).scalar()
                if new_id is None:  # a concurrent job stored it first: read it and compare as below
                    row = conn.execute(self._q(q.payout_get_by_ref),
                                       {"psp": payout.psp, "payout_ref": payout.payout_ref}).mappings().one()
                else:
                    self._insert_lines(conn, int(new_id), payout)
                    self._event(conn, int(new_id), "fetched", _describe(payout))
                    return StoreOutcome(int(new_id), "new")
            stored = self._payout(row)
            if stored.digest == params["digest"]:
                conn.execute(self._q(q.payout_touch), {"id": stored.id, "now": self.db.now_param()})
                return StoreOutcome(stored.id, "same")
            changes = _changes(stored, payout)
            updated = conn.execute(self._q(q.payout_update_if_version),
                                   {**params, "id": stored.id, "version": stored.version}).rowcount
            if updated != 1:  # another job changed it meanwhile: that one's event says what
                return StoreOutcome(stored.id, "same")
            self._insert_lines(conn, stored.id, payout)
            self._event(conn, stored.id, "changed", "; ".join(changes))
            self._reopen(conn, stored.id, why=f"the payout changed at the PSP ({'; '.join(changes)})")
            return StoreOutcome(stored.id, "changed", tuple(changes))

    def _reopen(self, conn: sa.Connection, payout_id: int, *, why: str) -> None:
        now = self.db.now_param()
        conn.execute(self._q(q.entry_unlink), {"payout_id": payout_id})
        unmatched = conn.execute(self._q(q.match_delete), {"payout_id": payout_id}).rowcount
        cleared = conn.execute(self._q(q.exception_clear_of_payout),
                               {"payout_id": payout_id, "why": redact(f"reopened: {why}")[:500], "now": now}).rowcount
        if unmatched or cleared:
            self._event(conn, payout_id, "reopened",
                        f"{unmatched} bank match(es) removed, {cleared} exception(s) cleared: {why}")

    def _payout_params(self, p: NewPayout) -> dict[str, Any]:
        return {"psp": p.psp, "merchant_account": redact(p.merchant_account), "payout_ref": p.payout_ref,
                "amount": p.amount, "currency": p.currency, "status": p.status.value,
                "arrival_date": self._day(p.arrival_date), "trace_ref": redact_optional(p.trace_ref),
                "statement_descriptor": redact_optional(p.statement_descriptor), "digest": digest(p),
                "line_count": len(p.lines), "lines_net": p.lines_net, "now": self.db.now_param()}

    def _insert_lines(self, conn: sa.Connection, payout_id: int, payout: NewPayout) -> None:
        if not payout.lines:
            return
        by_psp = self._lookup(conn, q.payment_ids_by_psp_reference, payout,
                              {ln.psp_reference for ln in payout.lines if ln.psp_reference})
        by_ours = self._lookup(conn, q.payment_ids_by_merchant_reference, payout,
                               {ln.merchant_reference for ln in payout.lines
                                if ln.merchant_reference and by_psp.get(ln.psp_reference or "") is None})
        refunds = self._lookup(conn, q.refund_ids_by_psp_refund_id, payout,
                               {ln.movement_reference for ln in payout.lines
                                if ln.movement_reference and ln.kind is LineKind.REFUND})
        disputes = self._lookup(conn, q.dispute_ids_by_psp_dispute_id, payout,
                                {ref for ln in payout.lines if ln.kind in DISPUTE_KINDS
                                 for ref in (ln.movement_reference, ln.psp_reference) if ref})
        rows = []
        for ln in payout.lines:
            payment = by_psp.get(ln.psp_reference or "") or by_ours.get(ln.merchant_reference or "")
            dispute = (disputes.get(ln.movement_reference or "") or disputes.get(ln.psp_reference or "")
                       if ln.kind in DISPUTE_KINDS else None)
            rows.append({"payout_id": payout_id, "line_ref": ln.line_ref, "kind": ln.kind.value,
                         "psp_reference": ln.psp_reference,
                         "merchant_reference": redact_optional(ln.merchant_reference),
                         "gross": ln.gross, "fee": ln.fee, "net": ln.net, "currency": ln.currency,
                         "payment_id": payment, "missing_locally": payment is None and ln.kind in PAYMENT_KINDS,
                         "movement_reference": ln.movement_reference,
                         "refund_id": refunds.get(ln.movement_reference or "") if ln.kind is LineKind.REFUND
                         else None, "dispute_id": dispute})
        for start in range(0, len(rows), PAGE):
            conn.execute(self._q(q.payout_line_insert), rows[start:start + PAGE])

    def _lookup(self, conn: sa.Connection, query: Any, payout: NewPayout, refs: set[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        ordered = sorted(refs)
        for start in range(0, len(ordered), PAGE):
            for r in conn.execute(self._q(query), {"psp": payout.psp, "refs": ordered[start:start + PAGE],
                                                   "account": payout.merchant_account}).mappings():
                found.setdefault(r["ref"], int(r["id"]))
        return found

    def _event(self, conn: sa.Connection, payout_id: int, kind: str, detail: str) -> None:
        insert_event(self.db, conn, payout_id, kind, detail)

    # --- reading --------------------------------------------------------------------------------------------

    def iter_payouts(self, *, psp: str | None = None, status: str | None = None, since: date | None = None,
                     until: date | None = None, page: int = PAGE) -> Iterator[Payout]:
        """Payouts by id, of ``psp``, in ``status``, arriving in ``[since, until)``."""
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(q.payout_list), {
                    "psp": psp, "status": status, "since": self._day(since), "until": self._day(until),
                    "after_id": after, "n": page}).mappings().all()
            yield from (self._payout(r) for r in rows)
            if len(rows) < page:
                return
            after = int(rows[-1]["id"])

    def known_refs(self, psp: str, *, since: date) -> list[str]:
        """The PSP payout ids of ``psp`` arriving on or after ``since`` (Adyen's walk starts after them)."""
        return [p.payout_ref for p in self.iter_payouts(psp=psp, since=since)]

    def get(self, payout_id: int) -> Payout | None:
        with self.db.begin() as conn:
            row = conn.execute(self._q(q.payout_get), {"id": payout_id}).mappings().first()
        return None if row is None else self._payout(row)

    def find(self, word: str, *, psp: str | None = None) -> list[Payout]:
        """The payouts ``word`` names: recon's id, or a PSP's payout id (of ``psp``, or of any PSP)."""
        found = []
        if word.isdigit() and len(word) < 19:
            payout = self.get(int(word))
            found += [payout] if payout else []
        with self.db.begin() as conn:
            for name in ([psp] if psp else self._psps(conn)):
                row = conn.execute(self._q(q.payout_get_by_ref), {"psp": name, "payout_ref": word}).mappings().first()
                if row is not None:
                    found.append(self._payout(row))
        return found

    def _psps(self, conn: sa.Connection) -> list[str]:
        return [str(r["psp"]) for r in conn.execute(self._q(q.payout_psps)).mappings()]

    def lines(self, payout_id: int, *, page: int = PAGE) -> Iterator[PayoutLine]:
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(q.payout_lines_of), {"payout_id": payout_id, "after_id": after,
                                                                 "n": page}).mappings().all()
            yield from (self._line(r) for r in rows)
            if len(rows) < page:
                return
            after = int(rows[-1]["id"])

    def iter_report_lines(self, *, psp: str, since: date, until: date, last_id: int,
                          yield_per: int = 2000) -> Generator[tuple[int, dict[str, Any]], None, None]:
        """The close report's view of the lines of ``psp``'s payouts arriving in ``[since, until)`` with ids up
        to ``last_id``: (payout id, its merchant reference, PSP reference, kind, gross, fee, net, currency and
        category as ``PayoutLine.category``), by payout and id, streamed in one statement (a month's report
        prints a million of them: no row objects, never all in memory)."""
        params = {"psp": psp, "since": self._day(since), "until": self._day(until), "last_id": last_id}
        with self.db.begin() as conn:
            result = conn.execution_options(stream_results=True, yield_per=yield_per).execute(
                self._q(q.payout_report_lines), params)
            try:
                # row by row: the driver fetches yield_per rows at a time; Result.partitions() measured holding
                # every row read (800 MB for a month's million lines), iterating the result 50 MB
                for pid, ours, psp_ref, kind, gross, fee, net, currency, payment_id, missing in result:
                    category = ("matched" if payment_id is not None else "missing_locally" if missing
                                else "not_a_payment")
                    yield int(pid), {"merchant_reference": ours, "psp_reference": psp_ref, "kind": kind,
                                     "gross": int(gross), "fee": int(fee), "net": int(net), "currency": currency,
                                     "category": category}
            finally:
                result.close()

    def events(self, payout_id: int) -> list[PayoutEvent]:
        with self.db.begin() as conn:
            rows = conn.execute(self._q(q.payout_events_of), {"payout_id": payout_id}).mappings().all()
        return [PayoutEvent(payout_id=int(r["payout_id"]), at=self.db.from_db(r["at"]),  # type: ignore[arg-type]
                            kind=r["kind"], detail=r["detail"]) for r in rows]

    def line_totals(self, *, psp: str, since: date, until: date, last_id: int) -> list[dict[str, Any]]:
        """Per line kind and currency of ``psp``'s payouts arriving in ``[since, until)`` with ids up to
        ``last_id``: the gross, fee and net sums."""
        params = {"psp": psp, "since": self._day(since), "until": self._day(until), "last_id": last_id}
        with self.db.begin() as conn:
            return [{"kind": r["kind"], "currency": r["currency"], "gross": int(r["gross"]), "fee": int(r["fee"]),
                     "net": int(r["net"])} for r in conn.execute(self._q(q.payout_line_totals), params).mappings()]

    # --- rows -----------------------------------------------------------------------------------------------

    def _payout(self, r: Any) -> Payout:
        return Payout(id=int(r["id"]), psp=r["psp"], merchant_account=r["merchant_account"], payout_ref=r["payout_ref"],
                      amount=int(r["amount"]), currency=r["currency"], status=PayoutStatus(r["status"]),
                      arrival_date=from_day(r["arrival_date"]), trace_ref=r["trace_ref"],
                      statement_descriptor=r["statement_descriptor"], digest=r["digest"], version=int(r["version"]),
                      line_count=int(r["line_count"]), lines_net=int(r["lines_net"]),
                      fetched_at=self.db.from_db(r["fetched_at"]),  # type: ignore[arg-type]
                      updated_at=self.db.from_db(r["updated_at"]))  # type: ignore[arg-type]

    @staticmethod
    def _line(r: Any) -> PayoutLine:
        return PayoutLine(id=int(r["id"]), payout_id=int(r["payout_id"]), line_ref=r["line_ref"],
                          kind=LineKind(r["kind"]), psp_reference=r["psp_reference"],
                          merchant_reference=r["merchant_reference"], gross=int(r["gross"]), fee=int(r["fee"]),
                          net=int(r["net"]), currency=r["currency"],
                          payment_id=None if r["payment_id"] is None else int(r["payment_id"]),
                          missing_locally=bool(r["missing_locally"]), movement_reference=r["movement_reference"],
                          refund_id=None if r["refund_id"] is None else int(r["refund_id"]),
                          dispute_id=None if r["dispute_id"] is None else int(r["dispute_id"]))

    def _day(self, value: date | None) -> Any:
        return sql_day(self.db, value)

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]

def from_day(value: Any) -> date:
    """A day read back: a ``date`` (PostgreSQL) or its ISO text (SQLite)."""
    return value if isinstance(value, date) else date.fromisoformat(str(value))


def _describe(p: NewPayout) -> str:
    return (f"{p.status.value} {p.amount} {p.currency} (minor units) arriving {p.arrival_date}, {len(p.lines)} "
            f"line(s) netting {p.lines_net}")


def _changes(stored: Payout, new: NewPayout) -> list[str]:
    pairs = [("amount", stored.amount, new.amount), ("currency", stored.currency, new.currency),
             ("status", stored.status.value, new.status.value), ("arrival_date", stored.arrival_date, new.arrival_date),
             ("trace_ref", stored.trace_ref, redact_optional(new.trace_ref)),
             ("line_count", stored.line_count, len(new.lines)),
             ("lines_net", stored.lines_net, new.lines_net)]
    changes = [f"{name} {old} -> {now}" for name, old, now in pairs if old != now]
    return changes or ["its lines changed"]

