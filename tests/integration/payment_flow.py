"""Shared wiring for payment flow tests: a real sandbox server over HTTP, the real handlers, a worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import httpx

from psp_adapters.protocol import PspAdapter
from psp_adapters.sandbox.adapter import SandboxAdapter
from recon import Client, Handlers, JobStore, RetryPolicy, Settings, Worker
from recon.classify import classify
from recon.clock import SystemClock
from recon.config import BackoffConfig
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.payments.charge import ChargeHandler
from recon.reconcile import sweep as sw
from recon.reconcile.config import PspSchedule, ReconcileConfig
from recon.reconcile.handler import ReconcileHandler
from recon.rows import NewPayment

FAST_RETRY = BackoffConfig(base_seconds=0.05, cap_seconds=0.3, max_attempts=15)


def fast_settings() -> Settings:
    base = Settings()
    engine = replace(base.engine, concurrency=8, lease_ttl_seconds=5, heartbeat_interval_seconds=1,
                     poll_interval_seconds=0.02, watcher_interval_seconds=0.5)
    return replace(base, engine=engine, retry={k: FAST_RETRY for k in base.retry})


def sandbox_adapter(url: str, *, read_timeout: float = 1.0) -> SandboxAdapter:
    return SandboxAdapter(url, timeout=httpx.Timeout(connect=1.0, read=read_timeout, write=1.0, pool=1.0))


def reconcile_config(*, schedule: tuple[float, ...] = (0.2, 0.2), grace: float = 0.0) -> ReconcileConfig:
    return ReconcileConfig(default=PspSchedule(schedule=tuple(timedelta(seconds=s) for s in schedule),
                                               grace_period=timedelta(seconds=grace)),
                           settlement_window=timedelta(days=2))


def handlers_for(db: Database, adapter: PspAdapter, rc: ReconcileConfig | None = None) -> Handlers:
    ledger = PaymentStore(db)
    h = Handlers()
    h.register("charge", ChargeHandler(ledger, lambda _name: adapter))
    h.register("reconcile", ReconcileHandler(ledger, lambda _name: adapter, config=rc or reconcile_config(),
                                             clock=SystemClock()))
    return h


def create(db: Database, n: int, *, amount: int = 1000, currency: str = "EUR", psp: str = "sandbox",
           charge: bool = True, prefix: str = "order", account: str = "shop", payment_method: str | None = None,
           customer_reference: str | None = None) -> list[int]:
    return PaymentStore(db).create([NewPayment(account, f"{prefix}-{i}", amount, currency, psp,
                                              payment_method=payment_method, customer_reference=customer_reference)
                                   for i in range(n)], charge=charge)


def drain(db: Database, handlers: Handlers, *, queues: list[str], timeout: float = 30,
          settings: Settings | None = None) -> Worker:
    """Run a worker until no job of ``queues`` is unfinished (retries included) or ``timeout``."""
    settings = settings or fast_settings()
    store = JobStore(db)
    worker = Worker(store, handlers, config=settings.engine, policy=RetryPolicy(settings.retry), queues=queues,
                    classify_func=classify)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and unfinished(store, queues):
        time.sleep(0.05)
    worker.request_stop()
    t.join(20)
    assert not unfinished(store, queues), f"jobs still unfinished after {timeout}s"
    return worker


def unfinished(store: JobStore, queues: list[str]) -> int:
    """Unfinished jobs of ``queues``, counted in one statement (several reads could miss a moving job)."""
    depth = store.stats(window=timedelta(0))["depth"]
    return sum(n for queue, state, n in depth if queue in queues and state not in ("succeeded", "dead", "canceled"))


def sweep_now(db: Database, handlers: Handlers, *, timeout: float = 30,
              until_finished: bool = False) -> sw.SweepSummary:
    """Enqueue and run a sweep: like `recon sweep` (until nothing is due), or until every job finished."""
    settings = fast_settings()
    selection = sw.enqueue(PaymentStore(db), Client(JobStore(db), settings),
                           sw.SweepOptions(older_than=timedelta(0)), queue="reconcile")
    if until_finished:
        drain(db, handlers, queues=["reconcile"], timeout=timeout, settings=settings)
        return sw.summarise(PaymentStore(db), JobStore(db), selection)
    Worker(JobStore(db), handlers, config=settings.engine, policy=RetryPolicy(settings.retry), queues=["reconcile"],
           classify_func=classify).run(burst=True)
    return sw.summarise(PaymentStore(db), JobStore(db), selection)


def admin(url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    response = httpx.post(f"{url}{path}", json=body or {}, timeout=5) if body is not None or "/payments/" in path \
        else httpx.get(f"{url}{path}", timeout=5)
    response.raise_for_status()
    return response.json()


def wait_for(predicate: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
