"""WebhookStore: the events PSPs push, stored once each with the job that applies it. The only code that executes
``webhook_queries``.

``intake`` is the whole of a webhook request's database work: every new event (unique on PSP and event id)
and its job commit together, so a stored event is always applied and a redelivery inserts neither.

The storage boundary (``recon.redact``) is ``_params``, the one row builder of both intake paths: every text and
the body are redacted, but the PSP's own identifiers, kept exactly (``_VERBATIM``: the event id, which a
redelivery must match, and the PSP reference, see ``recon.db.payment_store``). A merchant reference or account
from an event for a payment we do not know is outside text like any other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from psp_adapters.protocol import DisputeNews, ModificationNews, PayoutNews, RefundNews, WebhookEvent, news_kind
from recon.db import webhook_queries as wq
from recon.db.database import Database, json_from_db
from recon.db.jobs_store import JobStore
from recon.db.libpq import AsyncSession
from recon.redact import redact_row, redact_value
from recon.rows import EnqueueRow
from recon.webhook_rows import StoredEvent, WebhookRecord, WebhookState

#: the webhook job's kind (the job handler's, recon.reconcile.webhook): created here, with its event
WEBHOOK_KIND = "webhook"
#: the webhook jobs' queue unless ``[webhooks] queue`` says otherwise (``recon.webhooks.config``)
WEBHOOK_QUEUE = "webhooks"
#: a stored event document is cut to this many characters of JSON (the columns keep what recon acts on)
BODY_MAX_CHARS = 32_768

#: the names of ``WEBHOOK_COLUMNS``, in order (rows read straight through the driver are tuples)
_COLUMN_NAMES = tuple(c.strip() for c in wq.WEBHOOK_COLUMNS.split(","))
#: the columns ``_params`` stores exactly as given (module docstring); ``body`` is redacted as a document first
_VERBATIM = frozenset({"event_id", "psp_reference", "movement_reference", "body"})


def webhook_key(webhook_id: int) -> str:
    return f"webhook:{webhook_id}"


def job_payload(webhook_id: int, event: WebhookEvent) -> dict[str, Any]:
    """The webhook job's payload: the event's id, and ``report`` for an event that names an available report or
    ``payout`` for news of a payout (its job has work to do before its finish; webhook_intake_batch builds the
    same)."""
    if isinstance(event.news, PayoutNews):
        return {"webhook_id": webhook_id, "payout": True}
    return {"webhook_id": webhook_id, "report": True} if event.report else {"webhook_id": webhook_id}


class WebhookStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def intake(self, events: Sequence[WebhookEvent], *, queue: str, max_attempts: int,
               max_depth: int = 0) -> list[StoredEvent]:
        """Store the new events of one request and queue one job each, in one transaction."""
        out: list[StoredEvent] = []
        with self.db.begin() as conn:
            new: list[tuple[WebhookEvent, int]] = []
            for event in events:
                row = conn.execute(self._q(wq.webhook_insert), self._params(event)).first()
                if row is None:
                    out.append(StoredEvent(event.event_id, stored=False, webhook_id=None, job_id=None))
                else:
                    new.append((event, int(row._mapping["id"])))
            if new:
                rows = [EnqueueRow(queue=queue, kind=WEBHOOK_KIND, payload_json=json.dumps(job_payload(i, e)),
                                   priority=0, run_at=None, delay=0.0, max_attempts=max_attempts,
                                   unique_key=webhook_key(i), tenant=e.merchant_account) for e, i in new]
                job_ids = JobStore(self.db).enqueue(rows, max_depth={queue: max_depth}, conn=conn)
                out.extend(StoredEvent(e.event_id, stored=True, webhook_id=i, job_id=j)
                           for (e, i), j in zip(new, job_ids, strict=True))
        return out

    def async_session(self) -> AsyncSession:
        """The intake writer's own asyncio connection (PostgreSQL), kept across failures (recon.db.libpq)."""
        return AsyncSession(self.db.url, outage=self.db.outage)

    async def intake_batch(self, requests: Sequence[Sequence[WebhookEvent]], *, queue: str, max_attempts: int,
                           session: AsyncSession) -> list[list[StoredEvent]]:
        """``intake`` for the events of several requests at once, on PostgreSQL, for a queue without
        ``max_depth``, on ``session``'s connection (``async_session``): one statement
        (``webhook_intake_batch``) inserts the new events and their jobs and notifies the workers, so the whole
        batch commits, or fails, together. An event seen earlier in the batch or already stored is a
        redelivery (``stored`` False). Returns one list per request, in order. Driver errors are translated as
        everywhere (DatabaseUnavailable when no server takes the batch: the session connects again, after its
        backoff, for a later batch; DatabaseTransientError, StoreError).

        Hazard: a batch whose commit's outcome is unknown (the connection died during the statement) raises
        DatabaseUnavailable, and its requests are answered 503 although their events may be stored: the PSP
        delivers them again and the redelivery stores nothing (unique on PSP and event id). A 2xx is only ever
        sent for events a commit holds."""
        rows: list[str] = []
        for events in requests:
            for e in events:
                params = self._params(e)
                body = params.pop("body")
                for key in ("now", "state"):
                    params.pop(key)
                params["ord"] = len(rows)
                if e.occurred_at is not None:
                    params["occurred_at"] = e.occurred_at.isoformat()
                if isinstance(e.news, DisputeNews) and e.news.due_by is not None:
                    params["due_by"] = e.news.due_by.isoformat()
                # the body is embedded as the JSON it already is (no second encoding as a string)
                rows.append(_dumps(params)[:-1] + ',"body":' + body + "}")
        sql = wq.webhook_intake_batch.for_driver("postgresql")
        args = {"rows": "[" + ",".join(rows) + "]", "queue": queue, "kind": WEBHOOK_KIND,
                "max_attempts": max_attempts, "now": self.db.now_param()}
        epoch = self.db.outage.epoch
        conn = await session.connection()
        try:
            cur = await conn.execute(sql, args)
            returned = await cur.fetchall()
        except self.db.dbapi.Error as exc:
            raise await session.failed(exc, conn) from exc
        session.succeeded(epoch)
        stored = {(psp, event_id): (int(webhook_id), int(job_id))
                  for psp, event_id, webhook_id, job_id, _woken in returned}
        out: list[list[StoredEvent]] = []
        for events in requests:
            results = []
            for e in events:
                ids = stored.pop((e.psp, e.event_id), None)  # popped: a second copy is the redelivery
                results.append(StoredEvent(e.event_id, stored=ids is not None, webhook_id=ids[0] if ids else None,
                                      job_id=ids[1] if ids else None))
            out.append(results)
        return out

    def get(self, webhook_id: int, conn: sa.Connection | None = None) -> WebhookRecord | None:
        if conn is None:
            with self.db.begin() as own:
                return self.get(webhook_id, own)
        row = conn.execute(self._q(wq.webhook_get), {"id": webhook_id}).first()
        return self._record(row) if row else None

    def mark(self, conn: sa.Connection, webhook_id: int, state: WebhookState, *, payment_id: int | None) -> bool:
        """How applying the event ended, once (compare-and-set on ``received``); inside the job's finish."""
        return conn.execute(self._q(wq.webhook_mark_if_received), {
            "id": webhook_id, "state": str(state), "payment_id": payment_id, "now": self.db.now_param()}).first() \
            is not None

    def get_many_to_apply(self, conn: sa.Connection, ids: Sequence[int]) -> dict[int, WebhookRecord]:
        """Events by id for the jobs applying them, inside the caller's transaction; ``body`` is not read (None)."""
        if not ids:
            return {}
        rows = self.db.run_in(conn, wq.webhook_get_many_to_apply, {"ids": list(ids)})
        return {r.id: r for r in (self._record_of(dict(zip(_COLUMN_NAMES, row, strict=True))) for row in rows)}

    def mark_many(self, conn: sa.Connection, marks: Sequence[tuple[int, WebhookState, int | None]]) -> set[int]:
        """``mark`` for many events at once, each ``(id, state, payment_id)``; returns the ids marked."""
        if not marks:
            return set()
        rows = _dumps([{"id": i, "state": str(state), "payment_id": pid} for i, state, pid in marks])
        return {int(webhook_id) for (webhook_id,) in self.db.run_in(conn, wq.webhook_mark_many_if_received,
                                                                    {"rows": rows, "now": self.db.now_param()})}

    def counts(self, *, since: datetime) -> list[dict[str, Any]]:
        with self.db.begin() as conn:
            rows = conn.execute(self._q(wq.webhook_counts), {"since": self.db.to_db(since)}).all()
        return [{"psp": psp, "state": state, "events": int(n)} for psp, state, n in rows]

    def unknown_between(self, *, psp: str, since: datetime, until: datetime) -> list[WebhookRecord]:
        with self.db.begin() as conn:
            rows = conn.execute(self._q(wq.webhook_unknown_between), {
                "psp": psp, "since": self.db.to_db(since), "until": self.db.to_db(until)}).all()
        return [self._record(r) for r in rows]

    # --- plumbing ----------------------------------------------------------------------------------------

    def _params(self, e: WebhookEvent) -> dict[str, Any]:
        news = e.news
        kind = None if news is None else news_kind(news)
        body = _dumps(redact_value(e.body))
        if len(body) > BODY_MAX_CHARS:
            body = json.dumps({"truncated": True, "chars": len(body)})
        reason = getattr(news, "reason", None)
        return redact_row({"psp": e.psp, "event_id": e.event_id, "event_type": e.event_type,
                           "occurred_at": self.db.to_db(e.occurred_at) if e.occurred_at else None,
                           "psp_reference": news.psp_reference if news else None,
                           "merchant_reference": news.merchant_reference if news else None,
                           "merchant_account": e.merchant_account, "amount": news.amount if news else None,
                           "currency": news.currency if news else None, "news": kind,
                           "psp_status": news.raw_status if news else None, "reason": reason, "report": e.report,
                           "body": body, "state": str(WebhookState.RECEIVED), "now": self.db.now_param(),
                           "movement_reference": _movement(news),
                           "due_by": self.db.to_db(news.due_by) if isinstance(news, DisputeNews) and news.due_by
                           else None,
                           "fee": news.fee if isinstance(news, DisputeNews) else None},
                          keep=_VERBATIM)

    def _record(self, r: Any) -> WebhookRecord:
        """A ``WebhookRecord`` from a row of ``WEBHOOK_COLUMNS``, read by name."""
        return self._record_of(r._mapping)

    def _record_of(self, m: Any) -> WebhookRecord:
        """A ``WebhookRecord`` from a mapping of ``WEBHOOK_COLUMNS``' names to their values."""
        t = self.db.from_db
        return WebhookRecord(id=int(m["id"]), psp=m["psp"], event_id=m["event_id"], event_type=m["event_type"],
                             occurred_at=t(m["occurred_at"]), received_at=t(m["received_at"]),  # type: ignore[arg-type]
                             psp_reference=m["psp_reference"], merchant_reference=m["merchant_reference"],
                             merchant_account=m["merchant_account"],
                             amount=int(m["amount"]) if m["amount"] is not None else None, currency=m["currency"],
                             news=m["news"], psp_status=m["psp_status"], reason=m["reason"], report=m["report"],
                             body=json_from_db(m["body"]), state=WebhookState(m["state"]),
                             payment_id=m["payment_id"], applied_at=t(m["applied_at"]),
                             movement_reference=m["movement_reference"], due_by=t(m["due_by"]),
                             fee=int(m["fee"]) if m["fee"] is not None else None)

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]


def _dumps(value: Any) -> str:
    """Compact JSON: orjson, a fifth of the stdlib's time for an event body (the intake's hot path)."""
    return orjson.dumps(value, default=str).decode()


def _movement(news: object) -> str | None:
    """The PSP's id of the movement an event is about (a refund's, a dispute's), stored apart from the payment's."""
    if isinstance(news, RefundNews):
        return news.refund_id
    if isinstance(news, DisputeNews):
        return news.dispute_id
    if isinstance(news, ModificationNews):
        return news.modification_id
    return None
