"""Console benchmark: the overview (``GET /``), the review queue (``GET /review``: its first page, a page halfway
down by its keyset cursor, filtered by severity and overdue, by assignee) and the payments list (unfinished, a
reference prefix) rendered with real volumes.

Seeds a PostgreSQL database of its own (``recon_bench_console`` on RECON_BENCH_DATABASE_URL's server, default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``; created, migrated by ``recon db upgrade``'s code and
dropped at the end) with set-based SQL (``INSERT … SELECT generate_series``):

- ``--payments`` payments (default 1,000,000), ``--unfinished`` of them unfinished (default 100,000: created,
  processing, pending), spread over 6 currencies, 3 PSPs, 20 merchant accounts and ages from seconds to 14
  days (skewed young, so every age bucket is populated); ``--review`` in needs_review (default 3,000) with
  review reasons of five kinds and review_since over the last month; the rest succeeded or failed over 90 days;
- their audit trails: a creation event each, a PSP answer for every payment that has one, the review
  evidence, and 500 manual resolutions in the last two weeks (about 2 million events);
- their jobs: a charge or reconcile job per unfinished payment (runnable, retryable, pending), ``--finished``
  succeeded jobs over the last week (default 200,000) and ``--dead`` dead jobs (default 2,000) in three
  queue/kind/error-kind groups, each job with its attempt rows; workers, sweeps, one PSP paused;

then ``VACUUM (ANALYZE)``, as autovacuum leaves a table that has been written. The console (``create_app`` on an
``App``, as ``recon console`` serves it) runs under uvicorn in a thread on 127.0.0.1; each page is fetched
over HTTP with httpx: ``--warmup`` times, then ``--runs`` times or for ``--seconds``, whichever ends first.
Every SQL statement a render sends is captured (SQLAlchemy's cursor events) with its time, named after the
``recon.db.*_queries`` query it is, and explained once with ``EXPLAIN (ANALYZE, BUFFERS)`` on a plain
connection with the same parameters: top node, the indexes and sequential scans in the plan, buffers, ms.

Prints one JSON document: seed sizes and time, per page p50/p95/max ms and whether it meets its goal
(< 200 ms; the queue and list pages < 300 ms, issue 27's goal at 100,000 items in review: run with
``--unfinished 100000 --review 100000``), the per-query times of one render, and the plans.

Usage: python bench/console.py [--payments N] [--unfinished N] [--review N] [--finished N] [--dead N]
                               [--runs N] [--warmup N] [--seconds S] [--profile] [--keep] [--reuse]
                               [--database NAME] [--all-filters] [--cold]
``--keep`` leaves the database for a look; ``--reuse`` measures a database kept by an earlier ``--keep`` run
(``--database`` names it, so that runs side by side do not share one). ``--all-filters`` adds every other filter
of the queue and the payments list (``FILTER_PAGES``). The pages are read as the console's access token's
operator. By default each filter's totals are kept ``[console] totals_ttl`` (recon.console.totals), as a day of
paging through a filter sees them; ``--cold`` computes them for every page, as the first page of a filter.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import platform
import secrets
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import sqlalchemy as sa
from exits import failed  # bench/exits.py (run as python bench/NAME.py)
from sqlalchemy.engine import make_url

from recon.app import App
from recon.db.database import connect, upgrade

SERVER_URL = os.environ.get("RECON_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
DB_NAME = "recon_bench_console"  #: the default of --database
GOAL_MS = 200.0
#: issue 27: a page of the review queue (keyset, with the filter's totals) p95 under 300 ms at 100,000 items
QUEUE_GOAL_MS = 300.0
PAGES = {"overview": "/", "review_queue": "/review", "review_queue_filtered": "/review?severity=high&overdue=1",
         "review_queue_assignee": "/review?assignee=bench-ann", "payments_unfinished": "/payments?status=unfinished",
         "payments_prefix": "/payments?reference=BENCH-0001"}
#: every other filter the console's queue and payments list offer, one at a time (``--all-filters``)
FILTER_PAGES = {
    "review_kind": "/review?kind=amount_mismatch", "review_psp": "/review?psp=stripe",
    "review_currency": "/review?currency=EUR", "review_older_than": "/review?older_than=7d",
    "review_unassigned": "/review?unassigned=1", "review_severity_high": "/review?severity=high",
    "review_severity_low": "/review?severity=low", "review_overdue": "/review?overdue=1",
    "review_combined": "/review?kind=no_final_answer&currency=EUR&severity=medium",
    "payments_status": "/payments?status=needs_review", "payments_psp": "/payments?psp=adyen",
    "payments_currency": "/payments?currency=USD", "payments_age": "/payments?age=1d_7d",
    "payments_amount": "/payments?min_amount=100&max_amount=500",
    "payments_prefix_lower": "/payments?reference=bench-00012",
    "payments_unfinished_prefix": "/payments?status=unfinished&reference=BENCH-000",
}
#: the pages whose goal is QUEUE_GOAL_MS (the rest: GOAL_MS)
QUEUE_PAGES = ("review_queue", "review_queue_filtered", "review_queue_assignee", "review_queue_deep",
               "payments_unfinished", "payments_prefix", *FILTER_PAGES)
#: the console's access token in the run (random per run: the database is the bench's own)
BENCH_TOKEN = secrets.token_urlsafe(24)
#: the whole run is stopped (stacks dumped) after this many seconds
BUDGET_SECONDS = 900

REVIEW_REASONS = [
    "amount_mismatch: ours ' || p.amount || ' ' || p.currency || ', PSP ' || (p.amount - 100)",
    "missing_at_psp: PSP has no payment ' || coalesce(p.psp_reference, '-')",
    "no_final_answer: after 3 checks: PSP still says pending'",
    "authentication_required: the customer must authenticate (3-D Secure)'",
    "psp_reversed: refunded at the PSP after it succeeded'",
]

# --- the seed: bench-only statements, set-based -------------------------------------------------------------

SEED_PAYMENTS = """
INSERT INTO payments (merchant_account, merchant_reference, amount, currency, psp, psp_reference, idempotency_key,
                      status, failure_reason, created_at, updated_at, key_generation)
SELECT 'shop-' || (g % 20), 'bench-' || lpad(g::text, 8, '0'), 100 + (g::bigint * 7919) % 250000,
       (ARRAY['EUR', 'USD', 'GBP', 'JPY', 'SEK', 'CHF'])[1 + (g / 3) % 6],
       (ARRAY['stripe', 'adyen', 'sandbox'])[1 + g % 3],
       CASE WHEN s.status = 'created' THEN NULL ELSE 'psp_' || md5(g::text) END,
       'recon-' || md5('key' || g), s.status,
       CASE WHEN s.status = 'failed' THEN 'declined: insufficient_funds' END,
       s.created_at,
       CASE WHEN s.status IN ('created', 'processing', 'pending') THEN s.created_at
            ELSE s.created_at + interval '3 minutes' END,
       0
FROM generate_series(1, :n) AS g
CROSS JOIN LATERAL (
    SELECT CASE WHEN g % :ratio = 0 THEN (ARRAY['created', 'processing', 'pending'])[1 + (g / :ratio) % 3]
                WHEN g % :ratio = 1 AND (g / :ratio) % :review_every = 0 THEN 'needs_review'
                WHEN g % 17 = 3 THEN 'failed'
                ELSE 'succeeded' END AS status,
           -- unfinished: up to 14 days old, skewed young (about 14% under an hour, 21% over 7 days); in review:
           -- up to 30 days; the rest: up to 90 days
           now() - make_interval(secs => CASE
               WHEN g % :ratio = 0 THEN 1209600 * power(((g::bigint * 2654435761) % 100003) / 100003.0, 3)
               WHEN g % :ratio = 1 AND (g / :ratio) % :review_every = 0
               THEN 3600 + 2592000 * (((g::bigint * 40503) % 100019) / 100019.0)
               ELSE 7776000 * (((g::bigint * 40503) % 100019) / 100019.0) END) AS created_at
) AS s
-- ids (and the table's physical order) follow creation time, as they do when payments arrive one by one
ORDER BY s.created_at
"""

SEED_EVENTS = [
    # the creation event of every payment
    """INSERT INTO payment_events (payment_id, from_status, to_status, source, job_id, attempt, details, at)
       SELECT id, NULL, 'created', 'manual', NULL, NULL, NULL, created_at FROM payments""",
    # the PSP's answer for every payment that has one
    """INSERT INTO payment_events (payment_id, from_status, to_status, source, job_id, attempt, details, at)
       SELECT id, 'processing', CASE WHEN status = 'needs_review' THEN 'pending' ELSE status END, 'charge', NULL, 1,
              jsonb_build_object('psp_outcome', CASE WHEN status IN ('succeeded', 'failed') THEN status
                                                     ELSE 'pending' END,
                                 'psp_status', status, 'psp_reference', psp_reference, 'psp_amount', amount,
                                 'psp_currency', currency),
              updated_at
       FROM payments WHERE status IN ('succeeded', 'failed', 'pending', 'needs_review')""",
    # the reconcile answer that sent each payment in review there
    """INSERT INTO payment_events (payment_id, from_status, to_status, source, job_id, attempt, details, at)
       SELECT id, 'pending', 'needs_review', 'reconcile', NULL, 1,
              jsonb_build_object('psp_outcome', 'succeeded', 'psp_status', 'succeeded', 'psp_reference',
                                 psp_reference, 'psp_amount', amount - 100, 'psp_currency', currency),
              review_since
       FROM payments WHERE status = 'needs_review'""",
    # 500 manual resolutions over the last two weeks
    """INSERT INTO payment_events (payment_id, from_status, to_status, source, job_id, attempt, details, at)
       SELECT id, 'needs_review', status, 'manual', NULL, NULL,
              jsonb_build_object('operator', (ARRAY['alice', 'bob', 'carol'])[1 + id % 3],
                                 'reason', 'checked with the PSP', 'override', id % 7 = 0),
              now() - make_interval(secs => (id % 1209600))
       FROM payments WHERE status IN ('succeeded', 'failed') ORDER BY id LIMIT 500""",
]

SEED_JOBS = [
    # a charge job per created payment (runnable) and per processing payment (retryable, a retry due later)
    """INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts, unique_key,
                         last_error_kind, last_error, tenant, created_at, attempted_at)
       SELECT 'charges', 'charge', jsonb_build_object('payment_id', id),
              CASE WHEN status = 'created' THEN 'runnable' ELSE 'retryable' END, 0,
              CASE WHEN status = 'created' THEN created_at ELSE now() + make_interval(secs => id % 600) END,
              CASE WHEN status = 'created' THEN 0 ELSE 1 + id % 3 END, 12, 'charge:' || id,
              CASE WHEN status = 'processing' THEN 'psp_unavailable' END,
              CASE WHEN status = 'processing' THEN 'PspUnavailable: 503 from the PSP' END,
              merchant_account, created_at, CASE WHEN status = 'processing' THEN created_at END
       FROM payments WHERE status IN ('created', 'processing')""",
    # a scheduled reconcile job per pending payment
    """INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts, unique_key,
                         tenant, created_at)
       SELECT 'reconcile', 'reconcile', jsonb_build_object('payment_id', id), 'pending', 0,
              now() + make_interval(secs => id % 3600), id % 3, 10, 'reconcile:' || id, merchant_account,
              created_at
       FROM payments WHERE status = 'pending'""",
    # succeeded jobs over the last week, as `recon jobs prune` would leave them
    """INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts, tenant,
                        created_at, attempted_at, finished_at)
       SELECT CASE WHEN g % 4 = 0 THEN 'reconcile' ELSE 'charges' END,
              CASE WHEN g % 4 = 0 THEN 'reconcile' ELSE 'charge' END,
              jsonb_build_object('payment_id', g), 'succeeded', 0, t, 1, 12, 'shop-' || (g % 20), t, t,
              t + interval '200 milliseconds'
       FROM generate_series(1, :finished) AS g,
            LATERAL (SELECT now() - make_interval(secs => 604800 * ((g::bigint * 7919) % 100003) / 100003.0) AS t) s""",
    # dead jobs in three groups
    """INSERT INTO jobs (queue, kind, payload, state, priority, run_after, attempts, max_attempts, tenant,
                         last_error_kind, last_error, created_at, attempted_at, finished_at)
       SELECT k.queue, k.kind, jsonb_build_object('payment_id', g), 'dead', 0, t, k.attempts, k.attempts,
              'shop-' || (g % 20), k.error_kind, k.error, t, t, t + interval '1 second'
       FROM generate_series(1, :dead) AS g,
            LATERAL (SELECT now() - make_interval(secs => 1209600 * ((g::bigint * 7919) % 100003) / 100003.0) AS t) s,
            LATERAL (SELECT (ARRAY['charges', 'reconcile', 'charges'])[1 + g % 3] AS queue,
                            (ARRAY['charge', 'reconcile', 'charge'])[1 + g % 3] AS kind,
                            (ARRAY['validation', 'psp_unavailable', 'bug'])[1 + g % 3] AS error_kind,
                            (ARRAY['ValidationError: currency not enabled', 'PspUnavailable: 503 ten times',
                                   'KeyError: psp_reference'])[1 + g % 3] AS error,
                            (ARRAY[1, 10, 1])[1 + g % 3] AS attempts) k""",
    # every attempt of every job that has run
    """INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_kind, error)
       SELECT j.id, a, 'bench:' || (j.id % 4), coalesce(j.attempted_at, j.created_at),
              coalesce(j.finished_at, j.attempted_at, j.created_at) - make_interval(secs => j.attempts - a)
                  + interval '150 milliseconds',
              CASE WHEN a < j.attempts OR j.state IN ('retryable', 'pending') THEN 'retried'
                   WHEN j.state = 'succeeded' THEN 'succeeded' ELSE 'dead' END,
              CASE WHEN j.state IN ('dead', 'retryable') OR a < j.attempts
                   THEN coalesce(j.last_error_kind, 'psp_unavailable') END,
              CASE WHEN j.state IN ('dead', 'retryable') OR a < j.attempts
                   THEN coalesce(j.last_error, 'retried') END
       FROM jobs j, generate_series(1, j.attempts) AS a
       WHERE j.attempts > 0""",
]

SEED_REST = [
    """INSERT INTO workers (id, host, pid, queues, slots, busy_slots, started_at, last_seen_at, stopped_at, counters)
       SELECT 'bench:' || g, 'bench-host-' || g, 1000 + g, '["charges", "reconcile"]'::jsonb, 16, g % 16,
              now() - interval '2 hours', now(), NULL, '{}'::jsonb
       FROM generate_series(1, 4) AS g""",
    """INSERT INTO sweep_runs (started_at, finished_at, operator, options, outcome, exit_code, summary)
       SELECT now() - make_interval(hours => g), now() - make_interval(hours => g) + interval '40 seconds', 'cron',
              '{"older_than": "15m"}'::jsonb, 'finished', CASE WHEN g % 2 = 0 THEN 1 ELSE 0 END,
              jsonb_build_object('checked', 1000 + g, 'healed', 10 * g, 'needs_review', g)
       FROM generate_series(1, 8) AS g""",
    """INSERT INTO psp_controls (psp, paused, paused_by, paused_at, pause_reason, updated_at)
       VALUES ('adyen', true, 'ops', now(), 'incident 42: Adyen degraded', now())""",
]

TABLES = ("payments", "payment_events", "jobs", "job_attempts", "workers", "sweep_runs", "psp_controls")


def deep_page(app: App) -> str:
    """The review queue's page halfway down (a cursor as the console's next-page link writes it)."""
    from recon.console.pages.review import _cursor_text

    with app.db.engine.connect() as conn:
        row = conn.exec_driver_sql(
            "SELECT review_since, id FROM payments WHERE status = 'needs_review' ORDER BY review_since, id "
            "OFFSET (SELECT count(*) / 2 FROM payments WHERE status = 'needs_review') LIMIT 1").first()
    return f"/review?after={_cursor_text((row[0], row[1]))}" if row else "/review"


def review_sql() -> str:
    reasons = ", ".join(f"'{r}" for r in REVIEW_REASONS)  # each reason is an SQL expression
    return f"""UPDATE payments AS p SET review_since = p.created_at + interval '30 minutes',
                      review_reason = (ARRAY[{reasons}])[1 + p.id % 5],
                      review_assignee = (ARRAY['bench-ann', 'bench-bob', NULL, NULL])[1 + p.id % 4]
               WHERE p.status = 'needs_review'"""


# --- measuring ----------------------------------------------------------------------------------------------


class Captured:
    """Every statement the App's engine sends while ``on``: (statement, parameters, ms)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.on = False
        self.rows: list[tuple[str, Any, float]] = []
        self._start = threading.local()
        sa.event.listen(engine, "before_cursor_execute", self._before)
        sa.event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                executemany: bool) -> None:
        self._start.t = time.perf_counter()

    def _after(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        if self.on:
            self.rows.append((statement, parameters, (time.perf_counter() - self._start.t) * 1000))


def query_names(engine: sa.Engine) -> dict[str, str]:
    """The statement psycopg receives for each recon.db query -> its name (expanding ones by their prefix)."""
    import importlib
    import pkgutil

    import recon.db
    from recon.db.sql import Query

    names: dict[str, str] = {}
    for info in pkgutil.iter_modules(recon.db.__path__):
        if not info.name.endswith("_queries"):
            continue
        module = importlib.import_module(f"recon.db.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Query):
                try:
                    clause = value.for_dialect("postgresql")
                except NotImplementedError:
                    continue
                compiled = str(clause.compile(dialect=engine.dialect))
                names[_normal(compiled.split("__[POSTCOMPILE")[0])] = value.name
    return names


def _normal(statement: str) -> str:
    return " ".join(statement.split())


def name_of(statement: str, names: dict[str, str]) -> str:
    flat = _normal(statement)
    if flat in names:
        return names[flat]
    for text, name in names.items():  # an expanding query: the text up to its first list parameter
        if len(text) > 40 and flat.startswith(text):
            return name
    return flat[:80]


def explain(engine: sa.Engine, statement: str, parameters: Any) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of one captured statement: its top node, what it scans, buffers, time."""
    with engine.connect() as conn:
        [[plan]] = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", parameters).all()
        conn.rollback()
    doc = plan[0] if isinstance(plan, list) else json.loads(plan)[0]
    top = doc["Plan"]
    indexes: list[str] = []
    seq_scans: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if "Index Name" in node:
            indexes.append(f"{node['Node Type']} using {node['Index Name']}")
        elif node["Node Type"] == "Seq Scan":
            seq_scans.append(f"{node['Relation Name']} (rows {node.get('Actual Rows')}, "
                             f"removed {node.get('Rows Removed by Filter', 0)})")
        for child in node.get("Plans", []):
            walk(child)

    walk(top)
    return {"top": top["Node Type"], "indexes": sorted(set(indexes)), "seq_scans": seq_scans,
            "rows": top.get("Actual Rows"), "shared_hit": top.get("Shared Hit Blocks"),
            "shared_read": top.get("Shared Read Blocks"), "planning_ms": round(doc.get("Planning Time", 0), 3),
            "execution_ms": round(doc["Execution Time"], 3)}


@contextmanager
def served(web: Any) -> Iterator[str]:
    """The console's ASGI app under uvicorn in a thread on 127.0.0.1 (``recon.asgi.background``)."""
    from recon.asgi import background

    try:
        with background(web) as base:
            yield base.rstrip("/")
    except RuntimeError as exc:
        failed(f"the console did not start ({exc})")


def percentile(values: list[float], p: float) -> float:
    """Nearest rank: the value at rank ceil(p * n)."""
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(p * len(ordered)))) - 1]


def time_page(client: httpx.Client, path: str, *, warmup: int, runs: int, seconds: float, captured: Captured,
              names: dict[str, str], goal: float = GOAL_MS) -> dict[str, Any]:
    """``warmup`` renders, then up to ``runs`` timed ones within ``seconds``; each timed render's statements
    captured: per query, its median ms per render (the sum when a render sends it more than once)."""
    for _ in range(warmup):
        client.get(path).raise_for_status()
    times: list[float] = []
    per_query: dict[str, list[float]] = {}
    sent: dict[str, int] = {}
    samples: dict[str, tuple[str, Any]] = {}
    size = 0
    deadline = time.monotonic() + seconds
    while len(times) < runs and time.monotonic() < deadline:
        captured.rows.clear()
        captured.on = True
        t = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - t) * 1000)
        captured.on = False
        response.raise_for_status()
        size = len(response.content)
        render: dict[str, float] = {}
        counts: dict[str, int] = {}
        for statement, parameters, ms in captured.rows:
            name = name_of(statement, names)
            render[name] = render.get(name, 0.0) + ms
            counts[name] = counts.get(name, 0) + 1
            samples.setdefault(name, (statement, parameters))
        sent.update(counts)
        for name, ms in render.items():
            per_query.setdefault(name, []).append(ms)
    queries = sorted(({"query": name, "per_render": sent[name], "median_ms": round(statistics.median(ms), 2),
                       "max_ms": round(max(ms), 2)} for name, ms in per_query.items()),
                     key=lambda q: -q["median_ms"])
    return {"path": path, "runs": len(times), "p50_ms": round(statistics.median(times), 1),
            "p95_ms": round(percentile(times, 0.95), 1), "max_ms": round(max(times), 1), "bytes": size,
            "goal_ms": goal, "meets_goal": percentile(times, 0.95) < goal,
            "sql_median_ms": round(sum(q["median_ms"] for q in queries), 1), "queries": queries,
            "_samples": samples}


def plans(engine: sa.Engine, samples: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """Each distinct read a page sent, explained once with the parameters it was sent with."""
    return {name: explain(engine, statement, parameters) for name, (statement, parameters) in samples.items()
            if statement.lstrip().upper().startswith(("SELECT", "WITH"))}


def profile(web: Any, top: int = 14) -> dict[str, Any]:
    """Each page's function called directly in this thread under cProfile (the function the route runs in its
    thread pool): where a render's time goes, SQL and Python, by cumulative time."""
    import cProfile
    import io
    import pstats

    from starlette.requests import Request

    from recon.console.pages.overview import overview
    from recon.console.pages.review import review_queue

    out: dict[str, Any] = {}
    for name, func, path in (("overview", overview, "/"), ("review_queue", review_queue, "/review")):
        request = Request({"type": "http", "app": web, "method": "GET", "path": path, "query_string": b"",
                           "headers": [(b"host", b"127.0.0.1")], "state": {}, "path_params": {}})
        func(request)  # warm
        prof = cProfile.Profile()
        prof.enable()
        func(request)
        prof.disable()
        buffer = io.StringIO()
        pstats.Stats(prof, stream=buffer).sort_stats("cumulative").print_stats(top)
        lines = [" ".join(line.split()) for line in buffer.getvalue().splitlines() if line.strip()]
        out[name] = [line for line in lines if not line.startswith(("Ordered by", "List reduced"))]
    return out


# --- the run ------------------------------------------------------------------------------------------------


def seed(url: str, args: argparse.Namespace) -> dict[str, Any]:
    engine = sa.create_engine(url)
    ratio = max(2, args.payments // max(1, args.unfinished))
    candidates = args.payments // ratio  # payments with g % ratio == 1
    review_every = max(1, candidates // max(1, args.review))
    steps: dict[str, float] = {}

    def step(name: str, sql: str, **params: int) -> None:
        t = time.perf_counter()
        with engine.begin() as conn:
            conn.execute(sa.text(sql), params)
        steps[name] = round(time.perf_counter() - t, 1)

    step("payments", SEED_PAYMENTS, n=args.payments, ratio=ratio, review_every=review_every)
    step("review", review_sql())
    for i, sql in enumerate(SEED_EVENTS):
        step(f"events_{i}", sql)
    for i, sql in enumerate(SEED_JOBS):
        step(f"jobs_{i}", sql, finished=args.finished, dead=args.dead)
    for i, sql in enumerate(SEED_REST):
        step(f"rest_{i}", sql)
    t = time.perf_counter()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in TABLES:
            conn.exec_driver_sql(f"VACUUM (ANALYZE) {table}")
    steps["vacuum_analyze"] = round(time.perf_counter() - t, 1)
    engine.dispose()
    return steps


def sizes(url: str) -> dict[str, Any]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        out: dict[str, Any] = {t: conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar_one()  # nosec B608
                               for t in ("payments", "payment_events", "jobs", "job_attempts")}
        out["payments_by_status"] = dict(conn.exec_driver_sql(
            "SELECT status, count(*) FROM payments GROUP BY status ORDER BY status").all())
        out["jobs_by_state"] = dict(conn.exec_driver_sql(
            "SELECT state, count(*) FROM jobs GROUP BY state ORDER BY state").all())
        out["unfinished"] = sum(n for s, n in out["payments_by_status"].items()
                                if s in ("created", "processing", "pending"))
        out["database_mb"] = round(conn.exec_driver_sql(
            "SELECT pg_database_size(current_database())").scalar_one() / 2**20)
    engine.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payments", type=int, default=1_000_000)
    parser.add_argument("--unfinished", type=int, default=100_000)
    parser.add_argument("--review", type=int, default=3_000)
    parser.add_argument("--finished", type=int, default=200_000, help="succeeded jobs of the last week")
    parser.add_argument("--dead", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="at most this long per page")
    parser.add_argument("--profile", action="store_true", help="also cProfile one render of each page")
    parser.add_argument("--keep", action="store_true", help="leave the database (for --reuse or a look)")
    parser.add_argument("--reuse", action="store_true", help="measure the database an earlier --keep left")
    parser.add_argument("--database", default=DB_NAME, help="the database's name (several runs side by side)")
    parser.add_argument("--cold", action="store_true",
                        help="compute every filter's totals for every page ([console] totals_ttl = 0s): the "
                             "first page of a filter, not the pages after it within the TTL")
    parser.add_argument("--all-filters", action="store_true",
                        help="also every other filter of the queue and the payments list (FILTER_PAGES)")
    args = parser.parse_args()
    faulthandler.dump_traceback_later(BUDGET_SECONDS, exit=True)

    base = make_url(SERVER_URL).set(drivername="postgresql+psycopg")
    url = base.set(database=args.database).render_as_string(hide_password=False)
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    started = time.perf_counter()
    seed_steps: dict[str, Any] = {"reused": True}
    if not args.reuse:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
            conn.exec_driver_sql(f'CREATE DATABASE "{args.database}"')
    db = connect(url)
    upgrade(db)  # what `recon db upgrade` runs (a kept database is brought up to date too)
    db.dispose()
    if not args.reuse:
        seed_steps = seed(url, args)
    seed_seconds = round(time.perf_counter() - started, 1)
    try:
        from recon.console.server import create_app

        app = App(database_url=url)
        web = create_app(app, token=BENCH_TOKEN)  # the pages are read as the token's operator (a viewer)
        if args.cold:  # recon.console.totals: nothing kept
            from datetime import timedelta

            from recon.console.totals import TotalsCache

            web.state.console_totals = TotalsCache(timedelta(0))
        with admin.connect() as conn:
            server_version = conn.exec_driver_sql("SHOW server_version").scalar_one()
        names = query_names(app.db.engine)
        captured = Captured(app.db.engine)
        pages: dict[str, Any] = {}
        with served(web) as base_url, httpx.Client(
                base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {BENCH_TOKEN}"}) as client:
            wanted = {**PAGES, "review_queue_deep": deep_page(app), **(FILTER_PAGES if args.all_filters else {})}
            for name, path in wanted.items():
                pages[name] = time_page(client, path, warmup=args.warmup, runs=args.runs, seconds=args.seconds,
                                        captured=captured, names=names,
                                        goal=QUEUE_GOAL_MS if name in QUEUE_PAGES else GOAL_MS)
        for page in pages.values():
            page["plans"] = plans(app.db.engine, page.pop("_samples"))
        profiles = profile(web) if args.profile else None
        app.close()
        app.db.dispose()
        doc = {
            "bench": "console", "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "totals": "computed for every page" if args.cold else "kept [console] totals_ttl per filter",
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "postgresql": server_version, "load_average": [round(x, 2) for x in os.getloadavg()]},
            "seed": {**sizes(url), "seconds": seed_seconds, "steps": seed_steps},
            "goal_ms": {"pages": GOAL_MS, "queue_pages": QUEUE_GOAL_MS},
            "meets_goal": {name: page["meets_goal"] for name, page in pages.items()},
            "pages": pages,
            "profile": profiles,
        }
        print(json.dumps(doc, indent=1, default=str))
    finally:
        if not args.keep:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        admin.dispose()


if __name__ == "__main__":
    main()
