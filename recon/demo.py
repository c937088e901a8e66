"""``recon demo``: the whole story end to end on SQLite and the PSP sandbox, in under a minute.

It starts the sandbox in-process with faults switched on (429s, answers lost after charging, 5xx, slow
settlement), creates a few hundred payments, runs the charge workers, then sweeps: reconciliation heals
what the charges left pending. It ends with a check against the sandbox's own ledger that no idempotency
key was charged twice. Like ``cli``, this module is a composition root: it wires the sandbox adapter.
"""

from __future__ import annotations

import random
import tempfile
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from psp_adapters.sandbox.adapter import SandboxAdapter
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from recon.classify import classify
from recon.clock import SystemClock
from recon.config import BackoffConfig, Settings
from recon.db.database import connect, upgrade
from recon.db.ledger import LedgerStore, NewPayment
from recon.db.store import JobStore
from recon.engine.client import Client
from recon.engine.handlers import Handlers
from recon.engine.retry import RetryPolicy
from recon.engine.worker import Worker
from recon.metrics import ProcessMetrics
from recon.payments.charge import ChargeHandler
from recon.payments.instrumented import instrument
from recon.payments.model import PaymentStatus
from recon.reconcile import sweep as sw
from recon.reconcile.config import PspSchedule, ReconcileConfig
from recon.reconcile.handler import ReconcileHandler

DEMO_FAULTS = Faults(rate_429=0.05, retry_after_seconds=1, rate_500=0.03, rate_hang=0.04, hang_seconds=1.5,
                     pending_fraction=0.12, settle_after_seconds=3.0, pending_fail_fraction=0.25,
                     rate_decline=0.04, decline_amount_suffix=None, seed=7)
CURRENCIES = (("EUR", 100), ("USD", 100), ("GBP", 100), ("JPY", 1), ("KWD", 1000))


def run_demo(*, payments: int = 300, directory: str | None = None, say: Any = print) -> int:
    """Run the story; return the exit code (0 when every payment ended final and no key was charged twice)."""
    with tempfile.TemporaryDirectory(prefix="recon-demo-") as tmp:
        where = Path(directory or tmp)
        where.mkdir(parents=True, exist_ok=True)
        return _story(where, payments, say)


def _story(where: Path, n: int, say: Any) -> int:
    started = time.monotonic()
    db = connect(f"sqlite:///{where / 'recon.db'}", pool_size=12)
    upgrade(db)
    with SandboxServer(where / "psp-sandbox.db", faults=DEMO_FAULTS) as server:
        say(f"PSP sandbox on {server.url}: 5% 429s, 3% 500s, 4% answers lost after charging, "
            f"12% slow settlement, 4% declines")
        metrics = ProcessMetrics()  # PSP latency and 429s through the instrumented adapter (recon.metrics)
        adapter = instrument(
            SandboxAdapter(server.url, timeout=httpx.Timeout(connect=1.0, read=1.0, write=1.0, pool=1.0)),
            recorder=metrics)
        ledger = LedgerStore(db)
        rng = random.Random(42)  # nosec B311  # jitter and simulation, not security
        new = [NewPayment(merchant_account="demo-shop", merchant_reference=f"order-{i:05d}",
                          amount=rng.randint(1, 500) * unit, currency=cur, psp="sandbox")
               for i, (cur, unit) in enumerate(rng.choice(CURRENCIES) for _ in range(n))]
        ledger.create(new)
        say(f"created {n} payments in {len({p.currency for p in new})} currencies, each with a charge job")

        settings = _demo_settings()
        store = JobStore(db)
        handlers = Handlers()
        handlers.register("charge", ChargeHandler(ledger, lambda _name: adapter))
        rc = ReconcileConfig(default=PspSchedule(schedule=(), grace_period=_seconds(0)),
                             settlement_window=_seconds(0))
        handlers.register("reconcile", ReconcileHandler(ledger, lambda _name: adapter, config=rc, clock=SystemClock()))
        charged = _run_until_done(store, handlers, settings, queue="charges", total=n, timeout=40,
                                  observer=metrics)
        counts = _statuses(ledger)
        say(f"charge workers: {charged['succeeded']} charge jobs done first time or after retries; "
            f"payments now {_fmt(counts)}")

        unfinished = counts.get("pending", 0) + counts.get("processing", 0)
        if unfinished:
            say(f"{unfinished} payments have no final answer (slow settlement or a lost answer); "
                f"waiting {DEMO_FAULTS.settle_after_seconds:.0f}s for the PSP to settle them, then sweeping")
            time.sleep(DEMO_FAULTS.settle_after_seconds + 0.5)
        selection = sw.enqueue(ledger, Client(store, settings), sw.SweepOptions(older_than=_seconds(0)),
                               queue=rc.queue)
        _run_until_done(store, handlers, settings, queue=rc.queue, total=len(selection), timeout=30,
                        observer=metrics)
        summary = sw.summarise(ledger, store, selection)
        say(f"sweep checked {summary.checked}: healed->succeeded {summary.counts['healed_succeeded']}, "
            f"healed->failed {summary.counts['healed_failed']}, needs review {summary.counts['needs_review']}, "
            f"still pending {summary.counts['still_pending']}")
        final = _statuses(ledger)
        say(f"final: {_fmt(final)}")
        charges = httpx.get(f"{server.url}/_admin/charges", timeout=5).json()
        for psp, (requests, throttled) in metrics.psp_totals().items():
            say(f"PSP calls to {psp}: {requests}, of which {throttled} were answered 429 (rate limited)")
        adapter.close()
    db.dispose()
    double = charges["max_per_key"] > 1
    say(f"sandbox ledger: {charges['charges']} charges for {charges['keys']} idempotency keys; "
        f"most charges for one key: {charges['max_per_key']} -> {'DOUBLE CHARGE' if double else 'no double charge'}")
    say(f"done in {time.monotonic() - started:.1f}s")
    unfinished = final.get("pending", 0) + final.get("processing", 0) + final.get("created", 0)
    return 3 if double else (1 if unfinished or final.get("needs_review") else 0)


def _demo_settings() -> Settings:
    """Short backoffs and leases so the demo's retries happen within seconds."""
    base = Settings()
    fast = BackoffConfig(base_seconds=0.1, cap_seconds=1.5, max_attempts=12)
    retry = {kind: fast for kind in base.retry}
    engine = replace(base.engine, concurrency=16, lease_ttl_seconds=10, heartbeat_interval_seconds=2,
                     poll_interval_seconds=0.05, watcher_interval_seconds=1)
    return replace(base, retry=retry, engine=engine)


def _run_until_done(store: JobStore, handlers: Handlers, settings: Settings, *, queue: str, total: int,
                    timeout: float, observer: ProcessMetrics | None = None) -> Counter[str]:
    """Run a worker on ``queue`` until no job of it is unfinished (retries included), or ``timeout``."""
    worker = Worker(store, handlers, config=settings.engine, policy=RetryPolicy(settings.retry), queues=[queue],
                    classify_func=classify, observer=observer)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        depth = store.stats(window=_seconds(0))["depth"]
        if not any(q == queue and s not in ("succeeded", "dead", "canceled") for q, s, _n in depth):
            break
    worker.request_stop()
    thread.join(30)
    return worker.stats.outcomes


def _statuses(ledger: LedgerStore) -> dict[str, int]:
    return dict(Counter(str(p.status) for p in ledger.iter_payments()))


def _fmt(counts: dict[str, int]) -> str:
    order = [s.value for s in PaymentStatus]
    return ", ".join(f"{s} {counts[s]}" for s in order if counts.get(s))


def _seconds(s: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=s)
