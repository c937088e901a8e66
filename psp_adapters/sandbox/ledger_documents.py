"""Documents: objects a flavour keeps whole, as JSON, that are neither payments nor money movements (Stripe's
customers, payment methods and events). A mixin of ``ledger.Ledger``, which owns the connection, the lock and
the transactions; the ``documents`` table is ``ledger_schema``'s.

A document has an id, a type (``customer``, ``payment_method``, ``event``), an optional parent (a payment
method's customer) and a creation time; its body is what the flavour renders from, never interpreted here.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psp_adapters.sandbox.records import ts
from psp_adapters.sandbox.wire import parse_timestamp


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    type: str
    parent: str | None
    created_at: datetime
    body: Mapping[str, Any]
    seq: int = 0  #: its place in the order of creation (listings page by it)


class DocumentBooks:
    """Stripe's customers, payment methods and events, kept as JSON documents."""

    _conn: sqlite3.Connection
    _lock: threading.RLock

    def _transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def put_document(self, document: Document) -> None:
        """Store a new document, or replace the body and parent of the one with its id."""
        with self._transaction():
            self._conn.execute(
                "INSERT INTO documents (id, type, parent, created_at, body) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET parent = excluded.parent, body = excluded.body",
                (document.id, document.type, document.parent, ts(document.created_at),
                 json.dumps(dict(document.body), separators=(",", ":"))),
            )

    def get_document(self, document_id: str, *, type: str) -> Document | None:
        found = self._documents("id = ? AND type = ?", (document_id, type), limit=1)
        return found[0] if found else None

    def documents(
        self,
        type: str,
        *,
        lo: datetime | None = None,
        hi: datetime | None = None,
        parent: str | None = None,
        after_seq: int | None = None,
        before_seq: int | None = None,
        limit: int = 100_000,
    ) -> list[Document]:
        """Documents of ``type`` newest first (``created_at``, then order of creation), created in ``[lo, hi)``,
        of ``parent``, older than the document at ``after_seq`` (a ``starting_after``) or, with ``before_seq``,
        the ``limit`` next newer than that one (an ``ending_before``), still newest first."""
        where, args = "type = ?", list[object]([type])
        for clause, value in (("created_at >= ?", lo), ("created_at < ?", hi)):
            if value is not None:
                where, args = f"{where} AND {clause}", [*args, ts(value)]
        if parent is not None:
            where, args = f"{where} AND parent = ?", [*args, parent]
        if after_seq is not None:
            where, args = f"{where} AND seq < ?", [*args, after_seq]
        if before_seq is not None:
            found = self._documents(f"{where} AND seq > ?", (*args, before_seq), limit=limit, newest_first=False)
            return found[::-1]
        return self._documents(where, tuple(args), limit=limit)

    def _documents(
        self, where: str, args: tuple[object, ...], *, limit: int, newest_first: bool = True
    ) -> list[Document]:
        order = "DESC" if newest_first else "ASC"
        with self._lock:
            rows = self._conn.execute(
                f"SELECT seq, id, type, parent, created_at, body FROM documents WHERE {where} "  # nosec B608
                f"ORDER BY seq {order} LIMIT ?",  # where: this module's own clauses, values bound
                (*args, limit),
            ).fetchall()
        return [
            Document(row["id"], row["type"], row["parent"], parse_timestamp(row["created_at"]),
                     json.loads(row["body"]), row["seq"])
            for row in rows
        ]
