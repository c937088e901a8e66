"""Authorise now, capture later, end to end on both databases: the charge, capture and cancel jobs through recon's
real Stripe and Adyen adapters against the sandbox's flavours (which follow Stripe's PaymentIntent statuses and
Adyen's asynchronous modifications), with the engine, leases and retries; the sandbox's own API says what the PSP
holds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from psp_adapters.adyen.adapter import AdyenAdapter
from psp_adapters.protocol import PspAdapter, Secret
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from psp_adapters.stripe.adapter import StripeAdapter
from recon import Handlers
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.errors import ModificationRefused, RefundRefused, StoreError
from recon.modification_rows import CANCEL, CAPTURE, NewModification
from recon.payments.charge import ChargeHandler
from recon.payments.modification import ModificationHandler
from recon.refund_rows import NewRefund
from recon.rows import EventSource, JobState, NewPayment, PaymentStatus, Transition
from tests.integration.payment_flow import drain, wait_for

KEY = "sk_test_captures"
ADYEN_KEY = "AQE_test_captures"
P = PaymentStatus


@pytest.fixture
def stripe_sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "stripe.db", flavor="stripe", api_key=KEY) as server:
        yield server


def stripe_adapter(server: SandboxServer, *, read_timeout: float = 5.0) -> StripeAdapter:
    return StripeAdapter(server.url, api_key=Secret(KEY),
                         timeout=httpx.Timeout(connect=1.0, read=read_timeout, write=1.0, pool=1.0))


def handlers(db: Database, adapter: PspAdapter) -> Handlers:
    h = Handlers()
    h.register("charge", ChargeHandler(PaymentStore(db), lambda _n: adapter))
    for kind in (CAPTURE, CANCEL):
        h.register(kind, ModificationHandler(kind, ModificationStore(db), PaymentStore(db), lambda _n: adapter))
    return h


def authorised(db: Database, adapter: PspAdapter, *, amount: int = 5000, ref: str = "order-1",
               account: str = "default", method: str = "pm_card_visa", customer: str = "cus_captures") -> int:
    [pid] = PaymentStore(db).create([NewPayment(account, ref, amount, "EUR", adapter.name, payment_method=method,
                                                customer_reference=customer, capture_mode="manual")])
    drain(db, handlers(db, adapter), queues=["charges"])
    p = PaymentStore(db).get(pid)
    assert p is not None and p.status is P.AUTHORISED, p
    assert (p.captured_amount, p.authorisation_claimed) == (0, 0) and p.authorised_at is not None
    return pid


def intent(server: SandboxServer, intent_id: str) -> dict[str, object]:
    """The PaymentIntent as Stripe's flavour holds it, read through its own API."""
    r = httpx.get(f"{server.url}/v1/payment_intents/{intent_id}", headers={"Authorization": f"Bearer {KEY}"},
                  timeout=5)
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def reference(db: Database, pid: int) -> str:
    p = PaymentStore(db).get(pid)
    assert p is not None and p.psp_reference
    return p.psp_reference


def test_stripe__a_manual_payment_is_authorised_and_a_partial_capture_takes_part(
        db: Database, stripe_sandbox: SandboxServer) -> None:
    adapter = stripe_adapter(stripe_sandbox)
    pid = authorised(db, adapter)
    assert intent(stripe_sandbox, reference(db, pid))["status"] == "requires_capture"
    store = ModificationStore(db)
    mid = store.create(NewModification(pid, CAPTURE, "order-1-capture1", "alice", amount=3000), queue="charges")
    drain(db, handlers(db, adapter), queues=["charges"])
    at_psp = intent(stripe_sandbox, reference(db, pid))
    assert (at_psp["status"], at_psp["amount_received"]) == ("succeeded", 3000)  # Stripe released the rest
    mod = store.get(mid)
    assert mod is not None and mod.status is P.SUCCEEDED and mod.psp_modification_id == reference(db, pid)
    assert [e.to_status for e in store.events(mid)] == ["created", "processing", "succeeded"]
    payment = PaymentStore(db).get(pid)
    assert payment is not None and (payment.status, payment.captured_amount) == (P.SUCCEEDED, 3000)
    # the refund bound follows the capture: 3000 captured, so 3001 is refused and 3000 is taken
    with pytest.raises(RefundRefused, match="more than the 3000"):
        RefundStore(db).create([NewRefund(pid, "rf-big", 3001, None, "alice")], queue="charges")
    RefundStore(db).create([NewRefund(pid, "rf-all", 3000, None, "alice")], queue="charges")
    adapter.close()



def test_stripe__a_partial_capture_survives_a_round_trip_through_review(db: Database,
                                                                       stripe_sandbox: SandboxServer) -> None:
    """A partly captured payment sent to review (a chargeback, a recheck) and resolved back to succeeded keeps
    what it captured: its refunds stay bound by the 3000 captured, not the 5000 authorised (the Spin model's
    finding 4, docs/verification.md)."""
    adapter = stripe_adapter(stripe_sandbox)
    pid = authorised(db, adapter)
    ModificationStore(db).create(NewModification(pid, CAPTURE, "order-1-capture1", "alice", amount=3000),
                                 queue="charges")
    drain(db, handlers(db, adapter), queues=["charges"])
    payments = PaymentStore(db)
    for step, (a, b) in enumerate([(P.SUCCEEDED, P.NEEDS_REVIEW), (P.NEEDS_REVIEW, P.SUCCEEDED)]):
        with db.begin() as conn:
            assert payments.apply(conn, Transition(pid, a, b, EventSource.MANUAL,
                                                   review_reason="chargeback" if step == 0 else None))
    payment = payments.get(pid)
    assert payment is not None and (payment.status, payment.captured_amount) == (P.SUCCEEDED, 3000)
    with pytest.raises(RefundRefused, match="more than the 3000"):
        RefundStore(db).create([NewRefund(pid, "rf-big", 3001, None, "alice")], queue="charges")
    adapter.close()


def test_stripe__a_cancel_releases_the_authorisation_and_the_payment_ends_cancelled(
        db: Database, stripe_sandbox: SandboxServer) -> None:
    adapter = stripe_adapter(stripe_sandbox)
    pid = authorised(db, adapter)
    store = ModificationStore(db)
    mid = store.create(NewModification(pid, CANCEL, "order-1-cancel1", "alice"), queue="charges")
    with pytest.raises(ModificationRefused, match="already under way or done"):  # one winner
        store.create(NewModification(pid, CAPTURE, "order-1-capture1", "bob", amount=100), queue="charges")
    drain(db, handlers(db, adapter), queues=["charges"])
    assert intent(stripe_sandbox, reference(db, pid))["status"] == "canceled"
    mod = store.get(mid)
    assert mod is not None and mod.status is P.SUCCEEDED
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.status is P.FAILED and payment.captured_amount == 0
    assert payment.failure_reason == "cancelled: order-1-cancel1 by alice"
    adapter.close()


def test_stripe__a_lost_capture_answer_is_retried_with_the_same_key_and_captures_once(
        db: Database, stripe_sandbox: SandboxServer) -> None:
    adapter = stripe_adapter(stripe_sandbox, read_timeout=0.5)
    pid = authorised(db, adapter)
    stripe_sandbox.set_faults(Faults(rate_hang=1.0, hang_seconds=1.5))  # captured, its answer comes too late
    mid = ModificationStore(db).create(NewModification(pid, CAPTURE, "order-1-capture1", "alice"), queue="charges")
    h = handlers(db, adapter)
    jobs = JobStore(db)

    def first_attempt_done() -> bool:
        [job] = jobs.list_jobs(kind="capture", limit=1)
        return job.attempts >= 1 and job.state is not JobState.LEASED

    worker = threading.Thread(target=lambda: drain(db, h, queues=["charges"], timeout=30), daemon=True)
    worker.start()
    wait_for(first_attempt_done, timeout=15)
    stripe_sandbox.set_faults(Faults())
    worker.join(40)
    mod = ModificationStore(db).get(mid)
    assert mod is not None and mod.status is P.SUCCEEDED
    events = [e.to_status for e in ModificationStore(db).events(mid)]
    assert events[:3] == ["created", "processing", "pending"] and events[-1] == "succeeded"
    at_psp = intent(stripe_sandbox, reference(db, pid))
    assert (at_psp["status"], at_psp["amount_received"]) == ("succeeded", 5000)
    payment = PaymentStore(db).get(pid)
    assert payment is not None and (payment.status, payment.captured_amount) == (P.SUCCEEDED, 5000)
    adapter.close()


def test_capture__never_more_than_authorised_nor_of_an_automatic_payment(db: Database) -> None:
    payments = PaymentStore(db)
    ids = payments.create([NewPayment("default", "manual-1", 5000, "EUR", "stripe", capture_mode="manual"),
                           NewPayment("default", "auto-1", 5000, "EUR", "stripe")], charge=False)
    with db.begin() as conn:  # as the charge job would leave them
        conn.execute(sa.text("UPDATE payments SET status = 'authorised', psp_reference = 'pi_' || id WHERE id = :a"),
                     {"a": ids[0]})
        conn.execute(sa.text("UPDATE payments SET status = 'succeeded', psp_reference = 'pi_' || id WHERE id = :a"),
                     {"a": ids[1]})
    store = ModificationStore(db)
    with pytest.raises(ModificationRefused, match="5001 is more than the 5000"):
        store.create(NewModification(ids[0], CAPTURE, "m-c1", "alice", amount=5001), queue="charges")
    with pytest.raises(ModificationRefused, match="captured automatically"):
        store.create(NewModification(ids[1], CAPTURE, "a-c1", "alice", amount=100), queue="charges")
    store.create(NewModification(ids[0], CAPTURE, "m-c2", "alice", amount=4000), queue="charges")
    with pytest.raises(ModificationRefused, match="already under way or done"):  # Stripe captures once: so do we
        store.create(NewModification(ids[0], CAPTURE, "m-c3", "alice", amount=100), queue="charges")
    # the database's own check is the backstop: no write may claim more than the amount
    with pytest.raises((sa.exc.IntegrityError, StoreError)), db.begin() as conn:
        conn.execute(sa.text("UPDATE payments SET authorisation_claimed = amount + 1 WHERE id = :a"), {"a": ids[0]})
    assert [m.modification_reference for m in store.for_payment(ids[0])] == ["m-c2"]


def test_capture__racing_a_cancel_on_two_writers_has_one_winner(db: Database) -> None:
    [pid] = PaymentStore(db).create([NewPayment("default", "race-1", 5000, "EUR", "stripe", capture_mode="manual")],
                                    charge=False)
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE payments SET status = 'authorised', psp_reference = 'pi_race' WHERE id = :a"),
                     {"a": pid})
    store = ModificationStore(db)
    start = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def ask(kind: str) -> None:
        start.wait()
        try:
            store.create(NewModification(pid, kind, f"race-1-{kind}", "alice", amount=5000 if kind == CAPTURE
                                         else None), queue="charges")
            outcomes[kind] = "made"
        except (ModificationRefused, StoreError):
            outcomes[kind] = "refused"

    threads = [threading.Thread(target=ask, args=(k,)) for k in (CAPTURE, CANCEL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(outcomes.values()) == ["made", "refused"]
    assert len(store.for_payment(pid)) == 1
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.authorisation_claimed == 5000


@pytest.fixture
def adyen_sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "adyen.db", flavor="adyen", api_key=ADYEN_KEY, report_username="report",
                       report_password="report-pass") as server:  # a sandbox's test password
        yield server


def test_adyen__manual_capture_is_authorised_and_the_capture_is_received_then_pending(
        db: Database, adyen_sandbox: SandboxServer) -> None:
    adapter = AdyenAdapter(adyen_sandbox.url, api_key=Secret(ADYEN_KEY), merchant_account="ShopECOM",
                           report_base_url=adyen_sandbox.url, report_username="report",
                           report_password=Secret("report-pass"))
    pid = authorised(db, adapter, account="ShopECOM", method="8315000000000001", customer="shopper-1")
    mid = ModificationStore(db).create(NewModification(pid, CAPTURE, "order-1-capture1", "alice", amount=2000),
                                       queue="charges")
    drain(db, handlers(db, adapter), queues=["charges"])
    mod = ModificationStore(db).get(mid)
    # Adyen answers [received] with the capture's own pspReference; its CAPTURE webhook tells the end
    assert mod is not None and mod.status is P.PENDING and mod.psp_modification_id
    assert mod.psp_modification_id != reference(db, pid)
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.status is P.AUTHORISED and payment.authorisation_claimed == 2000
    adapter.close()


@pytest.fixture
def native_sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "native.db", api_key="sk_native") as server:
        yield server


def native_payment(server: SandboxServer, ref: str) -> dict[str, object]:
    r = httpx.get(f"{server.url}/v1/payments/{ref}", headers={"Authorization": "Bearer sk_native"}, timeout=5)
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def test_native__manual_capture_partial_capture_cancel_and_a_lost_answer(db: Database,
                                                                         native_sandbox: SandboxServer) -> None:
    from psp_adapters.sandbox.adapter import SandboxAdapter

    adapter = SandboxAdapter(native_sandbox.url, api_key=Secret("sk_native"),
                             timeout=httpx.Timeout(connect=1.0, read=0.5, write=1.0, pool=1.0))
    part = authorised(db, adapter, ref="n-1", method="tok_visa", customer="c-1")
    whole = authorised(db, adapter, ref="n-2", method="tok_visa", customer="c-1")
    gone = authorised(db, adapter, ref="n-3", method="tok_visa", customer="c-1")
    assert native_payment(native_sandbox, reference(db, part))["status"] == "authorized"
    store = ModificationStore(db)
    store.create(NewModification(part, CAPTURE, "n-1-capture1", "alice", amount=3000), queue="charges")
    store.create(NewModification(gone, CANCEL, "n-3-cancel1", "alice"), queue="charges")
    drain(db, handlers(db, adapter), queues=["charges"])
    assert (native_payment(native_sandbox, reference(db, part))["status"],
            native_payment(native_sandbox, reference(db, part))["amount_captured"]) == ("succeeded", 3000)
    assert native_payment(native_sandbox, reference(db, gone))["status"] == "canceled"
    payments = PaymentStore(db)
    assert (payments.get(part).status, payments.get(part).captured_amount) == (P.SUCCEEDED, 3000)  # type: ignore[union-attr]
    assert payments.get(gone).status is P.FAILED  # type: ignore[union-attr]
    # captured, its answer lost: the same key again captures once
    native_sandbox.set_faults(Faults(rate_hang=1.0, hang_seconds=1.5))
    mid = store.create(NewModification(whole, CAPTURE, "n-2-capture1", "alice"), queue="charges")
    h = handlers(db, adapter)
    jobs = JobStore(db)

    def first_attempt_done() -> bool:
        job = next(j for j in jobs.list_jobs(kind="capture", limit=10) if j.payload == {"modification_id": mid})
        return job.attempts >= 1 and job.state is not JobState.LEASED

    worker = threading.Thread(target=lambda: drain(db, h, queues=["charges"], timeout=30), daemon=True)
    worker.start()
    wait_for(first_attempt_done, timeout=15)
    native_sandbox.set_faults(Faults())
    worker.join(40)
    mod = store.get(mid)
    assert mod is not None and mod.status is P.SUCCEEDED
    assert [e.to_status for e in store.events(mid)][:3] == ["created", "processing", "pending"]
    assert native_payment(native_sandbox, reference(db, whole))["amount_captured"] == 5000
    assert payments.get(whole).captured_amount == 5000  # type: ignore[union-attr]
    adapter.close()
