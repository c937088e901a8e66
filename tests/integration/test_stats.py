"""`recon stats [--json]`: the pool from the database, against a workload with known counts (both
databases)."""

from __future__ import annotations

import json
from datetime import timedelta

import sqlalchemy as sa

from recon.db.database import Database
from recon.db.pool_store import PoolStore
from recon.pool_rows import WorkerPresence
from tests.cli import Runner
from tests.integration.metrics_workload import run_workload


def age_worker_row(db: Database, worker_id: str, *, by: timedelta) -> None:
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE workers SET last_seen_at = :t WHERE id = :id"),
                     {"t": db.to_db(db.clock.now() - by), "id": worker_id})


def test_stats__json_reports_a_constructed_workload(db: Database, db_url: str, recon: Runner) -> None:
    worker, _ = run_workload(db)
    pool = PoolStore(db)
    pool.upsert_worker(WorkerPresence(id="gone:7:aaa", host="gone", pid=7, queues=("charges",), slots=8,
                                       busy_slots=3, counters={"claimed": 5, "stale_finishes": 4}))
    age_worker_row(db, "gone:7:aaa", by=timedelta(hours=3))  # crashed hours ago: listed, not counted
    r = recon("stats", "--json", db_url=db_url)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # the keys `recon stats` always had
    assert doc["attempts"] == {"succeeded": 7, "snoozed": 1, "retried": 2, "dead": 1, "lease_expired": 1}
    assert doc["lease_expirations"] == 1  # the ghost, rescued by the worker's watcher
    assert doc["retry_rate"] == round(2 / 12, 4) and doc["dead_rate"] == round(1 / 12, 4)
    assert doc["queues"]["idle"]["depth"] == {"runnable": 1}
    assert doc["queues"]["idle"]["oldest_runnable_age_seconds"] > 0
    # depth by queue, kind, tenant and priority (unfinished jobs only)
    assert sorted((d["queue"], d["kind"], d["tenant"], d["priority"], d["state"], d["jobs"])
                  for d in doc["depth_detail"]) == [
        ("default", "pay", "t1", 0, "pending", 1), ("default", "pay", "t2", 5, "pending", 1),
        ("idle", "sync", "", 0, "runnable", 1), ("side", "pay", "t1", 0, "leased", 1)]
    pay = doc["kinds"]["pay"]
    assert pay["attempts"] == doc["attempts"]
    assert (pay["successes"], pay["attempts_per_success"], pay["max_attempts_per_success"]) == (
        7, round(11 / 7, 4), 2)
    durations = pay["duration_seconds"]
    assert durations["count"] == 11  # lease_expired attempts time the lease, not the work
    assert 0 <= durations["p50"] <= durations["p95"] <= durations["max"]
    assert doc["attempts_per_success"] == round(11 / 7, 4)
    # the workers table: counters of the workers seen within the window; every row listed
    assert doc["stale_finishes"] == 1 and doc["leases_lost"] == 0
    workers = {w["id"]: w for w in doc["workers"]["list"]}
    assert workers[worker.worker_id]["status"] == "stopped" and workers[worker.worker_id]["claimed"] == 12
    assert workers[worker.worker_id]["lease_expirations"] == 1
    assert workers["gone:7:aaa"]["status"] == "dead" and workers["gone:7:aaa"]["stale_finishes"] == 4
    assert (doc["workers"]["live"], doc["workers"]["slots"], doc["workers"]["utilisation"]) == (0, 0, 0.0)
    assert doc["psp"]["fakepsp"]["requests"] == 9 and doc["psp"]["fakepsp"]["throttles"] == 2
    latency = doc["psp"]["fakepsp"]["latency_seconds"]
    assert latency["p50"] is not None and latency["p50"] <= latency["p95"]
    assert doc["payments"]["unfinished_by_age"] == {"1d_7d": 1, "1h_1d": 1, "lt_1h": 1}
    assert doc["payments"]["money_at_risk"] == {"EUR": 1250, "USD": 700}
    human = recon("stats", db_url=db_url)
    assert human.returncode == 0, human.stderr
    for text in ("job kinds", "stale finishes 1", "fakepsp: 9 requests, 2 throttled", "12.50 EUR", "7.00 USD",
                 "dead"):
        assert text in human.stdout


def test_stats__live_workers_give_utilisation(db: Database, db_url: str, recon: Runner) -> None:
    pool = PoolStore(db)
    for i, busy in enumerate((2, 4)):
        pool.upsert_worker(WorkerPresence(id=f"h:{i}:x", host="h", pid=i, queues=("default",), slots=4,
                                           busy_slots=busy, counters={"stale_finishes": 1}))
    pool.upsert_worker(WorkerPresence(id="h:9:x", host="h", pid=9, queues=("default",), slots=4,
                                       busy_slots=0, counters={}, stopped=True))
    doc = json.loads(recon("stats", "--json", db_url=db_url).stdout)
    w = doc["workers"]
    assert (w["live"], w["slots"], w["busy_slots"], w["utilisation"]) == (2, 8, 6, 0.75)
    assert sorted(r["status"] for r in w["list"]) == ["live", "live", "stopped"]
    assert doc["stale_finishes"] == 2
    age_worker_row(db, "h:0:x", by=timedelta(minutes=1))  # silent past the live window: dead, not live
    doc = json.loads(recon("stats", "--json", "--live-window", "30s", db_url=db_url).stdout)
    assert doc["workers"]["live"] == 1 and doc["workers"]["utilisation"] == 1.0


def test_stats__worker_rows_are_upserted_and_pruned(db: Database) -> None:
    store = PoolStore(db)
    row = WorkerPresence(id="h:1:x", host="h", pid=1, queues=("a", "b"), slots=2, busy_slots=1,
                         counters={"n": 1})
    store.upsert_worker(row)
    store.upsert_worker(WorkerPresence(**{**{f: getattr(row, f) for f in row.__slots__}, "busy_slots": 2,
                                          "counters": {"n": 2}}))
    [got] = store.pool_snapshot(workers_within=None)["workers"]
    assert (got.queues, got.busy_slots, got.counters, got.stopped_at) == (("a", "b"), 2, {"n": 2}, None)
    assert got.started_at <= got.last_seen_at
    age_worker_row(db, "h:1:x", by=timedelta(days=2))
    assert store.prune_workers(older_than=timedelta(days=1)) == 1
    assert store.pool_snapshot(workers_within=None)["workers"] == []
