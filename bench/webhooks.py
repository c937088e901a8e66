"""Webhook intake benchmark on PostgreSQL: `recon serve` receiving signed Stripe events while a `recon worker`
applies them. Prints one JSON document (figures, not a pass/fail test).

Setup (before any timing): a database of its own (``recon_bench_webhooks_<pid>``, created, migrated with
recon.db.database.upgrade, dropped at the end) on the server of RECON_BENCH_DATABASE_URL (default
postgresql+psycopg://postgres@127.0.0.1:5432/postgres); payments seeded ``processing`` for psp stripe with
one set-based INSERT; for each payment a Stripe ``payment_intent.succeeded`` Event (Stripe's canonical Event
and PaymentIntent from ../shared/specs/stripe/fixtures3.json, ~1,400 bytes of JSON; without that file the bench
exits 2 naming it, unless ``--event-shape minimal`` asks for the documented fields our parser reads alone, ~400
bytes, which costs every process less: its figures compare only with runs of the same shape), signed with
stripe-python's ``WebhookSignature.generate_signature_header`` for one secret; every request's bytes built in
advance.

Processes: ``python -m recon --database-url URL serve --port 0`` (RECON_STRIPE_WEBHOOK_SECRET in its
environment; ready at its "webhooks on ..." line), ``python -m recon ... worker --queues webhooks
--concurrency C --prefetch C`` (LISTEN/NOTIFY wake-ups), and the load generator, a separate process: asyncio
raw HTTP/1.1 keep-alive connections with the requests pre-built as bytes (a few µs of client work each).

Phases, each bounded in count and time:
  raw_floor       the machine's raw floor: one connection, an autocommit INSERT ... RETURNING loop of a small
                  JSON row into a table with one primary key (one round trip, one durable commit each), rows/s,
                  before and after the load phases: the figures below are also given as multiples of it, so
                  runs on different machines (or one machine in different moments) compare as ratios
  client_ceiling  the load generator against GET /healthz (closed loop): what the client and the server's
                  HTTP layer can do without a database, so the figures below are not the client's limit
  capacity        closed loop, K connections, as fast as they are answered: accepted events/s
  sustained       open loop at --rate events/s (each request scheduled at t0 + i/rate; latency counted from
                  its scheduled time, so a stalled server cannot hide its queue): response p50/p95/p99/max,
                  accepted events/s, errors by status; then event-received -> payment-final, from
                  webhook_events.received_at to the payment's payment_events row of source 'webhook' (both
                  database clock), p50/p95, once the worker has applied everything
Each load phase reports the CPU seconds of the four processes (the server, the worker, their PostgreSQL
backends, the load client) during the load and until every event is applied (``cpu_ms_per_request_until_applied``:
the CPU an event costs in all, wherever the worker spent it).
Both load phases redeliver a fraction (--redeliver, 5 %) of their events a little later (same body and
signature): they must answer 200 and store nothing (their latency is given apart).

Goals (issue 14, this 2-core machine): >= 2,000 events/s accepted sustained, p99 response < 50 ms,
received -> final p50 < 100 ms, with the worker applying at the same time; (issue 29) closed-loop capacity
>= 4,600 events/s, twice the open loop's rate, so that the open-loop goals hold in slow periods too.

Usage: python bench/webhooks.py [--events N] [--rate R] [--connections K] [--duration S]
       [--worker-concurrency C] [--serve-arg ARG ...] [--profile-server SECONDS] [--event-shape fixtures3|minimal]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import stripe
from exits import failed, usage  # bench/exits.py (run as python bench/NAME.py)
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("RECON_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
FIXTURES3 = ROOT / ".." / "shared" / "specs" / "stripe" / "fixtures3.json"
SECRET = "whsec_" + secrets.token_hex(16)
PATH = "/webhooks/stripe"
GOALS = {"accepted_per_s": 2000.0, "p99_ms": 50.0, "final_p50_ms": 100.0}
START_TIMEOUT = 30.0
DRAIN_TIMEOUT = 90.0


# --- the database -----------------------------------------------------------------------------------------


def create_db() -> str:
    base = make_url(PG_URL).set(drivername="postgresql+psycopg")
    if base.host not in (None, "127.0.0.1", "localhost", "::1"):
        usage(f"RECON_BENCH_DATABASE_URL: only a loopback server is benchmarked (got {base.host})")
    name = f"recon_bench_webhooks_{os.getpid()}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    url = base.set(database=name).render_as_string(hide_password=False)
    from recon.db.database import connect, upgrade

    db = connect(url)
    upgrade(db)
    db.dispose()
    return url


def vacuum(engine: sa.Engine) -> None:
    """VACUUM (ANALYZE) the database, as autovacuum would between phases (it is off on some servers, this
    machine's among them: then every phase would start on the dead rows of all earlier ones)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM (ANALYZE)")


def drop_db(url: str) -> None:
    parsed = make_url(url)
    admin = sa.create_engine(parsed.set(database=make_url(PG_URL).database or "postgres"),
                             isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
    admin.dispose()


def seed(engine: sa.Engine, prefix: str, n: int, amount: int = 1000) -> None:
    """``n`` payments ``processing`` for stripe, references ``{prefix}-{i}``, intents ``pi_{prefix}_{i}``."""
    with engine.begin() as conn:
        conn.execute(sa.text("""
            INSERT INTO payments (merchant_account, merchant_reference, amount, currency, psp, psp_reference,
                                  idempotency_key, status, created_at, updated_at)
            SELECT 'shop', :p || '-' || i, :amount, 'EUR', 'stripe', 'pi_' || :p || '_' || i,
                   'bench-' || :p || '-' || i, 'processing', now(), now()
            FROM generate_series(0, :n - 1) AS i"""), {"p": prefix, "n": n, "amount": amount})


# --- the events -------------------------------------------------------------------------------------------


#: ``--event-shape``: Stripe's canonical Event and PaymentIntent (FIXTURES3), or the documented fields alone
EVENT_SHAPES = ("fixtures3", "minimal")


class MissingFixtures(Exception):
    """The canonical event's file is not there (a checkout without ../shared beside it, e.g. a copy in /tmp)."""


def _canonical(shape: str, fixtures: Path = FIXTURES3) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Event and PaymentIntent every request is made of. ``fixtures3`` reads them from ``fixtures``, and
    raises MissingFixtures when it is not there: never a smaller event in silence (a copy of the repository
    without ../shared once measured ~400 bytes of JSON for ~1,400, every process cheaper, docs/benchmarks.md).
    ``minimal`` only when asked for: the documented fields stripe.webhook.parse and stripe.wire.to_outcome read."""
    if shape == "minimal":
        return ({"object": "event", "api_version": "2024-06-20", "livemode": False, "pending_webhooks": 1,
                 "request": {"id": None, "idempotency_key": None}},
                {"object": "payment_intent", "capture_method": "automatic", "livemode": False})
    if not fixtures.is_file():
        raise MissingFixtures(f"{fixtures}: Stripe's canonical objects (the event's shape) not found; run from a "
                              "checkout with ../shared/specs beside it, or pass --event-shape minimal")
    resources = json.loads(fixtures.read_text(encoding="utf-8"))["resources"]
    return resources["event"], resources["payment_intent"]


def build_requests(prefix: str, n: int, port: int, redeliver: float,
                   shape: str = "fixtures3") -> tuple[list[bytes], list[bool]]:
    """One signed POST per payment, plus redeliveries (the same bytes) of ``redeliver`` of them, each sent
    50-150 requests after its original; returns the requests and which are redeliveries."""
    event, intent = _canonical(shape)
    now = int(time.time())
    originals: list[bytes] = []
    for i in range(n):
        obj = {**intent, "id": f"pi_{prefix}_{i}", "status": "succeeded", "amount": 1000, "amount_received": 1000,
               "currency": "eur", "metadata": {"merchant_reference": f"{prefix}-{i}"}}
        doc = {**event, "id": f"evt_{prefix}_{i}_{secrets.token_hex(6)}", "type": "payment_intent.succeeded",
               "created": now, "data": {"object": obj}}
        body = json.dumps(doc, separators=(",", ":"))
        header = stripe.WebhookSignature.generate_signature_header(body, SECRET, timestamp=now)
        raw = body.encode()
        originals.append(
            f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json; charset=utf-8\r\n"
            f"Stripe-Signature: {header}\r\nUser-Agent: Stripe/1.0 (+https://stripe.com/docs/webhooks)\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
    rng = random.Random(14)
    later: dict[int, list[bytes]] = {}
    for i in rng.sample(range(n), int(n * redeliver)):
        later.setdefault(min(n - 1, i + rng.randint(50, 150)), []).append(originals[i])
    out, dup = [], []
    for i, req in enumerate(originals):
        out.append(req)
        dup.append(False)
        for again in later.get(i, ()):
            out.append(again)
            dup.append(True)
    return out, dup


# --- the load generator (a process of its own) -----------------------------------------------------------


def _load_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    requests = [bytes.fromhex(h) for h in spec["requests"]] if "requests" in spec else None
    if requests is None:
        import pickle

        with open(spec["requests_file"], "rb") as fh:
            requests = pickle.load(fh)  # nosec B301  # the bench's own file, written just before
    result = asyncio.run(_load(requests, port=spec["port"], connections=spec["connections"],
                               rate=spec.get("rate"), duration=spec["duration"]))
    print(json.dumps(result), flush=True)


async def _load(requests: list[bytes], *, port: int, connections: int, rate: float | None,
                duration: float) -> dict[str, Any]:
    n = len(requests)
    starts = [0.0] * n
    ends = [0.0] * n
    statuses = [0] * n
    next_i = 0
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(connections)]
    t0 = time.perf_counter() + 0.05
    deadline = t0 + duration

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal next_i
        while True:
            i = next_i
            if i >= n:
                return
            next_i += 1
            scheduled = t0 + i / rate if rate else 0.0
            now = time.perf_counter()
            if scheduled > now:
                await asyncio.sleep(scheduled - now)
                now = time.perf_counter()
            if now > deadline:
                return
            starts[i] = scheduled if rate else now
            writer.write(requests[i])
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            ends[i] = time.perf_counter()
            statuses[i] = status
            if b"connection: close" in head.lower():
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)

    while time.perf_counter() < t0:
        await asyncio.sleep(0.001)
    cpu0 = time.process_time()
    await asyncio.gather(*(run(r, w) for r, w in conns))
    cpu = time.process_time() - cpu0
    for _, w in conns:
        w.close()
    done = [i for i in range(n) if statuses[i]]
    first = min((starts[i] for i in done), default=t0)
    last = max((ends[i] for i in done), default=t0)
    return {"sent": len(done), "planned": n, "elapsed_s": round(last - first, 3),
            "latency_ms": [round((ends[i] - starts[i]) * 1000, 3) for i in done],
            "offset_s": [round(starts[i] - t0, 3) for i in done],
            "status": [statuses[i] for i in done], "index": done, "client_cpu_s": round(cpu, 3)}


def run_load(requests: list[bytes], *, port: int, connections: int, rate: float | None,
             duration: float) -> dict[str, Any]:
    import pickle

    with tempfile.TemporaryDirectory() as tmp:
        req_file = Path(tmp) / "requests.pickle"
        with open(req_file, "wb") as fh:
            pickle.dump(requests, fh)
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"requests_file": str(req_file), "port": port, "connections": connections,
                                    "rate": rate, "duration": duration}))
        out = subprocess.run([sys.executable, __file__, "_load", str(spec)], capture_output=True, text=True,
                             timeout=duration + 60, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return round(s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))], 2)


def slowest_seconds(load: dict[str, Any], top: int = 3) -> list[dict[str, Any]]:
    """The seconds of the load (by when each request was due) whose slowest answer was slowest: where a stall
    began and how long it lasted, which one p99 over the whole phase cannot tell."""
    worst: dict[int, float] = {}
    count: dict[int, int] = {}
    for offset, ms in zip(load["offset_s"], load["latency_ms"], strict=True):
        sec = int(offset)
        worst[sec] = max(worst.get(sec, 0.0), ms)
        count[sec] = count.get(sec, 0) + 1
    ranked = sorted(worst, key=lambda k: worst[k], reverse=True)[:top]
    return [{"second": k, "max_ms": round(worst[k], 1), "requests": count[k]} for k in sorted(ranked)]


def summarize(load: dict[str, Any], dup: list[bool] | None) -> dict[str, Any]:
    lat, status, index = load["latency_ms"], load["status"], load["index"]
    by_status: dict[str, int] = {}
    for s in status:
        by_status[str(s)] = by_status.get(str(s), 0) + 1
    out: dict[str, Any] = {
        "requests": load["sent"], "planned": load["planned"], "elapsed_s": load["elapsed_s"],
        "responses_per_s": round(load["sent"] / load["elapsed_s"], 1) if load["elapsed_s"] else None,
        "status": by_status, "client_cpu_s": load["client_cpu_s"]}
    if dup is not None:
        first = [lat[k] for k, i in enumerate(index) if not dup[i]]
        again = [lat[k] for k, i in enumerate(index) if dup[i]]
        accepted = sum(1 for k, i in enumerate(index) if not dup[i] and status[k] == 200)
        out.update(accepted_events=accepted, redeliveries=len(again),
                   accepted_per_s=round(accepted / load["elapsed_s"], 1) if load["elapsed_s"] else None,
                   latency_ms={"p50": pct(first, 50), "p95": pct(first, 95), "p99": pct(first, 99),
                               "max": round(max(first), 2) if first else None},
                   redelivery_latency_ms={"p50": pct(again, 50), "p99": pct(again, 99)},
                   slowest_seconds=slowest_seconds(load))
    else:
        out["latency_ms"] = {"p50": pct(lat, 50), "p95": pct(lat, 95), "p99": pct(lat, 99),
                             "max": round(max(lat), 2) if lat else None}
    return out


# --- processes ---------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its threads (its children not included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants (``recon serve --workers N`` forks)."""
    total = cpu_seconds(pid)
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return total + sum(tree_cpu(int(c)) for c in children)


def backends_cpu(engine: sa.Engine, dbname: str) -> float:
    with engine.connect() as conn:
        pids = [r[0] for r in conn.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :d "
                                                   "AND pid <> pg_backend_pid()"), {"d": dbname})]
    return sum(cpu_seconds(p) for p in pids)


def commit_wait_ms(config: str | None) -> float:
    """The intake's group-commit wait the server runs with: the config file's [webhooks] commit_wait, else
    recon's default."""
    import tomllib

    from recon.webhooks.config import WebhookConfig

    table = tomllib.loads(Path(config).read_text()).get("webhooks") if config else None
    return WebhookConfig.load(table, {}).commit_wait.total_seconds() * 1000


def _recon(url: str, config: str | None) -> list[str]:
    """The command line of recon on ``url``, with ``config`` (a recon config file) or none."""
    return [sys.executable, "-m", "recon", "--database-url", url, *(["--config", config] if config else [])]


def start_server(url: str, serve_args: list[str], config: str | None = None) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "RECON_STRIPE_WEBHOOK_SECRET": SECRET, "PYTHONPATH": str(ROOT)}
    env.pop("RECON_CONFIG", None)
    proc = subprocess.Popen([*_recon(url, config), "serve", "--port", "0",
                             *serve_args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline() if proc.stdout else ""),
                              daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    if not line or not line[0].startswith("webhooks on "):
        proc.kill()
        failed(f"recon serve did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    port = int(line[0].split("webhooks on ", 1)[1].split(PATH)[0].rsplit(":", 1)[1])
    return proc, port


def start_worker(url: str, concurrency: int, prefetch: int, config: str | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RECON_CONFIG", None)
    return subprocess.Popen([*_recon(url, config), "worker", "--queues", "webhooks",
                             "--concurrency", str(concurrency), "--prefetch", str(prefetch)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.stderr.read() if proc.stderr else ""


def wait_applied(engine: sa.Engine, prefix: str, expected: int) -> float:
    """Seconds until every stored event of the phase is applied (or DRAIN_TIMEOUT)."""
    start = time.monotonic()
    while time.monotonic() - start < DRAIN_TIMEOUT:
        with engine.connect() as conn:
            left = conn.execute(sa.text("SELECT count(*) FROM webhook_events WHERE event_id LIKE :p "
                                        "AND state = 'received'"), {"p": f"evt_{prefix}_%"}).scalar_one()
            stored = conn.execute(sa.text("SELECT count(*) FROM webhook_events WHERE event_id LIKE :p"),
                                  {"p": f"evt_{prefix}_%"}).scalar_one()
        if left == 0 and stored >= expected:
            break
        time.sleep(0.2)
    return round(time.monotonic() - start, 2)


def final_latency(engine: sa.Engine, prefix: str) -> dict[str, Any]:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # the tables' statistics as they are now (with autovacuum off the join below would be planned for the
        # empty tables of the start and take seconds)
        conn.exec_driver_sql("ANALYZE webhook_events, payment_events, payments")
        row = conn.execute(sa.text("""
            SELECT count(*),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY d), percentile_cont(0.95) WITHIN GROUP (ORDER BY d),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY d), max(d)
            FROM (SELECT extract(epoch FROM e.at - w.received_at) * 1000 AS d
                  FROM webhook_events w JOIN payment_events e ON e.payment_id = w.payment_id AND e.source = 'webhook'
                  WHERE w.event_id LIKE :p) AS x"""), {"p": f"evt_{prefix}_%"}).one()
        states = dict(conn.execute(sa.text("SELECT state, count(*) FROM webhook_events WHERE event_id LIKE :p "
                                           "GROUP BY state"), {"p": f"evt_{prefix}_%"}).all())
        succeeded = conn.execute(sa.text("SELECT count(*) FROM payments WHERE merchant_reference LIKE :p "
                                         "AND status = 'succeeded'"), {"p": f"{prefix}-%"}).scalar_one()
    return {"events": int(row[0]), "p50_ms": _r(row[1]), "p95_ms": _r(row[2]), "p99_ms": _r(row[3]),
            "max_ms": _r(row[4]), "webhook_states": {k: int(v) for k, v in states.items()},
            "payments_succeeded": int(succeeded)}


def raw_floor(url: str, n: int = 2_000) -> dict[str, Any]:
    """The machine's floor: ``n`` autocommit INSERT ... RETURNING of a small JSON row, one connection, rows/s."""
    import psycopg

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_raw_floor (id bigserial PRIMARY KEY, body jsonb NOT NULL)")
        bodies = [json.dumps({"i": i}) for i in range(n)]
        start = time.perf_counter()
        insert = "INSERT INTO bench_raw_floor (body) VALUES (CAST(%s AS jsonb)) RETURNING id"
        for body in bodies:
            conn.execute(insert, (body,)).fetchone()
        elapsed = time.perf_counter() - start
        conn.execute("DROP TABLE bench_raw_floor")
    return {"rows": n, "rows_per_s": round(n / elapsed, 1), "load_average": [round(x, 2) for x in os.getloadavg()]}


def _r(v: Any) -> float | None:
    return None if v is None else round(float(v), 2)


def profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        return None
    return subprocess.Popen([str(spy), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--format",
                             "raw", "--output", str(out), "--nonblocking", "--subprocesses"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# --- the run -----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000, help="events per load phase (one payment each)")
    # requests/s; with 5 % redelivered, 2,300 requests offer 2,190 new events/s, so that the goal's 2,000 is
    # not the offered rate itself (2,100 requests offered exactly 2,000 events/s)
    parser.add_argument("--rate", type=float, default=2_300.0, help="open-loop request rate of the sustained phase")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive connections of the load")
    parser.add_argument("--duration", type=float, default=45.0, help="time bound of each load phase (s)")
    parser.add_argument("--redeliver", type=float, default=0.05, help="fraction of events sent twice")
    parser.add_argument("--worker-concurrency", type=int, default=32)
    parser.add_argument("--worker-prefetch", type=int, default=32)
    parser.add_argument("--worker-processes", type=int, default=1, help="`recon worker` processes")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra `recon serve` argument")
    parser.add_argument("--config", help="a recon config file for the server and the worker (e.g. [webhooks] "
                        "commit_wait); none by default, so recon's defaults are measured")
    parser.add_argument("--phases", default="raw_floor,client_ceiling,capacity,sustained")
    parser.add_argument("--event-shape", choices=EVENT_SHAPES, default="fixtures3",
                        help="fixtures3: Stripe's canonical objects from ../shared/specs (exit 2 without them); "
                        "minimal: the documented fields alone, a smaller event (say so to compare runs)")
    parser.add_argument("--profile-server", type=float, default=0.0,
                        help="py-spy record the server for this many seconds of the sustained phase")
    args = parser.parse_args()
    if not 1 <= args.events <= 200_000 or not 1 <= args.duration <= 120 or not 1 <= args.connections <= 512:
        usage("--events 1..200000, --duration 1..120, --connections 1..512")
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    try:
        _canonical(args.event_shape)  # before any setup: a missing event file is bad input, not a smaller event
    except MissingFixtures as exc:
        print(f"bench/webhooks.py: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    began = time.monotonic()
    url = create_db()
    dbname = make_url(url).database or ""
    engine = sa.create_engine(url, pool_size=2)
    server = None
    workers: list[subprocess.Popen[str]] = []
    doc: dict[str, Any] = {
        "bench": "webhooks", "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                         "load_average_at_start": [round(x, 2) for x in os.getloadavg()]},
        "settings": {"events_per_phase": args.events, "rate": args.rate, "connections": args.connections,
                     "duration_bound_s": args.duration, "redeliver": args.redeliver,
                     "worker": {"queues": "webhooks", "processes": args.worker_processes,
                                "concurrency": args.worker_concurrency,
                                "prefetch": args.worker_prefetch},
                     "serve_args": args.serve_arg, "config": args.config,
                     "commit_wait_ms": commit_wait_ms(args.config), "event": "payment_intent.succeeded",
                     "event_shape": "fixtures3.json" if args.event_shape == "fixtures3" else "minimal"},
        "seed": {}, "phases": {}}
    try:
        with engine.connect() as conn:
            doc["postgresql"] = conn.execute(sa.text("SHOW server_version")).scalar_one()
            doc["settings"]["synchronous_commit"] = conn.execute(sa.text("SHOW synchronous_commit")).scalar_one()
            doc["settings"]["autovacuum"] = conn.execute(sa.text("SHOW autovacuum")).scalar_one()
        for name in ("capacity", "sustained"):
            if name in phases:
                seed(engine, name, args.events)
                doc["seed"][name] = {"payments": args.events, "status": "processing", "psp": "stripe"}
        if "raw_floor" in phases:
            doc["raw_floor"] = {"before": raw_floor(url)}
        server, port = start_server(url, args.serve_arg, args.config)
        workers = [start_worker(url, args.worker_concurrency, args.worker_prefetch, args.config)
                   for _ in range(max(1, args.worker_processes))]
        doc["settings"]["server_pid"] = server.pid
        time.sleep(1.0)  # the worker connected and listening
        if "client_ceiling" in phases:
            req = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
            cpu0 = tree_cpu(server.pid)
            load = run_load([req] * min(args.events, 20_000), port=port, connections=args.connections, rate=None,
                            duration=min(10.0, args.duration))
            figures = summarize(load, None)
            figures["server_cpu_s"] = round(tree_cpu(server.pid) - cpu0, 2)
            doc["phases"]["client_ceiling"] = {"path": "GET /healthz", "mode": "closed loop", **figures}
        for name in ("capacity", "sustained"):
            if name not in phases:
                continue
            requests, dup = build_requests(name, args.events, port, args.redeliver, args.event_shape)
            vacuum(engine)  # each phase starts from tables without the last phase's dead rows
            cpu0 = {"server": tree_cpu(server.pid), "worker": sum(cpu_seconds(w.pid) for w in workers),
                    "postgresql_backends": backends_cpu(engine, dbname)}
            spy = None
            if name == "sustained" and args.profile_server:
                spy = profile(server.pid, args.profile_server, Path(tempfile.gettempdir()) / "webhooks-server.txt")
            load = run_load(requests, port=port, connections=args.connections,
                            rate=args.rate if name == "sustained" else None, duration=args.duration)
            figures = summarize(load, dup)
            figures["cpu_s_during_load"] = {
                "server": round(tree_cpu(server.pid) - cpu0["server"], 2),
                "worker": round(sum(cpu_seconds(w.pid) for w in workers) - cpu0["worker"], 2),
                "postgresql_backends": round(backends_cpu(engine, dbname) - cpu0["postgresql_backends"], 2),
                "load_client": load["client_cpu_s"]}
            figures["applied_within_s_after_load"] = wait_applied(engine, name, figures["accepted_events"])
            # the CPU of the whole phase, until every event is applied: a worker that falls behind during the
            # load spends its share after it, which the figures during the load leave out
            until = {"server": round(tree_cpu(server.pid) - cpu0["server"], 2),
                     "worker": round(sum(cpu_seconds(w.pid) for w in workers) - cpu0["worker"], 2),
                     "postgresql_backends": round(backends_cpu(engine, dbname) - cpu0["postgresql_backends"], 2),
                     "load_client": load["client_cpu_s"]}
            figures["cpu_s_until_applied"] = until
            figures["cpu_ms_per_request_until_applied"] = {
                **{k: round(v / max(1, load["sent"]) * 1000, 3) for k, v in until.items()},
                "all": round(sum(until.values()) / max(1, load["sent"]) * 1000, 3)}
            figures["received_to_final"] = final_latency(engine, name)
            if spy is not None:
                spy.wait(timeout=args.profile_server + 30)
                figures["profile"] = str(Path(tempfile.gettempdir()) / "webhooks-server.txt")
            doc["phases"][name] = {"mode": "open loop" if name == "sustained" else "closed loop", **figures}
        if "raw_floor" in phases:
            doc["raw_floor"]["after"] = raw_floor(url)
            floor = (doc["raw_floor"]["before"]["rows_per_s"] + doc["raw_floor"]["after"]["rows_per_s"]) / 2
            doc["raw_floor"]["mean_rows_per_s"] = round(floor, 1)
            doc["of_raw_floor"] = {name: round((doc["phases"][name]["accepted_per_s"] or 0) / floor, 2)
                                   for name in ("capacity", "sustained") if name in doc["phases"]}
        doc["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        if "capacity" in doc["phases"]:
            c = doc["phases"]["capacity"]
            doc.setdefault("goals", {})["capacity_accepted_per_s >= 4600"] = {
                "value": c["accepted_per_s"], "met": bool(c["accepted_per_s"] and c["accepted_per_s"] >= 4600)}
        if "sustained" in doc["phases"]:
            s = doc["phases"]["sustained"]
            doc.setdefault("goals", {}).update({
                "accepted_per_s >= 2000": {"value": s["accepted_per_s"],
                                           "met": bool(s["accepted_per_s"] and s["accepted_per_s"] >= 2000
                                                       and s["status"].get("200", 0) == s["requests"])},
                "p99_ms < 50": {"value": s["latency_ms"]["p99"], "met": s["latency_ms"]["p99"] < 50},
                "received_to_final_p50_ms < 100": {"value": s["received_to_final"]["p50_ms"],
                                                   "met": (s["received_to_final"]["p50_ms"] or 1e9) < 100},
            })
    finally:
        doc["worker_exit"] = []
        for worker in workers:
            tail = stop(worker).strip().splitlines()
            doc["worker_exit"].append({"code": worker.returncode, "stats": tail[-1] if tail else ""})
        if server is not None:
            err = stop(server).strip()
            doc["server_exit"] = {"code": server.returncode, "stderr_tail": err.splitlines()[-3:] if err else []}
        engine.dispose()
        drop_db(url)
    doc["seconds"] = round(time.monotonic() - began, 1)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "_load":
        _load_main(sys.argv[2])
    else:
        main()
