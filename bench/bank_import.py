"""Bank statement import benchmark: ``recon bank import`` of one large statement file per format.

Prints one JSON line per format: entries/s and MB/s over the import process's wall time (start-up, reading,
checking, the temporary file and the database transaction included), its peak RSS (``ru_maxrss`` of the
child), the file's size and entry count, and the machine's load average before the run (figures on a loaded
machine vary by tens of percent: docs/benchmarks.md says when they were taken).

- The files are written by recon's own writers (``recon.bank.formats``), statements of 10,000 credits each, the
  entries shaped like a PSP's payouts: a bank reference, an end-to-end id, the counterparty, and a remittance
  of 230 characters, no value date (the statement tests/integration/test_bank_import_size.py imports: a camt.053
  entry is about 765 bytes, 140,000 entries are 100 MiB). camt.053 is written statement by statement (streamed,
  like the reader); MT940 and BAI2 are read whole and capped at 64 MiB, so their default is fewer entries
  (``--whole-entries``).
- Each import runs in a process of its own (``python -m recon``) against a new, migrated database (SQLite in a
  temporary directory; PostgreSQL: ``<db>_bank_bench_<pid>`` on the server of RECON_BENCH_DATABASE_URL, default
  the test server, dropped at the end), with a timeout (``--timeout``).

Usage: python bench/bank_import.py [--entries N] [--whole-entries N] [--formats camt053,mt940,bai2]
       [--backend sqlite|postgresql] [--repeats R] [--timeout S]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import pyexpat
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.db.database import connect, upgrade

PG_URL = os.environ.get("RECON_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
IBAN = "NL91ABNA0417164300"
PER_STATEMENT = 10_000
FIRST_DAY = date(2026, 11, 1)
CONFIG = f'[bank.accounts.bench]\niban = "{IBAN}"\ncurrency = "EUR"\n'


def statement(n: int, first: int, count: int, opening: int) -> StatementToWrite:
    """Statement ``n`` (one day), entries ``first`` .. ``first + count - 1``."""
    day = FIRST_DAY + timedelta(days=n)
    entries = [EntryToWrite(amount=1000 + i % 90_000, direction="credit", booking_date=day,
                            bank_reference=f"R{i:09d}", end_to_end_id=f"po_{i:012d}",
                            counterparty="STRIPE PAYMENTS EUROPE LTD",
                            remittance=f"STRIPE PAYOUT po_{i:012d} " + "X" * 200)
               for i in range(first, first + count)]
    return StatementToWrite(account=IBAN, currency="EUR", exponent=2, statement_id=f"S{n}", opening=opening,
                            period_start=day, period_end=day, entries=entries, sequence=str(n + 1))


def statements(total: int) -> list[StatementToWrite]:
    out, opening = [], 0
    for n, first in enumerate(range(0, total, PER_STATEMENT)):
        out.append(statement(n, first, min(PER_STATEMENT, total - first), opening))
        opening = out[-1].closing_balance()
    return out


def write_camt(path: Path, total: int) -> None:
    """One Document, its statements written one at a time (the writer's header and trailer around them)."""
    head = io.BytesIO()
    registry.writer("camt053").write(head, [])
    prefix, suffix = head.getvalue().split(b"</BkToCstmrStmt>")
    with path.open("wb") as fh:
        fh.write(prefix)
        opening = 0
        for n, first in enumerate(range(0, total, PER_STATEMENT)):
            s = statement(n, first, min(PER_STATEMENT, total - first), opening)
            body = io.BytesIO()
            registry.writer("camt053").write(body, [s])
            fh.write(body.getvalue().split(b"</GrpHdr>\n", 1)[1].split(b"</BkToCstmrStmt>")[0])
            opening = s.closing_balance()
        fh.write(b"</BkToCstmrStmt>" + suffix)


def write_file(fmt: str, path: Path, total: int) -> None:
    if fmt == "camt053":
        write_camt(path, total)
        return
    with path.open("wb") as fh:
        registry.writer(fmt).write(fh, statements(total))


def new_database(backend: str, tmp: Path, tag: str) -> tuple[str, str | None]:
    """A migrated, empty database: (url, PostgreSQL database name to drop or None)."""
    if backend == "sqlite":
        for old in tmp.glob(f"{tag}.db*"):
            old.unlink()
        url, name = f"sqlite:///{tmp / f'{tag}.db'}", None
    else:
        base = make_url(PG_URL).set(drivername="postgresql+psycopg")
        name = f"{base.database}_bank_bench_{os.getpid()}"
        _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
        url = base.set(database=name).render_as_string(hide_password=False)
    db = connect(url)
    upgrade(db)
    db.dispose()
    return url, name


def _pg_admin(*statements: str) -> None:
    engine = sa.create_engine(make_url(PG_URL).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement_sql in statements:
                conn.exec_driver_sql(statement_sql)
    finally:
        engine.dispose()


def import_once(path: Path, url: str, config: Path, timeout: float) -> dict[str, object]:
    """``recon bank import`` in a child process: its wall time, its own peak RSS (``wait4``) and summary."""
    argv = [sys.executable, "-m", "recon", "--config", str(config), "--database-url", url, "bank", "import",
            str(path), "--json"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err)
        timer = threading.Timer(timeout, child.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            timer.cancel()
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            return {"exit": child.returncode, "seconds": round(seconds, 2),
                    "stderr": err.read().decode(errors="replace")[-500:]}
        return {"seconds": round(seconds, 2), "summary": json.loads(out.read()),
                "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
                "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2)}


def run_format(fmt: str, total: int, args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    path, config = tmp / f"statement.{fmt}", tmp / "recon.toml"
    config.write_text(CONFIG)
    write_file(fmt, path, total)
    size = path.stat().st_size
    figures: dict[str, object] = {"format": fmt, "backend": args.backend, "entries": total,
                                  "file_mb": round(size / 1e6, 1), "runs": []}
    for _ in range(args.repeats):
        url, pg_name = new_database(args.backend, tmp, fmt)
        load = os.getloadavg()[0]
        try:
            run = import_once(path, url, config, args.timeout)
        finally:
            if pg_name:
                _pg_admin(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
        if "seconds" in run and "summary" in run:
            seconds = float(run["seconds"])  # type: ignore[arg-type]
            run.update(entries_per_s=round(total / seconds), mb_per_s=round(size / 1e6 / seconds, 2))
            summary = run.pop("summary")
            if summary["entries_added"] != total:  # type: ignore[index]
                run["error"] = f"{summary['entries_added']} entries added, not {total}"  # type: ignore[index]
        run["load_before"] = round(load, 2)
        figures["runs"].append(run)  # type: ignore[attr-defined]
    path.unlink()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--entries", type=int, default=140_000, help="camt.053 entries (140,000: about 100 MB)")
    parser.add_argument("--whole-entries", type=int, default=60_000,
                        help="MT940 and BAI2 entries (read whole, capped at 64 MiB)")
    parser.add_argument("--formats", default="camt053,mt940,bai2")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    formats = [f for f in ("camt053", "mt940", "bai2") if f in args.formats.split(",")]
    with tempfile.TemporaryDirectory(prefix="recon-bank-bench-") as tmp:
        for fmt in formats:
            total = args.entries if fmt == "camt053" else args.whole_entries
            figures = run_format(fmt, total, args, Path(tmp))
            figures.update(python=platform.python_version(), expat=pyexpat.EXPAT_VERSION, cpus=os.cpu_count())
            print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
