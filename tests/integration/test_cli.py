from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recon import Client, JobSpec, JobState, JobStore, Settings
from recon.db.database import Database
from tests.cli import Runner


def test_cli__db_upgrade_is_idempotent(db_url: str, recon: Runner) -> None:
    for _ in range(2):
        r = recon("db", "upgrade", db_url=db_url)
        assert r.returncode == 0, r.stderr
        assert "up to date" in r.stdout


def test_cli__jobs_list_show_retry_cancel(db: Database, db_url: str, staff: object, recon: Runner) -> None:
    store = JobStore(db)
    client = Client(store, Settings())
    a = client.enqueue("charge", {"payment": 1}, max_attempts=1)
    b = client.enqueue("charge", {"payment": 2})
    [_job] = store.claim(worker="w", queues=["default"], n=1, ttl=30)
    from recon.rows import Finish

    store.finish(worker="w", finishes=[Finish(id=a, attempt=1, state="dead", outcome="dead", error_kind="validation",
                                              error="amount must be positive")])
    listed = json.loads(recon("jobs", "list", "--state", "dead", "--json", db_url=db_url).stdout)
    assert [j["id"] for j in listed["jobs"]] == [a]
    shown = json.loads(recon("jobs", "show", str(a), "--json", db_url=db_url).stdout)
    assert shown["job"]["state"] == "dead"
    assert shown["attempts"][0]["error"] == "amount must be positive"
    human = recon("jobs", "show", str(a), db_url=db_url)
    assert human.returncode == 0 and "amount must be positive" in human.stdout
    assert recon("jobs", "retry", str(a), db_url=db_url).returncode == 2  # who retries?
    assert recon("jobs", "retry", str(a), "--by", "vic", db_url=db_url).returncode == 2  # a viewer
    assert recon("jobs", "retry", str(a), "--by", "ann", db_url=db_url).returncode == 0
    assert store.get(a).state is JobState.RUNNABLE  # type: ignore[union-attr]
    assert recon("jobs", "cancel", str(b), "--by", "ann", db_url=db_url).returncode == 0
    assert store.get(b).state is JobState.CANCELED  # type: ignore[union-attr]
    again = recon("jobs", "cancel", str(b), "--by", "ann", db_url=db_url)
    assert again.returncode == 2 and "only unfinished jobs can be canceled" in again.stderr
    missing = recon("jobs", "show", "999999", db_url=db_url)
    assert missing.returncode == 2 and missing.stderr.strip() == "recon: job 999999 not found"
    table = recon("jobs", "list", db_url=db_url)
    assert table.returncode == 0 and "charge" in table.stdout


def test_cli__stats_json(db: Database, db_url: str, recon: Runner) -> None:
    client = Client(JobStore(db), Settings())
    client.enqueue("k")
    client.enqueue("k", queue="other")
    doc = json.loads(recon("stats", "--json", db_url=db_url).stdout)
    assert doc["queues"]["default"]["depth"] == {"runnable": 1}
    assert doc["queues"]["other"]["oldest_runnable_age_seconds"] >= 0
    assert doc["lease_expirations"] == 0
    assert recon("stats", db_url=db_url).returncode == 0


@pytest.mark.parametrize(("args", "message"), [
    (["worker", "--lease-ttl", "soon"], "Invalid value for '--lease-ttl': 'soon' is not a duration"),
    (["worker", "--lease-ttl", "10", "--heartbeat", "20"], "heartbeat_interval_seconds: must be shorter"),
    (["worker", "--handlers", "no.such.module:handlers"], "--handlers 'no.such.module:handlers': cannot import"),
    (["jobs", "list", "--state", "lost"], "Invalid value for '--state'"),
])
def test_cli__bad_usage_exits_2_with_one_clear_line(db_url: str, args: list[str], message: str, recon: Runner) -> None:
    r = recon(*args, db_url=db_url)
    assert r.returncode == 2
    assert message in r.stderr


def test_cli__bad_database_url_and_config(tmp_path: Path, recon: Runner) -> None:
    r = recon("stats", db_url="mysql://x/y")
    assert r.returncode == 2 and "backend 'mysql' is not supported" in r.stderr
    r = recon("stats", db_url=f"sqlite:///{tmp_path}/missing-dir/x.db")
    assert r.returncode == 2 and "does not exist" in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[engine]\nconcurrency = 0\n")
    r = recon("--config", str(bad), "stats", db_url=f"sqlite:///{tmp_path}/x.db")
    assert r.returncode == 2 and r.stderr.strip().endswith("engine.concurrency: must be >= 1, got 0")


def test_cli__psp_sandbox_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    import signal
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "recon", "psp-sandbox", "--port", str(port), "--state-file",
                             str(tmp_path / "sandbox.db"), "--rate-limit", "1000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert f"listening on http://127.0.0.1:{port}" in proc.stdout.readline()
        body = {"merchant_reference": "r-1", "amount": 1250, "currency": "EUR"}
        key = {"Authorization": "Bearer recon_sandbox_test_key"}  # the native flavour's documented test key
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=key) as http:
            created = http.post("/v1/payments", json=body, headers={"Idempotency-Key": "k-1"})
            assert created.status_code == 201 and created.json()["amount"] == 1250
            assert http.get("/_admin/faults").json()["rate_limit"] == 1000
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0


def test_cli__psp_sandbox_bad_fault_value_exits_2(recon: Runner) -> None:
    r = recon("psp-sandbox", "--rate-500", "1.5")
    assert r.returncode == 2 and "rate_500 must be a probability" in r.stderr


def test_cli__worker_prefetch_runs_every_job_once(db: Database, db_url: str, subprocess_env: dict[str, str],
                                                  tmp_path: Path, recon: Runner) -> None:
    log = tmp_path / "runs.log"
    ids = Client(JobStore(db), Settings()).enqueue_many(
        [JobSpec("record", {"log": str(log)}) for _ in range(40)])
    r = recon("worker", "--burst", "--concurrency", "2", "--prefetch", "6", "--handlers", "tests.integration.handlers",
              db_url=db_url, env=subprocess_env)
    assert r.returncode == 0, r.stderr
    runs = [int(line.split()[0]) for line in log.read_text().splitlines()]
    assert sorted(runs) == ids  # each once
    bad = recon("worker", "--burst", "--prefetch", "-1", db_url=db_url, env=subprocess_env)
    assert bad.returncode == 2 and "--prefetch" in bad.stderr
