"""The close benchmark: a month of payouts (1,000,000 balance transactions in 30,000 payouts) and a statement of
30,000 credits, closed by ``recon close``; the goal is under 2 minutes on SQLite and PostgreSQL, in bounded memory.

Prints one JSON line per backend: the payouts stored (as the payouts job stores them: ``PayoutStore.store``, one
transaction each, lines linked; payouts/s and lines/s), the statement imported (``recon bank import`` of camt.053
files, in process), and ``recon close`` run twice in a process of its own (``python -m recon close --output``):
wall seconds and peak RSS (``ru_maxrss`` of that child, from ``wait4``) of each; the second run shows the close is
idempotent (same answer, nothing stored again). With the categories the close found, the load average before the
run, and the machine.

The month: payouts ``po_…`` arriving on the 30 days of November 2026, amounts all different, each with its charge
lines (fee 25 each) and its own payout line, adding up. The bank: 95 % of the payouts' credits carry the trace id
as end-to-end id (the reference rule), 4 % carry nothing but the amount, booked a day late (amount and date), 1 %
are missing (bank_missing); 0.2 % of the credits are foreign (unexplained_credit).

``--scale`` runs it smaller (0.1: 3,000 payouts, 100,000 lines, 3,000 credits): on a machine others share, run it
at 1/10 and say so. PostgreSQL: ``<db>_close_bench_<pid>`` on the server of RECON_BENCH_DATABASE_URL (default the
test server), dropped at the end.

Usage: python bench/close.py [--scale F] [--backend sqlite|postgresql|both] [--timeout S]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from exits import failed, usage  # bench/exits.py (run as python bench/NAME.py)
from sqlalchemy.engine import make_url

from recon.bank.config import BankConfig
from recon.bank.formats import registry
from recon.bank.formats.protocol import EntryToWrite, StatementToWrite
from recon.bank.importer import read_statement_file
from recon.db.bank_store import BankStore
from recon.db.database import connect, upgrade
from recon.db.payout_store import PayoutStore
from recon.payments.money import format_amount
from recon.payout_rows import LineKind, NewPayout, NewPayoutLine, PayoutStatus

PG_URL = os.environ.get("RECON_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
IBAN = "NL91ABNA0417164300"
FIRST = date(2026, 11, 1)
DAYS = 30
CONFIG = f'[bank.accounts.bench]\niban = "{IBAN}"\ncurrency = "EUR"\npsps = ["stripe"]\n'


def payout(i: int, lines: int) -> NewPayout:
    amount = 1_000_000 + i * 13
    charges = lines - 1
    nets = [amount // charges] * charges
    nets[-1] += amount - sum(nets)
    rows = [NewPayoutLine(f"txn_{i}_{n}", LineKind.CHARGE, f"pi_{i}_{n}", f"order-{i}-{n}", net + 25, 25, net, "EUR")
            for n, net in enumerate(nets)]
    rows.append(NewPayoutLine(f"txn_{i}_p", LineKind.PAYOUT, None, None, -amount, 0, -amount, "EUR"))
    return NewPayout("stripe", "", f"po_{i:08d}", amount, "EUR", PayoutStatus.PAID, FIRST + timedelta(days=i % DAYS),
                     f"TRACE{i:010d}", None, tuple(rows))


def credits_of(payouts: int) -> dict[date, list[EntryToWrite]]:
    by_day: dict[date, list[EntryToWrite]] = {}
    for i in range(payouts):
        arrival, amount = FIRST + timedelta(days=i % DAYS), 1_000_000 + i * 13
        kind = i % 100
        if kind == 99:
            continue  # missing
        if kind >= 95:  # the amount alone, a day late
            entry = EntryToWrite(amount=amount, direction="credit", booking_date=arrival + timedelta(days=1),
                                 bank_reference=f"B{i:010d}", remittance="PAYMENT")
        else:
            entry = EntryToWrite(amount=amount, direction="credit", booking_date=arrival, bank_reference=f"B{i:010d}",
                                 end_to_end_id=f"TRACE{i:010d}", remittance=f"STRIPE PAYOUT po_{i:08d}")
        by_day.setdefault(entry.booking_date, []).append(entry)
    for n in range(max(1, payouts // 500)):
        day = FIRST + timedelta(days=n % DAYS)
        by_day.setdefault(day, []).append(EntryToWrite(amount=4242 + n, direction="credit", booking_date=day,
                                                       bank_reference=f"F{n:08d}", remittance="INVOICE"))
    return by_day


def run(url: str, scale: float, timeout: float, work: Path) -> dict[str, Any]:
    db = connect(url)
    upgrade(db)
    n_payouts, n_lines = max(30, int(30_000 * scale)), max(60, int(1_000_000 * scale))
    per = n_lines // n_payouts
    store = PayoutStore(db)
    started = time.monotonic()
    lines = 0
    for i in range(n_payouts):
        extra = 1 if i < n_lines - per * n_payouts else 0
        store.store(payout(i, per + extra))
        lines += per + extra
    stored = time.monotonic() - started
    config = work / "recon.toml"
    config.write_text(CONFIG)
    started = time.monotonic()
    opening, entries = 0, 0
    bank = BankStore(db)
    for n, (day, items) in enumerate(sorted(credits_of(n_payouts).items())):
        out = io.BytesIO()
        registry.writer("camt053", camt_version="08").write(out, [StatementToWrite(
            account=IBAN, currency="EUR", exponent=2, statement_id=f"S{n}", opening=opening, period_start=day,
            period_end=day, entries=items)])
        path = work / f"s{n}.xml"
        path.write_bytes(out.getvalue())
        plan = read_statement_file(path, config=BankConfig.from_table(
            {"accounts": {"bench": {"iban": IBAN, "currency": "EUR", "psps": ["stripe"]}}}))
        try:
            entries += bank.import_plan(plan, money_func=format_amount).entries_added
        finally:
            plan.close()
        opening += sum(e.amount for e in items)
        path.unlink()
    imported = time.monotonic() - started
    db.dispose()
    closes = [_close(url, config, work / f"close{k}.json", timeout) for k in (1, 2)]
    first = json.loads((work / "close1.json").read_text())
    second = json.loads((work / "close2.json").read_text())
    return {"payouts": n_payouts, "lines": lines, "credits": entries,
            "store_seconds": round(stored, 1), "payouts_per_s": round(n_payouts / stored),
            "lines_per_s": round(lines / stored), "import_seconds": round(imported, 1),
            "close_seconds": [c["seconds"] for c in closes], "close_peak_rss_mb": [c["rss_mb"] for c in closes],
            "close_exit": [c["exit"] for c in closes], "categories": first["categories"],
            "same_answer_twice": first == second}


def _close(url: str, config: Path, output: Path, timeout: float) -> dict[str, Any]:
    """``recon close`` in a process of its own: wall seconds, its exit, and its own peak RSS (``wait4``'s rusage
    of that child: ``RUSAGE_CHILDREN`` would be the largest of every child so far, the other backend's too)."""
    argv = [sys.executable, "-m", "recon", "--database-url", url, "--config", str(config), "close", "--psp",
            "stripe", "--since", "2026-11-01", "--until", "2026-12-01", "--output", str(output)]
    with tempfile.TemporaryFile() as err:
        started = time.monotonic()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)  # nosec B603
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > timeout:
                child.kill()
                failed(f"recon close did not finish within {timeout:g} s")
            time.sleep(0.05)
        seconds = time.monotonic() - started
        code = os.waitstatus_to_exitcode(status)
        child.returncode = code  # reaped here: Popen must not wait for it again
        if code not in (0, 1):
            err.seek(0)
            failed(f"recon close failed ({code}): {err.read().decode(errors='replace').strip()[:500]}")
    return {"seconds": round(seconds, 1), "rss_mb": round(usage.ru_maxrss / 1024), "exit": code}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    if not 0 < args.scale <= 1:
        usage("--scale: from 0 (exclusive) to 1")
    if args.backend == "both":  # each in a process of its own: a close's peak RSS counted its parent's memory
        for backend in ("sqlite", "postgresql"):
            subprocess.run([sys.executable, __file__, "--scale", str(args.scale), "--backend", backend,  # nosec B603
                            "--timeout", str(args.timeout)], check=True)
        return
    for backend in (args.backend,):
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="recon-close-bench-") as tmp:
            work = Path(tmp)
            if backend == "sqlite":
                figures = run(f"sqlite:///{work / 'bench.db'}", args.scale, args.timeout, work)
            else:
                figures = _on_postgresql(args.scale, args.timeout, work)
        print(json.dumps({"bench": "close", "backend": backend, "scale": args.scale, **figures,
                          "goal_seconds": 120, "load_before": round(load, 2), "machine": platform.machine(),
                          "cpus": os.cpu_count()}), flush=True)


def _on_postgresql(scale: float, timeout: float, work: Path) -> dict[str, Any]:
    base = make_url(PG_URL).set(drivername="postgresql+psycopg")
    name = f"{base.database}_close_bench_{os.getpid()}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        return run(base.set(database=name).render_as_string(hide_password=False), scale, timeout, work)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
