"""Settlement report benchmark: ``recon report``'s engine on N local payments and a matching PSP listing.

Prints one JSON line: rows/s (payments reconciled per second of report wall time), items written, peak RSS of
the report process (``ru_maxrss``), wall times of the populate and report phases.

- Local payments are bulk-inserted by a bench-only path (SQLite ``executemany``, PostgreSQL ``COPY``), not
  PaymentStore.create: a million creation events would only measure the insert.
- The PSP is a small in-bench PspAdapter whose ``iter_settlements`` is a generator, not the sandbox: a million
  HTTP charges would take far longer than the report. About 1 payment in 200 is made a discrepancy (amounts,
  refunds, duplicates, ghosts, Adyen-style second events, unlisted payments) so every path runs.
- Each phase runs in its own process with a timeout (``--timeout``), so the RSS is the report's alone.

Usage: python bench/report.py [--payments N] [--backend sqlite|postgresql] [--format csv|json] [--timeout S]
PostgreSQL: a database of its own (``<db>_report_bench_<pid>``) on the server of RECON_BENCH_DATABASE_URL
(default: the test server), dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from psp_adapters.protocol import ChargeRequest, PaymentOutcome, PspRef, SettlementLine
from recon.db.database import connect, upgrade
from recon.db.report_store import ReportStore
from recon.reconcile.settlement import CsvWriter, JsonWriter, run_report

PG_URL = os.environ.get("RECON_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
PSP = "bench"
SINCE = datetime(2026, 10, 1, tzinfo=UTC)
UNTIL = datetime(2026, 11, 1, tzinfo=UTC)
WINDOW = timedelta(days=2)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def payment(i: int, n: int) -> tuple[str, str, int, str, str, datetime]:
    """Payment i of n: (merchant_reference, psp_reference, amount, currency, status, created_at)."""
    created = SINCE + (UNTIL - SINCE) * i / n
    status = "failed" if i % 50 == 7 else "processing" if i % 500 == 9 else "succeeded"
    return f"b{i:08d}", f"pr{i:08d}", 100 + i % 9000, "USD" if i % 10 == 0 else "EUR", status, created


class BenchPsp:
    """The PSP's side, generated: one line per payment, with a few discrepancies made on purpose."""

    name: ClassVar[str] = PSP

    def __init__(self, n: int) -> None:
        self.n = n
        self.listing_done = 0.0

    def iter_settlements(self, since: datetime, until: datetime, *,
                         merchant_accounts: Collection[str] = ()) -> Iterator[SettlementLine]:
        try:
            for i in range(self.n):
                yield from self._lines(i)
        finally:
            self.listing_done = time.perf_counter()

    def _lines(self, i: int) -> Iterator[SettlementLine]:
        mref, ref, amount, currency, status, created = payment(i, self.n)
        at = created + timedelta(minutes=5)
        if at >= UNTIL or i % 1000 == 1 or (status == "failed" and i % 100 == 7):
            return  # not listed (yet): expected or missing_at_psp; a failed one is not itemised
        psp_status = {"processing": "succeeded", "failed": "failed"}.get(status, "succeeded")
        if i % 1000 == 2:
            amount += 1
        if i % 1000 == 3:
            psp_status = "refunded"
        yield SettlementLine(ref, mref, amount, currency, psp_status, at)
        if i % 1000 == 4:
            yield SettlementLine(f"ghost{i:08d}", f"ghost-{mref}", amount, currency, "succeeded", at)
        if i % 1000 == 5:
            yield SettlementLine(f"dup{i:08d}", mref, amount, currency, "succeeded", at)
        if i % 1000 == 6:
            yield SettlementLine(ref, mref, amount, currency, "refunded", at + timedelta(hours=1))

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        raise NotImplementedError("the bench PSP only lists settlements")

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        raise NotImplementedError("the bench PSP only lists settlements")

    def close(self) -> None:
        pass


# --- phases (each in its own process) -----------------------------------------------------------------------


_COLUMNS = ("merchant_account, merchant_reference, amount, currency, psp, psp_reference, idempotency_key, "
            "status, created_at, updated_at")


def populate(url: str, n: int) -> dict[str, float]:
    start = time.perf_counter()
    rows = (_row(i, n) for i in range(n))
    if url.startswith("sqlite"):
        lite = sqlite3.connect(make_url(url).database or "")
        lite.execute("PRAGMA journal_mode=WAL")
        with lite:
            lite.executemany(f"INSERT INTO payments ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             ((*r[:8], _micros(r[8]), _micros(r[9])) for r in rows))
        lite.close()
    else:
        from recon.db.libpq import connect as connect_driver

        # the URL as recon reads it (any form: multi-host, service, socket), not rendered back for libpq
        with connect_driver(make_url(url), autocommit=False) as conn, conn.cursor() as cur:
            with cur.copy(f"COPY payments ({_COLUMNS}) FROM STDIN") as copy:
                for r in rows:
                    copy.write_row(r)
            cur.execute("ANALYZE payments")
    return {"populate_seconds": round(time.perf_counter() - start, 2)}


def _row(i: int, n: int) -> tuple[object, ...]:
    mref, ref, amount, currency, status, created = payment(i, n)
    return ("bench", mref, amount, currency, PSP, None if status == "processing" else ref, f"k{i}", status,
            created, created)


def _micros(value: object) -> int:
    assert isinstance(value, datetime)
    return (value - _EPOCH) // timedelta(microseconds=1)


def report(url: str, n: int, fmt: str, out_path: Path) -> dict[str, object]:
    db = connect(url)
    psp = BenchPsp(n)
    start = time.perf_counter()
    with out_path.open("w", encoding="utf-8", newline="") as out:
        writer = JsonWriter(out, psp=PSP, since=SINCE, until=UNTIL) if fmt == "json" else CsvWriter(out)
        result = run_report(ReportStore(db), psp, writer, psp=PSP, since=SINCE, until=UNTIL,
                            settlement_window=WINDOW)
    wall = time.perf_counter() - start
    db.dispose()
    totals = result.totals
    return {
        "report_seconds": round(wall, 2),
        "listing_load_seconds": round(psp.listing_done - start, 2),
        "rows_per_s": round(n / wall),
        "psp_lines": result.lines_read,
        "items": totals.items,
        "items_per_s": round(totals.items / wall),
        "discrepancies": totals.discrepancies,
        "unlisted_failed": result.unlisted_failed,
        "categories": {c: sum(v["count"] for v in cur.values()) for c, cur in totals.to_dict().items()},
        "output_mb": round(out_path.stat().st_size / 2**20, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


# --- orchestration ------------------------------------------------------------------------------------------


def fresh_db(backend: str, tmp: Path) -> tuple[str, str | None]:
    """A migrated, empty database: (url, PostgreSQL database name to drop at the end)."""
    if backend == "sqlite":
        url, name = f"sqlite:///{tmp}/report-bench.db", None
    else:
        base = make_url(PG_URL).set(drivername="postgresql+psycopg")
        name = f"{base.database}_report_bench_{os.getpid()}"
        _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
        url = base.set(database=name).render_as_string(hide_password=False)
    db = connect(url)
    upgrade(db)
    db.dispose()
    return url, name


def _pg_admin(*statements: str) -> None:
    admin = sa.create_engine(make_url(PG_URL).set(drivername="postgresql+psycopg"),
                             isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
    admin.dispose()


def phase(args: list[str], timeout: float) -> dict[str, object]:
    run = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0:
        raise RuntimeError(f"phase {args[:2]} failed:\n{run.stderr}")
    return json.loads(run.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--payments", type=int, default=1_000_000)
    p.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("--format", choices=["csv", "json"], default="csv")
    p.add_argument("--timeout", type=float, default=600.0, help="Seconds per phase.")
    p.add_argument("--phase", choices=["populate", "report"], help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.phase == "populate":
        print(json.dumps(populate(a.url, a.payments)))
        return
    if a.phase == "report":
        print(json.dumps(report(a.url, a.payments, a.format, Path(a.out))))
        return
    figures: dict[str, object] = {"bench": "report", "backend": a.backend, "payments": a.payments,
                                  "format": a.format, "python": platform.python_version()}
    with tempfile.TemporaryDirectory(prefix="recon-report-bench-") as tmp:
        url, pg_name = fresh_db(a.backend, Path(tmp))
        try:
            n = str(a.payments)
            figures.update(phase(["--phase", "populate", "--url", url, "--payments", n], a.timeout))
            figures.update(phase(["--phase", "report", "--url", url, "--payments", n, "--format", a.format,
                                  "--out", f"{tmp}/report.{a.format}"], a.timeout))
        except subprocess.TimeoutExpired as exc:
            figures.update({"timed_out": True, "phase": exc.cmd[3] if len(exc.cmd) > 3 else None})
        finally:
            if pg_name:
                _pg_admin(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
