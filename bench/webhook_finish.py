"""The webhook jobs' finish alone, and the audit sealer after it: CPU per event of this process and of its
PostgreSQL backends, the figure a loaded machine still lets through (wall-clock rates do not: docs/benchmarks.md,
"Webhook intake, fourth pass"). Prints one JSON document.

Setup (not timed): a scratch database (bench/scratch.py); N payments ``processing`` with Stripe references; one
stored Stripe event each (``payment_intent.succeeded`` news, by the PSP's reference) with its job
(``WebhookStore.intake``), every job claimed. Timed, in one thread as the worker's finisher runs it: the jobs
finished in batches of B (``JobStore.finish_together`` with ``WebhookHandler.apply_events``: the fenced finish,
the events, their payments, transitions, audit rows and marks), then ``Sealer.run_once`` chaining the payment
events. Each part's CPU: ``time.process_time`` here, and utime + stime of the database's backends
(/proc/PID/stat, the server on this machine).

To compare two versions of the code in the same minutes, run the same script with each on PYTHONPATH
(``git archive`` of the other commit), interleaved.

Usage: python bench/webhook_finish.py [--events N] [--batch B]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scratch import scratch_database

import recon
from psp_adapters.protocol import Succeeded, WebhookEvent
from recon.audit import Sealer
from recon.db.audit_store import AuditStore
from recon.db.database import Database, connect
from recon.db.jobs_store import JobStore
from recon.db.payment_store import PaymentStore
from recon.db.webhook_store import WebhookStore
from recon.reconcile.webhook import WebhookHandler
from recon.rows import Finish


def backends_cpu(db: Database) -> float:
    with db.engine.connect() as conn:
        pids = [int(p) for (p,) in conn.exec_driver_sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")]
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def setup(db: Database, n: int) -> list[tuple[Any, int]]:
    with db.begin() as conn:
        conn.exec_driver_sql("""
            INSERT INTO payments (merchant_account, merchant_reference, amount, currency, psp, psp_reference,
                                  idempotency_key, status, created_at, updated_at)
            SELECT 'shop', 'fin-' || i, 1000, 'EUR', 'stripe', 'pi_fin_' || i, 'fin-key-' || i, 'processing',
                   now(), now()
            FROM generate_series(0, %(n)s - 1) AS i""", {"n": n})
    webhooks = WebhookStore(db)
    taken = []
    for start in range(0, n, 500):
        events = [WebhookEvent("stripe", f"evt_fin_{i}", "payment_intent.succeeded", datetime(2026, 12, 5, tzinfo=UTC),
                               news=Succeeded(psp_reference=f"pi_fin_{i}", merchant_reference=f"fin-{i}",
                                              amount=1000, currency="EUR", raw_status="succeeded"),
                               merchant_account="shop", body={"id": f"pi_fin_{i}", "object": "payment_intent"})
                  for i in range(start, min(n, start + 500))]
        taken.extend(webhooks.intake(events, queue="webhooks", max_attempts=5))
    jobs = {j.id: j for j in JobStore(db).claim(worker="bench", queues=["webhooks"], n=n, ttl=3600)}
    with db.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    return [(jobs[t.job_id], t.webhook_id) for t in taken]  # type: ignore[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    with scratch_database("postgresql", "whfinish") as url:
        db = connect(url)
        try:
            items = setup(db, args.events)
            store, handler = JobStore(db), WebhookHandler(PaymentStore(db), WebhookStore(db))
            out: dict[str, Any] = {"bench": "webhook_finish", "events": args.events, "batch": args.batch,
                                   "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
                                   "code": str(Path(recon.__file__).resolve().parents[1])}
            cpu0, pg0, t0 = time.process_time(), backends_cpu(db), time.perf_counter()
            for at in range(0, len(items), args.batch):
                batch = items[at:at + args.batch]
                by_id = {job.id: (job, wid) for job, wid in batch}
                store.finish_together(
                    worker="bench", finishes=[Finish(job.id, job.attempts, "succeeded", "succeeded")
                                              for job, _ in batch],
                    write=lambda conn, ids, by_id=by_id: handler.apply_events(  # type: ignore[misc]
                        conn, [by_id[i] for i in sorted(ids)]))
            cpu1, pg1, t1 = time.process_time(), backends_cpu(db), time.perf_counter()
            sealed = Sealer(AuditStore(db)).run_once()
            cpu2, pg2 = time.process_time(), backends_cpu(db)
            with db.begin() as conn:
                applied = conn.exec_driver_sql("SELECT count(*) FROM webhook_events WHERE state = 'applied'").scalar()
            n = len(items)
            out["finish"] = {"client_us_per_event": round((cpu1 - cpu0) / n * 1e6, 1),
                             "postgresql_us_per_event": round((pg1 - pg0) / n * 1e6, 1),
                             "wall_s": round(t1 - t0, 2), "applied": applied}
            out["sealer"] = {"client_us_per_event": round((cpu2 - cpu1) / n * 1e6, 1),
                             "postgresql_us_per_event": round((pg2 - pg1) / n * 1e6, 1),
                             "sealed": sealed.sealed}
            out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        finally:
            db.dispose()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
