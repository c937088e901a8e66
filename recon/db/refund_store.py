"""RefundStore: refunds, the only code that executes ``recon.db.refund_queries``: their creation (the payment's
bound, the refund, its creation event and its refund job in one transaction), what a refund's transition does to
its payment (a failed refund gives its amount back) and the stats' read. Lookups, compare-and-set transitions,
notes with their audit events and the sweep's reads are every movement's (``recon.db.movement_store``).

The storage boundary (``recon.redact``): a new refund's texts (``_create_one``); the rest as
``recon.db.movement_store`` says.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from recon.db import refund_queries as rq
from recon.db.jobs_store import JobStore
from recon.db.movement_queries import movement_queries
from recon.db.movement_store import MovementStore
from recon.errors import RefundRefused, StoreError
from recon.redact import grouped, redact_row
from recon.refund_rows import REFUND, NewRefund, Refund, RefundSource, RefundTransition
from recon.rows import EnqueueRow, PaymentStatus

#: the refund job's kind (``recon.payments.refund.RefundHandler.kind``): created here, with its refund
REFUND_KIND = "refund"
#: the columns a new refund's row keeps exactly: its idempotency key, made here (``recon.redact.grouped``), sent
#: to the PSP on every attempt; redacting it would have masked a Luhn-valid run of its hex digits
KEPT = ("idempotency_key",)


class RefundStore(MovementStore[Refund, RefundTransition]):
    kind = REFUND
    queries = movement_queries(REFUND)

    # --- creation ------------------------------------------------------------------------------------------

    def create(self, refunds: Sequence[NewRefund], *, queue: str, max_attempts: int = 12,
               max_depth: dict[str, int] | None = None) -> list[int]:
        """Insert ``refunds`` (status ``created``), each reserved against its payment's captured amount, with
        its creation event and its refund job on ``queue``, all in one transaction: all or nothing. Returns the
        ids in order.

        Raises RefundRefused naming the refund (nothing written) when a payment has not succeeded, holds no PSP
        reference, or has less captured left than the refund (the database decides, under concurrency:
        ``refund_queries``' bound), or when a refund reference is taken; QueueFull past ``max_depth``."""
        if not refunds:
            return []
        try:
            with self.db.begin() as conn:
                ids = [self._create_one(conn, r) for r in refunds]
                rows = [EnqueueRow(queue=queue, kind=REFUND_KIND, payload_json=json.dumps({"refund_id": i}),
                                   priority=0, run_at=None, delay=0.0, max_attempts=max_attempts,
                                   unique_key=REFUND.job_unique_key(i), tenant=None) for i in ids]
                job_ids = JobStore(self.db).enqueue(rows, max_depth=max_depth or {}, conn=conn)
                for r, i, j in zip(refunds, ids, job_ids, strict=True):  # the creation event names the job
                    self._event(conn, i, from_status=None, to_status=PaymentStatus.CREATED,
                                source=RefundSource.MANUAL, job_id=j, attempt=None,
                                details={"requested_by": r.requested_by, "reason": r.reason})
                return ids
        except StoreError as exc:
            if not isinstance(exc.__cause__, sa.exc.IntegrityError):
                raise
            taken = sorted(self.existing_references([r.refund_reference for r in refunds]))
            if not taken:
                raise
            raise RefundRefused(f"refund_reference {taken[0]!r} already exists (written by another writer "
                                "meanwhile); nothing written") from None

    def _create_one(self, conn: sa.Connection, r: NewRefund) -> int:
        reserved = conn.execute(self._q(rq.payment_reserve_refund),
                                {"payment_id": r.payment_id, "amount": r.amount}).first()
        if reserved is None:
            raise RefundRefused(self._refusal(conn, r))
        m = reserved._mapping
        row = redact_row({"payment_id": r.payment_id, "refund_reference": r.refund_reference, "amount": r.amount,
                          "currency": m["currency"], "reason": r.reason, "psp": m["psp"],
                          "idempotency_key": f"recon-refund-{grouped(secrets.token_hex(12))}",
                          "requested_by": r.requested_by, "now": self.db.now_param()}, keep=KEPT)
        return int(conn.execute(self._q(rq.refund_insert), row).scalar_one())

    def _refusal(self, conn: sa.Connection, r: NewRefund) -> str:
        """Why the payment's reserve matched no row, in words naming the refund."""
        room = conn.execute(self._q(rq.payment_refund_room), {"payment_id": r.payment_id}).first()
        what = f"refund {r.refund_reference!r}"
        if room is None:
            return f"{what}: payment {r.payment_id} does not exist; nothing written"
        m = room._mapping
        if m["status"] != "succeeded":
            return f"{what}: the payment is {m['status']}, only a succeeded payment is refunded; nothing written"
        if not m["psp_reference"]:
            return f"{what}: the payment holds no PSP reference to refund; nothing written"
        left = int(m["captured_amount"]) - int(m["refunded_amount"])
        return (f"{what}: {r.amount} is more than the {max(left, 0)} (minor units of {m['currency']}) the payment "
                "has captured and not refunded; nothing written")

    def counts(self) -> list[dict[str, Any]]:
        """Refunds per status and currency: how many, and their sum in minor units."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(rq.refund_counts)).all()
        return [{"status": m["status"], "currency": m["currency"], "count": int(m["n"]), "amount": int(m["amount"])}
                for m in (r._mapping for r in rows)]

    # --- what a refund says (recon.db.movement_store) --------------------------------------------------------

    def _effect(self, conn: sa.Connection, m: Mapping[Any, Any], t: RefundTransition) -> None:
        """A move to failed gives the refund's amount back to the payment's captured amount."""
        if t.to_status is PaymentStatus.FAILED:
            conn.execute(self._q(rq.payment_release_refund), {"payment_id": m["payment_id"], "amount": m["amount"]})

    def _row(self, m: Mapping[Any, Any]) -> Refund:
        t = self.db.from_db
        return Refund(id=int(m["id"]), payment_id=int(m["payment_id"]), refund_reference=m["refund_reference"],
                      amount=int(m["amount"]), currency=m["currency"], psp=m["psp"], status=PaymentStatus(m["status"]),
                      idempotency_key=m["idempotency_key"], requested_by=m["requested_by"],
                      created_at=t(m["created_at"]), updated_at=t(m["updated_at"]),  # type: ignore[arg-type]
                      reason=m["reason"], psp_refund_id=m["psp_refund_id"], failure_reason=m["failure_reason"],
                      review_reason=m["review_reason"], sent_at=t(m["sent_at"]))
