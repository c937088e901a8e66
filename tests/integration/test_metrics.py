"""The pool's Prometheus endpoint, scraped over HTTP, against workloads with known counts (both databases)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from recon import Client, Handlers, JobSpec, JobStore, RetryPolicy, Settings, Worker
from recon.app import App
from recon.counters import ProcessMetrics
from recon.db.database import Database
from recon.db.pool_store import PoolStore
from recon.metrics import serve
from recon.overview import stats_document
from recon.pool_rows import WorkerPresence
from tests.integration.metrics_workload import ENGINE, run_workload

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert response.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def served_samples(db: Database) -> Samples:
    """The pool's metrics endpoint on ``db``, started, scraped once and closed (the stats tests of refunds,
    captures and disputes)."""
    server = serve(db, port=0, refresh=0)
    assert server is not None
    try:
        return scrape(server.port)
    finally:
        server.close()


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (e.g. over every worker)."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


#: how long a test waits for a worker process to reach the state it needs: a bound on a poll, never slept
PROCESS_BOUND_SECONDS = 120


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics__endpoint_counts_a_constructed_workload_exactly(db: Database) -> None:
    worker, _ = run_workload(db)
    server = serve(db, port=0, refresh=0)
    assert server is not None
    try:
        m = scrape(server.port)
    finally:
        server.close()
    me = {"worker": worker.worker_id}
    attempts = "recon_job_attempts_total"
    assert value(m, attempts, **me, queue="default", kind="pay", outcome="succeeded", error_kind="") == 7
    assert value(m, attempts, **me, outcome="snoozed", error_kind="") == 1
    assert value(m, attempts, **me, outcome="retried", error_kind="rate_limited") == 2
    assert value(m, attempts, **me, outcome="dead", error_kind="validation") == 1
    assert value(m, attempts, **me) == 11  # the stale finish is not an ended attempt
    assert value(m, "recon_job_claims_total", **me) == 12
    assert value(m, "recon_stale_finishes_total", **me) == 1
    assert value(m, "recon_lease_expirations_total", **me) == 1  # the ghost, rescued by this worker's watcher
    assert value(m, "recon_leases_lost_total", **me) == 0
    # handler run times: every attempt that ended (11); attempts per success: 3 x 1 and 4 x 2
    assert value(m, "recon_job_duration_seconds_count", **me, queue="default", kind="pay") == 11
    assert value(m, "recon_job_duration_seconds_bucket", **me, kind="pay", le="+Inf") == 11
    assert value(m, "recon_job_attempts_per_success_count", **me) == 7
    assert value(m, "recon_job_attempts_per_success_sum", **me) == 11
    assert value(m, "recon_job_attempts_per_success_bucket", **me, le="1.0") == 3
    assert value(m, "recon_job_attempts_per_success_bucket", **me, le="2.0") == 7
    # PSP: 3 ok + 1 snoozed-then-ok + 2 x 2 throttled-then-ok + 1 ghost = 9 calls, 2 of them 429s
    psp = {"psp": "fakepsp", "operation": "create_payment"}
    assert value(m, "recon_psp_request_duration_seconds_count", **me, **psp) == 9
    assert value(m, "recon_psp_throttles_total", **me, psp="fakepsp") == 2
    # from the database at scrape time: the stolen job (leased by the thief), two future jobs, one idle
    depth = "recon_queue_depth"
    assert value(m, depth, queue="side", state="leased") == 1
    assert value(m, depth, queue="default", kind="pay", tenant="t1", priority="0", state="pending") == 1
    assert value(m, depth, queue="default", kind="pay", tenant="t2", priority="5", state="pending") == 1
    assert value(m, depth, queue="idle", kind="sync", tenant="", state="runnable") == 1
    assert value(m, depth) == 4
    assert value(m, "recon_queue_oldest_runnable_age_seconds", queue="idle") > 0
    assert value(m, "recon_queue_oldest_runnable_age_seconds", queue="default") == 0
    # the worker stopped cleanly: its counters stay within the window, it is not live
    assert value(m, "recon_workers_live") == 0 and value(m, "recon_worker_utilisation_ratio") == 0
    assert value(m, "recon_payments_unfinished", currency="EUR", age="lt_1h") == 1
    assert value(m, "recon_payments_unfinished", currency="EUR", age="1h_1d") == 1
    assert value(m, "recon_payments_unfinished", currency="USD", age="1d_7d") == 1
    assert value(m, "recon_money_at_risk_minor_units", currency="EUR") == 1250
    assert value(m, "recon_money_at_risk_minor_units", currency="USD") == 700
    assert value(m, "recon_database_up") == 1


def test_metrics__utilisation_and_live_workers_follow_the_workers_rows(db: Database) -> None:
    store = JobStore(db)
    release = threading.Event()
    handlers = Handlers()
    handlers.register("block", lambda job, lease: release.wait(10) and None)
    Client(store, Settings()).enqueue_many([JobSpec("block") for _ in range(2)])
    worker = Worker(store, handlers, config=ENGINE, policy=RetryPolicy(Settings().retry),
                    observer=ProcessMetrics(), presence_interval=0.05)
    # a second process's row, long silent: counted nowhere in the live gauges
    PoolStore(db).upsert_worker(WorkerPresence(id="old-host:9:abc", host="old-host", pid=9, queues=("default",),
                                               slots=8, busy_slots=8, counters={"claimed": 40}))
    with db.begin() as conn:
        import sqlalchemy as sa

        old = db.to_db(db.clock.now().replace(year=2000))
        conn.execute(sa.text("UPDATE workers SET last_seen_at = :t WHERE id = 'old-host:9:abc'"), {"t": old})
    thread = threading.Thread(target=worker.run)
    thread.start()
    server = serve(db, port=0, refresh=0)
    assert server is not None
    try:
        wait_until(lambda: value(scrape(server.port), "recon_worker_busy_slots") == 2, 10, "2 busy slots")
        m = scrape(server.port)
        assert value(m, "recon_workers_live") == 1
        assert value(m, "recon_worker_slots", worker=worker.worker_id) == 4
        # a worker sizing itself starts with a claim of a job per thread and no prefetch (durations unknown; no
        # handler has returned yet)
        assert value(m, "recon_worker_claim_batch", worker=worker.worker_id) == 4
        assert value(m, "recon_worker_prefetch", worker=worker.worker_id) == 0
        assert value(m, "recon_worker_utilisation_ratio") == 0.5
        assert value(m, "recon_job_claims_total", worker="old-host:9:abc") == 0  # outside the live window
        release.set()
        worker.request_stop()
        thread.join(10)
        m = scrape(server.port)
        assert value(m, "recon_workers_live") == 0
        assert value(m, "recon_job_attempts_total", worker=worker.worker_id, outcome="succeeded") == 2
    finally:
        release.set()
        server.close()


def test_metrics__one_worker_endpoint_shows_every_process_of_the_pool(db: Database, db_url: str,
                                                                    subprocess_env: dict[str, str]) -> None:
    """Two `recon worker` processes given the same port: the first serves, the second carries on without
    an endpoint, and the first's endpoint counts the second's work too."""
    n = 20
    Client(JobStore(db), Settings()).enqueue_many([JobSpec("record") for _ in range(n)])
    port = free_port()
    args = ["--database-url", db_url, "--log-level", "INFO", "worker", "--handlers",
            "tests.integration.handlers", "--metrics-port", str(port), "--heartbeat", "0.1",
            "--lease-ttl", "5", "--concurrency", "2"]
    first = subprocess.Popen([sys.executable, "-m", "recon", *args], env=subprocess_env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # each wait is on the condition it needs, bounded generously (PROCESS_BOUND_SECONDS): a loaded machine
        # (load 17+) took longer than the 20 s these waits had to start a worker process
        wait_until(lambda: _answers(port), PROCESS_BOUND_SECONDS, "the first worker's endpoint")
        second = subprocess.run([sys.executable, "-m", "recon", *args, "--burst"], env=subprocess_env,
                                text=True, capture_output=True, timeout=PROCESS_BOUND_SECONDS)
        assert second.returncode == 0, second.stderr
        assert "another process may serve the pool's metrics" in second.stderr
        # the endpoint reads the database at most every REFRESH_SECONDS: wait for the second's final row
        seen: list[object] = []  # what the endpoint said last, for the message should a wait time out

        def said(found: object) -> object:
            seen[:] = [found]
            return found

        try:
            wait_until(lambda: len(said(_workers(scrape(port)))) == 2,  # type: ignore[arg-type]
                       PROCESS_BOUND_SECONDS, "both workers on the endpoint")
            wait_until(lambda: said(value(scrape(port), "recon_job_attempts_total", outcome="succeeded")) == n,
                       PROCESS_BOUND_SECONDS, f"{n} successes on the endpoint")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the endpoint said {seen}; the second worker's stderr: "
                                 f"{second.stderr[-2000:]}") from None
        m = scrape(port)
        assert value(m, "recon_job_claims_total") == n
        assert value(m, "recon_workers_live") == 1  # the burst worker stopped
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=PROCESS_BOUND_SECONDS)
    assert first.returncode == 0, err


def _workers(samples: Samples) -> set[str]:
    return {dict(labels)["worker"] for (name, labels) in samples if name == "recon_job_claims_total"}


def _answers(port: int) -> Any:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_metrics__the_gauges_recon_stats_also_shows_are_its_document_s_numbers(db: Database, db_url: str) -> None:
    """The endpoint and `recon stats --json` read the same sections of one document (recon.overview): live
    workers, utilisation (1 busy slot of 3 is 0.3333 in both, never 0.333333… in one of them), money at risk, the
    unfinished payments, the review queue and the oldest runnable job's age."""
    run_workload(db)
    PoolStore(db).upsert_worker(WorkerPresence(id="h:1:x", host="h", pid=1, queues=("default",), slots=3,
                                               busy_slots=1, counters={}))
    with db.begin() as conn:
        # in review for 3 days: past the 2-day SLA of a reason of no known kind, so overdue
        since = db.to_db(db.clock.now().replace(microsecond=123456) - timedelta(days=3))
        conn.execute(sa.text("UPDATE payments SET status = 'needs_review', review_since = :t "
                             "WHERE merchant_reference = 'p-2h'"), {"t": since})
    server = serve(db, port=0, refresh=0)
    assert server is not None
    app = App(database_url=db_url)
    try:
        doc = stats_document(app, window=timedelta(hours=1), live_window=timedelta(seconds=30))
        m = scrape(server.port)
    finally:
        server.close()
        app.close()
    assert value(m, "recon_workers_live") == doc["workers"]["live"] == 1
    assert value(m, "recon_worker_utilisation_ratio") == doc["workers"]["utilisation"] == 0.3333
    for currency, amount in doc["payments"]["money_at_risk"].items():
        assert value(m, "recon_money_at_risk_minor_units", currency=currency) == amount
    for row in doc["payments"]["unfinished"]:
        assert value(m, "recon_payments_unfinished", currency=row["currency"], age=row["age"]) == row["count"]
    assert value(m, "recon_payments_needs_review") == doc["review"]["needs_review"] == 1
    assert value(m, "recon_review_overdue") == doc["review"]["overdue"] == 1
    # the scrape came a moment after the document: the same age, rounded as the document rounds it
    age = value(m, "recon_review_oldest_age_seconds")
    assert age == round(age, 3) and 0 <= age - doc["review"]["oldest_age_seconds"] < 5
    idle = value(m, "recon_queue_oldest_runnable_age_seconds", queue="idle")
    assert 0 <= idle - doc["queues"]["idle"]["oldest_runnable_age_seconds"] < 5
