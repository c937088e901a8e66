"""DisputeStore: disputes, the only code that executes ``recon.db.dispute_queries``: what the PSP says about a
dispute recorded (created once, moved by the dispute state machine, else noted), and a payment's disputes.

The storage boundary (``recon.redact``): every text of a dispute and of its audit events (``record``); the PSP's
dispute id is its own identifier, stored exactly.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from recon.db import dispute_queries as dq
from recon.db.database import Database
from recon.dispute_rows import (
    DISPUTE_TRANSITIONS,
    Dispute,
    DisputeEvent,
    DisputeSource,
    DisputeStatus,
    DisputeWord,
    OpenDisputes,
)
from recon.redact import redact_evidence, redact_row


class DisputeStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def record(self, conn: sa.Connection, word: DisputeWord, *, details: dict[str, Any], job_id: int | None,
               attempt: int | None, source: DisputeSource = DisputeSource.WEBHOOK) -> tuple[Dispute, bool]:
        """What the PSP says about a dispute (a webhook's, or its listing's: ``source``), inside the caller's
        transaction: a dispute it tells of first is created (its event ``None -> status``); a known one moves when
        the state machine allows it, else the word is noted (``from = to``), the PSP's latest figures kept.
        Returns the dispute as stored now and whether its status changed."""
        row = redact_row({"payment_id": word.payment_id, "psp": word.psp, "psp_dispute_id": word.psp_dispute_id,
                          "status": str(word.status), "amount": word.amount, "currency": word.currency,
                          "fee": word.fee, "reason": word.reason, "psp_status": word.psp_status,
                          "evidence_due_by": self.db.to_db(word.evidence_due_by) if word.evidence_due_by else None,
                          "opened_at": self.db.to_db(word.opened_at), "now": self.db.now_param()},
                         keep=("psp_dispute_id",))
        made = conn.execute(self._q(dq.dispute_insert_if_new), row).first()
        current = self._get(conn, word.psp, word.psp_dispute_id)
        if made is not None:
            self._event(conn, current.id, None, current.status, details, job_id=job_id, attempt=attempt,
                        source=source)
            return current, True
        moved = word.status in DISPUTE_TRANSITIONS[current.status]
        # what the PSP says now (amount, fee, deadline, its own status word) is kept either way; the status moves
        # only by the state machine (an older word, or a redelivery, leaves it)
        target = word.status if moved else current.status
        conn.execute(self._q(dq.dispute_update_if_status),
                     {**row, "id": current.id, "from_status": str(current.status), "to_status": str(target)})
        self._event(conn, current.id, current.status, word.status if moved else current.status, details,
                    job_id=job_id, attempt=attempt, source=source)
        return self._get(conn, word.psp, word.psp_dispute_id), moved

    def for_payment(self, payment_id: int) -> list[Dispute]:
        with self.db.begin() as conn:
            return [self._dispute(r) for r in conn.execute(self._q(dq.dispute_list_for_payment),
                                                           {"payment_id": payment_id})]

    def known(self, conn: sa.Connection, psp: str, psp_dispute_id: str) -> Dispute | None:
        """The dispute ``psp`` knows as ``psp_dispute_id``, inside the caller's transaction (locked on PostgreSQL),
        or None."""
        row = conn.execute(self._q(dq.dispute_get_for_update), {"psp": psp, "psp_dispute_id": psp_dispute_id}).first()
        return None if row is None else self._dispute(row)

    def get(self, dispute_id: int) -> Dispute | None:
        with self.db.begin() as conn:
            row = conn.execute(self._q(dq.dispute_by_id), {"id": dispute_id}).first()
        return None if row is None else self._dispute(row)

    def by_psp_id(self, psp_dispute_id: str, *, psp: str | None = None) -> list[Dispute]:
        """The disputes with that PSP id (at most two: the same id at two PSPs asks for ``psp``)."""
        with self.db.begin() as conn:
            return [self._dispute(r) for r in conn.execute(self._q(dq.dispute_get),
                                                           {"psp_dispute_id": psp_dispute_id, "psp": psp})]

    def page(self, *, after_id: int = 0, limit: int = 100, status: DisputeStatus | None = None,
             psp: str | None = None) -> list[Dispute]:
        """Disputes by id after ``after_id``, at most ``limit``, filtered by status and PSP when given."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(dq.dispute_list_page), {"after_id": after_id, "n": limit, "psp": psp,
                                                                 "status": None if status is None else str(status)})
            return [self._dispute(r) for r in rows]

    def events(self, dispute_id: int) -> list[DisputeEvent]:
        """A dispute's audit trail, oldest first."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(dq.dispute_events_of), {"dispute_id": dispute_id}).mappings().all()
        return [DisputeEvent(from_status=DisputeStatus(r["from_status"]) if r["from_status"] else None,
                             to_status=DisputeStatus(r["to_status"]), source=r["source"],
                             at=self.db.from_db(r["at"]),  # type: ignore[arg-type]
                             details=json.loads(r["details"]) if isinstance(r["details"], str) else r["details"],
                             job_id=r["job_id"], attempt=r["attempt"]) for r in rows]

    def open_totals(self, *, soon: datetime) -> list[OpenDisputes]:
        """The open disputes per currency, with how many have their evidence due before ``soon``."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(dq.dispute_open_totals), {"soon": self.db.to_db(soon)}).mappings().all()
        return [OpenDisputes(currency=r["currency"] or "", count=int(r["n"]), withdrawn=int(r["withdrawn"]),
                             fees=int(r["fees"]), due_soon=int(r["due_soon"] or 0)) for r in rows]

    def listing_reach(self, psp: str) -> tuple[datetime | None, datetime | None]:
        """(where ``psp``'s dispute listing was last read to, when its oldest open dispute opened); None: never
        read, none open."""
        with self.db.begin() as conn:
            read = conn.execute(self._q(dq.dispute_read_get), {"psp": psp}).scalar()
            oldest = conn.execute(self._q(dq.dispute_oldest_open), {"psp": psp}).scalar()
        return self.db.from_db(read), self.db.from_db(oldest)

    def listing_read(self, psp: str, *, until: datetime) -> None:
        """``psp``'s listing was read without an error up to ``until``: the cursor moves there (never back)."""
        with self.db.begin() as conn:
            conn.execute(self._q(dq.dispute_read_advance),
                         {"psp": psp, "read_until": self.db.to_db(until), "now": self.db.now_param()})

    def status_counts(self) -> dict[str, dict[str, int]]:
        """PSP -> dispute status -> how many."""
        out: dict[str, dict[str, int]] = {}
        with self.db.begin() as conn:
            for r in conn.execute(self._q(dq.dispute_status_counts)).mappings():
                out.setdefault(r["psp"], {})[r["status"]] = int(r["n"])
        return out

    def _get(self, conn: sa.Connection, psp: str, psp_dispute_id: str) -> Dispute:
        row = conn.execute(self._q(dq.dispute_get_for_update), {"psp": psp, "psp_dispute_id": psp_dispute_id}).one()
        return self._dispute(row)

    def _event(self, conn: sa.Connection, dispute_id: int, from_status: DisputeStatus | None,
               to_status: DisputeStatus, details: dict[str, Any], *, job_id: int | None, attempt: int | None,
               source: DisputeSource) -> None:
        clean = redact_evidence(details)  # the PSP's identifiers in them exactly
        conn.execute(self._q(dq.dispute_event_insert), {
            "dispute_id": dispute_id, "from_status": None if from_status is None else str(from_status),
            "to_status": str(to_status), "source": str(source), "job_id": job_id, "attempt": attempt,
            "details": json.dumps(clean), "now": self.db.now_param()})

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]

    def _dispute(self, r: Any) -> Dispute:
        m, t = r._mapping, self.db.from_db
        return Dispute(id=int(m["id"]), payment_id=int(m["payment_id"]), psp=m["psp"],
                       psp_dispute_id=m["psp_dispute_id"], status=DisputeStatus(m["status"]),
                       opened_at=t(m["opened_at"]), updated_at=t(m["updated_at"]),  # type: ignore[arg-type]
                       amount=int(m["amount"]) if m["amount"] is not None else None, currency=m["currency"],
                       fee=int(m["fee"]) if m["fee"] is not None else None, reason=m["reason"],
                       psp_status=m["psp_status"], evidence_due_by=t(m["evidence_due_by"]))
