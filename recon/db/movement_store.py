"""MovementStore: what the refund store and the capture/cancel store share, the only code that executes
``recon.db.movement_queries``: lookups, compare-and-set transitions with their audit events, notes, the PSP's id
stored the moment it is known, the send's stamp, and the sweep's reads. A subclass names its kind
(``recon.movement_rows.MovementKind``), reads its rows, and says what a transition does to the payment
(``_effect``): a refund's bound (``recon.db.refund_store``), a capture's or cancel's claim and its payment's move
(``recon.db.modification_store``).

The storage boundary (``recon.redact``): a transition's reasons (``_transition_row``) and every audit event
(``_event``). A PSP id is stored exactly as the PSP gave it, as a PSP reference is (``recon.db.payment_store``),
and is never replaced once stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, ClassVar, Generic, TypeVar

import sqlalchemy as sa

from recon.db.database import Database, json_from_db
from recon.db.movement_queries import MovementQueries
from recon.errors import IllegalTransition, PspReferenceConflict
from recon.movement_rows import Movement, MovementEvent, MovementKind, MovementTransition
from recon.redact import has_card_number, redact, redact_evidence, redact_row
from recon.rows import PaymentStatus

M = TypeVar("M", bound=Movement)
T = TypeVar("T", bound=MovementTransition)


class MovementStore(Generic[M, T]):
    kind: ClassVar[MovementKind]
    queries: ClassVar[MovementQueries]

    def __init__(self, db: Database) -> None:
        self.db = db

    # --- what a kind says --------------------------------------------------------------------------------------

    def _row(self, m: Mapping[Any, Any]) -> M:
        """A movement from a row of ``kind.columns``, read by name."""
        raise NotImplementedError

    def _effect(self, conn: sa.Connection, m: Mapping[Any, Any], t: T) -> None:
        """What the movement's new status (its row ``m``, after the change) does to its payment, in the same
        transaction."""
        raise NotImplementedError

    # --- reads ---------------------------------------------------------------------------------------------

    def get(self, movement_id: int, conn: sa.Connection | None = None) -> M | None:
        if conn is None:
            with self.db.begin() as own:
                return self.get(movement_id, own)
        row = conn.execute(self._q(self.queries.get), {"id": movement_id}).first()
        return self._row(row._mapping) if row else None

    def by_reference(self, ref: str, conn: sa.Connection | None = None) -> M | None:
        if conn is None:
            with self.db.begin() as own:
                return self.by_reference(ref, own)
        row = conn.execute(self._q(self.queries.get_by_reference), {"ref": ref}).first()
        return self._row(row._mapping) if row else None

    def by_psp_id(self, conn: sa.Connection, *, psp: str, psp_id: str) -> M | None:
        """The movement of ``psp`` that holds PSP id ``psp_id`` (the oldest, should two)."""
        row = conn.execute(self._q(self.queries.get_by_psp_id), {"psp": psp, "psp_id": psp_id}).first()
        return self._row(row._mapping) if row else None

    def for_payment(self, payment_id: int, conn: sa.Connection | None = None) -> list[M]:
        """A payment's movements of this kind, oldest first."""
        if conn is None:
            with self.db.begin() as own:
                return self.for_payment(payment_id, own)
        return [self._row(r._mapping) for r in conn.execute(self._q(self.queries.list_for_payment),
                                                            {"payment_id": payment_id})]

    def events(self, movement_id: int) -> list[MovementEvent]:
        """A movement's audit trail, oldest first."""
        with self.db.begin() as conn:
            rows = conn.execute(self._q(self.queries.events_for), {"id": movement_id}).all()
        return [self._event_row(r._mapping) for r in rows]

    def _event_row(self, m: Mapping[Any, Any]) -> MovementEvent:
        """An audit event from a row of ``events_for``, read by name."""
        return MovementEvent(id=int(m["id"]), movement_id=int(m["movement_id"]), from_status=m["from_status"],
                             to_status=m["to_status"], source=m["source"],
                             at=self.db.from_db(m["at"]),  # type: ignore[arg-type]  # NOT NULL
                             job_id=m["job_id"], attempt=m["attempt"], details=json_from_db(m["details"]))

    def existing_references(self, refs: Sequence[str]) -> set[str]:
        """Which of ``refs`` are taken already."""
        found: set[str] = set()
        with self.db.begin() as conn:
            for start in range(0, len(refs), 1000):
                found.update(ref for (ref,) in conn.execute(self._q(self.queries.existing_references),
                                                            {"refs": list(refs[start:start + 1000])}))
        return found

    def iter_stale(self, *, older_than: timedelta, psp: str | None = None, page: int = 1000) -> Iterator[M]:
        """Unfinished movements not changed for ``older_than``, oldest id first, a page per transaction."""
        cutoff = self.db.to_db(self.db.clock.now() - older_than)
        after = 0
        while True:
            with self.db.begin() as conn:
                rows = conn.execute(self._q(self.queries.list_stale),
                                    {"cutoff": cutoff, "psp": psp, "after_id": after, "n": page}).all()
            yield from (self._row(r._mapping) for r in rows)
            if len(rows) < page:
                return
            after = int(rows[-1]._mapping["id"])

    def job_unfinished(self, movement_id: int, conn: sa.Connection) -> bool:
        """Is the movement's own job unfinished (running, or waiting to retry): may it still send?"""
        return conn.execute(self._q(self.queries.job_unfinished),
                            {"key": self.kind.job_unique_key(movement_id)}).first() is not None

    # --- changes -------------------------------------------------------------------------------------------

    def apply(self, conn: sa.Connection, t: T) -> bool:
        """Compare-and-set inside the caller's transaction, with its audit event and its effect on the payment
        (``_effect``), all in the caller's transaction; False when the status was no longer ``from_status``.
        Raises IllegalTransition for a move the kind's state machine forbids, and PspReferenceConflict (nothing
        written) when ``t.psp_id`` is not the PSP id stored."""
        if t.to_status not in self.kind.transitions.get(t.from_status, frozenset()):
            raise IllegalTransition(f"{self.kind.noun} cannot go from {t.from_status} to {t.to_status}")
        held = None  # the PSP id it holds, read only when a reason holds a card-like run (rare)
        if any(r and has_card_number(r) for r in (t.review_reason, t.failure_reason)):
            current = self.get(t.movement_id, conn)
            held = current.psp_id if current is not None else None
        row = conn.execute(self._q(self.queries.transition_if_status),
                           {**_transition_row(t, held), "now": self.db.now_param()}).first()
        if row is None:
            current = self.get(t.movement_id, conn)
            if (current is not None and current.status is t.from_status and current.psp_id and t.psp_id
                    and current.psp_id != t.psp_id):
                raise PspReferenceConflict(
                    f"{self.kind.noun} {t.movement_id}: a {t.source} transition to {t.to_status} names PSP id "
                    f"{t.psp_id!r}, it holds {current.psp_id!r}; never replaced: not moved")
            return False
        self._event(conn, t.movement_id, from_status=t.from_status, to_status=t.to_status, source=t.source,
                    job_id=t.job_id, attempt=t.attempt, details=t.details)
        self._effect(conn, row._mapping, t)
        return True

    def note(self, conn: sa.Connection, movement_id: int, *, status: PaymentStatus, source: str,
             details: dict[str, Any], job_id: int | None = None, attempt: int | None = None) -> bool:
        """An audit event without a status change; compare-and-set on the status (False: it changed)."""
        if conn.execute(self._q(self.queries.touch_if_status),
                        {"id": movement_id, "status": str(status), "now": self.db.now_param()}).first() is None:
            return False
        self._event(conn, movement_id, from_status=status, to_status=status, source=source, job_id=job_id,
                    attempt=attempt, details=details)
        return True

    def remember_psp_id(self, conn: sa.Connection, movement_id: int, *, status: PaymentStatus, psp_id: str) -> bool:
        """Store the PSP's id of the movement the moment it is known, where none is stored (never replaced)."""
        return conn.execute(self._q(self.queries.set_psp_id_if_null),
                            {"id": movement_id, "status": str(status), "psp_id": psp_id,
                             "now": self.db.now_param()}).first() is not None

    def mark_sent(self, conn: sa.Connection, movement_id: int) -> PaymentStatus | None:
        """Lock the row if it is still unfinished (its status; stamps ``sent_at``), else None."""
        row = conn.execute(self._q(self.queries.mark_sent_if_unfinished),
                           {"id": movement_id, "now": self.db.now_param()}).first()
        return PaymentStatus(row._mapping["status"]) if row else None

    # --- plumbing ------------------------------------------------------------------------------------------

    def _event(self, conn: sa.Connection, movement_id: int, *, from_status: PaymentStatus | None,
               to_status: PaymentStatus, source: str, job_id: int | None, attempt: int | None,
               details: dict[str, Any] | None) -> None:
        # the storage boundary of PSP evidence and operators' notes: details quote PSP texts
        clean = redact_evidence(details)  # the PSP's identifiers in them exactly
        conn.execute(self._q(self.queries.event_insert), {
            "movement_id": movement_id, "from_status": None if from_status is None else str(from_status),
            "to_status": str(to_status), "source": str(source), "job_id": job_id, "attempt": attempt,
            "details": None if clean is None else json.dumps(clean), "now": self.db.now_param()})

    def _q(self, query: Any) -> sa.TextClause:
        return query.for_dialect(self.db.dialect)  # type: ignore[no-any-return]


def _transition_row(t: MovementTransition, held: str | None) -> dict[str, Any]:
    """A transition's parameters at the storage boundary: the PSP's id exactly; its reasons redacted but for the
    PSP id stored on this movement (``held``, or the one this transition stores), which recon's reasons name
    ("missing_at_psp: PSP has no refund <id>"); a card number beside it is masked all the same, and so is an id
    the PSP names that is not this movement's (a conflict's other side: tests/integration/test_stored_text.py
    plants a card number inside one)."""
    row = redact_row({"id": t.movement_id, "from_status": str(t.from_status), "to_status": str(t.to_status),
                      "psp_id": t.psp_id}, keep=("psp_id",))
    keep = (held, t.psp_id)
    row["failure_reason"] = None if t.failure_reason is None else redact(t.failure_reason, keep)
    row["review_reason"] = None if t.review_reason is None else redact(t.review_reason, keep)
    return row
