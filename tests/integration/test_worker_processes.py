"""Worker processes under real signals: exactly-once draining, SIGKILL recovery, poison jobs, SIGSTOP
fencing, and SIGTERM draining. Each test bounds itself in jobs and seconds."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from recon import Client, JobSpec, JobState, JobStore, Settings
from recon.db.database import Database

pytestmark = pytest.mark.slow


def start_worker(url: str, env: dict[str, str], *args: str, **extra_env: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "recon", "--database-url", url, "--log-level", "WARNING", "worker",
           "--handlers", "tests.integration.handlers", *args]
    return subprocess.Popen(cmd, env={**env, **extra_env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def log_lines(path: Path) -> list[tuple[int, int, int]]:
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()]  # type: ignore[misc]


def worker_rows(db: Database) -> int:
    """Worker processes that published their presence (at start) and have not stopped."""
    import sqlalchemy as sa

    with db.begin() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM workers WHERE stopped_at IS NULL")).scalar_one())


def unfinished(db: Database) -> int:
    import sqlalchemy as sa

    with db.begin() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM jobs WHERE state <> 'succeeded'")).scalar_one())


def test_processes__several_workers_run_every_job_exactly_once(db: Database, db_url: str, tmp_path: Path,
                                                             subprocess_env: dict[str, str]) -> None:
    log = tmp_path / "runs.log"
    n = 1000
    store = JobStore(db)
    # the three workers are running before the jobs arrive: started with the jobs already queued (and --burst),
    # the first worker up drained all of them on a loaded machine before the others had imported recon
    workers = [start_worker(db_url, subprocess_env, "--concurrency", "4") for _ in range(3)]
    try:
        wait_for(lambda: worker_rows(db) >= 3, 60, "the three workers to start")
        # jobs of ~50 ms (lease.wait's step)
        Client(store, Settings()).enqueue_many([JobSpec("sleep", {"log": str(log), "seconds": 0.001})
                                                for _ in range(n)])
        wait_for(lambda: len(log_lines(log)) >= n and unfinished(db) == 0, 120, "every job to run")
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
    for w in workers:
        _, err = w.communicate(timeout=60)
        assert w.returncode == 0, err
    runs = log_lines(log)
    counts = Counter(job_id for job_id, _, _ in runs)
    assert len(counts) == n and set(counts.values()) == {1}
    assert len({pid for _, _, pid in runs}) >= 2  # the work really was shared
    from tests.jobs import iter_all_jobs

    assert {j.state for j in iter_all_jobs(store)} == {JobState.SUCCEEDED}
    with db.begin() as conn:
        import sqlalchemy as sa

        rows = conn.execute(sa.text("SELECT outcome, attempt, count(*) FROM job_attempts GROUP BY outcome, attempt"))
        assert [tuple(r) for r in rows] == [("succeeded", 1, n)]


def test_processes__sigkill_mid_job_runs_again_after_lease_expiry(db: Database, db_url: str, tmp_path: Path,
                                                                  subprocess_env: dict[str, str]) -> None:
    log = tmp_path / "runs.log"
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("crash_once", {"log": str(log)})
    fast = {"RECON_ENGINE_WATCHER_INTERVAL_SECONDS": "0.2", "RECON_ENGINE_POLL_INTERVAL_SECONDS": "0.1"}
    first = start_worker(db_url, subprocess_env, "--lease-ttl", "1", **fast)
    first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    job = store.get(job_id)
    assert job is not None and job.state is JobState.LEASED  # the dead worker still "holds" it
    second = start_worker(db_url, subprocess_env, "--lease-ttl", "1", **fast)
    try:
        wait_for(lambda: store.get(job_id).state is JobState.SUCCEEDED, 20, "the job to run again")  # type: ignore[union-attr]
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=30)
    assert second.returncode == 0
    history = store.attempts(job_id)
    assert [(a.attempt, a.outcome) for a in history] == [(1, "lease_expired"), (2, "succeeded")]
    assert history[0].worker != history[1].worker
    assert [attempt for _, attempt, _ in log_lines(log)] == [1, 2]


def test_processes__a_job_that_always_kills_its_worker_ends_dead(db: Database, db_url: str, tmp_path: Path,
                                                               subprocess_env: dict[str, str]) -> None:
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("crash", {"log": str(tmp_path / "runs.log")}, max_attempts=2)
    for _ in range(2):
        w = start_worker(db_url, subprocess_env, "--lease-ttl", "0.5", "--burst")
        w.communicate(timeout=30)
        assert w.returncode == -signal.SIGKILL
        time.sleep(0.6)
        subprocess.run([sys.executable, "-m", "recon", "--database-url", db_url, "watch", "--once"],
                       env=subprocess_env, check=True, capture_output=True, timeout=30)
    job = store.get(job_id)
    assert job is not None and job.state is JobState.DEAD and job.attempts == 2
    assert [a.outcome for a in store.attempts(job_id)] == ["lease_expired", "lease_expired"]


def test_processes__sigstopped_worker_cannot_overwrite_the_new_owner(db: Database, db_url: str, tmp_path: Path,
                                                                   subprocess_env: dict[str, str]) -> None:
    log = tmp_path / "runs.log"
    store = JobStore(db)
    job_id = Client(store, Settings()).enqueue("sleep", {"log": str(log), "seconds": 1.5})
    fast = {"RECON_ENGINE_WATCHER_INTERVAL_SECONDS": "0.2", "RECON_ENGINE_POLL_INTERVAL_SECONDS": "0.1"}
    frozen = start_worker(db_url, subprocess_env, "--lease-ttl", "1", "--heartbeat", "0.2", **fast)
    wait_for(lambda: len(log_lines(log)) == 1, 20, "the first worker to start the job")
    frozen.send_signal(signal.SIGSTOP)
    other = start_worker(db_url, subprocess_env, "--lease-ttl", "1", "--heartbeat", "0.2", **fast)
    try:
        wait_for(lambda: store.get(job_id).state is JobState.SUCCEEDED, 30, "the second worker to finish")  # type: ignore[union-attr]
    finally:
        frozen.send_signal(signal.SIGCONT)
    time.sleep(2.0)  # the resumed worker's handler ends and tries to finish
    for w in (frozen, other):
        w.send_signal(signal.SIGTERM)
    _, frozen_err = frozen.communicate(timeout=30)
    other.communicate(timeout=30)
    job = store.get(job_id)
    assert job is not None and job.state is JobState.SUCCEEDED and job.attempts == 2
    history = store.attempts(job_id)
    assert [(a.attempt, a.outcome) for a in history] == [(1, "lease_expired"), (2, "succeeded")]
    stats = json.loads(frozen_err.strip().splitlines()[-1])
    assert stats["outcomes"] == {} and stats["stale_finishes"] + stats["leases_lost"] >= 1


def test_processes__sigterm_drains_then_releases(db: Database, db_url: str, tmp_path: Path,
                                                subprocess_env: dict[str, str]) -> None:
    log = tmp_path / "runs.log"
    store = JobStore(db)
    client = Client(store, Settings())
    short = client.enqueue("sleep", {"log": str(log), "seconds": 0.8})
    w = start_worker(db_url, subprocess_env, "--drain-timeout", "10")
    wait_for(lambda: len(log_lines(log)) == 1, 20, "the job to start")
    w.send_signal(signal.SIGTERM)
    w.communicate(timeout=30)
    assert w.returncode == 0
    assert store.get(short).state is JobState.SUCCEEDED  # type: ignore[union-attr]  # finished inside the window

    long = client.enqueue("sleep", {"log": str(log), "seconds": 30})
    w = start_worker(db_url, subprocess_env, "--drain-timeout", "0.5")
    wait_for(lambda: len(log_lines(log)) == 2, 20, "the long job to start")
    started = time.monotonic()
    w.send_signal(signal.SIGTERM)
    w.communicate(timeout=30)
    assert w.returncode == 0 and time.monotonic() - started < 10
    job = store.get(long)
    assert job is not None and job.state is JobState.RUNNABLE and job.lease_owner is None
    assert [a.outcome for a in store.attempts(long)] == ["released"]
