"""The job that sends one movement (a refund, a capture, a cancel: ``recon.movement_rows``) to its PSP under a
heartbeating lease and records what happened, as the charge handler does for a charge (recon.payments.charge),
with the movement's own idempotency key. One handler; each kind says how it asks and reads the PSP
(``recon.payments.refund``, ``recon.payments.modification``).

The key is fixed at the movement's creation and sent with every attempt, so a retry after a lost answer, or a
stale worker's duplicate call, never moves the money twice. The PSP's id of the movement is stored the moment an
answer names it (a pending answer included) and never replaced. Every write is committed with the fenced job
finish (``Outcome.write``): a worker that lost its lease changes nothing.

| answer                                   | the movement                     | job                        |
| ---------------------------------------- | -------------------------------- | -------------------------- |
| as the kind's table in ``recon.reconcile.decide`` (``refund_sent``, ``modification_sent``) | its decision | complete |
| validation error (400/422)               | failed (rejected): its amount or claim freed | dead           |
| an error the PSP saved under the key     | pending (reconciliation decides) | complete                   |
| unknown outcome, 5xx, busy, protocol     | pending (never failed from these)| retry, same idempotency key|
| connect error, 429, 409, auth, bug       | unchanged                        | retry / dead as classified |
| the PSP's settings are missing, or its adapter cannot | unchanged           | dead (replay after fixing) |

Before anything changes the PSP guard may snooze the job, no attempt spent. Right before the send, a permit
older than the guard's PERMIT_SECONDS (the claim's write waited) or already spent on the lookup below is
admitted again (``PspGuard.refresh``, as the charge's): a snooze then leaves the movement processing and the next
attempt re-sends the same key. A key older than the PSP's
retention (``idempotency_retention``: Stripe 24 h) is never re-sent blindly: the PSP is asked first; what the
kind reads as found is recorded, anything else is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import sqlalchemy as sa

from psp_adapters.errors import PspError
from psp_adapters.protocol import PaymentOutcome, PspAdapter, Reversed
from recon.classify import classify
from recon.clock import Clock, SystemClock
from recon.db.movement_store import MovementStore
from recon.db.payment_store import CHARGE_QUEUE, PaymentStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Dead, Outcome, Snooze
from recon.errors import ConfigError, LeaseLost
from recon.movement_rows import Movement, MovementKind, MovementTransition
from recon.payments.charge import KEY_RETENTION_MARGIN, after_send_error, config_dead
from recon.payments.guard import Guard, Unguarded
from recon.reconcile.decide import outcome_details
from recon.rows import Job, Payment, PaymentStatus

AdapterFunc = Callable[[str], PspAdapter]
M = TypeVar("M", bound=Movement)
T = TypeVar("T", bound=MovementTransition)


class SentDecision(Protocol):
    """A kind's decision on the answer to its send (``decide.RefundHeal``, ``decide.ModificationHeal``)."""

    @property
    def target(self) -> PaymentStatus: ...

    def fields(self) -> dict[str, Any]: ...


class MovementJob(Generic[M, T]):
    """The job of one movement, payload ``{movement.id_field: N}``, on ``queue`` (the charge jobs' queue); the
    store creates these jobs with their movements. A subclass says what differs (``_adapter``, ``_send``,
    ``_look``, ``_found``, ``_decide``, ``_transition``)."""

    movement: ClassVar[MovementKind]
    kind: str

    def __init__(self, store: MovementStore[M, T], payments: PaymentStore, adapter_func: AdapterFunc, *,
                 guard: Guard | None = None, clock: Clock | None = None, queue: str = CHARGE_QUEUE) -> None:
        self.queue = queue
        self.store = store
        self.payments = payments
        self.adapter_func = adapter_func
        self.guard = guard or Unguarded()
        self.clock = clock or SystemClock()

    # --- what a kind says ----------------------------------------------------------------------------------

    def _adapter(self, m: M) -> Any:
        """The PSP's adapter for ``m``; ConfigError when it cannot make this kind of movement."""
        raise NotImplementedError

    def _send(self, adapter: Any, m: M, payment: Payment) -> Callable[[], PaymentOutcome]:
        """The call that sends ``m`` with its idempotency key."""
        raise NotImplementedError

    def _look(self, adapter: Any, m: M, payment: Payment) -> Callable[[], PaymentOutcome | Reversed]:
        """The call that asks the PSP about ``m`` before an old key is sent again."""
        raise NotImplementedError

    def _found(self, looked: PaymentOutcome | Reversed) -> PaymentOutcome | None:
        """What of the lookup's answer is recorded as the answer to ``m``; None: send it."""
        raise NotImplementedError

    def _decide(self, m: M, answer: PaymentOutcome) -> SentDecision:
        """The kind's table of the answers to its send."""
        raise NotImplementedError

    def _transition(self, m: M, from_status: PaymentStatus, target: PaymentStatus, job: Job, **fields: Any) -> T:
        """The job's transition of ``m`` (source: its own job)."""
        raise NotImplementedError

    def _note(self, conn: sa.Connection, m: M, job: Job, details: dict[str, Any]) -> bool:
        """The evidence noted on a pending ``m``."""
        raise NotImplementedError

    # --- the job -------------------------------------------------------------------------------------------

    def __call__(self, job: Job, lease: Lease) -> Outcome:
        movement_id = int(job.payload[self.movement.id_field])
        m = self.store.get(movement_id)
        if m is None:
            return Dead(error_kind="validation", error=f"{self.movement.noun} {movement_id} does not exist")
        if m.status.final:
            return Complete()  # reconciliation, a webhook or an earlier attempt knows the answer already
        payment = self.payments.get(m.payment_id)
        assert payment is not None  # nosec B101  # a foreign key: type narrowing, not a check
        try:
            adapter = self._adapter(m)
        except ConfigError as exc:
            return config_dead(exc)
        permit = self.guard.admit(m.psp, lease=lease)
        if isinstance(permit, Snooze):
            return permit
        if self._key_may_be_forgotten(m, adapter):
            lease.check()
            try:
                looked = permit.call(self._look(adapter, m, payment))
            except PspError as exc:
                return classify(exc)  # nothing changes; the lookup is tried again
            found = self._found(looked)
            if found is not None:
                return Complete(write=self._write_answer(m, job, found))
        if not self._claim_send(m, job, lease):
            return Complete()  # healed since we read it (e.g. "never reached the PSP"): nothing to send
        m = self.store.get(m.id) or m
        # as the charge's: a permit that waited in the claim's write (a pooled connection, SQLite's write lock) or
        # was spent on the lookup is admitted again, so a stall never releases a crowd of sends at once. A
        # snooze here leaves the movement processing: the next attempt re-sends the same key
        permit = self.guard.refresh(permit, lease=lease)
        if isinstance(permit, Snooze):
            return permit
        lease.check()
        try:
            answer = permit.call(self._send(adapter, m, payment))
        except PspError as exc:
            return self._on_error(m, job, exc)
        except ConfigError as exc:
            return config_dead(exc)
        return Complete(write=self._write_answer(m, job, answer))

    def _key_may_be_forgotten(self, m: M, adapter: Any) -> bool:
        retention: timedelta | None = getattr(adapter, "idempotency_retention", None)
        sent_at: datetime | None = getattr(m, "sent_at", None)  # when the request first went out
        if retention is None or sent_at is None:
            return False
        return self.clock.now() - sent_at >= retention - min(KEY_RETENTION_MARGIN, retention / 10)

    def _claim_send(self, m: M, job: Job, lease: Lease) -> bool:
        """created -> processing (or, on a retry, the row lock proving it is still unfinished), fenced by the
        lease, before the request goes out: a crash after sending leaves it processing, which reconciliation
        resolves. False when it is no longer unfinished: then nothing may be sent."""
        with self.store.db.begin() as conn:
            if not lease.holds(conn):
                raise LeaseLost(f"lease on job {job.id} lost before sending {self.movement.noun} {m.id}")
            if m.status is PaymentStatus.CREATED and not self.store.apply(
                    conn, self._transition(m, PaymentStatus.CREATED, PaymentStatus.PROCESSING, job)):
                return False
            return self.store.mark_sent(conn, m.id) is not None

    def _write_answer(self, m: M, job: Job, answer: PaymentOutcome) -> Callable[[sa.Connection], Any]:
        details = outcome_details(answer)
        decision = self._decide(m, answer)
        if decision.target is PaymentStatus.PENDING:
            return self._pending(m, job, details, psp_id=decision.fields()[self.movement.psp_id_field])
        return self._move(m, job, decision.target, details, **decision.fields())

    def _on_error(self, m: M, job: Job, exc: PspError) -> Outcome:
        return after_send_error(exc, pending=lambda details: self._pending(m, job, details),
                                failed=lambda details, reason: self._move(
                                    m, job, PaymentStatus.FAILED, details, failure_reason=reason))

    def _pending(self, m: M, job: Job, details: dict[str, Any], *,
                 psp_id: str | None = None) -> Callable[[sa.Connection], Any]:
        """Pending: moved there from processing, or, pending already, its PSP id kept the moment it is known and
        the evidence noted."""
        def write(conn: sa.Connection) -> None:
            current = self.store.get(m.id, conn)
            if current is None or current.status.final:
                return  # a webhook or reconciliation decided meanwhile: its answer stands
            if current.status is PaymentStatus.PENDING:
                if psp_id:
                    self.store.remember_psp_id(conn, m.id, status=PaymentStatus.PENDING, psp_id=psp_id)
                self._note(conn, current, job, details)
                return
            self.store.apply(conn, self._transition(m, current.status, PaymentStatus.PENDING, job, details=details,
                                                    **{self.movement.psp_id_field: psp_id}))
        return write

    def _move(self, m: M, job: Job, target: PaymentStatus, details: dict[str, Any],
              **fields: Any) -> Callable[[sa.Connection], Any]:
        def write(conn: sa.Connection) -> None:
            # compare-and-set from what it is now (processing after our claim, or pending after an earlier
            # attempt): if a webhook or reconciliation finished it meanwhile, its answer stands
            current = self.store.get(m.id, conn)
            if current is None or current.status.final:
                return
            self.store.apply(conn, self._transition(m, current.status, target, job, details=details, **fields))
        return write
