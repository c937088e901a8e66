"""The review queue's store: the queue read through one filter (``QueueFilter`` under ``QueueRules``), keyset
pages both ways and totals, assignments and comments. The only code that executes ``recon.db.review_queries``.

Every text written (assignee, author, comment) is redacted here, at the row builder, like every store's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from recon.db import review_queries as q
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.redact import redact
from recon.review_rows import (
    CommentKind,
    CurrencyTotal,
    QueueFilter,
    QueueRules,
    QueueTotals,
    ReviewComment,
    ReviewKind,
)
from recon.rows import Payment

#: a cursor: the (review_since, id) of the payment a page continues from
Cursor = tuple[datetime, int]


class ReviewStore:
    def __init__(self, db: Database, payments: PaymentStore) -> None:
        self.db = db
        self.payments = payments

    # --- the queue -----------------------------------------------------------------------------------------

    def page(self, where: QueueFilter, rules: QueueRules, *, after: Cursor | None = None,
             before: Cursor | None = None, limit: int) -> list[Payment]:
        """Up to ``limit`` payments the filter matches, longest in review first: those after the cursor
        ``after`` (the first page without one), or, with ``before``, the ``limit`` just before it."""
        params = self._params(where, rules)
        with self.db.begin() as conn:
            if before is not None:
                params.update(before_since=self.db.to_db(before[0]), before_id=before[1], n=limit)
                rows = conn.execute(self._q(q.review_queue_before), params).all()
                return [self.payments.from_row(r) for r in reversed(rows)]
            since, after_id = after if after else (datetime(1, 1, 2, tzinfo=rules.high_since.tzinfo), 0)
            params.update(after_since=self.db.to_db(since), after_id=after_id, n=limit)
            return [self.payments.from_row(r) for r in conn.execute(self._q(q.review_queue_after), params)]

    def totals(self, where: QueueFilter, rules: QueueRules) -> QueueTotals:
        """How many payments the filter matches, and per currency how many and how much (minor units)."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(q.review_queue_totals), self._params(where, rules)).all()
        by = [CurrencyTotal(currency=m["currency"], count=int(m["n"]), amount=int(m["amount"]))
              for m in (r._mapping for r in rows)]
        return QueueTotals(count=sum(t.count for t in by), by_currency=by)

    # --- assignments and comments ------------------------------------------------------------------------

    def assign(self, payment_id: int, *, assignee: str | None, by: str) -> bool:
        """Assign the payment (None: unassign) and record it as a comment, in one transaction; False, and
        nothing written, when it is not in review."""
        assignee = redact(assignee) if assignee is not None else None
        with self.db.begin() as conn:
            if conn.execute(self._q(q.payment_assign_review), {"id": payment_id, "assignee": assignee}).rowcount != 1:
                return False
            self._comment(conn, payment_id, author=by, kind=CommentKind.ASSIGNED, body=assignee or "unassigned")
        return True

    def comment(self, payment_id: int, *, author: str, body: str) -> None:
        with self.db.begin() as conn:
            self._comment(conn, payment_id, author=author, kind=CommentKind.COMMENT, body=body)

    def comments(self, payment_id: int) -> list[ReviewComment]:
        """The payment's comments and assignments, oldest first."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(q.review_comments_for), {"payment_id": payment_id}).all()
        return [ReviewComment(id=int(m["id"]), payment_id=int(m["payment_id"]), at=self.db.from_db(m["at"]),  # type: ignore[arg-type]
                              author=m["author"], kind=CommentKind(m["kind"]), body=m["body"])
                for m in (r._mapping for r in rows)]

    # --- plumbing ----------------------------------------------------------------------------------------

    def _comment(self, conn: sa.Connection, payment_id: int, *, author: str, kind: CommentKind, body: str) -> None:
        conn.execute(self._q(q.review_comment_insert), {
            "payment_id": payment_id, "author": redact(author), "kind": kind.value, "body": redact(body),
            "now": self.db.now_param()})

    def _params(self, where: QueueFilter, rules: QueueRules) -> dict[str, Any]:
        far = rules.high_since + timedelta(days=36500)
        params: dict[str, Any] = {
            "cutoff": self.db.to_db(where.cutoff or far), "has_cutoff": int(where.cutoff is not None),
            "psp": where.psp, "currency": where.currency,
            "assignee": where.assignee, "unassigned": int(where.unassigned), "kind": where.kind,
            "kind_like": where.kind.replace("_", "\\_") + ":%" if where.kind else None,
            "overdue": int(where.overdue), "severity": where.severity,
            "exponent_0": _listed(rules.exponent_0), "exponent_3": _listed(rules.exponent_3),
            "exponent_4": _listed(rules.exponent_4),
            **q.minor_thresholds("high_min", rules.high_scaled, at_least=True),
            **q.minor_thresholds("medium_min", rules.medium_scaled, at_least=True),
            "high_since": self.db.to_db(rules.high_since),
            "medium_since": self.db.to_db(rules.medium_since)}
        for kind in ReviewKind:
            params[f"due_{kind.value}"] = self.db.to_db(rules.due_cutoffs[kind.value])
        cutoffs = [rules.due_cutoffs[kind.value] for kind in ReviewKind]
        params["due_first"], params["due_last"] = self.db.to_db(min(cutoffs)), self.db.to_db(max(cutoffs))
        return params

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]


def _listed(values: Sequence[str]) -> list[str]:
    return list(values) or [""]  # an empty IN list matches nothing on both dialects, as "" does
