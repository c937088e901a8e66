"""A hypothesis ``RuleBasedStateMachine`` that drives payments through the real charge and reconcile handlers, on
SQLite and on PostgreSQL, and checks the payment state machine and its audit trail after every step.

Rules: create a payment (with its charge job); run the charge job with one PSP answer, now or a day later
(past the PSP's idempotency retention, so that the handler looks the payment up first) (an outcome or an
error: succeeded, other amount, declined, pending, unknown, not found, action required, a saved 500, an
unknown outcome, a rejection, a connect error); the same with a stale worker (the lease expires and the
watcher rescues it between the handler's answer and its finish); enqueue and run a reconcile job with one
PSP answer; resolve a payment in review by hand; advance the clock (past a lease, past the reconcile grace
period); a stuck-watcher pass. Jobs run as the worker runs them: claim, the handler with a
``Lease``, then the fenced finish carrying the handler's ``Outcome.write`` (a write that raises rolls back
and the attempt finishes as its error classifies, as ``Worker._finish_with_write`` does).

Checked after every step, per payment: every status change is one event and the events chain (the first
``None -> created``, each ``from`` the previous ``to``, the last ``to`` the payment's status); every change
is a transition of ``recon.rows.TRANSITIONS``; an event with ``from = to`` is evidence without a change; a
final status (succeeded, failed) changes only to ``needs_review``, and ``needs_review`` only by hand.

What is not here because it has not landed: PSP webhooks, and the review workflow (no command resolves a
payment in review yet). The manual resolution below is the only one the code has: ``PaymentStore.apply``
with ``EventSource.MANUAL``, the compare-and-set every writer uses.
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
    ActionRequired,
    ChargeRequest,
    Failed,
    NotFound,
    PaymentOutcome,
    Pending,
    PspRef,
    Succeeded,
    Unknown,
)
from recon.classify import classify
from recon.clock import FixedClock
from recon.db.database import Database
from recon.db.jobs_store import EnqueueRow, Finish, JobStore
from recon.db.payment_store import CHARGE_QUEUE, NewPayment, PaymentStore, Transition
from recon.engine.lease import Lease
from recon.engine.outcome import Cancel, Complete, Dead, Outcome, Retry, Snooze
from recon.engine.watcher import Watcher
from recon.errors import LeaseLost
from recon.payments.charge import ChargeHandler
from recon.reconcile.handler import ReconcileHandler, reconcile_key
from recon.rows import TRANSITIONS, EventSource, Job, PaymentStatus
from tests.integration.payment_flow import reconcile_config

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TTL = 30.0
AMOUNT = 2500
RECONCILE_QUEUE = "reconcile"
TABLES = ("payment_events", "payments", "job_replays", "job_attempts", "jobs")
P = PaymentStatus

Answer = PaymentOutcome | PspError
#: one PSP answer, made for the payment's amount (an outcome, or an error the adapter raises)
ANSWERS: dict[str, Callable[[], Answer]] = {
    "succeeded": lambda: Succeeded(psp_reference="pi_1", amount=AMOUNT, currency="EUR", raw_status="succeeded"),
    "other_amount": lambda: Succeeded(psp_reference="pi_1", amount=AMOUNT + 1, currency="EUR"),
    "declined": lambda: Failed(psp_reference="pi_1", reason="card_declined", raw_status="failed"),
    "pending": lambda: Pending(psp_reference="pi_1", raw_status="processing"),
    "unknown": lambda: Unknown(raw_status="weird"),
    "not_found": lambda: NotFound(),
    "action_required": lambda: ActionRequired(psp_reference="pi_1", raw_status="requires_action"),
    "saved_500": lambda: PspTransientError("HTTP 500", psp="sandbox", status_code=500, saved=True),
    "unknown_outcome": lambda: PspUnknownOutcome("read timeout", psp="sandbox"),
    "rejected": lambda: PspRejectedError("HTTP 400: invalid amount", psp="sandbox", status_code=400),
    "connect_error": lambda: PspTransientError("connection refused", psp="sandbox"),
}


#: the answers that lead somewhere further (a lost answer, a lookup that finds nothing, a saved 500) weigh more
ANSWER_NAMES = [*sorted(ANSWERS), "unknown_outcome", "unknown_outcome", "not_found", "not_found", "saved_500"]


class ScriptedPsp:
    """Answers every call (create_payment or fetch_payment) with ``answer``."""

    name: ClassVar[str] = "sandbox"
    idempotency_retention: ClassVar[timedelta | None] = timedelta(hours=24)

    def __init__(self) -> None:
        self.answer: Answer = NotFound()
        self.keys: dict[str, set[str]] = {}  #: merchant reference -> idempotency keys its charges went out with

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        self.keys.setdefault(request.merchant_reference, set()).add(idempotency_key)
        return self._answer()

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        return self._answer()

    def iter_settlements(self, since: datetime, until: datetime, *, merchant_accounts: Any = ()) -> Any:
        return iter(())

    def close(self) -> None:
        pass

    def _answer(self) -> PaymentOutcome:
        if isinstance(self.answer, PspError):
            raise self.answer
        return self.answer


def to_finish(job: Job, outcome: Outcome) -> Finish:
    """The engine's finish for a handler's outcome (``Worker._to_finish``, with no backoff delay)."""
    match outcome:
        case Complete():
            return Finish(job.id, job.attempts, "succeeded", "succeeded")
        case Retry(error_kind=kind, error=error):
            if job.attempts >= job.max_attempts:
                return Finish(job.id, job.attempts, "dead", "dead", error_kind=kind, error=error)
            return Finish(job.id, job.attempts, "retryable", "retried", delay=1.0, error_kind=kind, error=error)
        case Snooze(delay=delay, reason=reason):
            return Finish(job.id, job.attempts, "pending", "snoozed", delay=delay.total_seconds(), error=reason,
                          bump=1)
        case Dead(error_kind=kind, error=error):
            return Finish(job.id, job.attempts, "dead", "dead", error_kind=kind, error=error)
        case Cancel(reason=reason):
            return Finish(job.id, job.attempts, "canceled", "canceled", error=reason)
    raise TypeError(outcome)


class PaymentMachine(RuleBasedStateMachine):
    db: Database  # set by the test before the machine runs

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock(T0)
        self.db.clock = self.clock
        with self.db.begin() as conn:
            for table in TABLES:
                conn.execute(sa.text(f"DELETE FROM {table}"))  # constant table names
        self.jobs = JobStore(self.db)
        self.ledger = PaymentStore(self.db)
        self.psp = ScriptedPsp()
        self.charge = ChargeHandler(self.ledger, lambda _name: self.psp, clock=self.clock)
        self.reconcile = ReconcileHandler(self.ledger, lambda _name: self.psp, clock=self.clock,
                                          config=reconcile_config(schedule=(10.0, 10.0), grace=60.0))
        self.payments: list[int] = []
        self.seen_events: dict[int, int] = {}  #: payment -> events checked so far

    # --- rules ---------------------------------------------------------------------------------------------

    @precondition(lambda self: len(self.payments) < 2)
    @rule()
    def create(self) -> None:
        n = len(self.payments)
        [pid] = self.ledger.create([NewPayment("AcmeShopEU", f"order-{n}", AMOUNT, "EUR", "sandbox",
                                               payment_method="pm_card_visa", customer_reference="cus_1")],
                                   max_attempts=3)
        self.payments.append(pid)

    @rule(answer=st.sampled_from(ANSWER_NAMES))
    def run_charge(self, answer: str) -> None:
        self._run_one(CHARGE_QUEUE, self.charge, answer)

    @rule(answer=st.sampled_from(ANSWER_NAMES))
    def run_charge_stale(self, answer: str) -> None:
        """The worker pauses after the PSP answered: its lease expires and is rescued before it finishes."""
        self._run_one(CHARGE_QUEUE, self.charge, answer, stale=True)

    @rule(answer=st.sampled_from(ANSWER_NAMES))
    def run_charge_after_retention(self, answer: str) -> None:
        """A day later: the key may be forgotten, so the handler looks the payment up before re-sending."""
        self.clock.advance(25 * 3600.0)
        self._run_one(CHARGE_QUEUE, self.charge, answer)

    @precondition(lambda self: bool(self.payments))
    @rule(data=st.data(), answer=st.sampled_from(ANSWER_NAMES))
    def run_reconcile(self, data: st.DataObject, answer: str) -> None:
        pid = data.draw(st.sampled_from(self.payments), label="payment")
        row = EnqueueRow(queue=RECONCILE_QUEUE, kind="reconcile", payload_json=json.dumps({"payment_id": pid}),
                         priority=0, run_at=None, delay=0.0, max_attempts=3, unique_key=reconcile_key(pid),
                         tenant=None)
        self.jobs.enqueue([row], max_depth={})
        self._run_one(RECONCILE_QUEUE, self.reconcile, answer)

    @precondition(lambda self: any(self._status(p) is P.NEEDS_REVIEW for p in self.payments))
    @rule(data=st.data(), resolution=st.sampled_from([P.SUCCEEDED, P.FAILED]))
    def resolve_by_hand(self, data: st.DataObject, resolution: PaymentStatus) -> None:
        pid = data.draw(st.sampled_from([p for p in self.payments if self._status(p) is P.NEEDS_REVIEW]))
        with self.db.begin() as conn:
            assert self.ledger.apply(conn, Transition(pid, P.NEEDS_REVIEW, resolution, EventSource.MANUAL,
                                                      details={"by": "hypothesis"}))
        assert self._status(pid) is resolution

    @rule(seconds=st.sampled_from([1.0, TTL + 1.0, 61.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def watcher_pass(self) -> None:
        Watcher(self.jobs).run_once()

    # --- the invariants ------------------------------------------------------------------------------------

    @invariant()
    def audit_chain_and_state_machine(self) -> None:
        for pid in self.payments:
            payment = self.ledger.get(pid)
            assert payment is not None
            events = self.ledger.events(pid)
            assert events and (events[0].from_status, events[0].to_status) == (None, "created")
            previous = "created"
            for event in events[1:]:
                assert event.from_status == previous, f"payment {pid}: the events do not chain: {events}"
                frm, to = P(event.from_status), P(event.to_status)
                if frm is not to:
                    assert to in TRANSITIONS[frm], f"payment {pid}: {frm} -> {to} is no transition"
                    if frm.final:
                        assert to is P.NEEDS_REVIEW or (frm is P.NEEDS_REVIEW and event.source == "manual"), \
                            f"payment {pid}: a final status changed to {to} ({event.source})"
                previous = event.to_status
            assert previous == payment.status, f"payment {pid}: status {payment.status}, events end at {previous}"
            assert len(events) >= self.seen_events.get(pid, 0), "the audit trail only grows"
            self.seen_events[pid] = len(events)

    @invariant()
    def keys_move_only_with_proof(self) -> None:
        """Charges go out under the payment's key generations only, and a generation moves only with its audit
        event (the PSP proved it holds no payment for the previous key and has forgotten it)."""
        for pid in self.payments:
            payment = self.ledger.get(pid)
            assert payment is not None
            base = payment.idempotency_key
            allowed = {base} | {f"{base}-g{g}" for g in range(1, payment.key_generation + 1)}
            assert self.psp.keys.get(payment.merchant_reference, set()) <= allowed
            moves = [e for e in self.ledger.events(pid) if (e.details or {}).get("key_generation")]
            assert [e.details["key_generation"] for e in moves if e.details] == list(
                range(1, payment.key_generation + 1))
            assert all(e.from_status == e.to_status for e in moves), "a new key generation changes no status"

    # --- helpers -------------------------------------------------------------------------------------------

    def _status(self, pid: int) -> PaymentStatus | None:
        payment = self.ledger.get(pid)
        return payment.status if payment else None

    def _run_one(self, queue: str, handler: Callable[[Job, Lease], Outcome | None], answer: str, *,
                 stale: bool = False) -> None:
        claimed = self.jobs.claim(worker="w1", queues=[queue], n=1, ttl=TTL)
        if not claimed:
            return
        [job] = claimed
        lease = Lease(self.jobs, job.id, job.attempts, "w1")
        self.psp.answer = ANSWERS[answer]()
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
        pid = int(job.payload["payment_id"])
        before = (self._status(pid), len(self.ledger.events(pid)))
        finish = to_finish(job, outcome)
        try:
            matched = self.jobs.finish(worker="w1", finishes=[finish], write=outcome.write)
        except Exception as exc:  # the write raised: rolled back; finish as the error classifies
            finish = to_finish(job, classify(exc))
            matched = self.jobs.finish(worker="w1", finishes=[finish])
        if stale:
            assert matched == set(), "a rescued lease's finish matches nothing"
            assert (self._status(pid), len(self.ledger.events(pid))) == before, "and writes nothing"
        else:
            assert matched == {job.id}


def test_payment_state_machine(db: Database) -> None:
    machine = type("PaymentsOn" + db.dialect.title(), (PaymentMachine,), {"db": db})
    run_state_machine_as_test(machine)
