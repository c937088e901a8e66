"""BankStore: the bank statements and their entries. The only code that executes ``bank_queries``.

``import_plan`` writes a checked file (``recon.bank.importer.StatementPlan``) in ONE transaction: a
statement already stored is recognised by its identity (account, statement id, sequence, period) and not
stored again; an entry whose key the account has is not stored again. Evidence never overwrites what we
know: a stored statement with other balances, or a stored entry whose key now comes with another amount,
direction, currency or booking date, is a conflict; the transaction is rolled back (nothing written) and
``BankEvidenceConflict`` names both.

``account`` is the identifier from our own ``[bank.accounts]`` (recon.bank.config), not text from the file;
every text that came from the file reached here redacted (recon.bank.importer).

Two imports of the same new file at the same moment: on SQLite they run one after the other (a write
transaction holds the database); on PostgreSQL the second's inserts wait for the first's transaction, then
store nothing (ON CONFLICT DO NOTHING) and its entries count as already known, since the counts come from the
keys each INSERT returned.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import date
from itertools import islice
from typing import TYPE_CHECKING, Any

import orjson
import sqlalchemy as sa

from recon.bank.rows import BankEntry, BankStatement, ImportResult, NewEntry, NewStatement, StatementOutcome
from recon.db import bank_queries as bq
from recon.db.database import Database
from recon.errors import BankEvidenceConflict

if TYPE_CHECKING:
    from recon.bank.importer import StatementPlan

BATCH = 1000
#: (minor units, currency) -> text for people, e.g. recon.payments.money.format_amount
MoneyFunc = Callable[[int, str], str]



class BankStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._money: MoneyFunc = lambda minor, currency: f"{minor} {currency} (minor units)"

    def import_plan(self, plan: StatementPlan, *, money_func: MoneyFunc) -> ImportResult:
        """Store ``plan`` in one transaction; raises BankEvidenceConflict (rolled back) on a contradiction, its
        amounts written by ``money_func``."""
        self._money = money_func
        with self.db.begin() as conn:
            ids: dict[int, int] = {}
            known: dict[int, bool] = {}
            for statement in plan.statements:
                ids[statement.index], known[statement.index] = self._statement(conn, statement)
            added: dict[int, int] = defaultdict(int)
            seen: dict[int, int] = defaultdict(int)
            entries = plan.entries()
            while batch := list(islice(entries, BATCH)):
                for entry, is_new in self._entries(conn, batch, ids):
                    (added if is_new else seen)[entry.statement_index] += 1
        return ImportResult(tuple(StatementOutcome(
            statement_ref=s.statement_ref, account=s.account, period_start=s.period_start, period_end=s.period_end,
            known=known[s.index], entries_added=added[s.index], entries_known=seen[s.index])
            for s in plan.statements))

    def _statement(self, conn: sa.Connection, s: NewStatement) -> tuple[int, bool]:
        params = {"account": s.account, "statement_ref": s.statement_ref, "sequence": s.sequence,
                  "currency": s.currency, "opening_balance": s.opening_balance, "closing_balance": s.closing_balance,
                  "period_start": self._day(s.period_start), "period_end": self._day(s.period_end),
                  "entry_count": s.entry_count, "format": s.format, "file_name": s.file_name,
                  "file_digest": s.file_digest, "now": self.db.now_param()}
        new_id = conn.execute(self._q(bq.bank_statement_insert), params).scalar()
        if new_id is not None:
            return int(new_id), False
        row = conn.execute(self._q(bq.bank_statement_by_identity), params).mappings().one()
        if (row["opening_balance"], row["closing_balance"], row["currency"]) != \
                (s.opening_balance, s.closing_balance, s.currency):
            raise BankEvidenceConflict(
                f"{s.position}: statement {s.statement_ref!r} of {s.period_start}..{s.period_end} was imported before "
                f"(from {row['file_name']}) with balances {self._money(row['opening_balance'], row['currency'])} -> "
                f"{self._money(row['closing_balance'], row['currency'])}; this file says "
                f"{self._money(s.opening_balance, s.currency)} -> {self._money(s.closing_balance, s.currency)}; "
                "nothing imported")
        return int(row["id"]), True

    def _entries(self, conn: sa.Connection, batch: list[NewEntry],
                 ids: dict[int, int]) -> Iterator[tuple[NewEntry, bool]]:
        by_account: dict[str, list[NewEntry]] = defaultdict(list)
        for entry in batch:
            by_account[entry.account].append(entry)
        for account, entries in by_account.items():
            fresh, stored = self._insert_new(conn, account, entries, ids)
            for entry in entries:
                if entry.entry_key not in fresh:
                    self._check_same(entry, stored[entry.entry_key])
            yield from ((entry, entry.entry_key in fresh) for entry in entries)

    def _insert_new(self, conn: sa.Connection, account: str, entries: list[NewEntry],
                    ids: dict[int, int]) -> tuple[set[str], dict[str, Any]]:
        """Stores the entries whose keys ``account`` has not; returns their keys, and the stored rows of the others.

        PostgreSQL: the batch as one JSON array in one INSERT … ON CONFLICT DO NOTHING RETURNING, then a read of
        only the keys it did not store. A read of every key first, as SQLite does, cost more than the insert:
        the first import's table has no statistics inside its own transaction, and the planner scanned the
        account's rows by the booking index for each batch (130 ms for 1,000 keys out of 140,000). SQLite runs
        in process: the read goes by the unique index, and the driver's executemany inserts the new ones."""
        if self.db.is_postgresql:
            inserted = conn.execute(self._q(bq.bank_entry_insert), {
                "rows": orjson.dumps([self._entry_row(e, ids) for e in entries]).decode(),
                "now": self.db.now_param()}).scalars()
            fresh = set(inserted)
            return fresh, self._stored(conn, account, [e.entry_key for e in entries if e.entry_key not in fresh])
        stored = self._stored(conn, account, [e.entry_key for e in entries])
        rows = [{**self._entry_row(e, ids), "now": self.db.now_param()} for e in entries if e.entry_key not in stored]
        if rows:
            conn.exec_driver_sql(bq.bank_entry_insert.for_driver("sqlite"), rows)
        return {row["entry_key"] for row in rows}, stored

    def _stored(self, conn: sa.Connection, account: str, keys: list[str]) -> dict[str, Any]:
        if not keys:
            return {}
        return {r["entry_key"]: r for r in conn.execute(self._q(bq.bank_entry_known), {
            "account": account, "keys": orjson.dumps(keys).decode()}).mappings()}

    def _check_same(self, entry: NewEntry, row: Any) -> None:
        stored = (int(row["amount"]), row["direction"], row["currency"], self._from_day(row["booking_date"]))
        if stored != (entry.amount, entry.direction, entry.currency, entry.booking_date):
            raise BankEvidenceConflict(
                f"{entry.position}: an entry with the same key ({entry.entry_key}) is stored as "
                f"{row['direction']} {self._money(stored[0], row['currency'])} on {stored[3]}; this file says "
                f"{entry.direction} {self._money(entry.amount, entry.currency)} on {entry.booking_date}; "
                "nothing imported")

    @staticmethod
    def _entry_row(e: NewEntry, ids: dict[int, int]) -> dict[str, Any]:
        """``bank_entry_insert``'s values of one entry; days as ISO text (SQLite stores them so)."""
        return {"account": e.account, "entry_key": e.entry_key, "statement_id": ids[e.statement_index],
                "booking_date": e.booking_date.isoformat(),
                "value_date": e.value_date.isoformat() if e.value_date else None, "amount": e.amount,
                "direction": e.direction, "currency": e.currency, "bank_reference": e.bank_reference,
                "end_to_end_id": e.end_to_end_id, "counterparty": e.counterparty, "remittance": e.remittance,
                "bank_code": e.bank_code}

    # --- reading ----------------------------------------------------------------------------------------------

    def iter_entries(self, *, account: str | None = None, since: date | None = None,
                     page: int = 500) -> Iterator[BankEntry]:
        """Entries, oldest first (by id: import order), of ``account`` and booked on or after ``since``."""
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(bq.bank_entry_list), {
                    "account": account, "since": self._day(since) if since else None, "after_id": after,
                    "n": page}).mappings().all()
            yield from (self._entry(r) for r in rows)
            if len(rows) < page:
                return
            after = int(rows[-1]["id"])

    def lookup(self, word: str) -> list[BankEntry]:
        """The entries ``word`` names: an entry id, a bank reference or an end-to-end id (at most 50)."""
        entry_id = int(word) if word.isdigit() and len(word) < 19 else -1
        with self.db.begin() as conn:
            rows = conn.execute(self._q(bq.bank_entry_lookup), {"id": entry_id, "ref": word}).mappings().all()
        return [self._entry(r) for r in rows]

    def statement(self, statement_id: int) -> BankStatement | None:
        with self.db.begin() as conn:
            row = conn.execute(self._q(bq.bank_statement_get), {"id": statement_id}).mappings().first()
        return None if row is None else self._statement_row(row)

    def _entry(self, r: Any) -> BankEntry:
        return BankEntry(id=int(r["id"]), account=r["account"], entry_key=r["entry_key"],
                         statement_id=int(r["statement_id"]), booking_date=self._from_day(r["booking_date"]),
                         value_date=self._from_day(r["value_date"]) if r["value_date"] is not None else None,
                         amount=int(r["amount"]), direction=r["direction"], currency=r["currency"],
                         bank_reference=r["bank_reference"], end_to_end_id=r["end_to_end_id"],
                         counterparty=r["counterparty"], remittance=r["remittance"], bank_code=r["bank_code"],
                         payout_id=r["payout_id"], imported_at=self.db.from_db(r["imported_at"]))  # type: ignore[arg-type]

    def _statement_row(self, r: Any) -> BankStatement:
        return BankStatement(id=int(r["id"]), account=r["account"], statement_ref=r["statement_ref"],
                             sequence=r["sequence"], currency=r["currency"], opening_balance=int(r["opening_balance"]),
                             closing_balance=int(r["closing_balance"]), period_start=self._from_day(r["period_start"]),
                             period_end=self._from_day(r["period_end"]), entry_count=int(r["entry_count"]),
                             format=r["format"], file_name=r["file_name"], file_digest=r["file_digest"],
                             imported_at=self.db.from_db(r["imported_at"]))  # type: ignore[arg-type]

    def _day(self, value: date | None) -> Any:
        return value if self.db.is_postgresql or value is None else value.isoformat()

    @staticmethod
    def _from_day(value: Any) -> date:
        return value if isinstance(value, date) else date.fromisoformat(str(value))

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]




