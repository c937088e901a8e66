"""The PSP guard before a movement's send (``recon.payments.movement``), as before a charge's
(``tests/integration/test_psp_guard.py``): refunds through recon's real Stripe adapter against the sandbox's
Stripe flavour, on both databases. A permit that waited in the send's claim (a stalled write) is admitted again
right before the call, so the stall releases no crowd of sends at the PSP; one that finds no token snoozes the
job, which re-sends the same key on its next attempt: one refund at the PSP."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from random import Random
from typing import Any

import pytest
import sqlalchemy as sa

from psp_adapters.protocol import PaymentOutcome, RefundRequest, Secret
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from psp_adapters.stripe.adapter import StripeAdapter
from recon import Handlers, JobStore, RetryPolicy, Worker
from recon.classify import classify
from recon.db.control_store import ControlStore
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.db.refund_store import RefundStore
from recon.payments.guard import PspGuard
from recon.payments.psp_limits import GuardConfig, PspLimits
from recon.payments.refund import RefundHandler
from recon.refund_rows import NewRefund, Refund
from recon.rows import PaymentStatus
from tests.integration.payment_flow import fast_settings, unfinished
from tests.integration.test_psp_guard import StalledBegin
from tests.integration.test_refund_flow import KEY, charged, psp_refunds


@pytest.fixture
def sandbox(tmp_path: Path) -> Any:
    with SandboxServer(tmp_path / "stripe.db", flavor="stripe", api_key=KEY) as server:
        yield server


class Stamping(StripeAdapter):
    """The Stripe adapter, noting when each refund request goes out and under which key."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stamps: list[float] = []
        self.keys: list[str] = []

    def create_refund(self, request: RefundRequest, *, idempotency_key: str) -> PaymentOutcome:
        self.stamps.append(time.monotonic())  # list.append is atomic: every thread's call is counted
        self.keys.append(idempotency_key)
        return super().create_refund(request, idempotency_key=idempotency_key)


class StalledClaim(RefundStore):
    """The refund store whose claim of a send (the handler's transaction after its permit, before its call)
    waits for ``release`` first (``StalledBegin``), as it waits for a pooled connection or SQLite's write lock
    under load; its reads are the real database's. ``arrivals`` counts the claims held."""

    def __init__(self, db: Database) -> None:
        self.stall = StalledBegin(db)
        super().__init__(self.stall)  # type: ignore[arg-type]
        self.real = db

    @property
    def release(self) -> threading.Event:
        return self.stall.release

    @property
    def arrivals(self) -> int:
        return self.stall.arrivals

    def get(self, movement_id: int, conn: sa.Connection | None = None) -> Refund | None:
        if conn is None:
            with self.real.begin() as own:
                return super().get(movement_id, own)
        return super().get(movement_id, conn)


def refund_worker(db: Database, stalled: StalledClaim, adapter: StripeAdapter, guard: PspGuard,
                  n: int) -> tuple[Worker, threading.Thread]:
    handlers = Handlers()
    handlers.register("refund", RefundHandler(stalled, PaymentStore(db), lambda _name: adapter, guard=guard))
    settings = fast_settings()
    engine = replace(settings.engine, autosize=False, concurrency=n, claim_batch_size=n, prefetch=0)
    worker = Worker(JobStore(db), handlers, config=engine, policy=RetryPolicy(settings.retry), queues=["charges"],
                    classify_func=classify)
    return worker, threading.Thread(target=worker.run, daemon=True)


def run_stalled(db: Database, worker: Worker, thread: threading.Thread, stalled: StalledClaim, *, held: int,
                stall: float) -> None:
    """Start ``worker``, wait until ``held`` sends are held in their claim's write, hold them ``stall`` s more,
    release them and wait until no job is unfinished."""
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while stalled.arrivals < held and time.monotonic() < deadline:
            time.sleep(0.02)
        assert stalled.arrivals >= held
        time.sleep(stall)
        stalled.release.set()
        deadline = time.monotonic() + 60
        while unfinished(JobStore(db), ["charges"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stalled.release.set()
        worker.request_stop()
        thread.join(30)


def stripe_guard(db: Database, **limits: float) -> PspGuard:
    return PspGuard(ControlStore(db), GuardConfig(per_psp={"stripe": PspLimits(**limits)}),  # type: ignore[arg-type]
                    rng=Random(7))


def test_movement_guard__a_stall_before_the_send_releases_no_crowd_at_the_psp(db: Database,
                                                                               sandbox: SandboxServer) -> None:
    """24 refund jobs on 24 threads at 10 requests/s with a burst of 2, every send's claim stalled (a database
    under load) and then all released at once: the sends reach the PSP within the rate, at most 10 + 2 in any
    second, and each refund is sent once (no 429 to retry). Before, a refund's permit was taken before the claim
    and spent after it: the release sent the 24 in one instant (37 calls, 13 of them 429s)."""
    rate, burst, n = 10, 2, 24
    adapter = Stamping(sandbox.url, api_key=Secret(KEY))
    ids = charged(db, adapter, n)
    sandbox.set_faults(Faults(rate_limit=rate))
    refunds = RefundStore(db).create([NewRefund(pid, f"rf-{pid}", 1000, None, "alice") for pid in ids],
                                     queue="charges")
    stalled = StalledClaim(db)
    guard = stripe_guard(db, rate_limit=rate, rate_burst=burst, rate_wait_seconds=30)
    worker, thread = refund_worker(db, stalled, adapter, guard, n)
    try:
        run_stalled(db, worker, thread, stalled, held=n, stall=1.0)
    finally:
        adapter.close()
    assert [r.status for r in map(RefundStore(db).get, refunds)] == [PaymentStatus.SUCCEEDED] * n  # type: ignore[union-attr]
    assert len(adapter.stamps) == n  # one call each: no 429 to retry
    stamps = sorted(adapter.stamps)
    assert max(sum(1 for s in stamps if t0 <= s < t0 + 1.0) for t0 in stamps) <= rate + burst
    assert guard.counts["readmitted"] >= n - burst


def test_movement_guard__a_stale_permit_that_finds_no_token_snoozes_and_the_next_attempt_refunds_once(
        db: Database, sandbox: SandboxServer) -> None:
    """1 request/s, a bucket of 1, a wait for tokens of at most 0.1 s: the refund job takes the only token, its
    claim stalls 0.6 s (past PERMIT_SECONDS), the permit is admitted again and no token comes within 0.1 s: the
    job snoozes (no attempt spent) with the refund processing, nothing sent. Its next attempt re-sends the same
    key: one refund at the PSP, succeeded."""
    adapter = Stamping(sandbox.url, api_key=Secret(KEY))
    [pid] = charged(db, adapter)
    [rid] = RefundStore(db).create([NewRefund(pid, "rf-stale", 1500, None, "alice")], queue="charges")
    stalled = StalledClaim(db)
    guard = stripe_guard(db, rate_limit=1, rate_burst=1, rate_wait_seconds=0.1)
    worker, thread = refund_worker(db, stalled, adapter, guard, 1)
    try:
        run_stalled(db, worker, thread, stalled, held=1, stall=0.6)
    finally:
        adapter.close()
    store = JobStore(db)
    [job] = store.list_jobs(kind="refund")
    outcomes = [(a.outcome, a.error) for a in store.attempts(job.id)]
    assert outcomes[0] == ("snoozed", "psp stripe rate limit") and outcomes[-1][0] == "succeeded", outcomes
    assert guard.counts["readmitted"] >= 1
    refund = RefundStore(db).get(rid)
    assert refund is not None and refund.status is PaymentStatus.SUCCEEDED
    assert adapter.keys == [refund.idempotency_key]  # sent once, after the snooze, under the refund's one key
    payment = PaymentStore(db).get(pid)
    assert payment is not None and payment.psp_reference
    assert [r["amount"] for r in psp_refunds(sandbox, payment.psp_reference)] == [1500]
