"""Pruning finished jobs: `recon jobs prune`, recon.engine.pruner, and the worker's pruner thread."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from recon import (
    Client,
    FixedClock,
    Job,
    JobSpec,
    JobState,
    JobStore,
    Lease,
    Retry,
    RetryPolicy,
    Settings,
    connect,
)
from recon.app import App
from recon.config import BackoffConfig, EngineConfig, load_settings
from recon.db.database import Database
from recon.engine.handlers import Handlers
from recon.engine.periodic import Periodic
from recon.engine.pruner import Pruner
from recon.engine.worker import Worker
from recon.errors import ConfigError
from recon.rows import Finish, JobFilter
from tests.cli import Runner

NOW = datetime.now(UTC)


def count(db: Database, table: str, where: str = "TRUE") -> int:
    with db.begin() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE {where}")).scalar_one())


def finished_job(db_url: str, *, at: datetime, state: str, replayed: bool = False) -> int:
    """A job that ended ``state`` at ``at`` (with one attempt row; two and a replay with ``replayed``)."""
    clock = FixedClock(at)
    db = connect(db_url, clock=clock)
    try:
        store = JobStore(db)
        job_id = Client(store, Settings()).enqueue("k", queue=f"q-{state}")
        if state == "canceled":
            assert store.cancel(job_id) == "canceled"
            return job_id
        attempts = 2 if replayed else 1
        for attempt in range(1, attempts + 1):
            [job] = store.claim(worker="w", queues=[f"q-{state}"], n=1, ttl=30)
            store.finish(worker="w",
                         finishes=[Finish(id=job.id, attempt=attempt, state=state, outcome=state)])
            if replayed and attempt == 1:
                batch = store.dead_letters.replay_dead(filters=JobFilter(), after_id=job_id - 1, limit=1, budget=1)
                assert batch.replayed
        return job_id
    finally:
        db.dispose()


def test_prune__deletes_exactly_the_finished_jobs_older_than_the_cutoff(db: Database, db_url: str,
                                                                        recon: Runner) -> None:
    store = JobStore(db)
    ends = ("succeeded", "dead", "canceled")
    old = [finished_job(db_url, at=NOW - timedelta(days=10), state=s) for s in ends]
    old.append(finished_job(db_url, at=NOW - timedelta(days=9), state="dead", replayed=True))
    recent = [finished_job(db_url, at=NOW - timedelta(days=2), state=s) for s in ends]
    # unfinished jobs created long ago: never pruned, whatever their age
    ancient = connect(db_url, clock=FixedClock(NOW - timedelta(days=30)))
    try:
        old_store, client = JobStore(ancient), Client(JobStore(ancient), Settings())
        runnable = client.enqueue("k", queue="u")
        pending = client.enqueue("k", queue="u", run_at=NOW + timedelta(days=1))
        leased, retryable = client.enqueue("k", queue="v"), client.enqueue("k", queue="v")
        claimed = old_store.claim(worker="w", queues=["v"], n=2, ttl=3600 * 24 * 60)
        later = 3600.0 * 24 * 60
        old_store.finish(worker="w", finishes=[Finish(id=retryable, attempt=1, state="retryable",
                                                      outcome="retried", delay=later, error_kind="bug")])
    finally:
        ancient.dispose()
    assert {j.id for j in claimed} == {leased, retryable}
    unfinished = [runnable, pending, leased, retryable]
    assert count(db, "job_replays") == 1

    dry = json.loads(recon("jobs", "prune", "--older-than", "7d", "--dry-run", "--json", db_url=db_url,
                           log_level="WARNING").stdout)
    assert dry == {"dry_run": True, "older_than_seconds": 7 * 86400.0, "would_delete": 4,
                   "by_state": {"canceled": 1, "dead": 2, "succeeded": 1}}
    assert count(db, "jobs") == 11

    r = recon("jobs", "prune", "--older-than", "7d", "--batch", "3", "--json", db_url=db_url, log_level="WARNING")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)

    assert (doc["deleted"], doc["attempts_deleted"], doc["batches"]) == (4, 4, 2)
    assert store.get_many(old) == []
    assert {j.id for j in store.get_many(recent + unfinished)} == set(recent + unfinished)
    assert [j.state for j in store.get_many(unfinished)] == [JobState.RUNNABLE, JobState.PENDING,
                                                              JobState.LEASED, JobState.RETRYABLE]
    ids = ", ".join(map(str, old))
    assert count(db, "job_attempts", f"job_id IN ({ids})") == 0
    assert count(db, "job_replays") == 0  # cascaded with its job
    assert [a.outcome for a in store.attempts(retryable)] == ["retried"]
    assert count(db, "job_attempts") == 3  # recent succeeded and dead, and the retried attempt
    human = recon("jobs", "prune", "--older-than", "1d", db_url=db_url, log_level="WARNING")
    assert human.returncode == 0 and "pruned 3 jobs finished more than 1d ago" in human.stdout
    assert {j.id for j in store.dead_letters.list_jobs_filtered(filters=JobFilter())} == set(unfinished)


def test_prune__under_concurrent_workers_loses_no_unfinished_job(db: Database) -> None:
    """A worker drains jobs (some fail once and retry) while a pruner with --older-than 0 runs again and
    again: every job runs to success exactly once, and only finished jobs are ever deleted."""
    store = JobStore(db)
    n, waves = 600, 6
    runs: Counter[tuple[int, int]] = Counter()
    # every fifth job fails its first attempt and succeeds on the second
    expected = Counter([(i, 1) for i in range(n)] + [(i, 2) for i in range(0, n, 5)])
    lock = threading.Lock()

    def handle(job: Job, lease: Lease) -> Retry | None:
        with lock:
            runs[(job.payload["i"], lease.attempt)] += 1
        if job.payload["i"] % 5 == 0 and lease.attempt == 1:
            return Retry(error_kind="network", error="flaky")
        return None

    handlers = Handlers()
    handlers.register("k", handle)
    fast = {kind: BackoffConfig(base_seconds=0.01, cap_seconds=0.05, max_attempts=5)
            for kind in ("default", "network")}
    config = EngineConfig(concurrency=4, poll_interval_seconds=0.01, claim_batch_size=8, finish_batch_size=20)
    worker = Worker(store, handlers, config=config, policy=RetryPolicy(fast), run_watcher=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    stop = threading.Event()
    pruner = Pruner(store, older_than=timedelta(0), batch=25)
    passes = Counter[str]()

    def prune_repeatedly() -> None:
        while not stop.is_set():
            passes["runs"] += 1
            pruner.run_once()

    prune_thread = threading.Thread(target=prune_repeatedly, daemon=True)
    thread.start()
    prune_thread.start()
    client = Client(store, Settings())
    try:
        for wave in range(waves):
            client.enqueue_many([JobSpec("k", {"i": wave * (n // waves) + i}) for i in range(n // waves)])
            time.sleep(0.05)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(runs.values()) < len(expected):
            time.sleep(0.05)
    finally:
        worker.request_stop()
        thread.join(timeout=30)
        stop.set()
        prune_thread.join(timeout=30)

    assert runs == expected  # every job ran to success, each attempt exactly once
    assert pruner.pruned > 0 and passes["runs"] > 1  # the pruner really ran alongside
    # whatever is left is finished (and prunable); nothing unfinished was lost, and no history is orphaned
    left = store.dead_letters.list_jobs_filtered(filters=JobFilter(), limit=n)
    assert {j.state for j in left} <= {JobState.SUCCEEDED}
    pruner.run_once()
    assert count(db, "jobs") == 0 and count(db, "job_attempts") == 0
    assert pruner.pruned == n


def test_prune__its_loop_prunes_then_stops(db: Database, db_url: str) -> None:
    finished_job(db_url, at=NOW - timedelta(hours=2), state="succeeded")
    pruner = Pruner(JobStore(db), older_than=timedelta(hours=1))
    stop = threading.Event()
    thread = Periodic("pruner", pruner.run_once, interval=0.05).start(stop)
    deadline = time.monotonic() + 10
    while pruner.pruned == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and pruner.pruned == 1 and count(db, "jobs") == 0


def test_prune__worker_command_prunes_when_configured(db: Database, db_url: str,
                                                     subprocess_env: dict[str, str], tmp_path: Path,
                                                     recon: Runner) -> None:
    old = finished_job(db_url, at=NOW - timedelta(days=3), state="succeeded")
    store = JobStore(db)
    sleeper = Client(store, Settings()).enqueue("sleep", {"log": str(tmp_path / "runs.log"), "seconds": 1.0})
    env = {**subprocess_env, "RECON_ENGINE_PRUNE_OLDER_THAN": "1d",
           "RECON_ENGINE_PRUNE_INTERVAL_SECONDS": "0.1"}
    r = recon("worker", "--burst", "--handlers", "tests.integration.handlers", db_url=db_url, env=env,
              log_level="WARNING")
    assert r.returncode == 0, r.stderr
    assert store.get(old) is None
    job = store.get(sleeper)
    assert job is not None and job.state is JobState.SUCCEEDED  # finished just now: younger than a day


def test_prune__every_worker_the_app_builds_prunes_when_configured(db: Database, db_url: str, tmp_path: Path) -> None:
    """`recon sweep` and the demo run their workers through App.worker, as `recon worker` does: each prunes when
    ``engine.prune_older_than`` is set (only `recon worker` used to)."""
    old = finished_job(db_url, at=NOW - timedelta(days=3), state="succeeded")
    config = tmp_path / "recon.toml"
    config.write_text('[engine]\nprune_older_than = "1d"\nprune_interval_seconds = 3600\n', encoding="utf-8")
    store = JobStore(db)
    handlers = Handlers()

    @handlers.register("wait_for_prune")
    def wait_for_prune(job: Job, lease: Lease) -> None:  # keeps the burst run alive until the pruner's first pass
        deadline = time.monotonic() + 10
        while store.get(old) is not None and time.monotonic() < deadline:
            time.sleep(0.02)

    waiter = Client(store, Settings()).enqueue("wait_for_prune", queue="sweep-like")
    app = App(database_url=db_url, config_path=str(config))
    try:
        worker = app.worker(["sweep-like"], handlers=handlers)
        assert [loop.name for loop in worker.loops] == ["heartbeat", "presence", "watcher", "sizer", "sealer", "pruner"]
        worker.run(burst=True)
    finally:
        app.close()
    assert store.get(old) is None
    job = store.get(waiter)
    assert job is not None and job.state is JobState.SUCCEEDED  # finished just now: younger than a day


def test_prune__config_takes_a_duration_or_seconds(tmp_path: Path) -> None:
    assert Settings().engine.prune_after is None  # off by default
    path = tmp_path / "r.toml"
    cases = (('"7d"', timedelta(days=7)), ("3600", timedelta(hours=1)), ('"0"', None), ('""', None))
    for value, expected in cases:
        path.write_text(f"[engine]\nprune_older_than = {value}\nprune_interval_seconds = 60\n")
        assert load_settings(path, environ={}).engine.prune_after == expected
    env = {"RECON_ENGINE_PRUNE_OLDER_THAN": "12h"}
    assert load_settings(None, environ=env).engine.prune_after == timedelta(hours=12)
    path.write_text('[engine]\nprune_older_than = "soon"\n')
    with pytest.raises(ConfigError, match=r"engine.prune_older_than: 'soon' is not a duration"):
        load_settings(path, environ={})
    with pytest.raises(ConfigError, match=r"engine.prune_interval_seconds: must be > 0"):
        replace(EngineConfig(), prune_interval_seconds=0).validate()


@pytest.mark.parametrize(("args", "message"), [
    (["jobs", "prune", "--older-than", "soon"], "Invalid value for '--older-than': 'soon' is not a duration"),
    (["jobs", "prune"], "Missing option '--older-than'"),
    (["jobs", "prune", "--older-than", "1d", "--batch", "0"], "Invalid value for '--batch'"),
])
def test_prune__bad_usage_exits_2_with_one_error_line(db_url: str, args: list[str], message: str,
                                                      recon: Runner) -> None:
    r = recon(*args, db_url=db_url, log_level="WARNING")
    assert r.returncode == 2
    errors = r.stderr.strip().splitlines()  # one line: "recon jobs …: Invalid value for …"
    assert len(errors) == 1 and errors[0].startswith("recon jobs ") and message in errors[0], r.stderr

