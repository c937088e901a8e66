"""Refunds healed like charges, on both databases, against the sandbox's Stripe flavour through recon's real
Stripe adapter: a refund left pending is settled by its reconcile job; one that never reached the PSP fails
after the grace period and gives its amount back; one that failed after it succeeded (Stripe's
"refund.failed") is found by a recheck and sent to review; `recon sweep` covers refunds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from psp_adapters.protocol import Secret
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from psp_adapters.stripe.adapter import StripeAdapter
from recon import Client, Complete, Handlers, JobState, RetryPolicy, Settings, Worker
from recon.clock import SystemClock
from recon.db.database import Database
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.engine.lease import Lease
from recon.errors import ChargeInFlight
from recon.payments.charge import ChargeHandler
from recon.payments.refund import RefundHandler
from recon.reconcile.refund import REFUND_RECONCILE_KIND, RefundReconcileHandler, refund_reconcile_key
from recon.refund_rows import NewRefund, RefundSource, RefundTransition
from recon.rows import NewPayment, PaymentStatus
from tests.cli import Runner
from tests.integration.payment_flow import drain, fast_settings, reconcile_config

KEY = "sk_test_refund_heal"
P = PaymentStatus


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "stripe.db", flavor="stripe", api_key=KEY) as server:
        yield server


@pytest.fixture
def adapter(sandbox: SandboxServer) -> Iterator[StripeAdapter]:
    with StripeAdapter(sandbox.url, api_key=Secret(KEY),
                       timeout=httpx.Timeout(connect=1.0, read=5.0, write=1.0, pool=1.0)) as a:
        yield a


def handlers(db: Database, adapter: StripeAdapter, *, grace: float = 0.0) -> Handlers:
    h = Handlers()
    h.register("charge", ChargeHandler(PaymentStore(db), lambda _n: adapter))
    h.register("refund", RefundHandler(RefundStore(db), PaymentStore(db), lambda _n: adapter))
    h.register(REFUND_RECONCILE_KIND, RefundReconcileHandler(
        RefundStore(db), PaymentStore(db), lambda _n: adapter, config=reconcile_config(grace=grace),
        clock=SystemClock()))
    return h


def charged(db: Database, adapter: StripeAdapter, amount: int = 5000) -> int:
    [pid] = PaymentStore(db).create([NewPayment("default", "order-1", amount, "EUR", "stripe",
                                                payment_method="pm_card_visa", customer_reference="cus_heal")])
    drain(db, handlers(db, adapter), queues=["charges"])
    return pid


def reconcile(db: Database, adapter: StripeAdapter, refund_id: int, *, recheck: bool = False) -> None:
    payload: dict[str, object] = {"refund_id": refund_id, **({"recheck": True} if recheck else {})}
    Client(JobStore(db), Settings()).enqueue(REFUND_RECONCILE_KIND, payload, queue="reconcile",
                                             unique_key=refund_reconcile_key(refund_id))
    drain(db, handlers(db, adapter), queues=["reconcile"])


def test_refund_reconcile__a_pending_refund_is_settled(db: Database, sandbox: SandboxServer,
                                                       adapter: StripeAdapter) -> None:
    pid = charged(db, adapter)
    sandbox.set_faults(Faults(refund_pending_fraction=1.0, settle_after_seconds=0.3))
    [rid] = RefundStore(db).create([NewRefund(pid, "rf-1", 1000, None, "alice")], queue="charges")
    drain(db, handlers(db, adapter), queues=["charges"])
    pending = RefundStore(db).get(rid)
    assert pending is not None and pending.status is P.PENDING and pending.psp_refund_id  # stored at once
    time.sleep(0.4)
    reconcile(db, adapter, rid)
    healed = RefundStore(db).get(rid)
    assert healed is not None and healed.status is P.SUCCEEDED and healed.psp_refund_id == pending.psp_refund_id
    assert [e.source for e in RefundStore(db).events(rid)][-1] == "reconcile"


def test_refund_reconcile__never_reached_the_psp_fails_and_frees_the_amount(db: Database,
                                                                          adapter: StripeAdapter) -> None:
    pid = charged(db, adapter)
    store = RefundStore(db)
    [rid] = store.create([NewRefund(pid, "rf-lost", 5000, None, "alice")], queue="charges")
    [job] = JobStore(db).list_jobs(kind="refund", limit=1)
    assert JobStore(db).cancel(job.id) == "canceled"  # its worker died after the claim, before the send
    with db.begin() as conn:
        assert store.apply(conn, RefundTransition(rid, P.CREATED, P.PROCESSING, RefundSource.REFUND))
    reconcile(db, adapter, rid)
    lost = store.get(rid)
    assert lost is not None and lost.status is P.FAILED
    assert lost.failure_reason == "never reached the PSP (not found after the grace period)"
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.refunded_amount == 0



def test_refund_reconcile__a_send_between_its_read_and_its_heal_keeps_the_refund_unfinished(
        db: Database, adapter: StripeAdapter) -> None:
    """"Never reached the PSP" is decided on a read; a send stamped after it (a replayed refund job whose attempt
    then ended) makes the heal's write give way, so the request on its way is never declared lost (the Spin
    model's finding 5, docs/verification.md)."""
    pid = charged(db, adapter)
    store, jobs = RefundStore(db), JobStore(db)
    [rid] = store.create([NewRefund(pid, "rf-replayed", 5000, None, "alice")], queue="charges")
    [job] = jobs.list_jobs(kind="refund", limit=1)
    assert jobs.cancel(job.id) == "canceled"
    with db.begin() as conn:
        assert store.apply(conn, RefundTransition(rid, P.CREATED, P.PROCESSING, RefundSource.REFUND))
    Client(jobs, Settings()).enqueue(REFUND_RECONCILE_KIND, {"refund_id": rid}, queue="reconcile",
                                     unique_key=refund_reconcile_key(rid))
    [heal] = jobs.claim(worker="w1", queues=["reconcile"], n=1, ttl=30)
    handler = RefundReconcileHandler(store, PaymentStore(db), lambda _n: adapter,
                                     config=reconcile_config(grace=0.0), clock=SystemClock())
    outcome = handler(heal, Lease(jobs, heal.id, heal.attempts, "w1"))
    assert isinstance(outcome, Complete) and callable(outcome.write)  # about to fail it: not found, grace over
    with db.begin() as conn:  # meanwhile the refund is sent again
        assert store.mark_sent(conn, rid) is P.PROCESSING
    with pytest.raises(ChargeInFlight), db.begin() as conn:
        outcome.write(conn)
    kept = store.get(rid)
    assert kept is not None and kept.status is P.PROCESSING and kept.failure_reason is None

def test_refund_reconcile__waits_while_the_refund_job_may_still_send(db: Database, adapter: StripeAdapter) -> None:
    pid = charged(db, adapter)
    [rid] = RefundStore(db).create([NewRefund(pid, "rf-wait", 100, None, "alice")], queue="charges")
    Client(JobStore(db), Settings()).enqueue(REFUND_RECONCILE_KIND, {"refund_id": rid}, queue="reconcile")
    settings = fast_settings()
    Worker(JobStore(db), handlers(db, adapter), config=settings.engine, policy=RetryPolicy(settings.retry),
           queues=["reconcile"]).run(burst=True)
    [job] = JobStore(db).list_jobs(kind=REFUND_RECONCILE_KIND, limit=1)
    assert job.state is JobState.PENDING  # snoozed: the refund job decides first
    waiting = RefundStore(db).get(rid)
    assert waiting is not None and waiting.status is P.CREATED


def test_refund_recheck__a_refund_failed_after_success_goes_to_review(db: Database, sandbox: SandboxServer,
                                                                     adapter: StripeAdapter) -> None:
    pid = charged(db, adapter)
    sandbox.set_faults(Faults(refund_fail_fraction=1.0, settle_after_seconds=0.3))
    [rid] = RefundStore(db).create([NewRefund(pid, "rf-back", 1000, None, "alice")], queue="charges")
    drain(db, handlers(db, adapter), queues=["charges"])
    done = RefundStore(db).get(rid)
    assert done is not None and done.status is P.SUCCEEDED
    time.sleep(0.4)  # the card network returns the money: Stripe's refund.failed
    reconcile(db, adapter, rid)  # not a recheck: a final refund is left alone
    still = RefundStore(db).get(rid)
    assert still is not None and still.status is P.SUCCEEDED
    reconcile(db, adapter, rid, recheck=True)
    reviewed = RefundStore(db).get(rid)
    assert reviewed is not None and reviewed.status is P.NEEDS_REVIEW
    assert (reviewed.review_reason or "").startswith("refund_reversed: the PSP says failed for a refund ours was "
                                                     "succeeded")
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.refunded_amount == 1000  # counted until a person decides


def test_sweep__covers_refunds(db: Database, db_url: str, sandbox: SandboxServer, adapter: StripeAdapter,
                               recon: Runner) -> None:
    pid = charged(db, adapter)
    sandbox.set_faults(Faults(refund_pending_fraction=1.0, settle_after_seconds=0.2))
    [rid] = RefundStore(db).create([NewRefund(pid, "rf-swept", 700, None, "alice")], queue="charges")
    drain(db, handlers(db, adapter), queues=["charges"])
    time.sleep(0.3)
    env = {**os.environ, "RECON_STRIPE_BASE_URL": sandbox.url, "RECON_STRIPE_API_KEY": KEY}
    env.pop("RECON_CONFIG", None)
    r = recon("sweep", "--older-than", "0s", "--json", db_url=db_url, env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["refunds"]["checked"] == 1 and doc["refunds"]["healed_succeeded"] == 1
    swept = RefundStore(db).get(rid)
    assert swept is not None and swept.status is P.SUCCEEDED
