"""Audit trail benchmark: how fast the sealer chains rows and `recon audit verify` walks them, and what a payment
transition costs with the sealer running beside it (the design keeps the sealer off the write path:
recon/audit.py).

Prints one JSON line per phase (figures, not a pass/fail test):
  transitions          payments/s moved created -> processing (one compare-and-set and one event each, 500 per
                       transaction), with no sealer running
  transitions_sealing  the same on as many new payments while a sealer thread seals in a loop beside them
  seal                 rows/s chained into audit_seals (every payment event and the audit rows) by Sealer.run_once
  verify               rows/s checked by recon.audit.verify (both streams), and whether all matched

Usage: python bench/audit.py [--backend postgresql|sqlite] [--payments N] [--timeout S]
PostgreSQL (default): a database of its own next to RECON_BENCH_DATABASE_URL's (default: the test database's
server), dropped at the end. SQLite: a file in a temporary directory. Bounded: --payments at most 200,000; each
phase stops at --timeout seconds (reported as timed_out).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from datetime import timedelta

import sqlalchemy as sa
from scratch import scratch_database  # bench/scratch.py (run as python bench/NAME.py)

from recon.audit import Sealer, entry, verify
from recon.db.audit_store import AuditStore
from recon.db.database import Database, connect
from recon.db.payment_store import PaymentStore
from recon.rows import EventSource, NewPayment, PaymentStatus, Transition

BATCH = 500


def transitions(db: Database, n: int, *, prefix: str, timeout: float) -> dict[str, object]:
    store = PaymentStore(db)
    ids = store.create([NewPayment("shop", f"{prefix}-{i}", 1000, "EUR", "sandbox") for i in range(n)],
                       charge=False)
    start, moved = time.perf_counter(), 0
    for at in range(0, len(ids), BATCH):
        if time.perf_counter() - start > timeout:
            return {"payments": moved, "timed_out": True}
        with db.begin() as conn:
            moved += len(store.apply_many(conn, [Transition(pid, PaymentStatus.CREATED, PaymentStatus.PROCESSING,
                                                            EventSource.CHARGE, details={"bench": True})
                                                 for pid in ids[at:at + BATCH]]))
    seconds = time.perf_counter() - start
    return {"payments": moved, "seconds": round(seconds, 3), "per_second": round(moved / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--payments", type=int, default=20_000)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    n = max(1, min(args.payments, 200_000))
    with scratch_database(args.backend, "audit") as url:
        db = connect(url)
        try:
            AuditStore(db).record(*[entry("bench", "bench.row", f"row {i}", i=i) for i in range(min(n, 5000))])
            print(json.dumps({"case": "transitions", "backend": args.backend,
                              **transitions(db, n, prefix="a", timeout=args.timeout)}), flush=True)
            sealer = Sealer(AuditStore(db), gap_grace=timedelta(seconds=10))
            stop = threading.Event()

            def seal_loop() -> None:
                while not stop.is_set():
                    sealer.run_once(stop)

            thread = threading.Thread(target=seal_loop, daemon=True)
            thread.start()
            figures = transitions(db, n, prefix="b", timeout=args.timeout)
            stop.set()
            thread.join(args.timeout)
            print(json.dumps({"case": "transitions_sealing", "backend": args.backend, **figures}), flush=True)
            start = time.perf_counter()
            result = sealer.run_once()
            while any(result.waiting.values()) and time.perf_counter() - start < args.timeout:
                time.sleep(1)
                result = sealer.run_once()
            with db.begin() as conn:
                sealed = conn.execute(sa.text("SELECT count(*) FROM audit_seals")).scalar_one()
            print(json.dumps({"case": "seal", "backend": args.backend, "rows_sealed_in_all": sealed,
                              "last_pass_rows": sum(result.sealed.values()),
                              "seconds": round(time.perf_counter() - start, 3)}), flush=True)
            start = time.perf_counter()
            checks = verify(AuditStore(db))
            seconds = time.perf_counter() - start
            rows = sum(c.checked for c in checks)
            print(json.dumps({"case": "verify", "backend": args.backend, "rows": rows, "seconds": round(seconds, 3),
                              "per_second": round(rows / seconds), "ok": all(c.mismatch is None for c in checks)}),
                  flush=True)
        finally:
            db.dispose()


if __name__ == "__main__":
    main()
