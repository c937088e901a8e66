"""The charge and reconcile handlers' decisions on the answers that real PSPs give and the sandbox never did:
authentication required, an error the PSP saved under the idempotency key (Stripe's saved 500s), replayed
answers, a PSP that cannot be called as configured, and an idempotency key the PSP may have forgotten.

The PSP here is a scripted double: these tests are about recon's state machine. That each adapter turns
the PSP's real wire into these answers is tested against the PSPs' own documents in tests/adapters/.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from random import Random
from typing import Any, ClassVar

import pytest

from psp_adapters.errors import PspError, PspTransientError
from psp_adapters.protocol import (
    ActionRequired,
    ChargeRequest,
    NotFound,
    PaymentOutcome,
    Pending,
    PspRef,
    Succeeded,
)
from recon import Client, FixedClock, JobState, JobStore, Settings
from recon.clock import SystemClock
from recon.db.control_store import ControlStore
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.engine.handlers import Handlers
from recon.errors import ConfigError
from recon.payments.charge import ChargeHandler
from recon.payments.guard import PspGuard
from recon.payments.psp_limits import GuardConfig, PspLimits
from recon.reconcile.handler import ReconcileHandler
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition
from tests.integration.payment_flow import drain, reconcile_config

Answer = PaymentOutcome | PspError


class ScriptedPsp:
    """Answers each call with the next scripted answer (an outcome, or an error to raise); records calls."""

    name: ClassVar[str] = "sandbox"
    idempotency_retention: ClassVar[timedelta | None] = timedelta(hours=24)

    def __init__(self, *, create: list[Answer] | None = None, fetch: list[Answer] | None = None) -> None:
        self.create_answers = list(create or [])
        self.fetch_answers = list(fetch or [])
        self.creates: list[tuple[ChargeRequest, str]] = []
        self.fetches: list[PspRef] = []

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        self.creates.append((request, idempotency_key))
        return self._next(self.create_answers)

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        self.fetches.append(ref)
        return self._next(self.fetch_answers)

    def iter_settlements(self, since: datetime, until: datetime, *, merchant_accounts: Any = ()) -> Any:
        return iter(())

    def close(self) -> None:
        pass

    @staticmethod
    def _next(answers: list[Answer]) -> PaymentOutcome:
        answer = answers.pop(0)
        if isinstance(answer, PspError):
            raise answer
        return answer


def one_payment(db: Database, **fields: Any) -> int:
    payment = NewPayment("AcmeShopEU", "order-7", 2500, "EUR", "sandbox", payment_method="pm_card_visa",
                         customer_reference="cus_NffrFeUfNV2Hib", **fields)
    [pid] = PaymentStore(db).create([payment])
    return pid


def charge_handlers(db: Database, psp: Any, *, clock: Any = None, guard: Any = None) -> Handlers:
    h = Handlers()
    h.register("charge", ChargeHandler(PaymentStore(db), lambda _name: psp, clock=clock, guard=guard))
    return h


def charge_jobs(db: Database) -> list[Any]:
    return JobStore(db).list_jobs(kind="charge", limit=100)


def test_charge__sends_the_stored_payment_method_and_customer(db: Database) -> None:
    one_payment(db)
    psp = ScriptedPsp(create=[Succeeded(psp_reference="pi_1", amount=2500, currency="EUR")])
    drain(db, charge_handlers(db, psp), queues=["charges"])
    [(request, key)] = psp.creates
    assert (request.payment_method, request.customer_reference, request.merchant_account) == (
        "pm_card_visa", "cus_NffrFeUfNV2Hib", "AcmeShopEU")
    payment = PaymentStore(db).by_reference("order-7")
    assert payment is not None and key == payment.idempotency_key and payment.key_sent_at is not None


def test_charge__authentication_required_goes_to_review_never_waits(db: Database) -> None:
    pid = one_payment(db)
    psp = ScriptedPsp(create=[ActionRequired(psp_reference="pi_1", amount=2500, currency="EUR",
                                             raw_status="requires_action")])
    drain(db, charge_handlers(db, psp), queues=["charges"])
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.status is PaymentStatus.NEEDS_REVIEW
    assert payment.review_reason is not None and "customer authentication required" in payment.review_reason
    assert payment.psp_reference == "pi_1"
    assert [j.state for j in charge_jobs(db)] == [JobState.SUCCEEDED]


def test_charge__an_error_saved_under_the_key_is_not_retried_the_payment_is_pending(db: Database) -> None:
    pid = one_payment(db)
    saved = PspTransientError("stripe: HTTP 500: api_error", psp="stripe", status_code=500, saved=True)
    psp = ScriptedPsp(create=[saved])  # a second create would find no answer and fail the test
    drain(db, charge_handlers(db, psp), queues=["charges"])
    assert len(psp.creates) == 1
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.status is PaymentStatus.PENDING
    assert [j.state for j in charge_jobs(db)] == [JobState.SUCCEEDED]
    last = PaymentStore(db).events(pid)[-1]
    assert last.details is not None and last.details["saved_answer"] is True


def test_guard__a_replayed_answer_does_not_feed_the_breaker(db: Database) -> None:
    guard = PspGuard(ControlStore(db), GuardConfig(per_psp={"sandbox": PspLimits(breaker_failures=1)}),
                     rng=Random(7))
    replayed = PspTransientError("HTTP 500 (replayed)", psp="sandbox", status_code=500, saved=True, replayed=True)
    for _ in range(3):
        permit = guard.admit("sandbox")
        with pytest.raises(PspTransientError):
            permit.call(lambda: (_ for _ in ()).throw(replayed))  # type: ignore[union-attr]
    controls, _now = ControlStore(db).list_controls()
    assert all(c.breaker_state == "closed" and c.failures == 0 for c in controls if c.psp == "sandbox")
    fresh = PspTransientError("HTTP 500", psp="sandbox", status_code=500, saved=True)
    with pytest.raises(PspTransientError):
        guard.admit("sandbox").call(lambda: (_ for _ in ()).throw(fresh))  # type: ignore[union-attr]
    controls, _now = ControlStore(db).list_controls()
    assert [c.breaker_state for c in controls if c.psp == "sandbox"] == ["open"]


def test_charge__a_psp_that_cannot_be_called_leaves_the_payment_created(db: Database) -> None:
    pid = one_payment(db)

    def unconfigured(_name: str) -> Any:
        raise ConfigError("PSP 'stripe': api_key is not set; set the environment variable RECON_STRIPE_API_KEY")

    h = Handlers()
    h.register("charge", ChargeHandler(PaymentStore(db), unconfigured))
    drain(db, h, queues=["charges"])
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.status is PaymentStatus.CREATED  # never processing
    [job] = charge_jobs(db)
    assert job.state is JobState.DEAD and job.last_error_kind == "config"
    assert "RECON_STRIPE_API_KEY" in (job.last_error or "")


def _pending_with_key_sent(db: Database) -> tuple[int, datetime]:
    """A payment whose first charge got a saved 500: pending, its key sent now."""
    pid = one_payment(db)
    psp = ScriptedPsp(create=[PspTransientError("HTTP 500", psp="sandbox", status_code=500, saved=True)])
    drain(db, charge_handlers(db, psp), queues=["charges"])
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.status is PaymentStatus.PENDING and payment.key_sent_at is not None
    return pid, payment.key_sent_at


def _charge_again(db: Database, pid: int) -> None:
    Client(JobStore(db), Settings()).enqueue("charge", {"payment_id": pid}, queue="charges",
                                             unique_key=f"charge-again:{pid}")


def test_charge__a_key_the_psp_may_have_forgotten_is_never_resent_blindly(db: Database) -> None:
    pid, sent = _pending_with_key_sent(db)
    _charge_again(db, pid)
    later = FixedClock(sent + timedelta(hours=25))
    payment = PaymentStore(db).get(pid)
    assert payment is not None
    psp = ScriptedPsp(fetch=[NotFound(merchant_reference="order-7")],
                      create=[Succeeded(psp_reference="pi_2", amount=2500, currency="EUR")])
    drain(db, charge_handlers(db, psp, clock=later), queues=["charges"])
    # first the lookup (not a send), then a new key generation, then the charge under the new key
    assert [ref.merchant_reference for ref in psp.fetches] == ["order-7"]
    assert [key for _, key in psp.creates] == [f"{payment.idempotency_key}-g1"]
    healed = PaymentStore(db).get(pid)
    assert healed is not None and healed.status is PaymentStatus.SUCCEEDED and healed.key_generation == 1
    generations = [e.details.get("key_generation") for e in PaymentStore(db).events(pid)
                   if e.details and "key_generation" in e.details]
    assert generations == [1]


def test_charge__a_forgotten_key_whose_payment_exists_records_it_and_charges_nothing(db: Database) -> None:
    pid, sent = _pending_with_key_sent(db)
    _charge_again(db, pid)
    psp = ScriptedPsp(fetch=[Succeeded(psp_reference="pi_1", amount=2500, currency="EUR")])
    drain(db, charge_handlers(db, psp, clock=FixedClock(sent + timedelta(hours=30))), queues=["charges"])
    assert psp.creates == []
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.status is PaymentStatus.SUCCEEDED and payment.key_generation == 0


def test_charge__a_recent_key_is_resent_unchanged(db: Database) -> None:
    pid, sent = _pending_with_key_sent(db)
    _charge_again(db, pid)
    psp = ScriptedPsp(create=[Succeeded(psp_reference="pi_1", amount=2500, currency="EUR")])
    drain(db, charge_handlers(db, psp, clock=FixedClock(sent + timedelta(hours=2))), queues=["charges"])
    payment = PaymentStore(db).get(pid)
    assert payment is not None and psp.fetches == []
    assert [key for _, key in psp.creates] == [payment.idempotency_key]


def test_reconcile__authentication_required_goes_to_review(db: Database) -> None:
    [pid] = PaymentStore(db).create([NewPayment("AcmeShopEU", "order-8", 900, "EUR", "sandbox")], charge=False)
    psp = ScriptedPsp(fetch=[ActionRequired(psp_reference="pi_8", raw_status="requires_action")])
    h = Handlers()
    h.register("reconcile", ReconcileHandler(PaymentStore(db), lambda _name: psp, config=reconcile_config(),
                                             clock=SystemClock()))
    Client(JobStore(db), Settings()).enqueue("reconcile", {"payment_id": pid}, queue="reconcile")
    drain(db, h, queues=["reconcile"])
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.status is PaymentStatus.NEEDS_REVIEW
    assert payment.review_reason is not None and "authentication" in payment.review_reason
    assert [ref.merchant_account for ref in psp.fetches] == ["AcmeShopEU"]




def test_charge__a_saved_answer_after_a_lost_one_is_kept_as_evidence(db: Database) -> None:
    from psp_adapters.errors import PspUnknownOutcome

    pid = one_payment(db)
    unknown = PspUnknownOutcome("sandbox: no answer after the request was sent", psp="sandbox")
    saved = PspTransientError("HTTP 500 (replayed)", psp="sandbox", status_code=500, saved=True, replayed=True)
    psp = ScriptedPsp(create=[unknown, saved])
    drain(db, charge_handlers(db, psp), queues=["charges"])
    assert len(psp.creates) == 2
    events = PaymentStore(db).events(pid)
    assert [(e.from_status, e.to_status) for e in events] == [
        (None, "created"), ("created", "processing"), ("processing", "pending"), ("pending", "pending")]
    assert events[-1].details is not None and events[-1].details["saved_answer"] is True
    assert events[-1].details["replayed"] is True


def test_charge__a_key_is_aged_from_its_first_send_as_the_psps_count(db: Database) -> None:
    """Stripe prunes a key 24 h after its first use: a re-send at +12 h must not restart the clock."""
    pid, first_sent = _pending_with_key_sent(db)
    _charge_again(db, pid)
    psp = ScriptedPsp(create=[PspTransientError("HTTP 500", psp="sandbox", status_code=500, saved=True)])
    drain(db, charge_handlers(db, psp, clock=FixedClock(first_sent + timedelta(hours=12))), queues=["charges"])
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.key_sent_at == first_sent and len(psp.creates) == 1


def test_charge__a_payment_healed_before_it_is_marked_processing_is_never_sent(db: Database) -> None:
    from recon.rows import EventSource, Transition

    pid = one_payment(db)
    payment = PaymentStore(db).get(pid)
    assert payment is not None
    with db.begin() as conn:  # reconciliation got there first, after the charge job read the payment
        PaymentStore(db).apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.FAILED,
                                               EventSource.RECONCILE, failure_reason="never reached the PSP"))
    handler = ChargeHandler(PaymentStore(db), lambda _name: ScriptedPsp())
    assert handler._mark_processing(payment, _FakeJob(), _HoldingLease()) is None


class _FakeJob:
    id = 0
    attempts = 1


class _HoldingLease:
    def holds(self, conn: Any) -> bool:
        return True


def test_charge__an_answer_naming_another_psp_reference_than_its_key_got_goes_to_review(db: Database) -> None:
    """One idempotency key, two PSP references: the first (pi_1, pending) is kept, the second never replaces it
    and never heals the payment; a person looks (docs/design.md: a PSP reference, once stored, is kept)."""
    pid = one_payment(db)
    psp = ScriptedPsp(create=[Pending(psp_reference="pi_1", raw_status="processing"),
                              Succeeded(psp_reference="pi_2", amount=2500, currency="EUR", raw_status="succeeded")])
    drain(db, charge_handlers(db, psp), queues=["charges"])  # pending: pi_1 recorded
    assert PaymentStore(db).get(pid).psp_reference == "pi_1"  # type: ignore[union-attr]
    Client(JobStore(db), Settings()).enqueue("charge", {"payment_id": pid}, queue="charges")  # sent again
    drain(db, charge_handlers(db, psp), queues=["charges"])
    assert len(psp.creates) == 2 and len({key for _, key in psp.creates}) == 1
    payment = PaymentStore(db).get(pid)
    assert payment is not None and (payment.status, payment.psp_reference) == (PaymentStatus.NEEDS_REVIEW, "pi_1")
    assert (payment.review_reason or "").startswith("reference_conflict:") and "pi_2" in (payment.review_reason or "")
    last = PaymentStore(db).events(pid)[-1]
    assert last.details is not None and last.details["psp_reference_conflict"] == {"ours": "pi_1", "theirs": ["pi_2"]}


def test_reconcile__an_answer_naming_another_psp_reference_goes_to_review(db: Database) -> None:
    """Asked about the reference we hold (pi_8), the PSP answers about pi_9: never healed from, never written over
    ours; no later job would settle it, so a person looks."""
    [pid] = PaymentStore(db).create([NewPayment("AcmeShopEU", "order-8", 900, "EUR", "sandbox")], charge=False)
    with db.begin() as conn:
        assert PaymentStore(db).apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.PENDING,
                                                       EventSource.CHARGE, psp_reference="pi_8"))
    psp = ScriptedPsp(fetch=[Succeeded(psp_reference="pi_9", amount=900, currency="EUR", raw_status="succeeded")])
    h = Handlers()
    h.register("reconcile", ReconcileHandler(PaymentStore(db), lambda _name: psp, config=reconcile_config(),
                                             clock=SystemClock()))
    Client(JobStore(db), Settings()).enqueue("reconcile", {"payment_id": pid}, queue="reconcile")
    drain(db, h, queues=["reconcile"])
    assert [ref.psp_reference for ref in psp.fetches] == ["pi_8"]
    payment = PaymentStore(db).get(pid)
    assert payment is not None and (payment.status, payment.psp_reference) == (PaymentStatus.NEEDS_REVIEW, "pi_8")
    assert (payment.review_reason or "").startswith("reference_conflict:")
    last = PaymentStore(db).events(pid)[-1]
    assert (last.source, last.to_status) == ("reconcile", "needs_review")
    assert last.details is not None and last.details["psp_reference_conflict"] == {"ours": "pi_8", "theirs": ["pi_9"]}
