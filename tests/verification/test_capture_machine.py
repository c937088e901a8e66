"""A hypothesis ``RuleBasedStateMachine`` that drives captures and cancels of one authorised manual-capture payment
through the real modification store, capture and cancel jobs and their reconcile job, on SQLite and on
PostgreSQL, and checks the claim and the state machines after every step (the refund machine's sibling:
both are a tests/verification/movement_machine.py, whose rules, job harness and shared invariants they take).

Rules: ask for a capture (of 3.00, 7.00, 10.00 or all of a 10.00 authorisation, or 10.01: refused) or a cancel
(the store may refuse either); run a capture or cancel job with one PSP answer (succeeded, captured less, captured
more, failed, pending, unknown, not found, a saved 500, a lost answer, a rejection, a connect error, another id),
or with a stale worker (its lease rescued before its finish); run a modification's reconcile job with one answer;
advance the clock (past a lease, past the grace period, past Stripe's 24 h key retention); a watcher pass.

Checked after every step: **the payment's claim is exactly the amount of its one capture or cancel that has not
failed (none: 0), never more than it authorised**; the payment is authorised until a capture or cancel
succeeds, then succeeded with ``captured_amount`` what the PSP captured (at most the capture's amount) or failed,
never both; every modification's events chain by ``MODIFICATION_TRANSITIONS``; a PSP id never changes; a modification
failed as "never reached the PSP" was never sent; one key per modification, never sent again once final.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule, run_state_machine_as_test

from psp_adapters.protocol import ModificationRequest, PaymentOutcome, Succeeded
from recon.db.database import Database
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import CHARGE_QUEUE
from recon.engine.lease import Lease
from recon.engine.outcome import Outcome
from recon.errors import ModificationRefused
from recon.modification_rows import CANCEL, CAPTURE, NewModification
from recon.payments.modification import ModificationHandler
from recon.reconcile.modification import ModificationReconcileHandler, modification_reconcile_row
from recon.rows import EventSource, Job, NewPayment, PaymentStatus, Transition
from tests.integration.payment_flow import reconcile_config
from tests.verification.movement_machine import RECONCILE_QUEUE, MovementMachine, ScriptedPsp, answers

AUTHORISED = 1000
P = PaymentStatus

#: "other_amount": captured more than asked
ANSWERS = {**answers("mod_1", "mod_2", rejection="payment_intent_unexpected_state", pending="received"),
           "captured_less": lambda a: Succeeded(psp_reference="mod_1", amount=max(a - 100, 1), currency="EUR",
                                                raw_status="succeeded")}
ANSWER_NAMES = [*sorted(ANSWERS), "unknown_outcome", "not_found", "pending"]


class ScriptedCaptures(ScriptedPsp):
    """Answers every capture, cancel and lookup with ``answer`` and records each key a request went out with."""

    def modify_payment(self, request: ModificationRequest, *, idempotency_key: str) -> PaymentOutcome:
        return self._sent(request.modification_reference, idempotency_key, request.amount)

    def fetch_modification(self, request: ModificationRequest) -> PaymentOutcome:
        return self._answer(request.amount)


class CaptureMachine(MovementMachine):
    TABLES = ("modification_events", "modifications", "payment_events", "payments", "job_replays", "job_attempts",
              "jobs")
    ANSWERS = ANSWERS

    def __init__(self) -> None:
        super().__init__()
        self.store = self.mods = ModificationStore(self.db, self.payments)
        self.psp = ScriptedCaptures(ANSWERS["not_found"])
        self.handlers = {kind: ModificationHandler(kind, self.mods, self.payments, lambda _n: self.psp,
                                                   clock=self.clock) for kind in (CAPTURE, CANCEL)}
        self.reconcile = ModificationReconcileHandler(self.mods, self.payments, lambda _n: self.psp, clock=self.clock,
                                                      config=reconcile_config(schedule=(10.0, 10.0), grace=60.0))
        [self.pid] = self.payments.create([NewPayment("shop", "order-1", AUTHORISED, "EUR", "sandbox",
                                                      capture_mode="manual")], charge=False)
        with self.db.begin() as conn:
            assert self.payments.apply(conn, Transition(self.pid, P.CREATED, P.AUTHORISED, EventSource.CHARGE,
                                                        psp_reference="pay_1"))

    def _handler(self, queue: str, job: Job) -> Callable[[Job, Lease], Outcome | None]:
        return self.reconcile if queue == RECONCILE_QUEUE else self.handlers[job.kind]

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


def test_capture_state_machine(db: Database) -> None:
    machine = type("CapturesOn" + db.dialect.title(), (CaptureMachine,), {"db": db})
    run_state_machine_as_test(machine)
