"""TransitionStore: every change of a payment after its creation, the only code that executes
``recon.db.transition_queries``. ``PaymentStore`` is one.

Every status change is a compare-and-set (``WHERE status = :from``) plus a payment event, in one transaction;
a note is an audit event whose compare-and-set keeps the status. Writes made by a job handler run inside the
job's finish transaction (``Outcome.write``), so a worker that lost its lease changes nothing. A PSP reference,
once stored, is never replaced: a transition naming another one moves nothing and raises PspReferenceConflict.

The storage boundary (``recon.redact``), one place per kind of row: a transition's texts (``_transition_row``),
an audit event (``_events``). A PSP reference is stored exactly as the PSP gave it (``recon.db.payment_store``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa

from recon.db import transition_queries as tq
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.errors import PspReferenceConflict
from recon.redact import has_card_number, redact, redact_evidence, redact_row
from recon.rows import EnqueueRow, EventSource, Note, Payment, PaymentStatus, Transition, check_transition

#: from this many audit events a write keeps their foreign-key checks' generic plan (``Database.index_plans``):
#: its two statements cost a finish of 4 or 8 webhook events about what they saved, one of 32 far less than they
#: saved (docs/benchmarks.md, webhook intake, fourth pass)
INDEX_PLANS_FROM = 16


class TransitionStore:
    """A payment's changes: ``apply``/``apply_many`` (transitions), ``note``/``note_many``, the PSP reference
    remembered, the lock before a send, the next key generation, and reconcile jobs queued in a finish."""

    db: Database

    def apply(self, conn: sa.Connection, t: Transition) -> bool:
        """Compare-and-set inside the caller's transaction; False when the status was no longer
        ``from_status`` (someone else changed it first). Raises IllegalTransition for a move the state
        machine forbids, and PspReferenceConflict (nothing written) when ``t.psp_reference`` is not the PSP
        reference the payment holds: a stored reference is never replaced, and such a transition never moves
        the payment, whoever builds it (evidence naming another reference is ``recon.reconcile.decide``'s
        conflict, kept as evidence and resolved by a reconcile job or review)."""
        check_transition(t.from_status, t.to_status)
        row = conn.execute(self._q(tq.payment_transition_if_status),
                           {**_transition_row(t, self._held(conn, [t])), "now": self.db.now_param()}).first()
        if row is None:
            self._refuse_conflicts(conn, [t])
            return False
        self._events(conn, [dict(payment_id=t.payment_id, from_status=str(t.from_status), to_status=str(t.to_status),
                                 source=str(t.source), job_id=t.job_id, attempt=t.attempt, details=t.details)])
        return True

    def apply_many(self, conn: sa.Connection, transitions: Sequence[Transition]) -> set[int]:
        """``apply`` for many payments in the caller's transaction: each a compare-and-set on its own payment's
        status with its own audit event (its own evidence), in two statements per 5,000. Returns the ids that
        moved; the others had changed meanwhile and get no event. Raises IllegalTransition first, writing
        nothing, when one move is one the state machine forbids; PspReferenceConflict (as ``apply``) when one
        names another PSP reference than its payment holds (the caller's transaction is then to be rolled
        back: the other moves of the batch are written in it already)."""
        for t in transitions:
            check_transition(t.from_status, t.to_status)
        moved: set[int] = set()
        for start in range(0, len(transitions), 5000):
            chunk = transitions[start:start + 5000]
            held = self._held(conn, chunk)
            rows = [_transition_row(t, held) for t in chunk]
            done = {int(pid) for (pid,) in self.db.run_in(conn, tq.payment_transition_many_if_status,
                                                          {"rows": _dumps(rows), "now": self.db.now_param()})}
            self._refuse_conflicts(conn, [t for t in chunk if t.payment_id not in done])
            self._events(conn, [dict(payment_id=t.payment_id, from_status=str(t.from_status),
                                     to_status=str(t.to_status), source=str(t.source), job_id=t.job_id,
                                     attempt=t.attempt, details=t.details) for t in chunk if t.payment_id in done])
            moved |= done
        return moved

    def _held(self, conn: sa.Connection, transitions: Sequence[Transition]) -> dict[int, str]:
        """The PSP references stored on the payments of those ``transitions`` whose reasons hold a card-like run
        (rare: one read, and none without one), which their reasons keep as they are (``_transition_row``)."""
        ids = sorted({t.payment_id for t in transitions
                      if any(r and has_card_number(r) for r in (t.review_reason, t.failure_reason))})
        if not ids:
            return {}
        return {int(pid): held for pid, _status, held in conn.execute(self._q(tq.payment_references_many),
                                                                        {"ids": ids}) if held}

    def _refuse_conflicts(self, conn: sa.Connection, unmoved: Sequence[Transition]) -> None:
        """Raise PspReferenceConflict when one of ``unmoved`` (transitions that matched no row) failed only
        because it names another PSP reference than its payment holds; a lost compare-and-set raises nothing.
        One read, and only of transitions that carry a reference and did not move (rare)."""
        named = {t.payment_id: t for t in unmoved if t.psp_reference}
        if not named:
            return
        for payment_id, status, held in conn.execute(self._q(tq.payment_references_many), {"ids": sorted(named)}):
            t = named[int(payment_id)]
            if status == t.from_status and held and held != t.psp_reference:
                raise PspReferenceConflict(
                    f"payment {payment_id}: a {t.source} transition to {t.to_status} names PSP reference "
                    f"{t.psp_reference!r}, the payment holds {held!r}; a stored PSP reference is never "
                    "replaced: not moved")

    def enqueue_reconcile(self, conn: sa.Connection, rows: Sequence[EnqueueRow]) -> list[int]:
        """Reconcile jobs in the caller's transaction (a window job's fall-backs, with its finish); a row whose
        unique key an unfinished job holds gets that job. No queue limit: these replace work already queued."""
        return JobStore(self.db).enqueue(rows, max_depth={}, conn=conn)

    def note(self, conn: sa.Connection, *, payment_id: int, status: PaymentStatus, source: EventSource,
             details: dict[str, Any], job_id: int | None, attempt: int | None) -> bool:
        """An audit event without a status change (``from`` = ``to`` = ``status``): new PSP evidence for a payment
        whose status stays. Compare-and-set on the status; False (nothing written) when it changed meanwhile."""
        row = conn.execute(self._q(tq.payment_touch_if_status),
                           {"id": payment_id, "status": str(status), "now": self.db.now_param()}).first()
        if row is None:
            return False
        self._events(conn, [dict(payment_id=payment_id, from_status=str(status), to_status=str(status),
                                 source=str(source), job_id=job_id, attempt=attempt, details=details)])
        return True

    def note_many(self, conn: sa.Connection, notes: Sequence[Note]) -> set[int]:
        """``note`` for many payments in the caller's transaction, in two statements: returns the ids noted; the
        others changed status meanwhile and get no event."""
        if not notes:
            return set()
        done = {int(pid) for (pid,) in self.db.run_in(conn, tq.payment_touch_many_if_status, {
            "rows": _dumps([{"id": n.payment_id, "status": str(n.status)} for n in notes]),
            "now": self.db.now_param()})}
        self._events(conn, [dict(payment_id=n.payment_id, from_status=str(n.status), to_status=str(n.status),
                                 source=str(n.source), job_id=n.job_id, attempt=n.attempt, details=n.details)
                            for n in notes if n.payment_id in done])
        return done

    def remember_psp_reference(self, conn: sa.Connection, *, payment_id: int, status: PaymentStatus,
                               psp_reference: str) -> bool:
        return conn.execute(self._q(tq.payment_set_psp_reference_if_status),
                            {"id": payment_id, "status": str(status), "psp_reference": psp_reference,
                             "now": self.db.now_param()}).first() is not None

    def _events(self, conn: sa.Connection, events: list[dict[str, Any]]) -> None:
        # the storage boundary of PSP evidence and operators' notes: details quote PSP texts, which may carry
        # card data or keys; the PSP's identifiers in them are kept exactly (``redact_evidence``)
        events = [{**redact_row(e, keep=("details",)), "details": redact_evidence(e.get("details"))} for e in events]
        # each row's foreign-key check (payments) keeps one generic plan, an index scan: planned afresh per
        # row it cost more than the insert (recon.db.plan_queries); two statements more, so not for a few rows
        guard = self.db.index_plans(conn) if len(events) >= INDEX_PLANS_FROM else contextlib.nullcontext()
        with guard:
            for start in range(0, len(events), 5000):
                self.db.run_in(conn, tq.payment_event_insert_many,
                               {"rows": _dumps(events[start:start + 5000]), "now": self.db.now_param()})

    def touch_unfinished(self, conn: sa.Connection, *, payment_id: int) -> PaymentStatus | None:
        """Lock the payment row if it is still unfinished (its status), else None."""
        row = conn.execute(self._q(tq.payment_touch_if_unfinished),
                           {"id": payment_id, "now": self.db.now_param()}).first()
        return PaymentStatus(row._mapping["status"]) if row else None

    def next_key_generation(self, conn: sa.Connection, payment: Payment, *, job_id: int | None,
                            attempt: int | None, details: dict[str, Any]) -> int | None:
        """Move ``payment`` to its next idempotency key generation (compare-and-set on the generation) with an
        audit event (status unchanged, ``details.key_generation``); None when it had moved already."""
        row = conn.execute(self._q(tq.payment_next_key_generation_if),
                           {"id": payment.id, "generation": payment.key_generation,
                            "now": self.db.now_param()}).first()
        if row is None:
            return None
        generation = int(row._mapping["key_generation"])
        status = str(payment.status)
        self._events(conn, [dict(payment_id=payment.id, from_status=status, to_status=status, source="charge",
                                 job_id=job_id, attempt=attempt,
                                 details={**details, "key_generation": generation})])
        return generation

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]


def _dumps(value: Any) -> str:
    """A statement's JSON parameter: orjson (a finish's batch of rows, on the worker's hot path), which takes
    what ``json.dumps`` takes here (str keys, str, int, bool, None, lists) and refuses what it refuses."""
    return orjson.dumps(value).decode()


def _transition_row(t: Transition, held: dict[int, str]) -> dict[str, Any]:
    """A transition's parameters at the storage boundary: the PSP's reference exactly; its reasons redacted but
    for this payment's PSP reference (``held``, or the one this transition stores), which recon's reasons name
    ("missing_at_psp: PSP has no payment <reference>") and a Luhn-valid Adyen reference would otherwise read as
    ``[card]``; a card number beside it is masked all the same, and so is a reference the PSP names that is not
    this payment's (a conflict's other side, shown exactly in the event's evidence instead)."""
    row = redact_row({"id": t.payment_id, "from_status": str(t.from_status), "to_status": str(t.to_status),
                      "psp_reference": t.psp_reference}, keep=("psp_reference",))
    keep = (held.get(t.payment_id), t.psp_reference)
    row["failure_reason"] = None if t.failure_reason is None else redact(t.failure_reason, keep)
    row["review_reason"] = None if t.review_reason is None else redact(t.review_reason, keep)
    return row
