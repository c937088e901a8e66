"""A hypothesis ``RuleBasedStateMachine`` that drives captures and cancels of one authorised manual-capture payment
through the real modification store, capture and cancel jobs and their reconcile job, on SQLite and on
PostgreSQL, and checks the claim and the state machines after every step (the refund machine's sibling,
tests/verification/test_refund_machine.py, whose job harness it shares).

Rules: ask for a capture (of 3.00, 7.00, 10.00 or all of a 10.00 authorisation, or 10.01: refused) or a cancel
(the store may refuse either); run a capture or cancel job with one PSP answer (succeeded, captured less, captured
more, failed, pending, unknown, not found, a saved 500, a lost answer, a rejection, a connect error, another id),
or with a stale worker (its lease rescued before its finish); run a modification's reconcile job with one answer;
advance the clock (past a lease, past the grace period, past Stripe's 24 h key retention); a watcher pass.

Checked after every step: **the payment's claim is exactly the amount of its one capture or cancel that has not
failed (none: 0), never more than it authorised**; the payment is authorised until a capture or cancel
succeeds, then succeeded with ``captured_amount`` what the PSP captured (at most the capture's amount) or failed,
never both; every modification's events chain by ``REFUND_TRANSITIONS``; a PSP id never changes; a modification
failed as "never reached the PSP" was never sent; one key per modification, never sent again once final.
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
    ModificationRequest,
    NotFound,
    PaymentOutcome,
    Pending,
    Succeeded,
    Unknown,
)
from recon.classify import classify
from recon.clock import FixedClock
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import CHARGE_QUEUE, PaymentStore
from recon.engine.lease import Lease
from recon.engine.outcome import Complete, Outcome
from recon.engine.watcher import Watcher
from recon.errors import LeaseLost, ModificationRefused
from recon.modification_rows import CANCEL, CAPTURE, NewModification
from recon.payments.modification import ModificationHandler
from recon.reconcile.modification import ModificationReconcileHandler, modification_reconcile_row
from recon.refund_rows import REFUND_TRANSITIONS
from recon.rows import EventSource, Job, NewPayment, PaymentStatus, Transition
from tests.integration.payment_flow import reconcile_config
from tests.verification.test_payment_machine import to_finish

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TTL = 30.0
AUTHORISED = 1000
RECONCILE_QUEUE = "reconcile"
TABLES = ("modification_events", "modifications", "payment_events", "payments", "job_replays", "job_attempts",
          "jobs")
NEVER_REACHED = "never reached the PSP (not found after the grace period)"
P = PaymentStatus

Answer = PaymentOutcome | PspError
#: one PSP answer about the capture or cancel being asked for (its amount filled in when the answer is made)
ANSWERS: dict[str, Callable[[int], Answer]] = {
    "succeeded": lambda a: Succeeded(psp_reference="mod_1", amount=a, currency="EUR", raw_status="succeeded"),
    "captured_less": lambda a: Succeeded(psp_reference="mod_1", amount=max(a - 100, 1), currency="EUR",
                                         raw_status="succeeded"),
    "captured_more": lambda a: Succeeded(psp_reference="mod_1", amount=a + 1, currency="EUR", raw_status="succeeded"),
    "failed": lambda a: Failed(psp_reference="mod_1", amount=a, currency="EUR", raw_status="failed", reason="x"),
    "pending": lambda a: Pending(psp_reference="mod_1", amount=a, currency="EUR", raw_status="received"),
    "unknown": lambda a: Unknown(raw_status="weird"),
    "not_found": lambda a: NotFound(),
    "saved_500": lambda a: PspTransientError("HTTP 500", psp="sandbox", status_code=500, saved=True),
    "unknown_outcome": lambda a: PspUnknownOutcome("read timeout", psp="sandbox"),
    "rejected": lambda a: PspRejectedError("HTTP 400: payment_intent_unexpected_state", psp="sandbox",
                                           status_code=400),
    "connect_error": lambda a: PspTransientError("connection refused", psp="sandbox"),
    "other_id": lambda a: Succeeded(psp_reference="mod_2", amount=a, currency="EUR", raw_status="succeeded"),
}
ANSWER_NAMES = [*sorted(ANSWERS), "unknown_outcome", "not_found", "pending"]


class ScriptedCaptures:
    """Answers every capture, cancel and lookup with ``answer`` and records each key a request went out with."""

    name: ClassVar[str] = "sandbox"
    idempotency_retention: ClassVar[timedelta | None] = timedelta(hours=24)

    def __init__(self) -> None:
        self.answer: Callable[[int], Answer] = ANSWERS["not_found"]
        self.sent: list[tuple[str, str]] = []  #: (modification reference, idempotency key) per request

    def modify_payment(self, request: ModificationRequest, *, idempotency_key: str) -> PaymentOutcome:
        self.sent.append((request.modification_reference, idempotency_key))
        return self._answer(request.amount)

    def fetch_modification(self, request: ModificationRequest) -> PaymentOutcome:
        return self._answer(request.amount)

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


class CaptureMachine(RuleBasedStateMachine):
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
        self.mods = ModificationStore(self.db, self.payments)
        self.psp = ScriptedCaptures()
        self.handlers = {kind: ModificationHandler(kind, self.mods, self.payments, lambda _n: self.psp,
                                                   clock=self.clock) for kind in (CAPTURE, CANCEL)}
        self.reconcile = ModificationReconcileHandler(self.mods, self.payments, lambda _n: self.psp, clock=self.clock,
                                                      config=reconcile_config(schedule=(10.0, 10.0), grace=60.0))
        [self.pid] = self.payments.create([NewPayment("shop", "order-1", AUTHORISED, "EUR", "sandbox",
                                                      capture_mode="manual")], charge=False)
        with self.db.begin() as conn:
            assert self.payments.apply(conn, Transition(self.pid, P.CREATED, P.AUTHORISED, EventSource.CHARGE,
                                                        psp_reference="pay_1"))
        self.ids: list[int] = []
        self.psp_ids: dict[int, str] = {}  #: modification -> the first PSP id it was seen to hold
        self.final_at: dict[int, int] = {}  #: modification -> requests sent when it was first final

    # --- rules ---------------------------------------------------------------------------------------------

    @precondition(lambda self: len(self.ids) < 4)
    @rule(kind=st.sampled_from([CAPTURE, CANCEL]), amount=st.sampled_from([300, 700, 1000, 1001, None]))
    def ask(self, kind: str, amount: int | None) -> None:
        before = self._payment()
        try:
            mid = self.mods.create(NewModification(self.pid, kind, f"m-{len(self.ids)}", "alice",
                                                   amount=amount if kind == CAPTURE else None),
                                   queue=CHARGE_QUEUE, max_attempts=3)
        except ModificationRefused:
            assert (before.status is not P.AUTHORISED or before.authorisation_claimed > 0
                    or (kind == CAPTURE and (amount or 0) > AUTHORISED)), "refused only by a rule"
            return
        assert before.status is P.AUTHORISED and before.authorisation_claimed == 0
        self.ids.append(mid)

    @rule(answer=st.sampled_from(ANSWER_NAMES), stale=st.booleans())
    def run_modification(self, answer: str, stale: bool) -> None:
        self._run_one(CHARGE_QUEUE, answer, stale=stale)

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data(), answer=st.sampled_from(ANSWER_NAMES))
    def run_reconcile(self, data: st.DataObject, answer: str) -> None:
        mid = data.draw(st.sampled_from(self.ids), label="modification")
        self.jobs.enqueue([modification_reconcile_row(mid, queue=RECONCILE_QUEUE)], max_depth={})
        self._run_one(RECONCILE_QUEUE, answer)

    @rule(seconds=st.sampled_from([TTL + 1, 61.0, 25 * 3600.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def watch(self) -> None:
        Watcher(self.jobs).run_once()

    # --- invariants ----------------------------------------------------------------------------------------

    @invariant()
    def the_claim_is_the_one_live_modification_within_the_authorisation(self) -> None:
        payment = self._payment()
        live = [m for m in self.mods.for_payment(self.pid) if m.status is not P.FAILED]
        assert len(live) <= 1, [(m.kind, m.status) for m in live]
        assert payment.authorisation_claimed == sum(m.amount for m in live)
        assert 0 <= payment.authorisation_claimed <= payment.amount == AUTHORISED

    @invariant()
    def the_payment_follows_its_confirmed_capture_or_cancel(self) -> None:
        payment = self._payment()
        done = [m for m in self.mods.for_payment(self.pid) if m.status is P.SUCCEEDED]
        assert len(done) <= 1
        if not done:
            assert payment.status is P.AUTHORISED and payment.captured_amount == 0
        elif done[0].kind == CAPTURE:
            assert payment.status is P.SUCCEEDED
            assert 0 < payment.captured_amount <= done[0].amount
        else:
            assert payment.status is P.FAILED and payment.captured_amount == 0

    @invariant()
    def modifications_move_by_their_state_machine_with_one_event_each(self) -> None:
        for mod in self.mods.for_payment(self.pid):
            events = self.mods.events(mod.id)
            assert events[0].from_status is None and events[0].to_status == "created"
            status = "created"
            for e in events[1:]:
                assert e.from_status == status, [(x.from_status, x.to_status) for x in events]
                if e.to_status != e.from_status:
                    assert P(e.to_status) in REFUND_TRANSITIONS[P(status)]
                status = e.to_status
            assert status == mod.status

    @invariant()
    def a_psp_id_never_changes(self) -> None:
        for mod in self.mods.for_payment(self.pid):
            if mod.psp_modification_id is not None:
                assert self.psp_ids.setdefault(mod.id, mod.psp_modification_id) == mod.psp_modification_id

    @invariant()
    def never_reached_means_never_sent_and_final_means_never_sent_again(self) -> None:
        sent = {ref for ref, _ in self.psp.sent}
        for mod in self.mods.for_payment(self.pid):
            if mod.failure_reason == NEVER_REACHED:
                assert mod.modification_reference not in sent
            keys = {key for ref, key in self.psp.sent if ref == mod.modification_reference}
            assert keys <= {mod.idempotency_key}, "one key per modification, for every attempt"
            if mod.status.final:
                requests = sum(1 for ref, _ in self.psp.sent if ref == mod.modification_reference)
                assert self.final_at.setdefault(mod.id, requests) == requests, "sent again after it was final"

    # --- plumbing ------------------------------------------------------------------------------------------

    def _payment(self) -> Any:
        payment = self.payments.get(self.pid)
        assert payment is not None
        return payment

    def _run_one(self, queue: str, answer: str, *, stale: bool = False) -> None:
        claimed = self.jobs.claim(worker="w1", queues=[queue], n=1, ttl=TTL)
        if not claimed:
            return
        [job] = claimed
        handler: Callable[[Job, Lease], Outcome | None] = (
            self.reconcile if queue == RECONCILE_QUEUE else self.handlers[job.kind])
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
        before = [(m.status, len(self.mods.events(m.id))) for m in self.mods.for_payment(self.pid)]
        finish = to_finish(job, outcome)
        try:
            matched = self.jobs.finish(worker="w1", finishes=[finish], write=outcome.write)
        except Exception as exc:  # the write raised: rolled back; finish as the error classifies
            finish = to_finish(job, classify(exc))
            matched = self.jobs.finish(worker="w1", finishes=[finish])
        if stale:
            assert matched == set(), "a rescued lease's finish matches nothing"
            after = [(m.status, len(self.mods.events(m.id))) for m in self.mods.for_payment(self.pid)]
            assert after == before, "and writes nothing"
        else:
            assert matched == {job.id}
        assert json.loads(json.dumps(job.payload))  # a JSON payload, as stored


def test_capture_state_machine(db: Database) -> None:
    machine = type("CapturesOn" + db.dialect.title(), (CaptureMachine,), {"db": db})
    run_state_machine_as_test(machine)
