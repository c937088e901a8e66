"""ModificationStore: captures and cancels of authorised payments, the only code that executes
``recon.db.modification_queries``: creation (the modification, its claim on the payment's authorisation, its
creation event and its job in one transaction), lookups, compare-and-set transitions with their effect on the
payment (``recon.modification_rows``), notes with their audit events, and the sweep's and the stats' reads.

The storage boundary (``recon.redact``): a new modification's texts (``_create_one``), a transition's reasons
(``_transition_row``), every audit event (``_event``). A PSP modification id is stored exactly as the PSP gave
it, as a PSP reference is, and is never replaced once stored.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from recon.db import modification_queries as mq
from recon.db.database import Database, json_from_db
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.errors import ModificationRefused, PspReferenceConflict, StoreError
from recon.modification_rows import (
    CAPTURE,
    Modification,
    ModificationEvent,
    ModificationSource,
    ModificationTransition,
    NewModification,
    check_modification_transition,
)
from recon.redact import redact_row
from recon.rows import EnqueueRow, EventSource, PaymentStatus, Transition


def modification_key(modification_id: int) -> str:
    """The unique key of a modification's own job (kind ``capture`` or ``cancel``)."""
    return f"modification:{modification_id}"


class ModificationStore:
    def __init__(self, db: Database, payments: PaymentStore | None = None) -> None:
        self.db = db
        self.payments = payments or PaymentStore(db)

    # --- creation ------------------------------------------------------------------------------------------

    def create(self, new: NewModification, *, queue: str, max_attempts: int = 12,
               max_depth: dict[str, int] | None = None) -> int:
        """Insert ``new`` (status ``created``) with its claim on the payment's authorisation, its creation event
        and its job (kind ``new.kind``) on ``queue``, in one transaction: all or nothing. Returns its id.

        Raises ModificationRefused naming it (nothing written) when the payment is not an authorised
        manual-capture payment holding a PSP reference, when a capture is more than the authorised amount, when a
        capture or cancel not failed exists already (one per payment; the database decides, under concurrency:
        ``modification_queries``' bound), or when the reference is taken; QueueFull past ``max_depth``."""
        try:
            with self.db.begin() as conn:
                mid = self._create_one(conn, new)
                row = EnqueueRow(queue=queue, kind=new.kind, payload_json=json.dumps({"modification_id": mid}),
                                 priority=0, run_at=None, delay=0.0, max_attempts=max_attempts,
                                 unique_key=modification_key(mid), tenant=None)
                [job_id] = JobStore(self.db).enqueue([row], max_depth=max_depth or {}, conn=conn)
                self._event(conn, modification_id=mid, from_status=None, to_status=PaymentStatus.CREATED,
                            source=ModificationSource.MANUAL, job_id=job_id, attempt=None,
                            details={"requested_by": new.requested_by, "kind": new.kind})
                return mid
        except StoreError as exc:
            if not isinstance(exc.__cause__, sa.exc.IntegrityError):
                raise
            if not self.existing_references([new.modification_reference]):
                raise
            raise ModificationRefused(f"reference {new.modification_reference!r} already exists (written by "
                                      "another writer meanwhile); nothing written") from None

    def _create_one(self, conn: sa.Connection, new: NewModification) -> int:
        payment = self.payments.get(new.payment_id, conn)
        if new.kind == CAPTURE:
            amount = new.amount if new.amount is not None else (
                payment.amount - payment.authorisation_claimed if payment else 0)
            claimed = conn.execute(self._q(mq.payment_claim_capture),
                                   {"payment_id": new.payment_id, "amount": amount}).first() if amount > 0 else None
        else:
            claimed = conn.execute(self._q(mq.payment_claim_cancel), {"payment_id": new.payment_id}).first()
            amount = int(claimed._mapping["amount"]) if claimed is not None else 0
        if claimed is None:
            raise ModificationRefused(self._refusal(conn, new, amount))
        m = claimed._mapping
        row = redact_row({"payment_id": new.payment_id, "kind": new.kind,
                          "modification_reference": new.modification_reference, "amount": amount,
                          "currency": m["currency"], "psp": m["psp"],
                          "idempotency_key": f"recon-{new.kind}-{secrets.token_hex(12)}",
                          "requested_by": new.requested_by, "now": self.db.now_param()})
        return int(conn.execute(self._q(mq.modification_insert), row).scalar_one())

    def _refusal(self, conn: sa.Connection, new: NewModification, amount: int) -> str:
        """Why the payment's claim matched no row, in words naming the modification."""
        room = conn.execute(self._q(mq.payment_claim_room), {"payment_id": new.payment_id}).first()
        what = f"{new.kind} {new.modification_reference!r}"
        if room is None:
            return f"{what}: payment {new.payment_id} does not exist; nothing written"
        m = room._mapping
        if m["capture_mode"] != "manual":
            return f"{what}: the payment is captured automatically, not authorised for a capture; nothing written"
        if m["status"] != "authorised":
            return f"{what}: the payment is {m['status']}, only an authorised payment is {new.kind}ed; nothing written"
        if not m["psp_reference"]:
            return f"{what}: the payment holds no PSP reference; nothing written"
        if int(m["authorisation_claimed"]):
            return f"{what}: a capture or cancel of the payment is already under way or done; nothing written"
        return (f"{what}: {amount} is more than the {int(m['amount'])} (minor units of {m['currency']}) the payment "
                "authorised; nothing written")

    def existing_references(self, refs: Sequence[str]) -> set[str]:
        with self.db.begin() as conn:
            return {ref for (ref,) in conn.execute(self._q(mq.modification_existing_references), {"refs": list(refs)})}

    # --- reads ---------------------------------------------------------------------------------------------

    def get(self, modification_id: int, conn: sa.Connection | None = None) -> Modification | None:
        if conn is not None:
            row = conn.execute(self._q(mq.modification_get), {"id": modification_id}).first()
            return self._modification(row) if row else None
        with self.db.begin() as own:
            return self.get(modification_id, own)

    def by_reference(self, ref: str, conn: sa.Connection | None = None) -> Modification | None:
        if conn is not None:
            row = conn.execute(self._q(mq.modification_get_by_reference), {"ref": ref}).first()
            return self._modification(row) if row else None
        with self.db.begin() as own:
            return self.by_reference(ref, own)

    def by_psp_id(self, conn: sa.Connection, *, psp: str, psp_id: str) -> Modification | None:
        row = conn.execute(self._q(mq.modification_get_by_psp_id), {"psp": psp, "psp_id": psp_id}).first()
        return self._modification(row) if row else None

    def for_payment(self, payment_id: int, conn: sa.Connection | None = None) -> list[Modification]:
        if conn is not None:
            return [self._modification(r) for r in conn.execute(self._q(mq.modification_list_for_payment),
                                                                {"payment_id": payment_id})]
        with self.db.begin() as own:
            return self.for_payment(payment_id, own)

    def events(self, modification_id: int) -> list[ModificationEvent]:
        with self.db.begin() as conn:
            rows = conn.execute(self._q(mq.modification_events_for), {"id": modification_id}).all()
        return [ModificationEvent(id=int(m["id"]), modification_id=int(m["modification_id"]),
                                  from_status=m["from_status"], to_status=m["to_status"], source=m["source"],
                                  at=self.db.from_db(m["at"]), job_id=m["job_id"],  # type: ignore[arg-type]
                                  attempt=m["attempt"], details=json_from_db(m["details"]))
                for m in (r._mapping for r in rows)]

    def iter_stale(self, *, older_than: timedelta, psp: str | None = None, page: int = 1000) -> Iterator[Modification]:
        """Unfinished captures and cancels not changed for ``older_than``, oldest id first, a page per
        transaction."""
        cutoff = self.db.to_db(self.db.clock.now() - older_than)
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(mq.modification_list_stale),
                                    {"cutoff": cutoff, "psp": psp, "after_id": after, "n": page}).all()
            yield from (self._modification(r) for r in rows)
            if len(rows) < page:
                return
            after = int(rows[-1]._mapping["id"])

    def iter_authorised_before(self, *, psp: str, cutoff: datetime, page: int = 1000) -> Iterator[dict[str, Any]]:
        """Authorised payments of ``psp`` authorised before ``cutoff``: id, merchant_reference, amount, currency,
        authorised_at (aware UTC)."""
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(mq.payment_list_authorised),
                                    {"psp": psp, "cutoff": self.db.to_db(cutoff), "after_id": after, "n": page}).all()
            for r in rows:
                m = r._mapping
                yield {"id": int(m["id"]), "merchant_reference": m["merchant_reference"], "psp": m["psp"],
                       "amount": int(m["amount"]), "currency": m["currency"],
                       "authorised_at": self.db.from_db(m["authorised_at"])}
            if len(rows) < page:
                return
            after = int(rows[-1]._mapping["id"])

    def job_unfinished(self, modification_id: int, conn: sa.Connection) -> bool:
        """Is the modification's own job unfinished (running, or waiting to retry): may it still send?"""
        return conn.execute(self._q(mq.modification_job_unfinished),
                            {"key": modification_key(modification_id)}).first() is not None

    def counts(self) -> list[dict[str, Any]]:
        """Captures and cancels per kind, status and currency: how many, and their sum in minor units."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(mq.modification_counts)).all()
        return [{"kind": m["kind"], "status": m["status"], "currency": m["currency"], "count": int(m["n"]),
                 "amount": int(m["amount"])} for m in (r._mapping for r in rows)]

    def authorised_totals(self) -> list[dict[str, Any]]:
        """Authorised payments not captured, per currency: how many, and their sum in minor units."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(mq.payment_authorised_totals)).all()
        return [{"currency": m["currency"], "count": int(m["n"]), "amount": int(m["amount"])}
                for m in (r._mapping for r in rows)]

    # --- changes -------------------------------------------------------------------------------------------

    def apply(self, conn: sa.Connection, t: ModificationTransition) -> bool:
        """Compare-and-set inside the caller's transaction, with its audit event and its effect on the payment
        (``recon.modification_rows``' table), all in the caller's transaction; False when the status was no
        longer ``from_status``. Raises IllegalTransition for a move the state machine forbids, and
        PspReferenceConflict (nothing written) when ``t.psp_modification_id`` is not the PSP id stored."""
        check_modification_transition(t.from_status, t.to_status)
        row = conn.execute(self._q(mq.modification_transition_if_status),
                           {**_transition_row(t), "now": self.db.now_param()}).first()
        if row is None:
            current = self.get(t.modification_id, conn)
            if (current is not None and current.status is t.from_status and current.psp_modification_id
                    and t.psp_modification_id and current.psp_modification_id != t.psp_modification_id):
                raise PspReferenceConflict(
                    f"modification {t.modification_id}: a {t.source} transition to {t.to_status} names PSP id "
                    f"{t.psp_modification_id!r}, it holds {current.psp_modification_id!r}; never replaced: not moved")
            return False
        self._event(conn, modification_id=t.modification_id, from_status=t.from_status, to_status=t.to_status,
                    source=t.source, job_id=t.job_id, attempt=t.attempt, details=t.details)
        self._effect(conn, dict(row._mapping), t)
        return True

    def _effect(self, conn: sa.Connection, m: dict[str, Any], t: ModificationTransition) -> None:
        """What the modification's new status does to its payment, in the same transaction."""
        if t.to_status is PaymentStatus.FAILED:
            conn.execute(self._q(mq.payment_release_claim), {"payment_id": m["payment_id"], "amount": m["amount"]})
            return
        source = _PAYMENT_SOURCE[t.source]
        if t.to_status is PaymentStatus.NEEDS_REVIEW and t.from_status in (PaymentStatus.SUCCEEDED,
                                                                          PaymentStatus.FAILED):
            self._review_payment(conn, m, t, source)
            return
        if t.to_status is not PaymentStatus.SUCCEEDED:
            return
        what = {"modification": m["modification_reference"], "kind": m["kind"], "by": m["requested_by"]}
        if m["kind"] == CAPTURE:
            captured = t.captured if t.captured is not None else int(m["amount"])
            if self.payments.apply(conn, Transition(m["payment_id"], PaymentStatus.AUTHORISED,
                                                    PaymentStatus.SUCCEEDED, source, job_id=t.job_id,
                                                    attempt=t.attempt, details={**what, "captured": captured})):
                conn.execute(self._q(mq.payment_set_captured), {"payment_id": m["payment_id"], "captured": captured})
            return
        self.payments.apply(conn, Transition(m["payment_id"], PaymentStatus.AUTHORISED, PaymentStatus.FAILED, source,
                                             job_id=t.job_id, attempt=t.attempt, details=what,
                                             failure_reason=f"cancelled: {m['modification_reference']} by "
                                                            f"{m['requested_by']}"))

    def _review_payment(self, conn: sa.Connection, m: dict[str, Any], t: ModificationTransition,
                        source: EventSource) -> None:
        """A final modification the PSP contradicts (a capture it undid, a failed capture it says succeeded): the
        money recon counted for its payment may not be what moved, so the payment goes to review with the same
        reason and evidence, from whatever status it holds (one in review already keeps it)."""
        payment = self.payments.get(int(m["payment_id"]), conn)
        if payment is None or payment.status is PaymentStatus.NEEDS_REVIEW:
            return
        self.payments.apply(conn, Transition(
            payment.id, payment.status, PaymentStatus.NEEDS_REVIEW, source,
            details={**(t.details or {}), "modification": m["modification_reference"]}, job_id=t.job_id,
            attempt=t.attempt, review_reason=t.review_reason))

    def note(self, conn: sa.Connection, *, modification_id: int, status: PaymentStatus, source: ModificationSource,
             details: dict[str, Any], job_id: int | None = None, attempt: int | None = None) -> bool:
        """An audit event without a status change; compare-and-set on the status (False: it changed)."""
        if conn.execute(self._q(mq.modification_touch_if_status),
                        {"id": modification_id, "status": str(status), "now": self.db.now_param()}).first() is None:
            return False
        self._event(conn, modification_id=modification_id, from_status=status, to_status=status, source=source,
                    job_id=job_id, attempt=attempt, details=details)
        return True

    def remember_psp_id(self, conn: sa.Connection, *, modification_id: int, status: PaymentStatus,
                        psp_id: str) -> bool:
        """Store the PSP's id of the modification the moment it is known, where none is stored (never replaced)."""
        return conn.execute(self._q(mq.modification_set_psp_id_if_null),
                            {"id": modification_id, "status": str(status), "psp_id": psp_id,
                             "now": self.db.now_param()}).first() is not None

    def mark_sent(self, conn: sa.Connection, *, modification_id: int) -> PaymentStatus | None:
        """Lock the row if it is still unfinished (its status; stamps ``sent_at``), else None."""
        row = conn.execute(self._q(mq.modification_mark_sent_if_unfinished),
                           {"id": modification_id, "now": self.db.now_param()}).first()
        return PaymentStatus(row._mapping["status"]) if row else None

    # --- plumbing ------------------------------------------------------------------------------------------

    def _event(self, conn: sa.Connection, *, modification_id: int, from_status: PaymentStatus | None,
               to_status: PaymentStatus, source: ModificationSource, job_id: int | None, attempt: int | None,
               details: dict[str, Any] | None) -> None:
        # the storage boundary of PSP evidence and operators' notes: details quote PSP texts
        row = redact_row({"details": details})
        conn.execute(self._q(mq.modification_event_insert), {
            "modification_id": modification_id, "from_status": None if from_status is None else str(from_status),
            "to_status": str(to_status), "source": str(source), "job_id": job_id, "attempt": attempt,
            "details": None if row["details"] is None else json.dumps(row["details"]), "now": self.db.now_param()})

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]

    def _modification(self, r: Any) -> Modification:
        """A ``Modification`` from a row of ``MODIFICATION_COLUMNS``, read by name."""
        m, t = r._mapping, self.db.from_db
        return Modification(id=int(m["id"]), payment_id=int(m["payment_id"]), kind=m["kind"],
                            modification_reference=m["modification_reference"], amount=int(m["amount"]),
                            currency=m["currency"], psp=m["psp"], status=PaymentStatus(m["status"]),
                            idempotency_key=m["idempotency_key"], requested_by=m["requested_by"],
                            created_at=t(m["created_at"]), updated_at=t(m["updated_at"]),  # type: ignore[arg-type]
                            psp_modification_id=m["psp_modification_id"], failure_reason=m["failure_reason"],
                            review_reason=m["review_reason"], sent_at=t(m["sent_at"]))


#: who moves the payment when a modification's transition does
_PAYMENT_SOURCE = {ModificationSource.MODIFICATION: EventSource.CHARGE,
                   ModificationSource.RECONCILE: EventSource.RECONCILE,
                   ModificationSource.WEBHOOK: EventSource.WEBHOOK, ModificationSource.MANUAL: EventSource.MANUAL}


def _transition_row(t: ModificationTransition) -> dict[str, Any]:
    """A transition's parameters at the storage boundary: its reasons redacted; the PSP's id exactly."""
    return redact_row({"id": t.modification_id, "from_status": str(t.from_status), "to_status": str(t.to_status),
                       "psp_modification_id": t.psp_modification_id, "failure_reason": t.failure_reason,
                       "review_reason": t.review_reason}, keep=("psp_modification_id",))
