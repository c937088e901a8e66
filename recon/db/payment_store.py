"""PaymentStore: payments, the only code that executes ``recon.db.payment_queries``: their creation (with their
charge jobs and creation events), lookups and listings, and the review desk's and the stats' reads. Their
changes after creation (transitions, notes, the audit trail) are ``recon.db.transition_store.TransitionStore``'s,
which it is.

The storage boundary (``recon.redact``): new payments as ``create`` receives them (``_redacted``; the import
refuses a reference that would change, so none does in practice), their creation events (``_events``). A PSP
reference is stored exactly as the PSP gave it: it is the PSP's own identifier, compared by every lookup, and
Adyen's are often 16 digits (``8515208516304269`` in its webhook examples), one in ten of which pass the Luhn
check.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from recon.db import payment_queries as lq
from recon.db.database import Database, json_from_db
from recon.db.jobs_store import JobStore
from recon.db.transition_store import TransitionStore
from recon.errors import DuplicateReference, StoreError
from recon.redact import grouped, redact_value
from recon.rows import (
    EnqueueRow,
    NewPayment,
    Payment,
    PaymentEvent,
    PaymentStatus,
)

#: the charge job's kind (``recon.payments.charge.ChargeHandler.kind``): created here, with its payment
#: the names of ``PAYMENT_COLUMNS``, in order (rows read straight through the driver are tuples)
_COLUMN_NAMES = tuple(c.strip() for c in lq.PAYMENT_COLUMNS.split(","))

CHARGE_KIND = "charge"
#: the charge jobs' queue unless ``[payments] queue`` says otherwise (``recon.payments.config``)
CHARGE_QUEUE = "charges"


def charge_key(payment_id: int) -> str:
    """The unique key of a payment's charge job."""
    return f"charge:{payment_id}"


class PaymentStore(TransitionStore):
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- creation --------------------------------------------------------------------------------------

    def create(self, payments: Sequence[NewPayment], *, charge: bool = True, queue: str = CHARGE_QUEUE,
               max_attempts: int = 12, max_depth: dict[str, int] | None = None) -> list[int]:
        """Insert payments (status ``created``) with their creation events and, with ``charge``, one charge
        job each on ``queue``, all in one transaction. Returns the ids in order.

        ``max_depth`` (queue -> limit) applies to the charge jobs like to every enqueue: past it, QueueFull and
        nothing is written. A merchant reference that another writer took meanwhile raises
        DuplicateReference naming it, and nothing is written."""
        if not payments:
            return []
        payments = [_redacted(p) for p in payments]  # the storage boundary, before any statement sees them
        try:
            return self._create(payments, charge=charge, queue=queue, max_attempts=max_attempts,
                                max_depth=max_depth or {})
        except StoreError as exc:
            if not isinstance(exc.__cause__, sa.exc.IntegrityError):
                raise
            taken = sorted(self.existing_references([p.merchant_reference for p in payments]))
            if not taken:
                raise
            raise DuplicateReference(f"merchant_reference {taken[0]!r} already exists (written by another import "
                                     f"meanwhile); nothing imported") from None

    def _create(self, payments: Sequence[NewPayment], *, charge: bool, queue: str, max_attempts: int,
                max_depth: dict[str, int]) -> list[int]:
        if self.db.is_postgresql:
            return self._create_pg(payments, charge=charge, queue=queue, max_attempts=max_attempts,
                                   max_depth=max_depth)
        with self.db.begin() as conn:
            ids = self._insert(conn, payments)
            job_ids: list[int | None] = [None] * len(ids)
            if charge:
                jobs = JobStore(self.db)
                rows = [EnqueueRow(queue=queue, kind=CHARGE_KIND, payload_json=json.dumps({"payment_id": i}),
                                   priority=0, run_at=None, delay=0.0, max_attempts=max_attempts,
                                   unique_key=charge_key(i), tenant=p.merchant_account)
                        for i, p in zip(ids, payments, strict=True)]
                job_ids = list(jobs.enqueue(rows, max_depth=max_depth, conn=conn))
            # the creation event names the charge job: a payment's page finds every job of it from its events
            self._events(conn, [dict(payment_id=i, from_status=None, to_status="created", source="manual",
                                     job_id=j, attempt=None, details=None) for i, j in zip(ids, job_ids, strict=True)])
        return ids

    def _create_pg(self, payments: Sequence[NewPayment], *, charge: bool, queue: str, max_attempts: int,
                   max_depth: dict[str, int]) -> list[int]:
        """PostgreSQL: payments, charge jobs, creation events and NOTIFY in one statement per 5,000 payments
        (``payment_create_with_charge_jobs``). Up to 5,000 payments for a charge queue without a max depth:
        that statement alone in autocommit, one round trip. Otherwise one transaction; with a max depth, the
        queue's lock and count come first (``JobStore.check_depth``: the lock must be granted before the
        snapshot that counts)."""
        limit = max_depth.get(queue, 0) if charge else 0
        if len(payments) <= 5000 and not limit:
            with self.db.autocommit() as conn:
                return self._create_chunk(conn, payments, charge=charge, queue=queue, max_attempts=max_attempts)
        with self.db.begin() as conn:
            if limit:
                JobStore(self.db).check_depth(conn, {queue: len(payments)}, max_depth=max_depth)
            ids: list[int] = []
            for start in range(0, len(payments), 5000):
                ids.extend(self._create_chunk(conn, payments[start:start + 5000], charge=charge, queue=queue,
                                              max_attempts=max_attempts))
            return ids

    def _create_chunk(self, conn: sa.Connection, payments: Sequence[NewPayment], *, charge: bool, queue: str,
                      max_attempts: int) -> list[int]:
        params = {"rows": json.dumps(self._payment_rows(payments)), "charge": charge, "queue": queue,
                  "kind": CHARGE_KIND, "max_attempts": max_attempts, "now": self.db.now_param()}
        returned = {ref: int(i) for i, ref, _job, _woken in
                    conn.execute(self._q(lq.payment_create_with_charge_jobs), params)}
        return [returned[p.merchant_reference] for p in payments]

    def _insert(self, conn: sa.Connection, payments: Sequence[NewPayment]) -> list[int]:
        rows = self._payment_rows(payments)
        ids: list[int] = []
        for start in range(0, len(rows), 5000):
            chunk = rows[start:start + 5000]
            returned = dict((ref, i) for i, ref in conn.execute(
                self._q(lq.payment_insert_many), {"rows": json.dumps(chunk), "now": self.db.now_param()}))
            ids.extend(int(returned[r["merchant_reference"]]) for r in chunk)
        return ids

    def _payment_rows(self, payments: Sequence[NewPayment]) -> list[dict[str, Any]]:
        return [{"merchant_account": p.merchant_account, "merchant_reference": p.merchant_reference,
                 "amount": p.amount, "currency": p.currency, "psp": p.psp,
                 "payment_method": p.payment_method, "customer_reference": p.customer_reference,
                 "capture_mode": p.capture_mode, "idempotency_key": f"recon-{grouped(secrets.token_hex(12))}",
                 "created_at": (p.created_at.isoformat() if self.db.is_postgresql else self.db.to_db(p.created_at))
                 if p.created_at else None} for p in payments]

    def existing_references(self, refs: Sequence[str]) -> set[str]:
        found: set[str] = set()
        with self.db.begin() as conn:
            for start in range(0, len(refs), 1000):
                found.update(ref for (ref,) in conn.execute(self._q(lq.payment_existing_references),
                                                        {"refs": list(refs[start:start + 1000])}))
        return found

    # --- reads -------------------------------------------------------------------------------------------

    def get(self, payment_id: int, conn: sa.Connection | None = None) -> Payment | None:
        if conn is not None:
            row = conn.execute(self._q(lq.payment_get), {"id": payment_id}).first()
            return self._payment(row) if row else None
        with self.db.reading() as own:  # a read: on SQLite no write lock (the charge handler's first step)
            return self.get(payment_id, own)

    def for_psp_event(self, conn: sa.Connection, *, psp: str, psp_reference: str | None,
                      merchant_reference: str | None) -> Payment | None:
        """The payment a PSP's event is about: by the PSP's reference (the lowest id if several), else by our
        merchant reference (of that PSP). Inside the caller's transaction."""
        return self.for_psp_events(conn, [(psp, psp_reference, merchant_reference)])[0]

    def for_psp_events(self, conn: sa.Connection, keys: Sequence[tuple[str, str | None, str | None]]
                       ) -> list[Payment | None]:
        """The payment each key ``(psp, psp_reference, merchant_reference)`` names, as ``for_psp_event`` says,
        in one statement per PSP and one for the merchant references left: the payments, in the keys' order."""
        by_psp_ref: dict[tuple[str, str], Payment] = {}
        wanted: dict[str, set[str]] = {}
        for psp, ref, _ in keys:
            if ref:
                wanted.setdefault(psp, set()).add(ref)
        for psp, refs in wanted.items():
            for row in self.db.run_in(conn, lq.payment_get_by_psp_references, {"psp": psp, "refs": sorted(refs)}):
                p = self._payment_of(dict(zip(_COLUMN_NAMES, row, strict=True)))
                key = (psp, p.psp_reference or "")
                if key not in by_psp_ref or p.id < by_psp_ref[key].id:  # as for_psp_event: the first by id
                    by_psp_ref[key] = p
        left = {m for psp, ref, m in keys if m and (not ref or (psp, ref) not in by_psp_ref)}
        by_ref = {p.merchant_reference: p for p in (self._payment_of(dict(zip(_COLUMN_NAMES, r, strict=True)))
                                                    for r in self.db.run_in(conn, lq.payment_get_by_references,
                                                                            {"refs": sorted(left)}))} if left else {}
        out: list[Payment | None] = []
        for psp, ref, m in keys:
            found = by_psp_ref.get((psp, ref)) if ref else None
            if found is None and m:
                found = by_ref.get(m)
                if found is not None and found.psp != psp:
                    found = None
            out.append(found)
        return out

    def by_reference(self, ref: str) -> Payment | None:
        with self.db.begin() as conn:
            row = conn.execute(self._q(lq.payment_get_by_reference), {"ref": ref}).first()
        return self._payment(row) if row else None

    def get_many(self, ids: Sequence[int]) -> list[Payment]:
        out: list[Payment] = []
        with self.db.begin() as conn:
            for start in range(0, len(ids), 1000):
                out.extend(self._payment(r) for r in conn.execute(
                    self._q(lq.payment_get_many), {"ids": list(ids[start:start + 1000])}))
        return out

    def iter_payments(self, *, status: str | None = None, psp: str | None = None, page: int = 500) -> Iterator[Payment]:
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(lq.payment_list_page),
                                    {"status": status, "psp": psp, "after_id": after, "n": page}).all()
            yield from (self._payment(r) for r in rows)
            if len(rows) < page:
                return
            after = int(rows[-1]._mapping["id"])

    def iter_stale(self, *, older_than: timedelta, psp: str | None, page: int = 1000) -> Iterator[Payment]:
        """Unfinished payments not updated for ``older_than``, oldest id first, a page per transaction."""
        cutoff = self.db.to_db(self.db.clock.now() - older_than)
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(lq.payment_list_stale),
                                    {"cutoff": cutoff, "psp": psp, "after_id": after, "n": page}).all()
            yield from (self._payment(r) for r in rows)
            if len(rows) < page:
                return
            after = int(rows[-1]._mapping["id"])

    def psps_unfinished(self) -> set[str]:
        """The PSPs of unfinished payments: those a charge or reconcile job may call."""
        with self.db.begin() as conn:
            return {str(psp) for (psp,) in conn.execute(self._q(lq.payment_psps_unfinished))}

    def events(self, payment_id: int) -> list[PaymentEvent]:
        with self.db.begin() as conn:
            rows = conn.execute(self._q(lq.payment_events_for), {"id": payment_id}).all()
        return [PaymentEvent(id=int(m["id"]), payment_id=int(m["payment_id"]), from_status=m["from_status"],
                             to_status=m["to_status"], source=m["source"], at=self.db.from_db(m["at"]),  # type: ignore[arg-type]
                             job_id=m["job_id"], attempt=m["attempt"], details=json_from_db(m["details"]))
                for m in (r._mapping for r in rows)]

    def charge_unfinished(self, payment_id: int, conn: sa.Connection | None = None) -> bool:
        """Is the payment's charge job unfinished (running, or waiting to retry): may it still send?"""
        if conn is None:
            with self.db.begin() as own:
                return self.charge_unfinished(payment_id, own)
        return conn.execute(self._q(lq.job_unfinished_by_key), {"key": charge_key(payment_id)}).first() is not None

    def get_with_charge_lease(self, payment_id: int) -> tuple[Payment | None, bool]:
        """The payment (None if there is none) and whether a charge job holds a live lease on it now."""
        with self.db.autocommit() as conn:  # one statement: no BEGIN and COMMIT round trips on PostgreSQL
            row = conn.execute(self._q(lq.payment_get_with_charge_lease),
                               {"id": payment_id, "key": charge_key(payment_id), "now": self.db.now_param()}).first()
        if row is None:
            return None, False
        return self._payment(row), bool(row._mapping["charge_leased"])

    def window_candidates(self, ids: Sequence[int]) -> list[tuple[Payment, bool]]:
        """The unfinished payments among ``ids``, each with whether a charge job holds a live lease on it now."""
        out: list[tuple[Payment, bool]] = []
        with self.db.autocommit() as conn:
            for start in range(0, len(ids), 1000):
                rows = conn.execute(self._q(lq.payment_window_candidates),
                                    {"ids": list(ids[start:start + 1000]), "now": self.db.now_param()}).all()
                out.extend((self._payment(r), bool(r._mapping["charge_leased"])) for r in rows)
        return out

    def reconcile_jobs(self, payment_ids: Sequence[int], *, after_job_id: int) -> dict[int, int]:
        """payment id -> its reconcile job (``reconcile:<id>``): the latest created after ``after_job_id``, else
        an unfinished one. Payments with neither are left out."""
        wanted = {f"reconcile:{i}": i for i in payment_ids}
        found: dict[int, int] = {}
        if not wanted:
            return found
        with self.db.begin() as conn:
            after = after_job_id
            while True:
                rows = conn.execute(self._q(lq.job_reconcile_after), {"after_id": after, "n": 5000}).all()
                for job_id, key in rows:
                    if key in wanted:
                        found[wanted[key]] = int(job_id)
                if len(rows) < 5000:
                    break
                after = int(rows[-1]._mapping["id"])
            missing = [k for k, i in wanted.items() if i not in found]
            for start in range(0, len(missing), 1000):
                for job_id, key in conn.execute(self._q(lq.job_reconcile_unfinished_by_keys),
                                                {"keys": missing[start:start + 1000]}):
                    found[wanted[key]] = int(job_id)
        return found

    def search(self, text: str, *, psps: Sequence[str], limit: int = 50) -> list[Payment]:
        """Payments whose merchant reference or (at one of ``psps``) PSP reference is exactly ``text``."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(lq.payment_search),
                                {"text": text, "psps": list(psps) or [""], "n": limit}).all()
        return [self._payment(r) for r in rows]

    def review_summary(self) -> tuple[int, datetime | None]:
        """How many payments are in needs_review, and since when the oldest."""
        with self.db.begin() as conn:
            count, oldest = conn.execute(self._q(lq.payment_review_summary)).one()
        return int(count), self.db.from_db(oldest) if oldest is not None else None

    def latest_evidence(self, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """Each payment's latest event details carrying a PSP answer (``psp_outcome``), by payment id."""
        if not ids:
            return {}
        params = {"ids": list(ids)} if self.db.is_postgresql else {"ids_json": json.dumps(list(ids))}
        with self.db.begin() as conn:
            rows = conn.execute(self._q(lq.payment_latest_evidence), params).all()
        return {int(pid): json_from_db(details) for pid, details in rows if details is not None}

    def resolutions(self, *, since: datetime) -> list[dict[str, Any]]:
        """Manual resolutions out of needs_review since ``since``: per UTC day, operator and new status, with
        how many were overrides of the PSP's answer."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(lq.payment_resolutions), {"since": self.db.to_db(since)}).all()
        return [{"day": m["day"], "operator": m["operator"], "status": m["to_status"], "count": int(m["n"]),
                 "overrides": int(m["overrides"] or 0)} for m in (r._mapping for r in rows)]

    def job_ids(self, payment_id: int, *, keys: Sequence[str]) -> list[int]:
        """The jobs of a payment: those its events name, and unfinished or dead ones holding one of ``keys``."""
        with self.db.begin() as conn:
            return [int(job_id) for (job_id,) in conn.execute(self._q(lq.payment_job_ids),
                                                    {"id": payment_id, "keys": list(keys)})]

    def money_at_risk(self) -> list[dict[str, Any]]:
        """Unfinished payments per currency and age bucket (lt_1h, 1h_1d, 1d_7d, gt_7d): count and sum."""
        now = self.db.clock.now()
        params = {f"t_{k}": self.db.to_db(now - d) for k, d in
                  (("1h", timedelta(hours=1)), ("1d", timedelta(days=1)), ("7d", timedelta(days=7)))}
        with self.db.begin() as conn:
            rows = conn.execute(self._q(lq.payment_money_at_risk), params).all()
        return [{"currency": m["currency"], "age": m["bucket"], "count": int(m["n"]), "amount": int(m["amount"])}
                for m in (r._mapping for r in rows)]

    # --- plumbing ----------------------------------------------------------------------------------------

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]

    def from_row(self, r: Any) -> Payment:
        """A ``Payment`` from a row of ``PAYMENT_COLUMNS`` another store read (the review queue's)."""
        return self._payment(r)

    def _payment(self, r: Any) -> Payment:
        """A ``Payment`` from a row of ``PAYMENT_COLUMNS``, read by name."""
        return self._payment_of(r._mapping)

    def _payment_of(self, m: Any) -> Payment:
        """A ``Payment`` from a mapping of ``PAYMENT_COLUMNS``' names to their values."""
        t = self.db.from_db
        return Payment(id=int(m["id"]), merchant_account=m["merchant_account"],
                       merchant_reference=m["merchant_reference"], amount=int(m["amount"]), currency=m["currency"],
                       psp=m["psp"], idempotency_key=m["idempotency_key"], status=PaymentStatus(m["status"]),
                       created_at=t(m["created_at"]), updated_at=t(m["updated_at"]),  # type: ignore[arg-type]
                       psp_reference=m["psp_reference"], failure_reason=m["failure_reason"],
                       review_reason=m["review_reason"], payment_method=m["payment_method"],
                       customer_reference=m["customer_reference"], key_generation=int(m["key_generation"] or 0),
                       key_sent_at=t(m["key_sent_at"]), review_since=t(m["review_since"]),
                       review_assignee=m["review_assignee"],
                       captured_amount=int(m["captured_amount"] or 0), refunded_amount=int(m["refunded_amount"] or 0),
                       capture_mode=m["capture_mode"] or "automatic", authorised_at=t(m["authorised_at"]),
                       authorisation_claimed=int(m["authorisation_claimed"] or 0))


def _redacted(p: NewPayment) -> NewPayment:
    """A new payment at the storage boundary: every text redacted (the same payment when none changes)."""
    clean = NewPayment(merchant_account=redact_value(p.merchant_account),
                       merchant_reference=redact_value(p.merchant_reference), amount=p.amount,
                       currency=redact_value(p.currency), psp=redact_value(p.psp), created_at=p.created_at,
                       payment_method=redact_value(p.payment_method),
                       customer_reference=redact_value(p.customer_reference), capture_mode=p.capture_mode)
    return p if clean == p else clean
