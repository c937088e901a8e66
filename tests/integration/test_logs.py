"""Structured logs end to end: a charge flow against the real PSP sandbox with an API key configured,
logged at DEBUG as JSON lines. Every line about a job names it; the key appears nowhere (both databases)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from psp_adapters.protocol import PspAdapter, Secret
from psp_adapters.sandbox.adapter import SandboxAdapter
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from recon import Handlers, JobStore, RetryPolicy, Worker
from recon.classify import classify
from recon.counters import ProcessMetrics
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.logs import configure
from recon.payments.charge import ChargeHandler
from recon.payments.instrumented import instrument
from recon.rows import NewPayment, PaymentStatus
from tests.integration.payment_flow import fast_settings

KEY = "sk_test_4eC39HqLyjWDarjtT1zdp7dc"
WRONG_KEY = "sk_test_notTheRightOne0000"


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    level = root.level
    out = io.StringIO()
    handler = configure(level="DEBUG", fmt="json", stream=out)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


def test_logs__charge_flow_at_debug_names_jobs_and_never_logs_the_api_key(db: Database, tmp_path: Path,
                                                                          json_logs: io.StringIO) -> None:
    faults = Faults(rate_429=0.3, retry_after_seconds=0, seed=11)  # Retry-After 0: a burst worker retries
    with SandboxServer(tmp_path / "sandbox.db", api_key=KEY, faults=faults) as server:
        timeout = httpx.Timeout(2.0)
        adapters: dict[str, PspAdapter] = {
            "sandbox": SandboxAdapter(server.url, api_key=Secret(KEY), timeout=timeout),
            "sandbox_bad_key": SandboxAdapter(server.url, api_key=Secret(WRONG_KEY), timeout=timeout)}
        metrics = ProcessMetrics()
        instrumented = {name: instrument(a, recorder=metrics) for name, a in adapters.items()}
        ledger = PaymentStore(db)
        ledger.create([NewPayment("shop", f"order-{i}", 1000 + i, "EUR", "sandbox") for i in range(8)]
                      + [NewPayment("shop", "order-badkey", 500, "EUR", "sandbox_bad_key")])
        handlers = Handlers()
        handlers.register("charge", ChargeHandler(ledger, instrumented.__getitem__))
        settings = fast_settings()
        logging.getLogger("recon.test").debug("configured with api_key=%s", KEY)  # a careless line, masked
        worker = Worker(JobStore(db), handlers, config=settings.engine, policy=RetryPolicy(settings.retry),
                        queues=["charges"], classify_func=classify, observer=metrics)
        worker.run(burst=True)
        for adapter in adapters.values():
            adapter.close()
    statuses = {p.merchant_reference: p.status for p in ledger.iter_payments()}
    assert all(statuses[f"order-{i}"] is PaymentStatus.SUCCEEDED for i in range(8))
    assert worker.stats.outcomes["dead"] == 1  # the wrong key: auth, dead at once

    text = json_logs.getvalue()
    assert KEY not in text and WRONG_KEY not in text
    assert KEY[8:] not in text  # not even the part after the prefix
    records = [json.loads(line) for line in text.splitlines()]
    assert {"ts", "level", "logger", "message"} <= set(records[0])
    about_jobs = [r for r in records if "job_id" in r]
    assert about_jobs and all({"kind", "attempt", "worker"} <= set(r) for r in about_jobs)
    finished = [r for r in about_jobs if r["logger"] == "recon.engine.worker"]
    assert {r["message"].rsplit(": ", 1)[-1] for r in finished} >= {"succeeded", "dead"}
    assert all(r["payment_reference"].startswith("order-") for r in finished)
    # httpx's own request lines, emitted inside the handler, carry the job too
    http_lines = [r for r in records if r["logger"] == "httpx"]
    assert http_lines and all("job_id" in r and "payment_reference" in r for r in http_lines)
    assert any("429" in r["message"] for r in http_lines)
    [careless] = [r for r in records if r["logger"] == "recon.test"]
    assert careless["message"] == "configured with api_key=***"
