"""A hypothesis ``RuleBasedStateMachine`` that drives payments through the real charge and reconcile handlers, on
SQLite and on PostgreSQL, and checks the payment state machine and its audit trail after every step.

Rules: create a payment (with its charge job); run the charge job with one PSP answer, now or a day later (past the
PSP's idempotency retention, so that the handler looks the payment up first) (an outcome or an error: succeeded,
other amount, declined, pending, unknown, not found, action required, a saved 500, an unknown outcome, a rejection,
a connect error, a success of another PSP reference than the one the payment's earlier answers gave); the same with
a stale worker (the lease expires and the watcher rescues it between the handler's answer and its finish); enqueue
and run a reconcile job with one PSP answer; a PSP webhook (succeeded, other amount, failed, pending, action
required, unknown, refund, dispute) for one of the payments, named by the PSP's reference or only by ours, or for a
payment we do not know, or foreign news naming one of ours (``push_foreign_webhook``: our merchant reference with
another PSP reference than ours, or our references from another merchant account), or a redelivery of an earlier
one, stored as ``recon serve`` stores it (``WebhookStore.intake``: the event and its job); run up to four webhook
jobs and finish them together as the finisher does (``JobStore.finish_together`` with their ``BatchWrite``, each
alone when that fails), or with their leases rescued meanwhile; resolve a payment in review at the review desk
(``ReviewDesk.resolve``, with the PSP's answer of the moment, overriding it or not) or ask the desk for a recheck
and run it; advance the clock (past a lease, past the reconcile grace period); a stuck-watcher pass. Jobs run as
the worker runs them: claim, the handler with a ``Lease``, then the fenced finish carrying the handler's
``Outcome.write`` (a write that raises rolls back and the attempt finishes as its error classifies, as
``Worker._finish_with_write`` does).

Checked after every step, per payment: every status change is one event and the events chain (the first
``None -> created``, each ``from`` the previous ``to``, the last ``to`` the payment's status); every change
is a transition of ``recon.rows.TRANSITIONS``; an event with ``from = to`` is evidence without a change; a
final status (succeeded, failed) changes only to ``needs_review``, and ``needs_review`` only by hand, at the
review desk, with the operator in its event. Per webhook event: it is applied once, in the finish of its
job that committed (its job succeeded exactly when it is no longer ``received``); the webhook evidence in a
payment's audit trail is exactly its applied events, one event each; an event for a payment we do not know,
or from another merchant account than the payment's, is kept as ``unknown_payment``; a redelivery stores
nothing and queues nothing. Per payment, whatever the evidence: **a stored PSP reference never changes** (once a
payment holds one, it holds that one for good), and evidence naming another one never moves the payment to
``succeeded`` or ``failed``.
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
    Reversed,
    Succeeded,
    Unknown,
    WebhookEvent,
)
from recon import Settings
from recon.classify import classify
from recon.clock import FixedClock
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import CHARGE_QUEUE, PaymentStore
from recon.db.webhook_store import WebhookStore
from recon.engine.client import Client
from recon.engine.lease import Lease
from recon.engine.outcome import BatchWrite, Cancel, Complete, Dead, Outcome, Retry, Snooze
from recon.engine.watcher import Watcher
from recon.errors import LeaseLost, ReviewRefused
from recon.payments.charge import ChargeHandler
from recon.payments.guard import Unguarded
from recon.reconcile.handler import ReconcileHandler, reconcile_key
from recon.reconcile.webhook import WebhookHandler
from recon.review import ReviewDesk
from recon.rows import TRANSITIONS, EnqueueRow, Finish, Job, NewPayment, PaymentStatus
from recon.webhook_rows import WebhookState
from recon.webhooks.config import QUEUE_DEFAULT as WEBHOOK_QUEUE
from tests.integration.payment_flow import reconcile_config

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TTL = 30.0
AMOUNT = 2500
RECONCILE_QUEUE = "reconcile"
TABLES = ("payment_events", "payments", "webhook_events", "job_replays", "job_attempts", "jobs")
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
    # the PSP answers about another payment than the one its reference (pi_1) names: never ours replaced
    "other_reference": lambda: Succeeded(psp_reference="pi_2", amount=AMOUNT, currency="EUR", raw_status="succeeded"),
}


#: the answers that lead somewhere further (a lost answer, a lookup that finds nothing, a saved 500) weigh more
ANSWER_NAMES = [*sorted(ANSWERS), "unknown_outcome", "unknown_outcome", "not_found", "not_found", "saved_500"]

#: what one webhook says about a payment, made for the payment's amount (psp_reference, merchant_reference)
NEWS: dict[str, Callable[[str | None, str], PaymentOutcome | Reversed]] = {
    "succeeded": lambda ref, m: Succeeded(psp_reference=ref, merchant_reference=m, amount=AMOUNT, currency="EUR",
                                          raw_status="succeeded"),
    "other_amount": lambda ref, m: Succeeded(psp_reference=ref, merchant_reference=m, amount=AMOUNT + 1,
                                             currency="EUR", raw_status="succeeded"),
    "failed": lambda ref, m: Failed(psp_reference=ref, merchant_reference=m, reason="card_declined",
                                    raw_status="requires_payment_method"),
    "pending": lambda ref, m: Pending(psp_reference=ref, merchant_reference=m, raw_status="processing"),
    "action_required": lambda ref, m: ActionRequired(psp_reference=ref, merchant_reference=m,
                                                     raw_status="requires_action"),
    "unknown": lambda ref, m: Unknown(psp_reference=ref, merchant_reference=m, raw_status="weird"),
    "refund": lambda ref, m: Reversed(psp_reference=ref, merchant_reference=m, amount=AMOUNT, currency="EUR",
                                      kind="refund", reason="requested_by_customer"),
    "dispute": lambda ref, m: Reversed(psp_reference=ref, merchant_reference=m, amount=AMOUNT, currency="EUR",
                                       kind="dispute", reason="fraudulent"),
}
#: a webhook's target: one of the payments, by its index, or a payment we do not know
UNKNOWN = -1
#: news naming one of our payments that is not about it: our merchant reference with another PSP reference
#: (another PaymentIntent carrying our metadata); our payment's references from another merchant account
FOREIGN = ["another_reference", "another_account"]
ACCOUNT, OTHER_ACCOUNT, OTHER_REFERENCE = "AcmeShopEU", "AcmeShopUS", "pi_other"
#: the PSP answers with which the review desk refuses a resolution without --override (docs/operations.md, the
#: module docstring of recon.review): its final answer contradicts it (it says succeeded and the operator chose
#: failed; it says failed, or has no such payment, and the operator chose succeeded), or it could not be asked
_NOT_ASKED = {"saved_500", "unknown_outcome", "rejected", "connect_error"}
REFUSED = {"failed": {"succeeded", "other_amount"} | _NOT_ASKED,
           "succeeded": {"declined", "not_found"} | _NOT_ASKED}
#: the desk's answers, those it refuses on first (hypothesis draws the first of a list more often)
DESK_ANSWERS = ["succeeded", "declined", "not_found", "connect_error", "saved_500",
                *sorted(set(ANSWERS) - {"succeeded", "declined", "not_found", "connect_error", "saved_500"})]


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
        self.webhooks = WebhookStore(self.db)
        self.webhook = WebhookHandler(self.ledger, self.webhooks)
        self.desk = ReviewDesk(self.ledger, self.jobs, Client(self.jobs, Settings()), lambda _name: self.psp,
                               Unguarded(), reconcile_queue=RECONCILE_QUEUE, psp_names=["sandbox"], clock=self.clock)
        self.payments: list[int] = []
        self.seen_events: dict[int, int] = {}  #: payment -> events checked so far
        self.pushed: list[WebhookEvent] = []  #: every webhook event stored, in order
        self.unknown_events: set[str] = set()  #: the event ids of webhooks for a payment we do not know
        self.references: dict[int, str] = {}  #: payment -> the first PSP reference it was seen to hold

    # --- rules ---------------------------------------------------------------------------------------------

    @precondition(lambda self: len(self.payments) < 2)
    @rule()
    def create(self) -> None:
        n = len(self.payments)
        [pid] = self.ledger.create([NewPayment(ACCOUNT, f"order-{n}", AMOUNT, "EUR", "sandbox",
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

    @rule(data=st.data(), news=st.sampled_from(sorted(NEWS)), by_psp_reference=st.booleans())
    def push_webhook(self, data: st.DataObject, news: str, by_psp_reference: bool) -> None:
        """The PSP pushes an event, as ``recon serve`` stores it: the event and its job, or nothing again."""
        target = data.draw(st.sampled_from([*range(len(self.payments)), UNKNOWN]), label="target")
        self._push(news, target, by_psp_reference=by_psp_reference)

    @precondition(lambda self: bool(self.payments))
    @rule(data=st.data(), news=st.sampled_from(sorted(NEWS)), by_psp_reference=st.booleans(),
          whose=st.sampled_from(FOREIGN))
    def push_foreign_webhook(self, data: st.DataObject, news: str, by_psp_reference: bool, whose: str) -> None:
        """A correctly signed event naming one of our payments that is not about it: our merchant reference with
        another PSP reference (another PaymentIntent carrying our metadata), or our references from another
        merchant account (another shop of the company using the same merchant reference)."""
        target = data.draw(st.sampled_from(range(len(self.payments))), label="target")
        self._push(news, target, by_psp_reference=by_psp_reference, whose=whose)

    def _push(self, news: str, target: int, *, by_psp_reference: bool, whose: str = "ours") -> None:
        account = OTHER_ACCOUNT if whose == "another_account" else ACCOUNT
        if target == UNKNOWN:
            ref, merchant_reference = "pi_nobody", "order-nobody"
        else:
            payment = self.ledger.get(self.payments[target])
            assert payment is not None
            ref, merchant_reference = (payment.psp_reference or "pi_1") if by_psp_reference else None, \
                payment.merchant_reference
            if whose == "another_reference":
                ref = OTHER_REFERENCE
        event = WebhookEvent(psp="sandbox", event_id=f"evt_{len(self.pushed)}", event_type=f"test.{news}",
                             occurred_at=self.clock.now(), news=NEWS[news](ref, merchant_reference),
                             merchant_account=account, body={"id": f"evt_{len(self.pushed)}", "news": news})
        [stored] = self.webhooks.intake([event], queue=WEBHOOK_QUEUE, max_attempts=3)
        assert stored.stored and stored.job_id is not None
        self.pushed.append(event)
        if target == UNKNOWN or whose == "another_account":
            self.unknown_events.add(event.event_id)

    @precondition(lambda self: bool(self.pushed))
    @rule(data=st.data())
    def redeliver_webhook(self, data: st.DataObject) -> None:
        """The PSP delivers an event again (both PSPs say they do): nothing is stored or queued."""
        event = data.draw(st.sampled_from(self.pushed), label="event")
        jobs_before = self._count("SELECT count(*) FROM jobs")
        [stored] = self.webhooks.intake([event], queue=WEBHOOK_QUEUE, max_attempts=3)
        assert not stored.stored and stored.job_id is None
        assert self._count("SELECT count(*) FROM jobs") == jobs_before

    @rule(n=st.integers(min_value=1, max_value=4), stale=st.booleans())
    def run_webhooks(self, n: int, stale: bool) -> None:
        """Up to ``n`` webhook jobs, finished together as the finisher does (``Finisher._finish_together``):
        one transaction with their ``BatchWrite``; when that raises, each alone with its write, and a write
        that raises again finishes as its error classifies. ``stale``: the leases expire and are rescued
        between the handlers and the finish, which then matches and writes nothing."""
        claimed = self.jobs.claim(worker="w1", queues=[WEBHOOK_QUEUE], n=n, ttl=TTL)
        if not claimed:
            return
        outcomes = [(job, self.webhook(job, Lease(self.jobs, job.id, job.attempts, "w1"))) for job in claimed]
        if stale:
            self.clock.advance(TTL + 1.0)
            Watcher(self.jobs).run_once()
        before = self._webhook_states()
        writes = [o.write for _, o in outcomes]
        assert all(isinstance(w, BatchWrite) and w.apply == self.webhook.apply_events for w in writes)
        finishes = {job.id: to_finish(job, outcome) for job, outcome in outcomes}
        items = {job.id: w.item for (job, _), w in zip(outcomes, writes, strict=True)}  # type: ignore[union-attr]
        try:
            matched = self.jobs.finish_together(
                worker="w1", finishes=list(finishes.values()),
                write=lambda conn, ids: self.webhook.apply_events(conn, [items[i] for i in finishes if i in ids]))
        except Exception:
            matched = set()
            for job, outcome in outcomes:
                try:
                    matched |= self.jobs.finish(worker="w1", finishes=[finishes[job.id]], write=outcome.write)
                except Exception as exc:
                    matched |= self.jobs.finish(worker="w1", finishes=[to_finish(job, classify(exc))])
        if stale:
            assert matched == set(), "rescued leases' finishes match nothing"
            assert self._webhook_states() == before, "and apply nothing"
        else:
            assert matched == set(finishes)

    @precondition(lambda self: any(self._status(p) is P.NEEDS_REVIEW for p in self.payments))
    @rule(data=st.data(), to=st.sampled_from(["succeeded", "failed"]), answer=st.sampled_from(DESK_ANSWERS),
          override=st.booleans())
    def resolve_at_the_desk(self, data: st.DataObject, to: str, answer: str, override: bool) -> None:
        """A person resolves a payment in review (``recon review resolve``, the console): the desk asks the
        PSP (``answer``) and refuses a decision it contradicts, or that it could not check, unless overridden."""
        pid = data.draw(st.sampled_from([p for p in self.payments if self._status(p) is P.NEEDS_REVIEW]))
        payment = self.ledger.get(pid)
        assert payment is not None
        events_before = len(self.ledger.events(pid))
        self.psp.answer = ANSWERS[answer]()
        try:
            resolution = self.desk.resolve(payment.merchant_reference, to=to, reason="checked with the PSP",
                                           by="hypothesis", override=override)
        except ReviewRefused:
            assert not override, "an override is never refused"
            assert self._status(pid) is P.NEEDS_REVIEW and len(self.ledger.events(pid)) == events_before
            assert answer in REFUSED[to], f"resolving as {to} refused when the PSP answered {answer}"
            return
        assert override or answer not in REFUSED[to], f"resolved as {to} although the PSP answered {answer}"
        assert resolution.payment.status is P(to)
        last = self.ledger.events(pid)[-1]
        assert (last.from_status, last.to_status, last.source) == ("needs_review", to, "manual")
        assert last.details is not None and (last.details["operator"], last.details["override"]) == (
            "hypothesis", override)

    @precondition(lambda self: any(self._status(p) is P.NEEDS_REVIEW for p in self.payments))
    @rule(data=st.data(), answer=st.sampled_from(ANSWER_NAMES))
    def recheck_at_the_desk(self, data: st.DataObject, answer: str) -> None:
        """``recon review recheck``: a reconcile job that keeps the PSP's answer as evidence, status unchanged."""
        pid = data.draw(st.sampled_from([p for p in self.payments if self._status(p) is P.NEEDS_REVIEW]))
        payment = self.ledger.get(pid)
        assert payment is not None
        self.desk.recheck(payment.merchant_reference)
        self._run_one(RECONCILE_QUEUE, self.reconcile, answer)

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
                    if frm is P.NEEDS_REVIEW:
                        assert (event.details or {}).get("operator") == "hypothesis", \
                            f"payment {pid}: left review without the desk's operator: {event}"
                previous = event.to_status
            assert previous == payment.status, f"payment {pid}: status {payment.status}, events end at {previous}"
            assert len(events) >= self.seen_events.get(pid, 0), "the audit trail only grows"
            self.seen_events[pid] = len(events)

    @invariant()
    def a_stored_psp_reference_never_changes(self) -> None:
        """A PSP reference, once stored, is never replaced, whatever evidence names another (a webhook naming
        our merchant reference with another PSP reference, a PSP answer about another payment): the payment
        holds the first reference it was seen to hold, for good. Evidence naming another reference never
        moves a payment to succeeded or failed: such an event is kept as a note naming both, or a review."""
        for pid in self.payments:
            payment = self.ledger.get(pid)
            assert payment is not None
            if pid in self.references:
                assert payment.psp_reference == self.references[pid], \
                    f"payment {pid}: held {self.references[pid]}, now {payment.psp_reference}"
            elif payment.psp_reference is not None:
                self.references[pid] = payment.psp_reference
            for event in self.ledger.events(pid):
                details = event.details or {}
                named, held = details.get("psp_reference"), details.get("psp_reference_conflict")
                if held is not None:  # evidence naming both: never a heal
                    assert event.to_status in (event.from_status, "needs_review"), event
                    assert named in held["theirs"] and held["ours"] == self.references.get(pid), event
                elif event.to_status in ("succeeded", "failed") and event.source != "manual" and named:
                    assert named == payment.psp_reference, f"payment {pid} healed by evidence naming {named}"

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

    @invariant()
    def webhooks_are_applied_once_in_their_committed_finish(self) -> None:
        with self.db.begin() as conn:
            rows = conn.execute(sa.text(
                "SELECT w.event_id, w.state, w.payment_id, j.state FROM webhook_events w "
                "JOIN jobs j ON j.unique_key = 'webhook:' || CAST(w.id AS TEXT) ORDER BY w.id")).all()
        assert [r[0] for r in rows] == [e.event_id for e in self.pushed], "one row and one job per event, once"
        applied: dict[int, set[str]] = {}
        for event_id, state, payment_id, job_state in rows:
            assert (state == WebhookState.RECEIVED) == (job_state != "succeeded"), \
                f"{event_id}: {state} with its job {job_state}"
            if event_id in self.unknown_events:
                assert state in (WebhookState.RECEIVED, WebhookState.UNKNOWN_PAYMENT) and payment_id is None
            else:
                assert state != WebhookState.UNKNOWN_PAYMENT, f"{event_id}: its payment exists"
            if state == WebhookState.APPLIED:
                applied.setdefault(payment_id, set()).add(event_id)
        for pid in self.payments:
            evidence = [e.details["webhook"]["event_id"] for e in self.ledger.events(pid)
                        if e.source == "webhook" and e.details]
            assert sorted(evidence) == sorted(applied.get(pid, set())), \
                f"payment {pid}: webhook evidence {evidence}, applied events {applied.get(pid)}"

    # --- helpers -------------------------------------------------------------------------------------------

    def _count(self, sql: str) -> int:
        with self.db.begin() as conn:
            return int(conn.execute(sa.text(sql)).scalar_one())

    def _webhook_states(self) -> list[tuple[Any, ...]]:
        """Every webhook event's state and every payment event: what applying webhooks may change."""
        with self.db.begin() as conn:
            events = [tuple(r) for r in conn.execute(sa.text(
                "SELECT id, state, payment_id FROM webhook_events ORDER BY id")).all()]
        return events + [(e.payment_id, e.to_status) for pid in self.payments for e in self.ledger.events(pid)]

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
