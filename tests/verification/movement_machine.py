"""What the refund machine (test_refund_machine.py) and the capture machine (test_capture_machine.py) share: a
hypothesis ``RuleBasedStateMachine`` over one payment's movements (``recon.movement_rows``) through the real
store, the movement's job and the generic reconcile job, on SQLite and on PostgreSQL.

The shared rules: advance the clock (past a lease, past the grace period, past Stripe's 24 h key retention); a
stuck-watcher pass; and the plumbing that runs one job as the worker runs it (claim, handler with a ``Lease``,
the fenced finish carrying ``Outcome.write``), with one scripted PSP answer, or with a stale worker (its lease
rescued before its finish: its finish matches nothing and writes nothing).

The shared invariants, checked after every step: every movement's events chain (``None -> created``, each ``from``
the previous ``to``, the last ``to`` its status) through its kind's state machine only
(``MovementKind.transitions``); its PSP id, once stored, never changes; one failed as "never reached the PSP" left
nothing at the PSP (every request about it, if any, answered "not found"); one idempotency key per movement, for
every attempt; and none was sent after it was final. Each machine adds its kind's rules (asking for one, running
its job and its reconcile job) and its money invariant (the refund bound, the authorisation's claim).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from psp_adapters.errors import PspError, PspRejectedError, PspTransientError, PspUnknownOutcome
from psp_adapters.protocol import Failed, NotFound, PaymentOutcome, Pending, Succeeded, Unknown
from recon.classify import classify
from recon.clock import FixedClock
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.movement_store import MovementStore
from recon.db.payment_store import PaymentStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Outcome
from recon.engine.watcher import Watcher
from recon.errors import LeaseLost
from recon.movement_rows import Movement
from recon.rows import Job, PaymentStatus
from tests.verification.test_payment_machine import to_finish

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TTL = 30.0
RECONCILE_QUEUE = "reconcile"
NEVER_REACHED = "never reached the PSP (not found after the grace period)"
P = PaymentStatus

Answer = PaymentOutcome | PspError


def answers(psp_id: str, other_id: str, *, rejection: str, pending: str) -> dict[str, Callable[[int], Answer]]:
    """One PSP answer per name about the movement being asked for (its amount filled in when the answer is
    made): ``psp_id`` is the PSP's id of it; ``other_id`` names another one."""
    return {
        "succeeded": lambda a: Succeeded(psp_reference=psp_id, amount=a, currency="EUR", raw_status="succeeded"),
        "other_amount": lambda a: Succeeded(psp_reference=psp_id, amount=a + 1, currency="EUR",
                                            raw_status="succeeded"),
        "failed": lambda a: Failed(psp_reference=psp_id, amount=a, currency="EUR", raw_status="failed", reason="x"),
        "pending": lambda a: Pending(psp_reference=psp_id, amount=a, currency="EUR", raw_status=pending),
        "unknown": lambda a: Unknown(raw_status="weird"),
        "not_found": lambda a: NotFound(),
        "saved_500": lambda a: PspTransientError("HTTP 500", psp="sandbox", status_code=500, saved=True),
        "unknown_outcome": lambda a: PspUnknownOutcome("read timeout", psp="sandbox"),
        "rejected": lambda a: PspRejectedError(f"HTTP 400: {rejection}", psp="sandbox", status_code=400),
        "connect_error": lambda a: PspTransientError("connection refused", psp="sandbox"),
        "other_id": lambda a: Succeeded(psp_reference=other_id, amount=a, currency="EUR", raw_status="succeeded"),
    }


class ScriptedPsp:
    """Answers every call with ``answer`` and records each key a request went out with (``_sent``)."""

    name: ClassVar[str] = "sandbox"
    idempotency_retention: ClassVar[timedelta | None] = timedelta(hours=24)

    def __init__(self, first: Callable[[int], Answer]) -> None:
        self.answer = first
        self.sent: list[tuple[str, str]] = []  #: (movement reference, idempotency key) per request
        self.held: set[str] = set()  #: the movements a request may have left at the PSP (any answer but not found)

    def create_payment(self, *_: Any, **__: Any) -> PaymentOutcome:
        raise AssertionError("no charge in this machine")

    def fetch_payment(self, *_: Any, **__: Any) -> PaymentOutcome:
        raise AssertionError("no charge in this machine")

    def close(self) -> None:
        pass

    def _sent(self, reference: str, key: str, amount: int) -> PaymentOutcome:
        self.sent.append((reference, key))
        answer = self.answer(amount)
        if not isinstance(answer, NotFound):  # a send answered "not found" left nothing of it at the PSP
            self.held.add(reference)
        if isinstance(answer, PspError):
            raise answer
        return answer

    def _answer(self, amount: int) -> PaymentOutcome:
        answer = self.answer(amount)
        if isinstance(answer, PspError):
            raise answer
        return answer


class MovementMachine(RuleBasedStateMachine):
    """A machine over one payment's movements of one kind: a subclass sets ``store``, ``psp``, ``pid``,
    ``ANSWERS`` and ``TABLES``, and says which handler runs a claimed job (``_handler``)."""

    db: ClassVar[Database]  # set by the test before the machine runs
    TABLES: ClassVar[tuple[str, ...]]
    ANSWERS: ClassVar[dict[str, Callable[[int], Answer]]]
    store: MovementStore[Any, Any]
    psp: ScriptedPsp
    pid: int

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock(T0)
        self.db.clock = self.clock
        with self.db.begin() as conn:
            for table in self.TABLES:
                conn.execute(sa.text(f"DELETE FROM {table}"))  # constant table names
        self.jobs = JobStore(self.db)
        self.payments = PaymentStore(self.db)
        self.ids: list[int] = []
        self.psp_ids: dict[int, str] = {}  #: movement -> the first PSP id it was seen to hold
        self.final_at: dict[int, int] = {}  #: movement -> requests sent when it was first final

    def _handler(self, queue: str, job: Job) -> Callable[[Job, Lease], Outcome | None]:
        raise NotImplementedError

    # --- rules ---------------------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([TTL + 1, 61.0, 25 * 3600.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def watch(self) -> None:
        Watcher(self.jobs).run_once()

    # --- invariants ----------------------------------------------------------------------------------------

    @invariant()
    def movements_move_by_their_state_machine_with_one_event_each(self) -> None:
        transitions = self.store.kind.transitions
        for movement in self._movements():
            events = self.store.events(movement.id)
            assert events[0].from_status is None and events[0].to_status == "created"
            status = "created"
            for e in events[1:]:
                assert e.from_status == status, [(x.from_status, x.to_status) for x in events]
                if e.to_status != e.from_status:
                    assert P(e.to_status) in transitions[P(status)]
                status = e.to_status
            assert status == movement.status

    @invariant()
    def a_psp_id_never_changes(self) -> None:
        for movement in self._movements():
            if movement.psp_id is not None:
                assert self.psp_ids.setdefault(movement.id, movement.psp_id) == movement.psp_id

    @invariant()
    def never_reached_means_never_sent_and_final_means_never_sent_again(self) -> None:
        for movement in self._movements():
            if movement.failure_reason == NEVER_REACHED:  # the PSP holds nothing of it: no money moved
                assert movement.reference not in self.psp.held
            keys = {key for ref, key in self.psp.sent if ref == movement.reference}
            assert keys <= {movement.idempotency_key}, "one key per movement, for every attempt"
            if movement.status.final:
                requests = sum(1 for ref, _ in self.psp.sent if ref == movement.reference)
                assert self.final_at.setdefault(movement.id, requests) == requests, "sent again after it was final"

    # --- plumbing ------------------------------------------------------------------------------------------

    def _movements(self) -> list[Any]:
        found: list[Movement] = self.store.for_payment(self.pid)
        return found

    def _payment(self) -> Any:
        payment = self.payments.get(self.pid)
        assert payment is not None
        return payment

    def _run_one(self, queue: str, answer: str, *, stale: bool = False) -> None:
        claimed = self.jobs.claim(worker="w1", queues=[queue], n=1, ttl=TTL)
        if not claimed:
            return
        [job] = claimed
        handler = self._handler(queue, job)
        lease = Lease(self.jobs, job.id, job.attempts, "w1")
        self.psp.answer = self.ANSWERS[answer]
        try:
            outcome: Outcome | None = handler(job, lease) or Complete()
        except LeaseLost:
            outcome = None
        except Exception as exc:  # the worker classifies a handler's failure
            outcome = classify(exc)
        if outcome is None:
            return
        if stale:
            self.clock.advance(TTL + 1.0)
            Watcher(self.jobs).run_once()
        before = [(m.status, len(self.store.events(m.id))) for m in self._movements()]
        finish = to_finish(job, outcome)
        try:
            matched = self.jobs.finish(worker="w1", finishes=[finish], write=outcome.write)
        except Exception as exc:  # the write raised: rolled back; finish as the error classifies
            finish = to_finish(job, classify(exc))
            matched = self.jobs.finish(worker="w1", finishes=[finish])
        if stale:
            assert matched == set(), "a rescued lease's finish matches nothing"
            after = [(m.status, len(self.store.events(m.id))) for m in self._movements()]
            assert after == before, "and writes nothing"
        else:
            assert matched == {job.id}
        assert json.loads(json.dumps(job.payload))  # a JSON payload, as stored
