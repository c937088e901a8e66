"""A hypothesis ``RuleBasedStateMachine`` that drives refunds of one succeeded payment through the real refund
store, refund job and refund reconcile job, on SQLite and on PostgreSQL, and checks the bound and the refund
state machine after every step.

Rules: ask for a refund (of 1.00, 3.00, 7.00 or 10.00 of a 10.00 capture; the store may refuse it); run the
refund job with one PSP answer (succeeded, other amount, failed, pending, unknown, not found, a saved 500, a lost
answer, a rejection, a connect error, another refund id), or with a stale worker (its lease rescued before its
finish); enqueue and run a refund's reconcile job with one answer, or its recheck; advance the clock (past a
lease, past the grace period, past Stripe's 24 h key retention); a stuck-watcher pass. Jobs run as the worker
runs them (claim, handler with a ``Lease``, the fenced finish carrying ``Outcome.write``): the rules, the
plumbing and the invariants every movement shares are tests/verification/movement_machine.py's.

Checked after every step: **the payment's refunded amount is exactly the sum of its refunds that have not
failed, and never more than it captured**; every refund's events chain (``None -> created``, each ``from`` the
previous ``to``, the last ``to`` its status) through ``recon.refund_rows.REFUND_TRANSITIONS`` only; a refund's
PSP refund id, once stored, never changes; a refund failed as "never reached the PSP" was never sent; and no
refund key went to the PSP after its refund was final.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule, run_state_machine_as_test

from psp_adapters.protocol import PaymentOutcome, RefundRef, RefundRequest
from recon.db.database import Database
from recon.db.payment_store import CHARGE_QUEUE
from recon.db.refund_store import RefundStore
from recon.engine.lease import Lease
from recon.engine.outcome import Outcome
from recon.errors import RefundRefused
from recon.payments.refund import RefundHandler
from recon.reconcile.refund import RefundReconcileHandler, refund_reconcile_row
from recon.refund_rows import NewRefund
from recon.rows import EventSource, Job, NewPayment, PaymentStatus, Transition
from tests.integration.payment_flow import reconcile_config
from tests.verification.movement_machine import RECONCILE_QUEUE, MovementMachine, ScriptedPsp, answers

CAPTURED = 1000
P = PaymentStatus

ANSWERS = answers("re_1", "re_2", rejection="amount_too_large", pending="pending")
ANSWER_NAMES = [*sorted(ANSWERS), "unknown_outcome", "not_found", "pending"]


class ScriptedRefunds(ScriptedPsp):
    """Answers every refund call with ``answer`` and records each key a create went out with."""

    refund_reasons: ClassVar[tuple[str, ...] | None] = None

    def create_refund(self, request: RefundRequest, *, idempotency_key: str) -> PaymentOutcome:
        return self._sent(request.refund_reference, idempotency_key, request.amount)

    def fetch_refund(self, ref: RefundRef) -> PaymentOutcome:
        return self._answer(0)


class RefundMachine(MovementMachine):
    TABLES = ("refund_events", "refunds", "payment_events", "payments", "job_replays", "job_attempts", "jobs")
    ANSWERS = ANSWERS

    def __init__(self) -> None:
        super().__init__()
        self.store = self.refunds = RefundStore(self.db)
        self.psp = ScriptedRefunds(ANSWERS["not_found"])
        self.handler = RefundHandler(self.refunds, self.payments, lambda _n: self.psp, clock=self.clock)
        self.reconcile = RefundReconcileHandler(self.refunds, self.payments, lambda _n: self.psp, clock=self.clock,
                                                config=reconcile_config(schedule=(10.0, 10.0), grace=60.0))
        [self.pid] = self.payments.create([NewPayment("shop", "order-1", CAPTURED, "EUR", "sandbox")], charge=False)
        with self.db.begin() as conn:
            assert self.payments.apply(conn, Transition(self.pid, P.CREATED, P.SUCCEEDED, EventSource.CHARGE,
                                                        psp_reference="pay_1"))

    def _handler(self, queue: str, job: Job) -> Callable[[Job, Lease], Outcome | None]:
        return self.reconcile if queue == RECONCILE_QUEUE else self.handler

    # --- rules ---------------------------------------------------------------------------------------------

    @precondition(lambda self: len(self.ids) < 4)
    @rule(amount=st.sampled_from([100, 300, 700, 1000]))
    def ask(self, amount: int) -> None:
        before = self._payment().refunded_amount
        try:
            [rid] = self.refunds.create([NewRefund(self.pid, f"rf-{len(self.ids)}", amount, None, "alice")],
                                        queue=CHARGE_QUEUE, max_attempts=3)
        except RefundRefused:
            assert before + amount > CAPTURED, "refused only beyond the capture"
            return
        assert before + amount <= CAPTURED
        self.ids.append(rid)

    @rule(answer=st.sampled_from(ANSWER_NAMES), stale=st.booleans())
    def run_refund(self, answer: str, stale: bool) -> None:
        self._run_one(CHARGE_QUEUE, answer, stale=stale)

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data(), answer=st.sampled_from(ANSWER_NAMES), recheck=st.booleans())
    def run_reconcile(self, data: st.DataObject, answer: str, recheck: bool) -> None:
        rid = data.draw(st.sampled_from(self.ids), label="refund")
        self.jobs.enqueue([refund_reconcile_row(rid, queue=RECONCILE_QUEUE, recheck=recheck)], max_depth={})
        self._run_one(RECONCILE_QUEUE, answer)

    # --- invariants ----------------------------------------------------------------------------------------

    @invariant()
    def refunded_is_the_sum_of_refunds_not_failed_within_the_capture(self) -> None:
        payment = self._payment()
        owed = sum(r.amount for r in self.refunds.for_payment(self.pid) if r.status is not P.FAILED)
        assert payment.refunded_amount == owed
        assert 0 <= payment.refunded_amount <= payment.captured_amount == CAPTURED


def test_refund_state_machine(db: Database) -> None:
    machine = type("RefundsOn" + db.dialect.title(), (RefundMachine,), {"db": db})
    run_state_machine_as_test(machine)
