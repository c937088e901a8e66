"""DisputeStore: disputes, the only code that executes ``recon.db.dispute_queries``: what the PSP says about a
dispute recorded (created once, moved by the dispute state machine, else noted), and a payment's disputes.

The storage boundary (``recon.redact``): every text of a dispute and of its audit events (``record``); the PSP's
dispute id is its own identifier, stored exactly.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from recon.db import dispute_queries as dq
from recon.db.database import Database
from recon.dispute_rows import DISPUTE_TRANSITIONS, Dispute, DisputeStatus, DisputeWord
from recon.redact import redact_row


class DisputeStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def record(self, conn: sa.Connection, word: DisputeWord, *, details: dict[str, Any], job_id: int | None,
               attempt: int | None) -> tuple[Dispute, bool]:
        """What the PSP says about a dispute, inside the caller's transaction: a dispute it tells of first is
        created (its event ``None -> status``); a known one moves when the state machine allows it, else the word
        is noted (``from = to``), the PSP's latest figures kept. Returns the dispute as stored now and whether its
        status changed."""
        row = redact_row({"payment_id": word.payment_id, "psp": word.psp, "psp_dispute_id": word.psp_dispute_id,
                          "status": str(word.status), "amount": word.amount, "currency": word.currency,
                          "fee": word.fee, "reason": word.reason, "psp_status": word.psp_status,
                          "evidence_due_by": self.db.to_db(word.evidence_due_by) if word.evidence_due_by else None,
                          "now": self.db.now_param()}, keep=("psp_dispute_id",))
        made = conn.execute(self._q(dq.dispute_insert_if_new), row).first()
        current = self._get(conn, word.psp, word.psp_dispute_id)
        if made is not None:
            self._event(conn, current.id, None, current.status, details, job_id=job_id, attempt=attempt)
            return current, True
        moved = word.status in DISPUTE_TRANSITIONS[current.status]
        # what the PSP says now (amount, fee, deadline, its own status word) is kept either way; the status moves
        # only by the state machine (an older word, or a redelivery, leaves it)
        target = word.status if moved else current.status
        conn.execute(self._q(dq.dispute_update_if_status),
                     {**row, "id": current.id, "from_status": str(current.status), "to_status": str(target)})
        self._event(conn, current.id, current.status, word.status if moved else current.status, details,
                    job_id=job_id, attempt=attempt)
        return self._get(conn, word.psp, word.psp_dispute_id), moved

    def for_payment(self, payment_id: int) -> list[Dispute]:
        with self.db.begin() as conn:
            return [self._dispute(r) for r in conn.execute(self._q(dq.dispute_list_for_payment),
                                                           {"payment_id": payment_id})]

    def _get(self, conn: sa.Connection, psp: str, psp_dispute_id: str) -> Dispute:
        row = conn.execute(self._q(dq.dispute_get_for_update), {"psp": psp, "psp_dispute_id": psp_dispute_id}).one()
        return self._dispute(row)

    def _event(self, conn: sa.Connection, dispute_id: int, from_status: DisputeStatus | None,
               to_status: DisputeStatus, details: dict[str, Any], *, job_id: int | None, attempt: int | None) -> None:
        clean = redact_row({"details": details})["details"]
        conn.execute(self._q(dq.dispute_event_insert), {
            "dispute_id": dispute_id, "from_status": None if from_status is None else str(from_status),
            "to_status": str(to_status), "source": "webhook", "job_id": job_id, "attempt": attempt,
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
