"""ModificationStore: captures and cancels of authorised payments, the only code that executes
``recon.db.modification_queries``: creation (the modification, its claim on the payment's authorisation, its
creation event and its job in one transaction), what a transition does to the payment
(``recon.modification_rows``' table), the stats' and the authorisations' reads. Lookups, compare-and-set
transitions, notes with their audit events and the sweep's reads are every movement's
(``recon.db.movement_store``).

The storage boundary (``recon.redact``): a new modification's texts (``_create_one``); the rest as
``recon.db.movement_store`` says.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from recon.db import modification_queries as mq
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.movement_queries import movement_queries
from recon.db.movement_store import MovementStore
from recon.db.payment_store import PaymentStore
from recon.errors import ModificationRefused, StoreError
from recon.modification_rows import (
    CAPTURE,
    MODIFICATION,
    Modification,
    ModificationSource,
    ModificationTransition,
    NewModification,
)
from recon.redact import grouped, redact_row
from recon.rows import EnqueueRow, EventSource, PaymentStatus, Transition

#: the columns a new modification's row keeps exactly: its idempotency key, made here (``recon.redact.grouped``),
#: sent to the PSP on every attempt; redacting it would have masked a Luhn-valid run of its hex digits
KEPT = ("idempotency_key",)


class ModificationStore(MovementStore[Modification, ModificationTransition]):
    kind = MODIFICATION
    queries = movement_queries(MODIFICATION)

    def __init__(self, db: Database, payments: PaymentStore | None = None) -> None:
        super().__init__(db)
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
                                 unique_key=MODIFICATION.job_unique_key(mid), tenant=None)
                [job_id] = JobStore(self.db).enqueue([row], max_depth=max_depth or {}, conn=conn)
                self._event(conn, mid, from_status=None, to_status=PaymentStatus.CREATED,
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
                          "idempotency_key": f"recon-{new.kind}-{grouped(secrets.token_hex(12))}",
                          "requested_by": new.requested_by, "now": self.db.now_param()}, keep=KEPT)
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

    # --- what a capture or cancel says (recon.db.movement_store) --------------------------------------------

    def _effect(self, conn: sa.Connection, m: Mapping[Any, Any], t: ModificationTransition) -> None:
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

    def _review_payment(self, conn: sa.Connection, m: Mapping[Any, Any], t: ModificationTransition,
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

    def _row(self, m: Mapping[Any, Any]) -> Modification:
        t = self.db.from_db
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

