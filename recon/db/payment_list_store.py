"""The console's payments list: the only code that executes ``recon.db.payment_list_queries``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from recon.console_rows import PaymentListFilter
from recon.db import payment_list_queries as q
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.db.review_queries import FILTER_LISTS, minor_thresholds
from recon.review_rows import CurrencyTotal, QueueTotals
from recon.rows import Payment

#: the bounds an open age range is read with
_EARLIEST = datetime(1970, 1, 2, tzinfo=UTC)
_LATEST = datetime(9999, 1, 1, tzinfo=UTC)


class PaymentListStore:
    def __init__(self, db: Database, payments: PaymentStore) -> None:
        self.db = db
        self.payments = payments

    def page(self, where: PaymentListFilter, exponents: dict[str, tuple[str, ...]], *, before_id: int | None = None,
             after_id: int | None = None, limit: int) -> list[Payment]:
        """Up to ``limit`` payments the filter matches, newest first: those before ``before_id`` (the first page
        without it), or with ``after_id`` the ``limit`` just after it."""
        params = self._params(where, exponents)
        with self.db.begin() as conn:
            if after_id is not None:
                rows = conn.execute(self._q(q.payment_list_filtered_after), {**params, "after_id": after_id,
                                                                             "n": limit}).all()
                return [self.payments.from_row(r) for r in reversed(rows)]
            rows = conn.execute(self._q(q.payment_list_filtered), {
                **params, "before_id": before_id if before_id is not None else 2**63 - 1, "n": limit}).all()
        return [self.payments.from_row(r) for r in rows]

    def totals(self, where: PaymentListFilter, exponents: dict[str, tuple[str, ...]]) -> QueueTotals:
        with self.db.begin() as conn:
            rows = conn.execute(self._q(q.payment_list_totals), self._params(where, exponents)).all()
        by = [CurrencyTotal(currency=m["currency"], count=int(m["n"]), amount=int(m["amount"]))
              for m in (r._mapping for r in rows)]
        return QueueTotals(count=sum(t.count for t in by), by_currency=by)

    def _params(self, where: PaymentListFilter, exponents: dict[str, tuple[str, ...]]) -> dict[str, Any]:
        prefix = None
        if where.reference_prefix:
            escaped = where.reference_prefix.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            prefix = escaped + "%"
        unfinished = where.status == "unfinished"
        return {"status": None if unfinished else where.status, "unfinished": int(unfinished), "psp": where.psp,
                "currency": where.currency,
                "created_before": self.db.to_db(where.created_before or _LATEST),
                "created_after": self.db.to_db(where.created_after or _EARLIEST),
                "min_scaled": where.min_scaled, "max_scaled": where.max_scaled, "prefix": prefix,
                "dispute": where.dispute, "evidence_before": self.db.to_db(where.evidence_before or _EARLIEST),
                **minor_thresholds("min", where.min_scaled, at_least=True),
                **minor_thresholds("max", where.max_scaled, at_least=False),
                **{name: list(exponents.get(name, ())) or [""] for name in FILTER_LISTS}}

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]


def age_bounds(now: datetime, bucket: str) -> tuple[datetime | None, datetime | None]:
    """The money-at-risk age buckets as (created_before, created_after)."""
    hour, day, week = timedelta(hours=1), timedelta(days=1), timedelta(days=7)
    return {"lt_1h": (None, now - hour), "1h_1d": (now - hour, now - day), "1d_7d": (now - day, now - week),
            "gt_7d": (now - week, None)}.get(bucket, (None, None))
