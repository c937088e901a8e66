"""`recon psp pause | resume | status` and the PSP controls in `recon stats`, through the real command line,
with charge workers against the real sandbox on both databases."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from random import Random

import pytest

from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from recon import Client, Handlers, JobState, JobStore, RetryPolicy, Settings, Worker
from recon.classify import classify
from recon.db.control_store import ControlStore
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.payments.charge import ChargeHandler
from recon.payments.guard import PspGuard
from recon.payments.psp_limits import GuardConfig
from recon.rows import NewPayment, PaymentStatus
from tests.cli import Runner, run
from tests.integration.payment_flow import admin, fast_settings, sandbox_adapter


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "psp.db", faults=Faults(decline_amount_suffix=None)) as server:
        yield server


def no_config_env() -> dict[str, str]:
    """This process's environment without RECON_CONFIG."""
    return {k: v for k, v in os.environ.items() if k != "RECON_CONFIG"}


def status(url: str) -> dict[str, dict[str, object]]:
    result = run("psp", "status", "--json", db_url=url, log_level="ERROR", env=no_config_env())
    assert result.returncode == 0, result.stderr
    return {p["psp"]: p for p in json.loads(result.stdout)["psps"]}


def test_psp_cli__pause_snoozes_jobs_without_spending_attempts_and_resume_lets_them_run(
        db: Database, db_url: str, staff: object, sandbox: SandboxServer, recon: Runner) -> None:
    asked = recon("psp", "pause", "sandbox", "--reason", "maintenance window", "--by", "ann", db_url=db_url,
                  log_level="ERROR", env=no_config_env())
    assert asked.returncode == 1, asked.stderr  # four eyes: requested
    assert asked.stdout.startswith("psp.pause of sandbox needs a second operator: approval 1 requested by ann")
    assert status(db_url)["sandbox"]["paused"] is False
    assert recon("approvals", "approve", "1", "--by", "ann", db_url=db_url, env=no_config_env()).returncode == 2
    paused = recon("approvals", "approve", "1", "--by", "bob", db_url=db_url, log_level="ERROR",
                   env=no_config_env())
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.strip() == "approval 1 (psp.pause of sandbox) approved by bob: psp sandbox paused"
    doc = status(db_url)
    assert doc["sandbox"]["paused"] is True and doc["sandbox"]["pause_reason"] == "maintenance window"
    assert doc["sandbox"]["paused_by"] == "ann (approved by bob)" and doc["sandbox"]["paused_at"]
    assert doc["stripe"]["paused"] is False and set(doc) == {"adyen", "sandbox", "stripe"}

    ledger = PaymentStore(db)
    new = [NewPayment("shop", f"order-{i}", 1000, "EUR", "sandbox") for i in range(3)]
    ids = ledger.create(new, max_attempts=2)
    with sandbox_adapter(sandbox.url) as adapter:
        guard = PspGuard(ControlStore(db), GuardConfig(per_psp={}), rng=Random(3))
        handlers = Handlers()
        handlers.register("charge", ChargeHandler(ledger, lambda _n: adapter, guard=guard))
        settings = fast_settings()
        store = JobStore(db)

        def burst() -> None:
            Worker(store, handlers, config=settings.engine, policy=RetryPolicy(settings.retry),
                   queues=["charges"], classify_func=classify).run(burst=True)

        client = Client(store, Settings())
        for _ in range(3):  # more snoozes than the jobs' budget of 2 attempts: none of them dies
            burst()
            for job in store.list_jobs(kind="charge"):
                assert job.state is JobState.PENDING and job.last_error == "psp sandbox paused"
                client.retry(job.id)  # due again at once, so the next burst meets the pause again
        jobs = store.list_jobs(kind="charge")
        assert {(j.attempts, j.max_attempts, j.free_attempts) for j in jobs} == {(3, 5, 3)}  # 2 left, as before
        assert all([a.outcome for a in store.attempts(j.id)] == ["snoozed"] * 3 for j in jobs)
        assert {p.status for p in ledger.get_many(ids)} == {PaymentStatus.CREATED}
        assert admin(sandbox.url, "/_admin/charges")["charges"] == 0

        burst()  # the jobs are snoozed for pause_snooze_seconds (60 s): a burst finds nothing due
        resumed = recon("psp", "resume", "sandbox", "--by", "ann", db_url=db_url, log_level="ERROR",
                        env=no_config_env())
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "psp sandbox resumed; 3 waiting jobs are due now"
        doc = status(db_url)  # who resumed it; the pause it ended apart, never read as the current state
        assert (doc["sandbox"]["paused"], doc["sandbox"]["resumed_by"], doc["sandbox"]["paused_by"],
                doc["sandbox"]["paused_at"], doc["sandbox"]["pause_reason"]) == (False, "ann", None, None, None)
        last = doc["sandbox"]["last_pause"]
        assert isinstance(last, dict)
        assert (last["by"], last["reason"]) == ("ann (approved by bob)", "maintenance window")
        assert str(doc["sandbox"]["resumed_at"]) >= str(last["at"])
        for command in (("psp", "status"), ("stats",)):
            human = recon(*command, db_url=db_url, log_level="ERROR", env={**no_config_env(), "COLUMNS": "200"})
            assert human.returncode == 0, human.stderr
            [row] = [line for line in human.stdout.splitlines() if "sandbox" in line and "flowing" in line]
            assert f"flowing (resumed by ann at {str(doc['sandbox']['resumed_at'])[:19]})" in row
        burst()
        assert {j.state for j in store.list_jobs(kind="charge")} == {JobState.SUCCEEDED}
        assert {p.status for p in ledger.get_many(ids)} == {PaymentStatus.SUCCEEDED}
        assert admin(sandbox.url, "/_admin/charges")["charges"] == 3
        again = recon("psp", "resume", "sandbox", "--by", "ann", db_url=db_url, log_level="ERROR", env=no_config_env())
        assert again.returncode == 0 and again.stdout.strip() == "psp sandbox was not paused"
    assert recon("psp", "pause", "sandbox", "--reason", "second window", "--by", "ann", db_url=db_url,
                 env=no_config_env()).returncode == 1
    assert recon("approvals", "approve", "2", "--by", "bob", db_url=db_url, env=no_config_env()).returncode == 0
    doc = status(db_url)  # paused again: the earlier resume is no longer the state
    assert (doc["sandbox"]["paused"], doc["sandbox"]["paused_by"], doc["sandbox"]["pause_reason"],
            doc["sandbox"]["resumed_by"], doc["sandbox"]["resumed_at"], doc["sandbox"]["last_pause"]) == (
        True, "ann (approved by bob)", "second window", None, None, None)


def test_psp_cli__status_and_stats_show_breaker_and_cool_down(db: Database, db_url: str, recon: Runner) -> None:
    store = ControlStore(db)
    store.ensure("sandbox")
    store.cool_down("sandbox", seconds=45)
    for _ in range(2):
        store.record_failure("sandbox", threshold=2, force=False, open_for=30,
                             reason="PspTransientError: 503")
    doc = status(db_url)["sandbox"]
    assert doc["cooling_down"] is True and 40 < float(doc["cooldown_seconds_left"]) <= 45  # type: ignore[arg-type]
    assert (doc["breaker_state"], doc["consecutive_failures"]) == ("open", 2)
    assert doc["next_probe_at"] and doc["breaker_reason"] == "PspTransientError: 503"
    human = recon("psp", "status", db_url=db_url, log_level="ERROR", env=no_config_env())
    assert human.returncode == 0 and "sandbox" in human.stdout and "open" in human.stdout
    stats = recon("stats", "--json", db_url=db_url, log_level="ERROR", env=no_config_env())
    assert stats.returncode == 0, stats.stderr
    [entry] = [p for p in json.loads(stats.stdout)["psp_controls"] if p["psp"] == "sandbox"]
    assert entry["breaker_state"] == "open" and entry["cooling_down"] is True


def test_psp_cli__a_psp_without_credentials_is_not_configured_not_flowing(db: Database, db_url: str,
                                                                         recon: Runner) -> None:
    env = {k: v for k, v in no_config_env().items() if not k.startswith(("RECON_STRIPE_", "RECON_ADYEN_"))}
    result = recon("psp", "status", "--json", db_url=db_url, log_level="ERROR", env=env)
    assert result.returncode == 0, result.stderr
    doc = {p["psp"]: p for p in json.loads(result.stdout)["psps"]}
    assert (doc["stripe"]["configured"], doc["adyen"]["configured"], doc["sandbox"]["configured"]) == (
        False, False, True)
    assert "RECON_STRIPE_" in doc["stripe"]["not_configured"] and doc["sandbox"]["not_configured"] is None
    for command in (("psp", "status"), ("stats",)):
        human = recon(*command, db_url=db_url, log_level="ERROR", env={**env, "COLUMNS": "200"})
        assert human.returncode == 0, human.stderr
        rows = {name: line for line in human.stdout.splitlines() for name in ("stripe", "adyen", "sandbox")
                if f" {name} " in line and ("flowing" in line or "configured" in line)}
        assert "not configured" in rows["stripe"] and "not configured" in rows["adyen"], human.stdout
        assert "flowing" in rows["sandbox"] and "not configured" not in rows["sandbox"]


def test_psp_cli__unknown_psp_is_bad_usage(tmp_path: Path, recon: Runner) -> None:
    for args in (("pause", "paypal"), ("resume", "paypal")):
        result = recon("psp", *args, db_url=f"sqlite:///{tmp_path / 'recon.db'}", log_level="ERROR",
                       env=no_config_env())
        assert result.returncode == 2 and "unknown PSP 'paypal'" in result.stderr


def test_psp_cli__bad_guard_config_is_bad_usage(tmp_path: Path, recon: Runner) -> None:
    config = tmp_path / "recon.toml"
    config.write_text('[psp.sandbox]\nrate_limit = "fast"\n')
    result = recon("--config", str(config), "psp", "status", db_url=f"sqlite:///{tmp_path / 'recon.db'}",
                   log_level="ERROR", env=no_config_env())
    assert result.returncode == 2 and "psp.sandbox.rate_limit: expected a number" in result.stderr
