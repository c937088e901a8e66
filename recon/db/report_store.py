"""ReportStore: the settlement report's database side. The only code that executes ``report_queries``.

A report runs in one ``ReportSession``: one connection, one transaction, so that every read of ``payments``
sees one snapshot (PostgreSQL ``REPEATABLE READ``; SQLite a WAL read transaction). The PSP listing goes into
a TEMPORARY table on that connection, in batches; the classification joins it with ``payments`` and streams
the result through a server-side cursor. Memory stays bounded by the batch size and the cursor's buffer,
whatever the number of payments or lines.

Invariants:
- Read-only against ``payments`` (and every other shared table): the only writes go to the temporary table,
  which no other session can see and which disappears with the transaction (PostgreSQL) or connection
  (SQLite). A temporary table rather than a scratch table keyed by a run id: nothing to clean up after a
  crash, no migration, no WAL on PostgreSQL, and on SQLite it does not need the main database's write lock.
- SQLite: the engine's connections start every transaction with ``BEGIN IMMEDIATE`` (the single write lock),
  which would stall every worker for the whole report. The report therefore opens its own connection, with a
  deferred ``BEGIN``: a WAL read snapshot that never blocks writers. Hazard: a long report keeps the WAL from
  being checkpointed past its snapshot, so the WAL file grows while it runs.
- PostgreSQL: a long ``REPEATABLE READ`` transaction holds back vacuum's horizon while the report runs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import NullPool

from psp_adapters.protocol import SettlementLine
from recon.db import report_queries as rq
from recon.db.database import Database, translate_errors
from recon.report_rows import LineMatch, UnlistedPayment

BATCH_DEFAULT = 5000
YIELD_PER_DEFAULT = 2000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


class ReportStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    @contextlib.contextmanager
    def session(self, *, psp: str, yield_per: int = YIELD_PER_DEFAULT) -> Iterator[ReportSession]:
        """A connection in one snapshot transaction, with an empty ``report_lines``; rolled back at the end
        (there is nothing to keep). Raises StoreError / DatabaseTransientError for database failures."""
        with translate_errors(), self._connect() as conn, conn.begin() as tx:
            session = ReportSession(self.db, conn, psp=psp, yield_per=yield_per)
            conn.execute(session.q(rq.report_lines_drop))
            conn.execute(session.q(rq.report_lines_create))
            try:
                yield session
            finally:
                tx.rollback()

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sa.Connection]:
        if self.db.is_postgresql:
            with self.db.engine.connect() as conn:
                yield conn.execution_options(isolation_level="REPEATABLE READ")
            return
        engine = _sqlite_reader(self.db.engine.url)
        try:
            with engine.connect() as conn:
                yield conn
        finally:
            engine.dispose()


class ReportSession:
    """The report's connection. ``load`` first (once), then ``matched_lines`` and ``unlisted_payments``."""

    def __init__(self, db: Database, conn: sa.Connection, *, psp: str, yield_per: int) -> None:
        self.db = db
        self.conn = conn
        self.psp = psp
        self.yield_per = yield_per

    def load(self, lines: Iterable[SettlementLine], *, batch: int = BATCH_DEFAULT) -> int:
        """Insert the PSP listing, ``batch`` references per statement; returns the number of lines read.

        A reference listed twice is merged (see ``report_queries``): inside a batch here, across batches by
        the upsert, with the same rule. Exceptions of the iterable (PspError) propagate unchanged.
        """
        pending: dict[str, dict[str, Any]] = {}
        seq = 0
        for seq, line in enumerate(lines, start=1):
            row = _line_row(line, seq)
            old = pending.get(line.psp_reference)
            pending[line.psp_reference] = _merge(old, row) if old else row
            if len(pending) >= batch:
                self._upsert(pending)
                pending = {}
        if pending:
            self._upsert(pending)
        self.conn.execute(self.q(rq.report_lines_index))
        self.conn.execute(self.q(rq.report_lines_analyze))
        return seq

    def matched_lines(self, *, cutoff: datetime) -> Iterator[LineMatch]:
        """Every merged PSP line with its payment, in listing order, streamed."""
        for r in self._stream(rq.report_lines_matched, {"cutoff": self.db.to_db(cutoff)}):
            m = r._mapping
            yield LineMatch(psp_reference=m["psp_reference"], psp_merchant_reference=m["psp_merchant_reference"],
                            psp_amount=int(m["psp_amount"]), psp_currency=m["psp_currency"],
                            psp_status=m["psp_status"], lines=int(m["lines"]), payment_id=m["payment_id"],
                            merchant_reference=m["merchant_reference"], our_psp_reference=m["our_psp_reference"],
                            amount=_int(m["amount"]), currency=m["currency"], status=m["status"],
                            in_window=bool(m["in_window"]), fee=_int(m["fee"]), net=_int(m["net"]),
                            settlement_currency=m["settlement_currency"], rank=int(m["rank"]),
                            refunded=int(m["refunded"] or 0), dispute=m["dispute"])

    def merchant_accounts(self) -> list[str]:
        """The merchant accounts of our payments of this PSP (Adyen lists settlements per account)."""
        return [str(account) for (account,) in self.conn.execute(self.q(rq.report_merchant_accounts),
                                                                 {"psp": self.psp})]

    def unlisted_payments(self, *, since: datetime, until: datetime,
                          cutoff: datetime) -> Iterator[UnlistedPayment]:
        """Payments of this PSP created in ``[since, until)`` that no line stands for, oldest first."""
        params = {"psp": self.psp, "since": self.db.to_db(since), "until": self.db.to_db(until),
                  "cutoff": self.db.to_db(cutoff)}
        for r in self._stream(rq.report_payments_unlisted, params):
            m = r._mapping
            yield UnlistedPayment(payment_id=int(m["payment_id"]), merchant_reference=m["merchant_reference"],
                                  psp_reference=m["psp_reference"], amount=int(m["amount"]), currency=m["currency"],
                                  status=m["status"], in_window=bool(m["in_window"]))

    def q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]

    def _upsert(self, rows: dict[str, dict[str, Any]]) -> None:
        self.conn.execute(self.q(rq.report_lines_upsert),
                          {"rows": json.dumps(list(rows.values())), "psp": self.psp})

    def _stream(self, query: Any, params: dict[str, Any]) -> Iterator[Any]:
        with translate_errors():
            result = self.conn.execution_options(stream_results=True, yield_per=self.yield_per).execute(
                self.q(query), params)
            try:
                yield from result
            finally:
                result.close()


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _line_row(line: SettlementLine, seq: int) -> dict[str, Any]:
    at = (line.settled_at - _EPOCH) // _MICRO
    return {"psp_reference": line.psp_reference, "merchant_reference": line.merchant_reference,
            "amount": line.amount, "currency": line.currency, "status": line.status,
            "first_at": at, "last_at": at, "lines": 1, "seq": seq, "fee": line.fee, "net": line.net,
            "settlement_currency": line.settlement_currency, "merchant_account": line.merchant_account}


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The in-batch twin of the upsert's merge: latest status (CONFLICTING when two at one time disagree);
    earliest amount, currency, fee and net."""
    earlier = new if new["first_at"] < old["first_at"] else old
    later = new if new["last_at"] > old["last_at"] else old
    status = later["status"]
    if new["last_at"] == old["last_at"] and new["status"] != old["status"]:
        status = rq.CONFLICTING
    return {**old, "merchant_reference": old["merchant_reference"] or new["merchant_reference"],
            "merchant_account": old["merchant_account"] or new["merchant_account"],
            "amount": earlier["amount"], "currency": earlier["currency"], "status": status,
            "fee": earlier["fee"], "net": earlier["net"], "settlement_currency": earlier["settlement_currency"],
            "first_at": earlier["first_at"], "last_at": later["last_at"],
            "lines": old["lines"] + new["lines"]}


def _sqlite_reader(url: sa.URL) -> sa.Engine:
    """A one-connection engine for the report on SQLite: deferred BEGIN (a read snapshot, never the write
    lock), temporary tables on disk (bounded memory), a larger page cache for the joins."""
    engine = sa.create_engine(url, poolclass=NullPool,
                              connect_args={"timeout": 60, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=60000")
        cur.execute("PRAGMA temp_store=FILE")
        cur.execute("PRAGMA cache_size=-16384")  # KiB: 16 MiB, a bound, not a function of the table size
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine
