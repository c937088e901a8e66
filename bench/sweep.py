"""`recon sweep` against a rate-limited PSP: bulk (window jobs, one listing page per 100 payments) or single
(one call per payment), and does the guard keep the sweep at the PSP's rate, without 429s?

Issue 15's goals (``--psp stripe --mode bulk``, the defaults): at a PSP limit of 25 requests/s, 100,000 dense
stale payments healed in < 5 minutes with <= 0.05 PSP calls per healed payment and a peak RSS < 300 MB, on
SQLite and PostgreSQL; ``--mode single`` measures the per-payment rate on a smaller ``--payments`` (at 25/s,
100,000 would take over an hour). "Dense": the PSP's payments in each window are all ours, one every
``SPACING`` (0.9 s, about 4,000 an hour) of send time over the last day; each is settled (succeeded, same
amount) at the PSP and pending, stale, with us, holding its PaymentIntent id.

Issue 4's benchmark is ``--psp sandbox --mode single --rate 500``. ``--payments N`` stale pending payments
(default 100,000), each with a real payment in the PSP sandbox (settled, same amount: the sweep heals every one
to ``succeeded``). The sandbox runs in a child process with a global rate limit of ``--rate R`` requests/s
(default 25; beyond it, 429 with Retry-After), and recon is configured with ``[psp.NAME] rate_limit = R``.
Then ``recon sweep`` runs as a subprocess (SQLite by default; ``--backend postgresql`` on a database of its
own) and this prints one JSON line:

    {"bench": "sweep", "psp": …, "mode": …, "payments": N, "rate": R, "seconds": …, "healed": …,
     "psp_calls": …, "calls_per_healed": …, "healed_per_second": …, "efficiency": N/R / seconds,
     "http_429": …, "peak_rss_mb": …, …, "goals": {…}, "passed": …}

- ``seconds``: the whole ``recon sweep`` process (start-up, enqueue, reconcile, summary); ``efficiency`` is
  the ideal N/R divided by it (target >= 0.9); ``call_phase_efficiency`` uses the first attempt's start to
  the last attempt's end instead; ``cpu_seconds`` is the sweep process's CPU time.
- ``http_429``: the 429s the sandbox answered to the sweep, from the attempt history (a 429 ends an attempt
  with error kind ``rate_limited``; target: a handful); ``sweep_http_429`` is the sweep's own count.
- ``peak_rss_mb``: the sweep process's peak RSS (``wait4``), to be flat in N and under 300 MB.
- ``guard`` (``--guard-cost``): the guard's own cost, measured in this process on the same database after the sweep:
  statements per call and milliseconds per admission statement, rate-limited and unlimited.

- ``psp_calls``: what the sweep's own summary says it made (``recon sweep --json``, counted by the
  instrumented adapters: a listing page is one call); ``calls_per_healed`` divides it by ``healed``.
  ``psp_requests_served`` is the sandbox's own count of API requests (``GET /_admin/faults`` aside), 429s
  included.

The run is bounded by ``--max-seconds`` (default 2 N/R + 120 for single, 480 for bulk): the sweep is stopped
(SIGTERM, then SIGKILL) past it and ``passed`` is false. Set-up is timed separately and not part of
``seconds``: the sandbox's payments are written straight into its ledger file before the server starts (the
bench's own state file; ``Ledger.import_payments``, one transaction, about 100,000 a second), ours in bulk.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402
from exits import failed  # noqa: E402  # bench/exits.py (run as python bench/NAME.py)
from sqlalchemy.engine import make_url  # noqa: E402

from psp_adapters.sandbox.ledger import Ledger, PaymentRecord  # noqa: E402
from psp_adapters.sandbox.records import sandbox_fee  # noqa: E402
from psp_adapters.sandbox.wire import PaymentStatus  # noqa: E402
from recon.db.control_store import ControlStore  # noqa: E402
from recon.db.database import Database, connect, upgrade  # noqa: E402
from recon.db.payment_store import PaymentStore  # noqa: E402
from recon.payments.guard import Permit, PspGuard  # noqa: E402
from recon.payments.psp_limits import GuardConfig, PspLimits  # noqa: E402
from recon.rows import NewPayment  # noqa: E402

PG_URL_DEFAULT = os.environ.get("RECON_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
AMOUNT, CURRENCY = 1250, "EUR"
STRIPE_KEY = "sk_test_bench"
#: send time between two consecutive payments: dense windows (about 4,000 payments an hour)
SPACING = timedelta(seconds=0.9)
_CHILD = (
    "import signal, sys; from psp_adapters.sandbox import serve_forever; "
    "from psp_adapters.sandbox.faults import Faults; "
    "[signal.signal(s, signal.default_int_handler) for s in (signal.SIGINT, signal.SIGTERM)]; "
    "serve_forever(sys.argv[1], port=0, on_ready_func=lambda url: print(url, flush=True), "
    "faults=Faults(rate_limit=float(sys.argv[2]), decline_amount_suffix=None), flavor=sys.argv[3], "
    "api_key=sys.argv[4] or None)"
)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    bulk = args.mode == "bulk"
    max_seconds = args.max_seconds or (480.0 if bulk else 2 * args.payments / args.rate + 120)
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        url, drop = _database(args, Path(tmp))
        db = connect(url)
        try:
            upgrade(db)
            started = time.perf_counter()
            _sandbox_payments(Path(tmp, "sandbox.db"), args.payments, psp=args.psp)
            _local_payments(db, args.payments, psp=args.psp)
            setup = time.perf_counter() - started
            config = Path(tmp, "recon.toml")
            config.write_text(f"[psp.{args.psp}]\nrate_limit = {args.rate}\n")
            result = _with_sandbox(Path(tmp), args, lambda sandbox_url: _sweep(
                url, config, sandbox_url, args=args, max_seconds=max_seconds, tmp=Path(tmp)))
            result.update(_attempt_figures(db))
            if args.guard_cost:
                result["guard"] = _guard_cost(db, args.rate)
        finally:
            db.dispose()
            drop()
    doc: dict[str, Any] = {
        "bench": "sweep", "backend": args.backend, "psp": args.psp, "mode": args.mode, "payments": args.payments,
        "rate": args.rate, "concurrency": args.concurrency, "setup_seconds": round(setup, 1), **result,
    }
    _figures(doc, args)
    print(json.dumps(doc))
    return 0 if doc["passed"] else 1


def _figures(doc: dict[str, Any], args: argparse.Namespace) -> None:
    """The derived figures and the goals of the mode."""
    healed = doc["healed"] or 0
    doc["calls_per_healed"] = round(doc["psp_calls"] / healed, 4) if healed and doc["psp_calls"] is not None else None
    doc["healed_per_second"] = round(healed / doc["seconds"], 1)
    ideal = args.payments / args.rate  # one call per payment, at the PSP's limit
    doc["efficiency"] = round(ideal / doc["seconds"], 3)
    phase = doc.pop("call_phase_seconds", None)
    doc["call_phase_efficiency"] = round(ideal / phase, 3) if phase else None
    if args.mode == "single":
        doc["minutes_for_100k"] = round(100_000 / doc["healed_per_second"] / 60, 1) if healed else None
    ran = not doc["timed_out"] and doc["exit_code"] in (0, 1) and healed == args.payments
    goals = {"all_healed": ran, "rss_under_300_mb": doc["peak_rss_mb"] < 300,
             "http_429_at_most_10": doc["http_429"] <= 10}
    if args.mode == "bulk":
        per = doc["calls_per_healed"]
        goals["calls_per_healed_at_most_0.05"] = per is not None and per <= 0.05
        goals["under_5_minutes"] = doc["seconds"] < 300
    else:
        goals["efficiency_at_least_0.9"] = doc["efficiency"] >= 0.9
    doc["goals"] = goals
    doc["passed"] = all(goals.values())


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payments", type=int, default=100_000, help="stale payments to sweep")
    parser.add_argument("--rate", type=float, default=25.0, help="the PSP's rate limit, requests/s")
    parser.add_argument("--mode", choices=("bulk", "single"), default="bulk", help="recon sweep --mode")
    parser.add_argument("--psp", choices=("stripe", "sandbox"), default="stripe",
                        help="the sandbox's flavour: stripe (recon's Stripe adapter) or sandbox (native)")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--database-url",
                        help=f"PostgreSQL server to create a database on (default {PG_URL_DEFAULT})")
    parser.add_argument("--concurrency", type=int, default=8, help="recon sweep --concurrency")
    parser.add_argument("--max-seconds", type=float,
                        help="stop the sweep after this long (default 2 N/R + 120 single, 480 bulk)")
    parser.add_argument("--guard-cost", action="store_true", help="also time the guard's own statements")
    return parser.parse_args(argv)


# --- set-up -------------------------------------------------------------------------------------------------


def _database(args: argparse.Namespace, tmp: Path) -> tuple[str, Any]:
    """The database URL and a function that drops it: a SQLite file, or a PostgreSQL database of our own."""
    if args.backend == "sqlite":
        return f"sqlite:///{tmp / 'recon.db'}", lambda: None
    base = make_url(args.database_url or PG_URL_DEFAULT).set(drivername="postgresql+psycopg")
    name = f"recon_bench_sweep_{os.getpid()}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        for attempt in range(3):  # the server may be restarting (a chaos test on the same machine)
            try:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                break
            except sa.exc.OperationalError:
                if attempt == 2:
                    raise
                time.sleep(2)
        admin.dispose()

    return base.set(database=name).render_as_string(hide_password=False), drop


def _sandbox_payments(path: Path, n: int, *, psp: str) -> None:
    """N settled payments in the sandbox's own ledger file, before its server starts (as if charged), one
    transaction per 20,000 (``Ledger.import_payments``)."""
    flavor = "stripe" if psp == "stripe" else "native"
    ledger = Ledger(path)
    try:
        for start in range(0, n, 20_000):
            records = []
            for i in range(start, min(n, start + 20_000)):
                ref, sent = _reference(i), _sent_at(i, n)
                records.append(PaymentRecord(
                    psp_reference=_psp_reference(ref, psp), idempotency_key=f"bench-key-{i}", merchant_reference=ref,
                    amount=AMOUNT, currency=CURRENCY, status=PaymentStatus.SUCCEEDED, created_at=sent,
                    updated_at=sent + timedelta(seconds=1), merchant_account="bench",
                    settled_at=sent + timedelta(seconds=1), flavor=flavor, payment_method="pm_card_visa",
                    customer_reference="cus_bench", metadata={"merchant_reference": ref} if psp == "stripe" else {},
                    fee=sandbox_fee(AMOUNT)))
            ledger.import_payments(records)
    finally:
        ledger.close()


def _local_payments(db: Database, n: int, *, psp: str) -> None:
    """N payments of ours, pending for an hour, each holding its PSP payment's reference and send time."""
    ledger = PaymentStore(db)
    for start in range(0, n, 20_000):
        ledger.create([NewPayment("bench", _reference(i), AMOUNT, CURRENCY, psp, created_at=_sent_at(i, n),
                                  payment_method="pm_card_visa", customer_reference="cus_bench")
                       for i in range(start, min(n, start + 20_000))], charge=False)
    stale = db.to_db(datetime.now(UTC) - timedelta(hours=1))
    prefix = "pi_" if psp == "stripe" else "psp_"
    with db.begin() as conn:  # set-up only: the state a crash between charge and answer leaves behind
        conn.execute(sa.text("UPDATE payments SET status = 'pending', updated_at = :stale, key_sent_at = created_at, "
                             "psp_reference = :prefix || replace(merchant_reference, '-', '_')"),
                     {"stale": stale, "prefix": prefix})


def _reference(i: int) -> str:
    return f"bench-{i:07d}"


def _psp_reference(ref: str, psp: str) -> str:
    return ("pi_" if psp == "stripe" else "psp_") + ref.replace("-", "_")


_START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)


def _sent_at(i: int, n: int) -> datetime:
    """Payment i's send time (and the PSP's created): one every SPACING, the last two hours ago."""
    return _START - SPACING * (n - 1 - i)


# --- the run ------------------------------------------------------------------------------------------------


def _with_sandbox(tmp: Path, args: argparse.Namespace, func: Any) -> dict[str, Any]:
    flavor, key = ("stripe", STRIPE_KEY) if args.psp == "stripe" else ("native", "")
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp / "sandbox.db"), str(args.rate), flavor, key],
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            failed(f"sandbox did not start (got {url!r})")
        return func(url)  # type: ignore[no-any-return]
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def _sweep(url: str, config: Path, sandbox_url: str, *, args: argparse.Namespace, max_seconds: float,
           tmp: Path) -> dict[str, Any]:
    """Run `recon sweep` in a child process; its wall time, peak RSS (wait4) and JSON summary."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RECON_SANDBOX_BASE_URL": sandbox_url,
           "RECON_STRIPE_BASE_URL": sandbox_url, "RECON_STRIPE_API_KEY": STRIPE_KEY}
    env.pop("RECON_CONFIG", None)
    concurrency = args.concurrency
    out, err = tmp / "sweep.out", tmp / "sweep.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "recon", "--database-url", url, "--config",
                                 str(config), "--log-level", "WARNING", "sweep", "--older-than", "30m",
                                 "--mode", args.mode, "--concurrency", str(concurrency), "--json"], cwd=ROOT, env=env,
                                stdout=stdout, stderr=stderr)
        status, rusage, timed_out = _wait4(proc, started + max_seconds)
        seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # wait4 reaped it; tell Popen
    summary = json.loads(out.read_text() or "{}")
    warnings = [line for line in err.read_text().splitlines() if " WARNING " in line or " ERROR " in line]
    return {"seconds": round(seconds, 2), "timed_out": timed_out, "exit_code": proc.returncode,
            "healed": summary.get("healed_succeeded"), "still_pending": summary.get("still_pending"),
            "errors": summary.get("errors"), "psp_calls": summary.get("psp_calls"),
            "window_jobs": summary.get("window_jobs"), "sweep_http_429": summary.get("http_429"),
            "peak_rss_mb": round(rusage.ru_maxrss / 1024, 1),
            "cpu_seconds": round(rusage.ru_utime + rusage.ru_stime, 1),
            "sweep_log_warnings": len(warnings), "first_warning": warnings[0][:200] if warnings else None}


def _wait4(proc: subprocess.Popen[bytes], deadline: float) -> tuple[int, Any, bool]:
    timed_out = False
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            return status, rusage, timed_out
        if time.perf_counter() > deadline and not timed_out:
            timed_out = True
            proc.send_signal(signal.SIGTERM)
            deadline += 20
        elif timed_out and time.perf_counter() > deadline:
            proc.kill()
        time.sleep(0.05)


def _attempt_figures(db: Database) -> dict[str, Any]:
    """From the attempt history: 429s answered (error kind rate_limited), snoozes, the call phase."""
    with db.begin() as conn:
        r = conn.execute(sa.text(
            "SELECT count(*), sum(CASE WHEN error_kind = 'rate_limited' THEN 1 ELSE 0 END), "
            "sum(CASE WHEN outcome = 'snoozed' THEN 1 ELSE 0 END), min(started_at), max(finished_at) "
            "FROM job_attempts")).one()
    first, last = db.from_db(r[3]), db.from_db(r[4])
    return {"attempts": int(r[0]), "http_429": int(r[1] or 0), "snoozed": int(r[2] or 0),
            "call_phase_seconds": round((last - first).total_seconds(), 2) if first and last else None}


# --- the guard's own cost -----------------------------------------------------------------------------------


def _guard_cost(db: Database, rate: float) -> dict[str, Any]:
    store = ControlStore(db)
    timed = 200
    started = time.perf_counter()
    for _ in range(timed):
        store.admit("sandbox", rate=None, capacity=0.0, batch=1)  # the row the sweep made
    statement_ms = (time.perf_counter() - started) / timed * 1000
    return {"admission_statement_ms": round(statement_ms, 3),
            "rate_limited": _guard_loop(db, PspLimits(rate_limit=rate), calls=int(rate * 2), threads=8),
            "unlimited": _guard_loop(db, PspLimits(), calls=20_000, threads=1)}


def _guard_loop(db: Database, limits: PspLimits, *, calls: int, threads: int) -> dict[str, Any]:
    """``calls`` admissions (and no-op calls) from ``threads`` threads through one guard."""
    store = ControlStore(db)
    guard = PspGuard(store, GuardConfig(per_psp={"bench-guard": limits}))
    store.ensure("bench-guard")
    store.statements = 0
    tickets = iter(range(calls))
    lock = threading.Lock()
    snoozed = [0]

    def run() -> None:
        while True:
            with lock:
                if next(tickets, None) is None:
                    return
            permit = guard.admit("bench-guard")
            if isinstance(permit, Permit):
                permit.call(lambda: None)
            else:
                snoozed[0] += 1

    started = time.perf_counter()
    workers = [threading.Thread(target=run) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    seconds = time.perf_counter() - started
    with db.begin() as conn:  # leave the PSP row of the next loop alone
        conn.execute(sa.text("DELETE FROM psp_controls WHERE psp = 'bench-guard'"))
    return {"calls": calls, "threads": threads, "seconds": round(seconds, 3),
            "calls_per_s": round(calls / seconds, 1), "snoozed": snoozed[0],
            "statements_per_call": round(store.statements / calls, 4),
            "us_per_call": round(seconds / calls * 1e6, 1)}


if __name__ == "__main__":
    sys.exit(main())
