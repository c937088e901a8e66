"""Refunds end to end on both databases: the refund job through recon's real Stripe adapter against the sandbox's
Stripe flavour (which follows Stripe's documented Refund object and its statuses), with the engine, leases and
retries; the sandbox's own books say how many refunds each payment got.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from psp_adapters.protocol import Secret
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from psp_adapters.stripe.adapter import StripeAdapter
from recon import Handlers
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.payments.charge import ChargeHandler
from recon.payments.refund import RefundHandler
from recon.refund_rows import NewRefund
from recon.rows import JobState, NewPayment, PaymentStatus
from tests.integration.payment_flow import drain, wait_for

KEY = "sk_test_refunds"
P = PaymentStatus


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "stripe.db", flavor="stripe", api_key=KEY) as server:
        yield server


def adapter_for(server: SandboxServer, *, read_timeout: float = 5.0) -> StripeAdapter:
    return StripeAdapter(server.url, api_key=Secret(KEY),
                         timeout=httpx.Timeout(connect=1.0, read=read_timeout, write=1.0, pool=1.0))


def handlers(db: Database, adapter: StripeAdapter) -> Handlers:
    h = Handlers()
    h.register("charge", ChargeHandler(PaymentStore(db), lambda _n: adapter))
    h.register("refund", RefundHandler(RefundStore(db), PaymentStore(db), lambda _n: adapter))
    return h


def charged(db: Database, adapter: StripeAdapter, n: int = 1, amount: int = 5000) -> list[int]:
    ids = PaymentStore(db).create([NewPayment("default", f"order-{i}", amount, "EUR", "stripe",
                                              payment_method="pm_card_visa", customer_reference="cus_refunds")
                                   for i in range(n)])
    drain(db, handlers(db, adapter), queues=["charges"])
    for pid in ids:
        p = PaymentStore(db).get(pid)
        assert p is not None and p.status is P.SUCCEEDED and p.captured_amount == amount
    return ids


def psp_refunds(server: SandboxServer, intent: str) -> list[dict[str, object]]:
    """The refunds Stripe's flavour holds for a PaymentIntent, read through its own API."""
    r = httpx.get(f"{server.url}/v1/refunds", params={"payment_intent": intent, "limit": "100"},
                  headers={"Authorization": f"Bearer {KEY}"}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]  # type: ignore[no-any-return]


def test_refund__partial_refunds_succeed_with_the_psp_refund_id_stored(db: Database, sandbox: SandboxServer) -> None:
    adapter = adapter_for(sandbox)
    [pid] = charged(db, adapter)
    store = RefundStore(db)
    ids = store.create([NewRefund(pid, "rf-1", 2000, "requested_by_customer", "alice"),
                        NewRefund(pid, "rf-2", 3000, None, "alice")], queue="charges")
    drain(db, handlers(db, adapter), queues=["charges"])
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.psp_reference is not None
    at_psp = psp_refunds(sandbox, payment.psp_reference)
    assert sorted((r["amount"], r["metadata"]["refund_reference"], r["status"]) for r in at_psp) == [  # type: ignore[index]
        (2000, "rf-1", "succeeded"), (3000, "rf-2", "succeeded")]
    for rid in ids:
        refund = store.get(rid)
        assert refund is not None and refund.status is P.SUCCEEDED
        assert refund.psp_refund_id in {r["id"] for r in at_psp}
        assert [e.to_status for e in store.events(rid)] == ["created", "processing", "succeeded"]
    assert (payment.refunded_amount, payment.status) == (5000, P.SUCCEEDED)  # the payment stays succeeded
    adapter.close()


def test_refund__a_lost_answer_is_retried_with_the_same_key_and_refunds_once(db: Database,
                                                                            sandbox: SandboxServer) -> None:
    adapter = adapter_for(sandbox, read_timeout=0.5)
    [pid] = charged(db, adapter)
    sandbox.set_faults(Faults(rate_hang=1.0, hang_seconds=1.5))  # the refund is made, its answer comes too late
    [rid] = RefundStore(db).create([NewRefund(pid, "rf-lost", 1500, None, "alice")], queue="charges")
    h = handlers(db, adapter)
    store = JobStore(db)

    def first_attempt_done() -> bool:
        [job] = store.list_jobs(kind="refund", limit=1)
        return job.attempts >= 1 and job.state is not JobState.LEASED

    worker_thread = threading.Thread(
        target=lambda: drain(db, h, queues=["charges"], timeout=30), daemon=True)
    worker_thread.start()
    wait_for(first_attempt_done, timeout=15)
    sandbox.set_faults(Faults())
    worker_thread.join(40)
    refund = RefundStore(db).get(rid)
    payment = PaymentStore(db).get(pid)
    assert refund is not None and payment is not None and payment.psp_reference
    at_psp = psp_refunds(sandbox, payment.psp_reference)
    assert len(at_psp) == 1 and at_psp[0]["amount"] == 1500  # one refund for the key, however many attempts
    assert refund.status is P.SUCCEEDED and refund.psp_refund_id == at_psp[0]["id"]
    events = [e.to_status for e in RefundStore(db).events(rid)]
    assert events[:3] == ["created", "processing", "pending"] and events[-1] == "succeeded"
    adapter.close()


def test_refund__a_refusal_fails_the_refund_and_frees_its_amount(db: Database, sandbox: SandboxServer) -> None:
    adapter = adapter_for(sandbox)
    [pid] = charged(db, adapter)
    # the sandbox refunds the whole capture outside recon (a dashboard refund): Stripe refuses ours (400)
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.psp_reference
    httpx.post(f"{sandbox.url}/v1/refunds", data={"payment_intent": payment.psp_reference},
               headers={"Authorization": f"Bearer {KEY}"}, timeout=5).raise_for_status()
    [rid] = RefundStore(db).create([NewRefund(pid, "rf-x", 1000, None, "alice")], queue="charges")
    drain(db, handlers(db, adapter), queues=["charges"])
    refund = RefundStore(db).get(rid)
    assert refund is not None and refund.status is P.FAILED and (refund.failure_reason or "").startswith("rejected")
    [job] = JobStore(db).list_jobs(kind="refund", limit=1)
    assert job.state is JobState.DEAD and job.last_error_kind == "validation"
    after = PaymentStore(db).get(pid)
    assert after is not None and after.refunded_amount == 0
    adapter.close()
