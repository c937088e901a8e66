"""A hypothesis ``RuleBasedStateMachine`` that drives refunds of one succeeded payment through the real refund
store, refund job and refund reconcile job, on SQLite and on PostgreSQL, and checks the bound and the refund
state machine after every step.

Rules: ask for a refund (of 1.00, 3.00, 7.00 or 10.00 of a 10.00 capture; the store may refuse it); run the
refund job with one PSP answer (succeeded, other amount, failed, pending, unknown, not found, a saved 500, a lost
answer, a rejection, a connect error, another refund id), or with a stale worker (its lease rescued before its
finish); enqueue and run a refund's reconcile job with one answer, or its recheck; advance the clock (past a
lease, past the grace period, past Stripe's 24 h key retention); a stuck-watcher pass. Jobs run as the worker
runs them (claim, handler with a ``Lease``, the fenced finish carrying ``Outcome.write``).

Checked after every step: **the payment's refunded amount is exactly the sum of its refunds that have not
failed, and never more than it captured**; every refund's events chain (``None -> created``, each ``from`` the
previous ``to``, the last ``to`` its status) through ``recon.refund_rows.REFUND_TRANSITIONS`` only; a refund's
PSP refund id, once stored, never changes; a refund failed as "never reached the PSP" was never sent; and no
refund key went to the PSP after its refund was final.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from psp_adapters.errors import PspError, PspRejectedError, PspTransientError, PspUnknownOutcome
from psp_adapters.protocol import (
    Failed,
    NotFound,
    PaymentOutcome,
    Pending,
    RefundRef,
    RefundRequest,
    Succeeded,
    Unknown,
)
from recon.classify import classify
from recon.clock import FixedClock
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import CHARGE_QUEUE, PaymentStore
from recon.db.refund_store import RefundStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Outcome
from recon.engine.watcher import Watcher
from recon.errors import LeaseLost, RefundRefused
from recon.payments.refund import RefundHandler
from recon.reconcile.refund import RefundReconcileHandler, refund_reconcile_row
from recon.refund_rows import REFUND_TRANSITIONS, NewRefund
from recon.rows import EventSource, Job, NewPayment, PaymentStatus, Transition
from tests.integration.payment_flow import reconcile_config
from tests.verification.test_payment_machine import to_finish

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TTL = 30.0
CAPTURED = 1000
RECONCILE_QUEUE = "reconcile"
TABLES = ("refund_events", "refunds", "payment_events", "payments", "job_replays", "job_attempts", "jobs")
NEVER_REACHED = "never reached the PSP (not found after the grace period)"
P = PaymentStatus

Answer = PaymentOutcome | PspError
#: one PSP answer about the refund being asked for (its amount filled in when the answer is made)
ANSWERS: dict[str, Callable[[int], Answer]] = {
    "succeeded": lambda a: Succeeded(psp_reference="re_1", amount=a, currency="EUR", raw_status="succeeded"),
    "other_amount": lambda a: Succeeded(psp_reference="re_1", amount=a + 1, currency="EUR", raw_status="succeeded"),
    "failed": lambda a: Failed(psp_reference="re_1", amount=a, currency="EUR", raw_status="failed", reason="x"),
    "pending": lambda a: Pending(psp_reference="re_1", amount=a, currency="EUR", raw_status="pending"),
    "unknown": lambda a: Unknown(raw_status="weird"),
    "not_found": lambda a: NotFound(),
    "saved_500": lambda a: PspTransientError("HTTP 500", psp="sandbox", status_code=500, saved=True),
    "unknown_outcome": lambda a: PspUnknownOutcome("read timeout", psp="sandbox"),
    "rejected": lambda a: PspRejectedError("HTTP 400: amount_too_large", psp="sandbox", status_code=400),
    "connect_error": lambda a: PspTransientError("connection refused", psp="sandbox"),
    "other_id": lambda a: Succeeded(psp_reference="re_2", amount=a, currency="EUR", raw_status="succeeded"),
}
ANSWER_NAMES = [*sorted(ANSWERS), "unknown_outcome", "not_found", "pending"]


class ScriptedRefunds:
    """Answers every refund call with ``answer`` and records each key a create went out with."""

    name: ClassVar[str] = "sandbox"
    idempotency_retention: ClassVar[timedelta | None] = timedelta(hours=24)
    refund_reasons: ClassVar[tuple[str, ...] | None] = None

    def __init__(self) -> None:
        self.answer: Callable[[int], Answer] = ANSWERS["not_found"]
        self.sent: list[tuple[str, str]] = []  #: (refund reference, idempotency key) per create

    def create_refund(self, request: RefundRequest, *, idempotency_key: str) -> PaymentOutcome:
        self.sent.append((request.refund_reference, idempotency_key))
        return self._answer(request.amount)

    def fetch_refund(self, ref: RefundRef) -> PaymentOutcome:
        return self._answer(0)

    def create_payment(self, *_: Any, **__: Any) -> PaymentOutcome:
        raise AssertionError("no charge in this machine")

    def fetch_payment(self, *_: Any, **__: Any) -> PaymentOutcome:
        raise AssertionError("no charge in this machine")

    def close(self) -> None:
        pass

    def _answer(self, amount: int) -> PaymentOutcome:
        answer = self.answer(amount)
        if isinstance(answer, PspError):
            raise answer
        return answer


class RefundMachine(RuleBasedStateMachine):
    db: Database  # set by the test before the machine runs

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock(T0)
        self.db.clock = self.clock
        with self.db.begin() as conn:
            for table in TABLES:
                conn.execute(sa.text(f"DELETE FROM {table}"))  # constant table names
        self.jobs = JobStore(self.db)
        self.payments = PaymentStore(self.db)
        self.refunds = RefundStore(self.db)
        self.psp = ScriptedRefunds()
        self.handler = RefundHandler(self.refunds, self.payments, lambda _n: self.psp, clock=self.clock)
        self.reconcile = RefundReconcileHandler(self.refunds, self.payments, lambda _n: self.psp, clock=self.clock,
                                                config=reconcile_config(schedule=(10.0, 10.0), grace=60.0))
        [self.pid] = self.payments.create([NewPayment("shop", "order-1", CAPTURED, "EUR", "sandbox")], charge=False)
        with self.db.begin() as conn:
            assert self.payments.apply(conn, Transition(self.pid, P.CREATED, P.SUCCEEDED, EventSource.CHARGE,
                                                        psp_reference="pay_1"))
        self.ids: list[int] = []
        self.refund_ids: dict[int, str] = {}  #: refund -> the first PSP refund id it was seen to hold
        self.final_at: dict[int, int] = {}  #: refund -> how many creates had gone out when it was first final

    # --- rules ---------------------------------------------------------------------------------------------

    @precondition(lambda self: len(self.ids) < 4)
    @rule(amount=st.sampled_from([100, 300, 700, 1000]))
    def ask(self, amount: int) -> None:
        before = self._refunded()
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
        self._run_one(CHARGE_QUEUE, self.handler, answer, stale=stale)

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data(), answer=st.sampled_from(ANSWER_NAMES), recheck=st.booleans())
    def run_reconcile(self, data: st.DataObject, answer: str, recheck: bool) -> None:
        rid = data.draw(st.sampled_from(self.ids), label="refund")
        self.jobs.enqueue([refund_reconcile_row(rid, queue=RECONCILE_QUEUE, recheck=recheck)], max_depth={})
        self._run_one(RECONCILE_QUEUE, self.reconcile, answer)

    @rule(seconds=st.sampled_from([TTL + 1, 61.0, 25 * 3600.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def watch(self) -> None:
        Watcher(self.jobs).run_once()

    # --- invariants ----------------------------------------------------------------------------------------

    @invariant()
    def refunded_is_the_sum_of_refunds_not_failed_within_the_capture(self) -> None:
        payment = self.payments.get(self.pid)
        assert payment is not None
        owed = sum(r.amount for r in self.refunds.for_payment(self.pid) if r.status is not P.FAILED)
        assert payment.refunded_amount == owed
        assert 0 <= payment.refunded_amount <= payment.captured_amount == CAPTURED

    @invariant()
    def refunds_move_by_their_state_machine_with_one_event_each(self) -> None:
        for refund in self.refunds.for_payment(self.pid):
            events = self.refunds.events(refund.id)
            assert events[0].from_status is None and events[0].to_status == "created"
            status = "created"
            for e in events[1:]:
                assert e.from_status == status, [(x.from_status, x.to_status) for x in events]
                if e.to_status != e.from_status:
                    assert P(e.to_status) in REFUND_TRANSITIONS[P(status)]
                status = e.to_status
            assert status == refund.status

    @invariant()
    def a_psp_refund_id_never_changes(self) -> None:
        for refund in self.refunds.for_payment(self.pid):
            if refund.psp_refund_id is not None:
                assert self.refund_ids.setdefault(refund.id, refund.psp_refund_id) == refund.psp_refund_id

    @invariant()
    def never_reached_means_never_sent_and_final_means_never_sent_again(self) -> None:
        sent = {ref for ref, _ in self.psp.sent}
        for refund in self.refunds.for_payment(self.pid):
            if refund.failure_reason == NEVER_REACHED:
                assert refund.refund_reference not in sent
            keys = {key for ref, key in self.psp.sent if ref == refund.refund_reference}
            assert keys <= {refund.idempotency_key}, "one key per refund, for every attempt"
            if refund.status.final:
                creates = sum(1 for ref, _ in self.psp.sent if ref == refund.refund_reference)
                assert self.final_at.setdefault(refund.id, creates) == creates, "sent again after it was final"

    # --- plumbing ------------------------------------------------------------------------------------------

    def _refunded(self) -> int:
        payment = self.payments.get(self.pid)
        assert payment is not None
        return payment.refunded_amount

    def _run_one(self, queue: str, handler: Callable[[Job, Lease], Outcome | None], answer: str, *,
                 stale: bool = False) -> None:
        claimed = self.jobs.claim(worker="w1", queues=[queue], n=1, ttl=TTL)
        if not claimed:
            return
        [job] = claimed
        lease = Lease(self.jobs, job.id, job.attempts, "w1")
        self.psp.answer = ANSWERS[answer]
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
        before = [(r.status, len(self.refunds.events(r.id))) for r in self.refunds.for_payment(self.pid)]
        finish = to_finish(job, outcome)
        try:
            matched = self.jobs.finish(worker="w1", finishes=[finish], write=outcome.write)
        except Exception as exc:  # the write raised: rolled back; finish as the error classifies
            finish = to_finish(job, classify(exc))
            matched = self.jobs.finish(worker="w1", finishes=[finish])
        if stale:
            assert matched == set(), "a rescued lease's finish matches nothing"
            after = [(r.status, len(self.refunds.events(r.id))) for r in self.refunds.for_payment(self.pid)]
            assert after == before, "and writes nothing"
        else:
            assert matched == {job.id}
        assert json.loads(json.dumps(job.payload))  # a JSON payload, as stored


def test_refund_state_machine(db: Database) -> None:
    machine = type("RefundsOn" + db.dialect.title(), (RefundMachine,), {"db": db})
    run_state_machine_as_test(machine)
