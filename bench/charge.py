"""Charge throughput at a PSP's rate limit, with the shipped defaults (issue 29): figures as JSON, not a test.

N payments (``--payments``, default 20,000; ``--quick``: 2,000) are created with their charge jobs, then ONE
``recon worker`` process (a subprocess, its ``[engine]`` as shipped) charges them through the PSP sandbox (a
child process, native flavour) that answers after ``--latency-ms`` (default 200) x uniform(1 - J, 1 + J)
(``--jitter``, default 0.5: a 200 ms median) and refuses with 429 beyond ``--rate`` requests/s (default 100,
Stripe's live default). recon is told the PSP's limit (``[psp.sandbox] rate_limit``), as an operator would.

Cases (``--cases``, default ``shipped,tuned``), each on a fresh database and a fresh sandbox:
  shipped   the [engine] defaults as shipped (a worker that sizes itself: recon.engine.sizing)
  tuned     autosize off, ceil(1.25 x rate x latency) handler threads (Little's law with headroom), no prefetch
  fixed8    autosize off at the old shipped defaults (8 threads, claims of 50, no prefetch): the "before"

One JSON line per backend and case:

    {"bench": "charge", "backend", "case", "payments", "rate_limit", "latency_ms", "seconds", "charged",
     "rate", "rate_over_limit", "steady_rate_over_limit", "double_charges", "max_charges_per_key", "http_429",
     "snoozed", "peak_rss_mb", "cpu_seconds", "sizing", "goals", "passed"}

- ``rate``: charged payments / the call phase (the first attempt's start to the last attempt's end, from the
  attempt history); ``steady_rate_over_limit``: the rate between 10 % and 90 % charged (sampled every 0.25 s),
  over the limit: what the worker sustains once sized (start-up and the tail apart).
- ``double_charges``: from the sandbox's ledger (``GET /_admin/charges``): charges beyond one per idempotency
  key; ``max_charges_per_key`` its worst key.
- ``peak_rss_mb``: the worker process's peak RSS (``wait4``). ``sizing``: the worker's row at the end (its
  threads, claim batch, prefetch and why: ``recon stats`` shows the same); ``database_waits``: its
  transactions' waits for a pooled connection and (SQLite) the write lock, as last published (every few
  seconds: ``recon.db.database.Waits``).
- goals (shipped only): ``rate_over_limit`` >= 0.95 (>= 0.90 from 2 s latency on), no double charge, RSS < 300 MB.

``--noop`` adds the no-op drain (bench/engine.py's, 20,000 jobs, one process) at the shipped defaults and tuned
(64 threads, claims and prefetch of 64, autosize off) on each backend: goal shipped >= 1/2 tuned.

Every run is bounded: a case stops after ``--max-seconds`` (default 3 N / rate + 60); the sandbox and the
worker are stopped (SIGTERM, then SIGKILL). PostgreSQL: a database of its own on RECON_BENCH_DATABASE_URL's
server (default: the test server), dropped after.

Usage: python bench/charge.py [--quick] [--payments N] [--latency-ms MS] [--jitter J] [--rate R]
                              [--backend sqlite|postgresql|both] [--cases shipped,tuned,fixed8] [--noop]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from exits import failed  # noqa: E402  # bench/exits.py (run as python bench/NAME.py)
from sqlalchemy.engine import make_url  # noqa: E402

from recon.db.database import Database, connect, upgrade  # noqa: E402
from recon.db.payment_store import PaymentStore  # noqa: E402
from recon.rows import NewPayment  # noqa: E402

PG_URL = os.environ.get("RECON_BENCH_DATABASE_URL",
                        os.environ.get("RECON_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"))
AMOUNT, CURRENCY = 1250, "EUR"
#: payments per PaymentStore.create call (its one-statement path takes up to 5,000)
CREATE_BATCH = 5000
_CHILD = (
    "import json, signal, sys; from psp_adapters.sandbox import serve_forever; "
    "from psp_adapters.sandbox.faults import Faults; "
    "[signal.signal(s, signal.default_int_handler) for s in (signal.SIGINT, signal.SIGTERM)]; "
    "serve_forever(sys.argv[1], port=0, on_ready_func=lambda url: print(url, flush=True), "
    "faults=Faults(**json.loads(sys.argv[2])))"
)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "load_average": _load()}
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    passed = True
    for backend in backends:
        for case in args.cases.split(","):
            doc = {"bench": "charge", "backend": backend, "case": case, "payments": args.payments,
                   "rate_limit": args.rate, "latency_ms": args.latency_ms, "jitter": args.jitter,
                   **_run_case(backend, case, args), **machine, "load_average_after": _load()}
            _goals(doc, args)
            passed = passed and doc["passed"]
            print(json.dumps(doc), flush=True)
        if args.noop:
            print(json.dumps({"bench": "charge", "backend": backend, **_noop(backend, args.noop_jobs), **machine}),
                  flush=True)
    return 0 if passed else 1


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payments", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="2,000 payments (and 5,000 no-op jobs with --noop)")
    parser.add_argument("--latency-ms", type=int, default=200, help="the sandbox's median latency")
    parser.add_argument("--jitter", type=float, default=0.5, help="latency x uniform(1 - J, 1 + J)")
    parser.add_argument("--rate", type=float, default=100.0, help="the PSP's rate limit, requests/s")
    parser.add_argument("--rate-burst", type=float, help="recon's [psp.sandbox] rate_burst (default: not set)")
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--cases", default="shipped,tuned", help="comma-separated: shipped, tuned, fixed8")
    parser.add_argument("--noop", action="store_true", help="also the no-op drain, shipped against tuned")
    parser.add_argument("--noop-jobs", type=int, default=20_000)
    parser.add_argument("--max-seconds", type=float, help="bound of one case (default 3 N / rate + 60)")
    parser.add_argument("--worker-log", type=Path, help="append the worker's log (INFO: its resizings) to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.payments = 2_000
        args.noop_jobs = 5_000
    for case in args.cases.split(","):
        if case not in ("shipped", "tuned", "fixed8"):
            parser.error(f"--cases: unknown case {case!r} (shipped, tuned, fixed8)")
    return args


def _load() -> float:
    return round(os.getloadavg()[0], 2)


# --- one case ---------------------------------------------------------------------------------------------


def _run_case(backend: str, case: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-charge-") as tmp_name:
        tmp = Path(tmp_name)
        url, drop = _database(backend, tmp)
        db = connect(url)
        try:
            upgrade(db)
            _payments(db, args.payments)
            config = tmp / "recon.toml"
            config.write_text(_config(case, args))
            faults = {"rate_limit": args.rate, "latency_ms": args.latency_ms, "latency_jitter": args.jitter,
                      "decline_amount_suffix": None}
            result = _with_sandbox(tmp, faults, lambda sandbox: _charge(db, url, config, sandbox, args, tmp))
            result.update(_attempt_figures(db, result.pop("charged_now")))
            result["settings"] = config.read_text().strip().replace("\n", "; ")
        finally:
            db.dispose()
            drop()
    return result


def _config(case: str, args: argparse.Namespace) -> str:
    text = f"[psp.sandbox]\nrate_limit = {args.rate:g}\n"
    if args.rate_burst is not None:
        text += f"rate_burst = {args.rate_burst:g}\n"
    if case == "tuned":
        threads = math.ceil(1.25 * args.rate * args.latency_ms / 1000)
        text += f"\n[engine]\nautosize = false\nconcurrency = {threads}\nprefetch = 0\n"
    elif case == "fixed8":
        text += "\n[engine]\nautosize = false\nconcurrency = 8\nclaim_batch_size = 50\nprefetch = 0\n"
    return text


def _database(backend: str, tmp: Path) -> tuple[str, Callable[[], None]]:
    if backend == "sqlite":
        return f"sqlite:///{tmp / 'recon.db'}", lambda: None
    base = make_url(PG_URL).set(drivername="postgresql+psycopg")
    name = f"recon_bench_charge_{os.getpid()}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()

    return base.set(database=name).render_as_string(hide_password=False), drop


def _payments(db: Database, n: int) -> None:
    store = PaymentStore(db)
    for start in range(0, n, CREATE_BATCH):
        store.create([NewPayment("bench", f"bench-{i:07d}", AMOUNT, CURRENCY, "sandbox")
                      for i in range(start, min(n, start + CREATE_BATCH))], charge=True)


def _with_sandbox(tmp: Path, faults: dict[str, Any], func: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp / "sandbox.db"), json.dumps(faults)],
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            failed(f"sandbox did not start (got {url!r})")
        result = func(url)
        charges = httpx.get(f"{url}/_admin/charges", timeout=30).json()
        result["double_charges"] = int(charges["charges"]) - int(charges["keys"])
        result["max_charges_per_key"] = charges["max_per_key"]
        result["psp_charges"] = charges["charges"]
        return result
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def _charge(db: Database, url: str, config: Path, sandbox: str, args: argparse.Namespace,
            tmp: Path) -> dict[str, Any]:
    """The worker process, until every payment is charged (or the bound); samples of the charged count."""
    n = args.payments
    max_seconds = args.max_seconds or 3 * n / args.rate + 60
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RECON_SANDBOX_BASE_URL": sandbox}
    env.pop("RECON_CONFIG", None)
    err = args.worker_log or tmp / "worker.err"
    samples: list[tuple[float, int]] = []
    with err.open("a" if args.worker_log else "w") as stderr:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "recon", "--database-url", url, "--config", str(config),
                                 "--log-level", "INFO" if args.worker_log else "WARNING",
                                 "worker", "--queues", "charges"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=stderr)
        charged = 0
        while charged < n and time.perf_counter() - started < max_seconds and proc.poll() is None:
            time.sleep(0.25)
            charged = _charged(db)
            samples.append((time.perf_counter() - started, charged))
        seconds = time.perf_counter() - started
        sizing, waits = _sizing(db)
        proc.send_signal(signal.SIGTERM)
        status, rusage = _wait4(proc, time.perf_counter() + 60)
    warnings = [line for line in err.read_text().splitlines() if " WARNING " in line or " ERROR " in line]
    return {"seconds": round(seconds, 2), "timed_out": charged < n, "exit_code": os.waitstatus_to_exitcode(status),
            "charged_now": charged, "steady_rate": _steady(samples, n), "sizing": sizing, "database_waits": waits,
            "peak_rss_mb": round(rusage.ru_maxrss / 1024, 1),
            "cpu_seconds": round(rusage.ru_utime + rusage.ru_stime, 1),
            "worker_log_warnings": len(warnings), "first_warning": warnings[0][:200] if warnings else None}


def _charged(db: Database) -> int:
    with db.begin() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM payments WHERE status = 'succeeded'")).scalar_one())


def _sizing(db: Database) -> tuple[Any, Any]:
    """The worker's sizing at the end, and its waits for a pooled connection or SQLite's write lock."""
    with db.begin() as conn:
        row = conn.execute(sa.text("SELECT slots, counters FROM workers ORDER BY last_seen_at DESC")).first()
    if row is None:
        return None, None
    counters = row[1] if isinstance(row[1], dict) else json.loads(row[1] or "{}")
    return counters.get("sizing") or {"concurrency": row[0]}, counters.get("database_waits")


def _steady(samples: list[tuple[float, int]], n: int) -> float | None:
    """Payments charged per second between 10 % and 90 % of n."""
    lo = next(((t, c) for t, c in samples if c >= 0.1 * n), None)
    hi = next(((t, c) for t, c in samples if c >= 0.9 * n), None)
    if lo is None or hi is None or hi[0] <= lo[0]:
        return None
    return round((hi[1] - lo[1]) / (hi[0] - lo[0]), 1)


def _wait4(proc: subprocess.Popen[bytes], deadline: float) -> tuple[int, Any]:
    killed = False
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return status, rusage
        if time.perf_counter() > deadline and not killed:
            proc.kill()
            killed = True
        time.sleep(0.05)


def _attempt_figures(db: Database, charged: int) -> dict[str, Any]:
    with db.begin() as conn:
        r = conn.execute(sa.text(
            "SELECT count(*), sum(CASE WHEN error_kind = 'rate_limited' THEN 1 ELSE 0 END), "
            "sum(CASE WHEN outcome = 'snoozed' THEN 1 ELSE 0 END), min(started_at), max(finished_at) "
            "FROM job_attempts")).one()
    first, last = db.from_db(r[3]), db.from_db(r[4])
    phase = (last - first).total_seconds() if first and last else None
    return {"charged": charged, "attempts": int(r[0]), "http_429": int(r[1] or 0), "snoozed": int(r[2] or 0),
            "call_phase_seconds": round(phase, 2) if phase else None,
            "rate": round(charged / phase, 1) if phase else None, "snooze_reasons": _snooze_reasons(db)}


def _snooze_reasons(db: Database) -> dict[str, int]:
    """Snoozed attempts by reason (the PSP's rate, a pause, a cancel...): what held the charges back."""
    with db.begin() as conn:
        rows = conn.execute(sa.text("SELECT error, count(*) FROM job_attempts WHERE outcome = 'snoozed' "
                                    "GROUP BY error ORDER BY count(*) DESC")).all()
    return {str(reason): int(n) for reason, n in rows}


def _goals(doc: dict[str, Any], args: argparse.Namespace) -> None:
    rate = doc.get("rate") or 0.0
    doc["rate_over_limit"] = round(rate / args.rate, 3)
    steady = doc.get("steady_rate")
    doc["steady_rate_over_limit"] = round(steady / args.rate, 3) if steady else None
    goals = {"all_charged": doc["charged"] == args.payments, "no_double_charge": doc["double_charges"] == 0,
             "rss_under_300_mb": doc["peak_rss_mb"] < 300}
    if doc["case"] == "shipped":
        floor = 0.90 if args.latency_ms >= 2000 else 0.95
        goals[f"rate_over_limit_at_least_{floor}"] = doc["rate_over_limit"] >= floor
    doc["goals"] = goals
    doc["passed"] = all(goals.values())


# --- the no-op drain --------------------------------------------------------------------------------------


def _noop(backend: str, jobs: int) -> dict[str, Any]:
    """bench/engine.py's one-process drain: tuned (64/64/64, fixed) and the shipped defaults, alternating twice."""
    sys.path.insert(0, str(ROOT / "bench"))
    import engine  # bench/engine.py

    rates: dict[str, list[float]] = {"tuned": [], "shipped": []}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-charge-noop-") as tmp:
            for _ in range(2):
                for case, spec in (("tuned", "64"), ("shipped", "0")):
                    rates[case].append(engine.drain(engine.fresh_db(backend, Path(tmp)), jobs, 1, spec)["jobs_per_s"])
    finally:
        engine.drop_created()
    tuned, shipped = max(rates["tuned"]), max(rates["shipped"])
    return {"case": "noop_drain", "jobs": jobs, "tuned_jobs_per_s": rates["tuned"],
            "shipped_jobs_per_s": rates["shipped"], "shipped_over_tuned": round(shipped / tuned, 3),
            "goals": {"shipped_at_least_half_of_tuned": shipped >= tuned / 2}}


if __name__ == "__main__":
    sys.exit(main())
