"""A constructed workload with known counts, for tests/integration/test_metrics.py and test_stats.py.

Nine ``pay`` jobs on queues ``default`` and ``side``, run by one burst worker with a ``ProcessMetrics``
observer and an instrumented fake PSP:

| mode      | jobs | what happens                                                          | attempts |
| --------- | ---- | --------------------------------------------------------------------- | -------- |
| ok        | 3    | one PSP call, succeeded                                               | 1        |
| snooze    | 1    | snoozed once (no PSP call), then one PSP call, succeeded             | 2        |
| throttle  | 2    | the PSP answers 429 (retry_after 0): retried, then succeeded          | 2        |
| dead      | 1    | Dead(validation) at once                                              | 1        |
| ghost     | 1    | leased by a crashed worker, lease expired: the watcher rescues it,    | 2        |
|           |      | then one PSP call, succeeded                                          |          |
| steal     | 1    | (queue ``side``) a "thief" takes the lease over mid-run (as if it had | 1 (+1)   |
|           |      | expired and been claimed): a stale finish; the thief keeps the job   |          |

Not worked: two future jobs (pending, tenants t1/t2, priorities 0/5) and one runnable job on queue
``idle``. Three unfinished payments (EUR 1000 new, EUR 250 two hours old, USD 700 two days old).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from psp_adapters.errors import PspError, PspRateLimited
from psp_adapters.protocol import ChargeRequest, PaymentOutcome, PspAdapter, PspRef, SettlementLine, Succeeded
from recon import (
    Client,
    Complete,
    Dead,
    Handlers,
    Job,
    JobSpec,
    JobStore,
    Lease,
    RetryPolicy,
    Settings,
    Snooze,
    Worker,
)
from recon.classify import classify
from recon.config import EngineConfig
from recon.counters import ProcessMetrics
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.payments.instrumented import instrument
from recon.rows import NewPayment

ENGINE = EngineConfig(lease_ttl_seconds=30, heartbeat_interval_seconds=5, watcher_interval_seconds=5,
                      poll_interval_seconds=0.02, concurrency=4, drain_timeout_seconds=5)
MODES = {"ok": 3, "snooze": 1, "throttle": 2, "dead": 1, "ghost": 1, "steal": 1}


class FakePsp:
    """Succeeds, except that each ``throttle-*`` key is rate limited on its first call."""

    name = "fakepsp"
    idempotency_retention = None

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        self.calls[idempotency_key] = self.calls.get(idempotency_key, 0) + 1
        if idempotency_key.startswith("throttle") and self.calls[idempotency_key] == 1:
            raise PspRateLimited("slow down", psp=self.name, status_code=429, retry_after=0.0)
        return Succeeded(psp_reference=f"fp_{idempotency_key}", amount=request.amount,
                         currency=request.currency)

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        raise NotImplementedError

    def iter_settlements(self, since: Any, until: Any, *, merchant_accounts: Any = ()) -> list[SettlementLine]:
        return []

    def close(self) -> None:
        pass


def _handlers(db: Database, adapter: PspAdapter) -> Handlers:
    handlers = Handlers()

    @handlers.register("pay")
    def pay(job: Job, lease: Lease) -> Any:
        mode = job.payload["mode"]
        if mode == "snooze" and job.attempts == 1:
            return Snooze(timedelta(0), reason="PSP says pending")
        if mode == "dead":
            return Dead(error_kind="validation", error="amount must be positive")
        if mode == "steal":  # a pause past the TTL: the lease expired and another worker claimed the job
            with db.begin() as conn:
                conn.execute(sa.text("UPDATE jobs SET lease_owner = 'thief', attempts = attempts + 1 "
                                     "WHERE id = :id"), {"id": job.id})
            return Complete()
        request = ChargeRequest(merchant_reference=f"order-{job.id}", amount=1000, currency="EUR")
        try:
            adapter.create_payment(request, idempotency_key=f"{mode}-{job.id}")
        except PspError as exc:
            return classify(exc)
        return Complete()

    return handlers


def run_workload(db: Database) -> tuple[Worker, ProcessMetrics]:
    """Enqueue and run the workload; return the (stopped) worker and its metrics."""
    store = JobStore(db)
    client = Client(store, Settings())
    # the ghost: claimed by a worker that died; its lease is long expired
    ghost = client.enqueue("pay", {"mode": "ghost"})
    assert store.claim(worker="ghost-host:1:dead", queues=["default"], n=1, ttl=30)
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET lease_until = created_at WHERE id = :id"), {"id": ghost})
    client.enqueue_many([JobSpec("pay", {"mode": mode}, tenant="t1",
                                 queue="side" if mode == "steal" else None)
                         for mode, n in MODES.items() if mode != "ghost" for _ in range(n)])
    client.enqueue_many([JobSpec("pay", {"mode": "ok"}, tenant="t1", delay=timedelta(hours=1)),
                         JobSpec("pay", {"mode": "ok"}, tenant="t2", priority=5, delay=timedelta(hours=1)),
                         JobSpec("sync", queue="idle")])
    now = db.clock.now()
    PaymentStore(db).create([
        NewPayment("shop", "p-new", 1000, "EUR", "fakepsp"),
        NewPayment("shop", "p-2h", 250, "EUR", "fakepsp", created_at=now - timedelta(hours=2)),
        NewPayment("shop", "p-2d", 700, "USD", "fakepsp", created_at=now - timedelta(days=2))], charge=False)
    metrics = ProcessMetrics()
    adapter = instrument(FakePsp(), recorder=metrics)
    worker = Worker(store, _handlers(db, adapter), config=ENGINE, policy=RetryPolicy(Settings().retry),
                    queues=["default", "side"], classify_func=classify, observer=metrics)
    worker.run(burst=True)
    return worker, metrics
