"""The reconcile job of a movement (a refund, a capture, a cancel: ``recon.movement_rows``): asks the PSP what
became of one movement and heals our record, as the payment's reconcile job does for a charge
(recon.reconcile.handler), by its kind's table in ``recon.reconcile.decide``. One handler; each kind says how it
asks the PSP and which of decide's tables reads the answer (``recon.reconcile.refund``,
``recon.reconcile.modification``).

| PSP says                                  | ours         | action                                            |
| ----------------------------------------- | ------------ | ------------------------------------------------- |
| what the kind's table decides             | any          | that decision (a final one only on a recheck)     |
| pending / cannot say                      | unfinished   | snooze on the schedule, then needs_review; the    |
|                                           |              | PSP's id stored the moment it names one           |
| not found, no PSP id ever recorded        | unfinished   | grace period, then failed: "never reached the PSP" |
| not found, but we hold its PSP id         | unfinished   | needs_review (the PSP lost what it told us)       |
| anything else                             | final        | nothing; on a recheck, the answer is noted        |

A recheck (payload ``"recheck": true``: ``recon review recheck REF``) asks about a final movement: what the
kind's table makes of it moves it (to review, never to another final status), any other answer joins its audit
trail. While the movement's own job is unfinished (it may still send), the movement is left to it; the heal
"never reached the PSP" and a send exclude each other on the movement's row (``mark_sent``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import sqlalchemy as sa

from psp_adapters.errors import PspError
from psp_adapters.protocol import NotFound, PaymentOutcome, PspAdapter, Reversed
from recon.classify import classify
from recon.clock import Clock
from recon.db.movement_store import MovementStore
from recon.db.payment_store import PaymentStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Snooze
from recon.errors import ChargeInFlight, ConfigError
from recon.movement_rows import Movement, MovementKind, MovementTransition
from recon.payments.charge import config_dead
from recon.payments.guard import Guard, Unguarded
from recon.reconcile.config import ReconcileConfig
from recon.reconcile.decide import outcome_details
from recon.rows import EnqueueRow, Job, Payment, PaymentStatus

#: how long the reconcile job waits while the movement's own job is unfinished (it decides first)
BUSY_SNOOZE = timedelta(seconds=30)
MAX_ATTEMPTS = 10
NEVER_REACHED = "never reached the PSP (not found after the grace period)"

M = TypeVar("M", bound=Movement)
T = TypeVar("T", bound=MovementTransition)


class Decision(Protocol):
    """A kind's decision (``decide.RefundHeal``, ``decide.ModificationHeal``): the target and its fields."""

    @property
    def target(self) -> PaymentStatus: ...

    def fields(self) -> dict[str, Any]: ...


def reconcile_row(kind: MovementKind, movement_id: int, *, queue: str, recheck: bool = False) -> EnqueueRow:
    """A movement's reconcile job (``recheck``: about a final one)."""
    payload: dict[str, Any] = {kind.id_field: movement_id, **({"recheck": True} if recheck else {})}
    return EnqueueRow(queue=queue, kind=kind.reconcile_kind, payload_json=json.dumps(payload), priority=0, run_at=None,
                      delay=0.0, max_attempts=MAX_ATTEMPTS, unique_key=kind.reconcile_key(movement_id), tenant=None)


class MovementReconcileHandler(Generic[M, T]):
    """Job kind ``movement.reconcile_kind``, payload ``{movement.id_field: N}`` (``"recheck": true`` for a final
    one); ``job.progress["checks"]`` counts the pending answers so far, so the schedule survives restarts. A
    subclass says what differs (``_label``, ``_fetch``, ``_decision``, ``_transition``)."""

    movement: ClassVar[MovementKind]
    kind: ClassVar[str]  #: ``movement.reconcile_kind``

    def __init__(self, store: MovementStore[M, T], payments: PaymentStore,
                 adapter_func: Callable[[str], PspAdapter], *, config: ReconcileConfig, clock: Clock,
                 guard: Guard | None = None) -> None:
        self.queue = config.queue
        self.store = store
        self.payments = payments
        self.adapter_func = adapter_func
        self.config = config
        self.clock = clock
        self.guard = guard or Unguarded()

    # --- what a kind says ----------------------------------------------------------------------------------

    def _label(self, m: M) -> str:
        """How messages name the movement ("refund", "capture", "cancel")."""
        raise NotImplementedError

    def _fetch(self, m: M, payment: Payment) -> Callable[[], PaymentOutcome | Reversed]:
        """The call that asks the PSP about ``m``; ConfigError when its PSP's adapter cannot."""
        raise NotImplementedError

    def _decision(self, m: M, payment: Payment, answer: PaymentOutcome | Reversed
                  ) -> tuple[Decision | None, PaymentOutcome]:
        """What the kind's table makes of the answer (None: nothing), and the answer as read."""
        raise NotImplementedError

    def _transition(self, m: M, target: PaymentStatus, job: Job, details: dict[str, Any], **fields: Any) -> T:
        """The reconcile job's transition of ``m`` to ``target``."""
        raise NotImplementedError

    def _note(self, conn: sa.Connection, m: M, job: Job, details: dict[str, Any]) -> bool:
        """The answer joins the audit trail of ``m``."""
        raise NotImplementedError

    # --- the job -------------------------------------------------------------------------------------------

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        movement_id = int(job.payload[self.movement.id_field])
        m = self.store.get(movement_id)
        if m is None:
            return Dead(error_kind="validation", error=f"{self.movement.noun} {movement_id} does not exist")
        recheck = bool(job.payload.get("recheck"))
        if m.status.final and not recheck:
            return Complete()
        if not m.status.final:
            with self.store.db.begin() as conn:
                if self.store.job_unfinished(m.id, conn):
                    return Snooze(BUSY_SNOOZE, reason=f"the {self._label(m)}'s own job is unfinished")
        payment = self.payments.get(m.payment_id)
        assert payment is not None  # nosec B101  # a foreign key: type narrowing
        try:
            call = self._fetch(m, payment)
        except ConfigError as exc:
            return config_dead(exc)
        permit = self.guard.admit(m.psp, lease=lease)
        if isinstance(permit, Snooze):
            return permit
        lease.check()
        try:
            answer = permit.call(call)
        except PspError as exc:
            return classify(exc)
        except ConfigError as exc:
            return config_dead(exc)
        return self._decide(m, payment, job, lease, answer, recheck=recheck)

    def _decide(self, m: M, payment: Payment, job: Job, lease: Lease, answer: PaymentOutcome | Reversed, *,
                recheck: bool) -> Outcome:
        details = {**outcome_details(answer), **({"recheck": True} if recheck else {})}
        decision, read = self._decision(m, payment, answer)
        if decision is not None:
            return self._move(m, job, decision.target, details, **decision.fields())
        if m.status.final:  # a recheck that changes nothing: the answer joins the audit trail
            return Complete(write=lambda conn: self._note(conn, m, job, details))
        if isinstance(read, NotFound):
            return self._not_found(m, job, details)
        return self._wait(m, job, lease, details, why=f"PSP still says {read.raw_status or 'pending'}",
                          psp_id=read.psp_reference)

    def _not_found(self, m: M, job: Job, details: dict[str, Any]) -> Outcome:
        if m.psp_id:
            return self._move(m, job, PaymentStatus.NEEDS_REVIEW, details,
                              review_reason=f"missing_at_psp: PSP has no {self._label(m)} {m.psp_id}")
        grace = self.config.for_psp(m.psp).grace_period
        age = self.clock.now() - max(m.created_at, m.updated_at)  # no earlier than its last send's stamp
        if age < grace:
            return Snooze(grace - age, reason="not found at the PSP yet; inside the grace period")
        transition = self._transition(m, PaymentStatus.FAILED, job, details, failure_reason=NEVER_REACHED)
        noun = self.movement.noun

        def write(conn: sa.Connection) -> None:
            # sent again since it was read (a replayed job whose attempt then ended): the grace starts again
            current = self.store.get(m.id, conn)
            if current is not None and current.updated_at != m.updated_at:
                raise ChargeInFlight(f"{noun} {m.id}: sent again while healing; retrying")
            # the compare-and-set locks the row; the movement's own job locks it before every send
            # (mark_sent_if_unfinished): whichever is second sees the other
            if self.store.apply(conn, transition) and self.store.job_unfinished(m.id, conn):
                raise ChargeInFlight(f"{noun} {m.id}: its own job started while healing; retrying")

        return Complete(write=write)

    def _wait(self, m: M, job: Job, lease: Lease, details: dict[str, Any], *, why: str,
              psp_id: str | None) -> Outcome:
        schedule = self.config.for_psp(m.psp).schedule
        checks = int((job.progress or {}).get("checks", 0))
        if checks >= len(schedule):
            return self._move(m, job, PaymentStatus.NEEDS_REVIEW, details,
                              review_reason=f"no_final_answer: after {checks} checks: {why}")
        lease.save_progress({"checks": checks + 1})
        write = None
        if psp_id and not m.psp_id:
            def write(conn: sa.Connection) -> None:
                self.store.remember_psp_id(conn, m.id, status=m.status, psp_id=psp_id)
        return Snooze(schedule[checks], reason=why, write=write)

    def _move(self, m: M, job: Job, target: PaymentStatus, details: dict[str, Any], **fields: Any) -> Outcome:
        transition = self._transition(m, target, job, details, **fields)
        return Complete(write=lambda conn: self.store.apply(conn, transition))
