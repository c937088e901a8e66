"""RefundStore: refunds, the only code that executes ``recon.db.refund_queries``: their creation (the payment's
bound, the refund, its creation event and its refund job in one transaction), lookups, compare-and-set
transitions and notes with their audit events, and the sweep's and the stats' reads.

The storage boundary (``recon.redact``): a new refund's texts (``create``), a transition's reasons
(``_transition_row``), every audit event (``_event``). A PSP refund id is stored exactly as the PSP gave it, as a
PSP reference is (``recon.db.payment_store``), and is never replaced once stored.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from recon.db import refund_queries as rq
from recon.db.database import Database, json_from_db
from recon.db.jobs_store import JobStore
from recon.errors import PspReferenceConflict, RefundRefused, StoreError
from recon.redact import grouped, redact_row
from recon.refund_rows import (
    NewRefund,
    Refund,
    RefundEvent,
    RefundSource,
    RefundTransition,
    check_refund_transition,
)
from recon.rows import EnqueueRow, PaymentStatus

#: the refund job's kind (``recon.payments.refund.RefundHandler.kind``): created here, with its refund
REFUND_KIND = "refund"
#: the columns a new refund's row keeps exactly: its idempotency key, made here (``recon.redact.grouped``), sent
#: to the PSP on every attempt; redacting it would have masked a Luhn-valid run of its hex digits
KEPT = ("idempotency_key",)


def refund_key(refund_id: int) -> str:
    """The unique key of a refund's refund job."""
    return f"refund:{refund_id}"


class RefundStore:
    def __init__(self, db: Database) -> None:
        self.db = db

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
                                   unique_key=refund_key(i), tenant=None) for i in ids]
                job_ids = JobStore(self.db).enqueue(rows, max_depth=max_depth or {}, conn=conn)
                for r, i, j in zip(refunds, ids, job_ids, strict=True):  # the creation event names the job
                    self._event(conn, refund_id=i, from_status=None, to_status=PaymentStatus.CREATED,
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

    def existing_references(self, refs: Sequence[str]) -> set[str]:
        found: set[str] = set()
        with self.db.begin() as conn:
            for start in range(0, len(refs), 1000):
                found.update(ref for (ref,) in conn.execute(self._q(rq.refund_existing_references),
                                                        {"refs": list(refs[start:start + 1000])}))
        return found

    # --- reads ---------------------------------------------------------------------------------------------

    def get(self, refund_id: int, conn: sa.Connection | None = None) -> Refund | None:
        if conn is not None:
            row = conn.execute(self._q(rq.refund_get), {"id": refund_id}).first()
            return self._refund(row) if row else None
        with self.db.begin() as own:
            return self.get(refund_id, own)

    def by_reference(self, ref: str, conn: sa.Connection | None = None) -> Refund | None:
        if conn is not None:
            row = conn.execute(self._q(rq.refund_get_by_reference), {"ref": ref}).first()
            return self._refund(row) if row else None
        with self.db.begin() as own:
            return self.by_reference(ref, own)

    def by_psp_refund_id(self, conn: sa.Connection, *, psp: str, psp_refund_id: str) -> Refund | None:
        row = conn.execute(self._q(rq.refund_get_by_psp_refund_id), {"psp": psp, "psp_refund_id": psp_refund_id}
                           ).first()
        return self._refund(row) if row else None

    def for_payment(self, payment_id: int) -> list[Refund]:
        with self.db.begin() as conn:
            return [self._refund(r) for r in conn.execute(self._q(rq.refund_list_for_payment),
                                                          {"payment_id": payment_id})]

    def events(self, refund_id: int) -> list[RefundEvent]:
        with self.db.begin() as conn:
            rows = conn.execute(self._q(rq.refund_events_for), {"id": refund_id}).all()
        return [RefundEvent(id=int(m["id"]), refund_id=int(m["refund_id"]), from_status=m["from_status"],
                            to_status=m["to_status"], source=m["source"], at=self.db.from_db(m["at"]),  # type: ignore[arg-type]
                            job_id=m["job_id"], attempt=m["attempt"], details=json_from_db(m["details"]))
                for m in (r._mapping for r in rows)]

    def iter_stale(self, *, older_than: timedelta, psp: str | None = None, page: int = 1000) -> Iterator[Refund]:
        """Unfinished refunds not changed for ``older_than``, oldest id first, a page per transaction."""
        cutoff = self.db.to_db(self.db.clock.now() - older_than)
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(rq.refund_list_stale),
                                    {"cutoff": cutoff, "psp": psp, "after_id": after, "n": page}).all()
            yield from (self._refund(r) for r in rows)
            if len(rows) < page:
                return
            after = int(rows[-1]._mapping["id"])

    def refund_job_unfinished(self, refund_id: int, conn: sa.Connection) -> bool:
        """Is the refund's refund job unfinished (running, or waiting to retry): may it still send?"""
        return conn.execute(self._q(rq.refund_job_unfinished), {"key": refund_key(refund_id)}).first() is not None

    def counts(self) -> list[dict[str, Any]]:
        """Refunds per status and currency: how many, and their sum in minor units."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(rq.refund_counts)).all()
        return [{"status": m["status"], "currency": m["currency"], "count": int(m["n"]), "amount": int(m["amount"])}
                for m in (r._mapping for r in rows)]

    # --- changes -------------------------------------------------------------------------------------------

    def apply(self, conn: sa.Connection, t: RefundTransition) -> bool:
        """Compare-and-set inside the caller's transaction, with its audit event; False when the status was no
        longer ``from_status``. A move to failed gives the refund's amount back to the payment's captured amount
        in the same transaction. Raises IllegalTransition for a move the refund state machine forbids, and
        PspReferenceConflict (nothing written) when ``t.psp_refund_id`` is not the PSP refund id stored."""
        check_refund_transition(t.from_status, t.to_status)
        row = conn.execute(self._q(rq.refund_transition_if_status), {**_transition_row(t), "now": self.db.now_param()}
                           ).first()
        if row is None:
            current = self.get(t.refund_id, conn)
            if (current is not None and current.status is t.from_status and current.psp_refund_id
                    and t.psp_refund_id and current.psp_refund_id != t.psp_refund_id):
                raise PspReferenceConflict(
                    f"refund {t.refund_id}: a {t.source} transition to {t.to_status} names PSP refund id "
                    f"{t.psp_refund_id!r}, the refund holds {current.psp_refund_id!r}; never replaced: not moved")
            return False
        m = row._mapping
        if t.to_status is PaymentStatus.FAILED:
            conn.execute(self._q(rq.payment_release_refund), {"payment_id": m["payment_id"], "amount": m["amount"]})
        self._event(conn, refund_id=t.refund_id, from_status=t.from_status, to_status=t.to_status, source=t.source,
                    job_id=t.job_id, attempt=t.attempt, details=t.details)
        return True

    def note(self, conn: sa.Connection, *, refund_id: int, status: PaymentStatus, source: RefundSource,
             details: dict[str, Any], job_id: int | None = None, attempt: int | None = None) -> bool:
        """An audit event without a status change; compare-and-set on the status (False: it changed)."""
        if conn.execute(self._q(rq.refund_touch_if_status), {"id": refund_id, "status": str(status),
                                                             "now": self.db.now_param()}).first() is None:
            return False
        self._event(conn, refund_id=refund_id, from_status=status, to_status=status, source=source, job_id=job_id,
                    attempt=attempt, details=details)
        return True

    def remember_psp_refund_id(self, conn: sa.Connection, *, refund_id: int, status: PaymentStatus,
                               psp_refund_id: str) -> bool:
        """Store the PSP's refund id the moment it is known, where none is stored (never replaced)."""
        return conn.execute(self._q(rq.refund_set_psp_refund_id_if_null),
                            {"id": refund_id, "status": str(status), "psp_refund_id": psp_refund_id,
                             "now": self.db.now_param()}).first() is not None

    def mark_sent(self, conn: sa.Connection, *, refund_id: int) -> PaymentStatus | None:
        """Lock the refund row if it is still unfinished (its status; stamps ``sent_at``), else None."""
        row = conn.execute(self._q(rq.refund_mark_sent_if_unfinished),
                           {"id": refund_id, "now": self.db.now_param()}).first()
        return PaymentStatus(row._mapping["status"]) if row else None

    # --- plumbing ------------------------------------------------------------------------------------------

    def _event(self, conn: sa.Connection, *, refund_id: int, from_status: PaymentStatus | None,
               to_status: PaymentStatus, source: RefundSource, job_id: int | None, attempt: int | None,
               details: dict[str, Any] | None) -> None:
        # the storage boundary of PSP evidence and operators' notes: details quote PSP texts
        row = redact_row({"details": details})
        conn.execute(self._q(rq.refund_event_insert), {
            "refund_id": refund_id, "from_status": None if from_status is None else str(from_status),
            "to_status": str(to_status), "source": str(source), "job_id": job_id, "attempt": attempt,
            "details": None if row["details"] is None else json.dumps(row["details"]), "now": self.db.now_param()})

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]

    def _refund(self, r: Any) -> Refund:
        """A ``Refund`` from a row of ``REFUND_COLUMNS``, read by name."""
        m, t = r._mapping, self.db.from_db
        return Refund(id=int(m["id"]), payment_id=int(m["payment_id"]), refund_reference=m["refund_reference"],
                      amount=int(m["amount"]), currency=m["currency"], psp=m["psp"], status=PaymentStatus(m["status"]),
                      idempotency_key=m["idempotency_key"], requested_by=m["requested_by"],
                      created_at=t(m["created_at"]), updated_at=t(m["updated_at"]),  # type: ignore[arg-type]
                      reason=m["reason"], psp_refund_id=m["psp_refund_id"], failure_reason=m["failure_reason"],
                      review_reason=m["review_reason"], sent_at=t(m["sent_at"]))


def _transition_row(t: RefundTransition) -> dict[str, Any]:
    """A transition's parameters at the storage boundary: its reasons redacted; the PSP's refund id exactly."""
    return redact_row({"id": t.refund_id, "from_status": str(t.from_status), "to_status": str(t.to_status),
                       "psp_refund_id": t.psp_refund_id, "failure_reason": t.failure_reason,
                       "review_reason": t.review_reason}, keep=("psp_refund_id",))
