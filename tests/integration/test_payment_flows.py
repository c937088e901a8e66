"""Charges and reconciliation end to end against the PSP sandbox over real HTTP, on both databases."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from recon import Client, JobSpec, JobState, JobStore, Lease, Settings, Snooze
from recon.clock import SystemClock
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.reconcile.handler import ReconcileHandler
from recon.rows import PaymentStatus
from tests.cli import Runner
from tests.integration.payment_flow import (
    admin,
    create,
    drain,
    handlers_for,
    reconcile_config,
    sandbox_adapter,
    sweep_now,
)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "psp.db", faults=Faults(decline_amount_suffix=None)) as server:
        yield server


def statuses(db: Database) -> Counter[str]:
    return Counter(str(p.status) for p in PaymentStore(db).iter_payments())


def test_charge__clean_run_succeeds_with_audit_trail(db: Database, sandbox: SandboxServer) -> None:
    [pid] = create(db, 1, amount=4200, currency="EUR")
    with sandbox_adapter(sandbox.url) as adapter:
        drain(db, handlers_for(db, adapter), queues=["charges"])
        payment = PaymentStore(db).get(pid)
        assert payment is not None and payment.status is PaymentStatus.SUCCEEDED and payment.psp_reference
        trail = [(e.from_status, e.to_status, e.source) for e in PaymentStore(db).events(pid)]
        assert trail == [(None, "created", "manual"), ("created", "processing", "charge"),
                         ("processing", "succeeded", "charge")]
        last = PaymentStore(db).events(pid)[-1]
        assert last.details is not None and last.details["psp_amount"] == 4200 and last.job_id is not None


def test_charge__faults_end_in_the_right_states_with_one_charge_per_payment(db: Database,
                                                                           sandbox: SandboxServer) -> None:
    sandbox.set_faults(Faults(rate_429=0.15, retry_after_seconds=0, rate_500=0.1, rate_503=0.05, rate_hang=0.1,
                              hang_seconds=0.6, rate_decline=0.1, decline_amount_suffix=None, seed=11))
    ids = create(db, 60)
    with sandbox_adapter(sandbox.url, read_timeout=0.3) as adapter:
        drain(db, handlers_for(db, adapter), queues=["charges"], timeout=60)
        counts = statuses(db)
        assert counts["processing"] == 0 and counts["created"] == 0
        assert counts["succeeded"] + counts["failed"] + counts["pending"] == 60
        assert counts["failed"] >= 1  # declines are business answers: failed, job complete
        charges = admin(sandbox.url, "/_admin/charges")
        assert charges["max_per_key"] == 1 and charges["keys"] == charges["charges"]
        # a lost answer leaves the payment pending (never failed), and the retry with the same key resolves it
        jobs = JobStore(db).list_jobs(kind="charge", limit=1000)
        assert all(j.state is JobState.SUCCEEDED for j in jobs), Counter(str(j.state) for j in jobs)
        ledger = PaymentStore(db)
        for pid in ids:
            for event in ledger.events(pid):
                if event.to_status == "failed":
                    assert event.details and event.details.get("reason")  # a decline, with its reason


def test_charge__validation_error_fails_the_payment_and_kills_the_job(db: Database, sandbox: SandboxServer) -> None:
    [pid] = create(db, 1)
    # a currency the PSP refuses (our ledger's check allows it): the PSP answers 400
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE payments SET currency = 'EU1' WHERE id = :id"), {"id": pid})
    with sandbox_adapter(sandbox.url) as adapter:
        drain(db, handlers_for(db, adapter), queues=["charges"])
        payment = PaymentStore(db).get(pid)
        assert payment is not None and payment.status is PaymentStatus.FAILED
        assert (payment.failure_reason or "").startswith("rejected:")
        [job] = JobStore(db).list_jobs(kind="charge")
        assert job.state is JobState.DEAD and job.last_error_kind == "validation"


def test_reconcile__heals_pending_payments_with_events(db: Database, sandbox: SandboxServer) -> None:
    sandbox.set_faults(Faults(pending_fraction=1.0, settle_after_seconds=60, decline_amount_suffix=None))
    ids = create(db, 4)
    with sandbox_adapter(sandbox.url) as adapter:
        handlers = handlers_for(db, adapter)
        drain(db, handlers, queues=["charges"])
        ledger = PaymentStore(db)
        payments = [ledger.get(i) for i in ids]
        assert {p.status for p in payments if p} == {PaymentStatus.PENDING}
        refs = [p.psp_reference for p in payments if p]
        admin(sandbox.url, f"/_admin/payments/{refs[0]}/settle", {})
        admin(sandbox.url, f"/_admin/payments/{refs[1]}/fail", {"reason": "insufficient_funds"})
        admin(sandbox.url, f"/_admin/payments/{refs[2]}/amount", {"amount": 999})
        admin(sandbox.url, f"/_admin/payments/{refs[2]}/settle", {})
        summary = sweep_now(db, handlers_for(db, adapter, reconcile_config(schedule=(0.05,))), until_finished=True)
        after = [ledger.get(i) for i in ids]
        assert [p.status for p in after if p] == [PaymentStatus.SUCCEEDED, PaymentStatus.FAILED,
                                                 PaymentStatus.NEEDS_REVIEW, PaymentStatus.NEEDS_REVIEW]
        assert "amount_mismatch" in (after[2].review_reason or "")  # type: ignore[union-attr]
        assert "no_final_answer: after 1 checks" in (after[3].review_reason or "")  # type: ignore[union-attr]
        healed = ledger.events(ids[0])[-1]
        assert (healed.source, healed.to_status) == ("reconcile", "succeeded")
        assert healed.details and healed.details["psp_status"] == "succeeded"
        assert summary.counts == Counter(healed_succeeded=1, healed_failed=1, needs_review=2)
        assert summary.exit_code == 1


def test_reconcile__not_found_fails_only_after_grace_and_without_psp_reference(db: Database,
                                                                               sandbox: SandboxServer) -> None:
    ids = create(db, 1, charge=False)  # never sent: the PSP has never heard of it
    with sandbox_adapter(sandbox.url) as adapter:
        summary = sweep_now(db, handlers_for(db, adapter, reconcile_config(grace=3600)))
        assert summary.counts == Counter(still_pending=1)  # inside the grace period: snoozed
        with db.begin() as conn:
            conn.execute(sa.text("DELETE FROM job_attempts"))
            conn.execute(sa.text("DELETE FROM jobs"))
        summary = sweep_now(db, handlers_for(db, adapter, reconcile_config(grace=0)))
        payment = PaymentStore(db).get(ids[0])
        assert payment is not None and payment.status is PaymentStatus.FAILED
        assert "never reached the PSP" in (payment.failure_reason or "")


def test_sweep__overlapping_sweeps_share_jobs(db: Database, sandbox: SandboxServer) -> None:
    from datetime import timedelta

    from recon import Client, Settings
    from recon.reconcile import sweep as sw

    create(db, 20, charge=False)
    client = Client(JobStore(db), Settings())
    options = sw.SweepOptions(older_than=timedelta(0))
    first = sw.enqueue(PaymentStore(db), client, options, queue="reconcile")
    second = sw.enqueue(PaymentStore(db), client, options, queue="reconcile")
    assert list(first.job_ids) == list(second.job_ids)
    assert len(JobStore(db).list_jobs(kind="reconcile", limit=100)) == 20


def test_stale_charge_worker_cannot_overwrite_what_reconciliation_healed(db: Database,
                                                                        sandbox: SandboxServer) -> None:
    """A charge worker pauses past its lease after sending; reconciliation heals the payment meanwhile;
    the charge worker's late answer must change nothing."""
    import threading

    from recon import RetryPolicy, Settings, Worker
    from recon.payments.charge import ChargeHandler

    [pid] = create(db, 1)
    with sandbox_adapter(sandbox.url) as adapter:
        ledger = PaymentStore(db)
        store = JobStore(db)
        real = ChargeHandler(ledger, lambda _n: adapter)
        paused = threading.Event()
        resume = threading.Event()

        def slow_charge(job, lease: Lease):  # type: ignore[no-untyped-def]
            outcome = real(job, lease)  # the charge is sent and answered "succeeded"
            paused.set()
            resume.wait(20)  # ...then the worker stalls past its lease before finishing
            return outcome

        from recon import Handlers

        h = Handlers()
        h.register("charge", slow_charge)
        settings = Settings()
        from dataclasses import replace

        cfg = replace(settings.engine, lease_ttl_seconds=0.5, heartbeat_interval_seconds=100 * 0 + 0.4,
                      poll_interval_seconds=0.02, watcher_interval_seconds=100)
        worker = Worker(store, h, config=cfg, policy=RetryPolicy(settings.retry), queues=["charges"], run_watcher=False)
        # no heartbeats reach the database while paused: stop the heartbeater by making its beats no-ops
        worker._heartbeater.beat_once = lambda: None  # type: ignore[method-assign]
        t = threading.Thread(target=worker.run, kwargs={"burst": True})
        t.start()
        assert paused.wait(10)
        import time

        time.sleep(0.7)  # lease expired
        from recon import Watcher

        assert Watcher(store).run_once().total == 1
        # meanwhile the PSP reports the payment with another amount (a constructed disagreement), and
        # reconciliation marks it needs_review
        payment = ledger.get(pid)
        assert payment is not None and payment.status is PaymentStatus.PROCESSING
        with db.begin() as conn:
            from recon.rows import EventSource, Transition

            ledger.apply(conn, Transition(pid, PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW,
                                          EventSource.RECONCILE, review_reason="constructed"))
        resume.set()
        t.join(10)
        payment = ledger.get(pid)
        assert payment is not None and payment.status is PaymentStatus.NEEDS_REVIEW
        assert worker.stats.stale_finishes == 1
        assert [e.to_status for e in ledger.events(pid)] == ["created", "processing", "needs_review"]


def test_sweep_cli__json_report_dry_run_and_exit_codes(db: Database, db_url: str, sandbox: SandboxServer,
                                                      tmp_path: Path, recon: Runner) -> None:
    import json
    import os

    sandbox.set_faults(Faults(pending_fraction=1.0, settle_after_seconds=60, decline_amount_suffix=None))
    ids = create(db, 3)
    with sandbox_adapter(sandbox.url) as adapter:
        drain(db, handlers_for(db, adapter), queues=["charges"])
        refs = [PaymentStore(db).get(i).psp_reference for i in ids]  # type: ignore[union-attr]
        env = {**os.environ, "RECON_SANDBOX_BASE_URL": sandbox.url}
        dry = recon("sweep", "--older-than", "0", "--dry-run", "--json", db_url=db_url, log_level="ERROR", env=env)
        assert dry.returncode == 0 and json.loads(dry.stdout)["would_check"] == 3
        assert JobStore(db).list_jobs(kind="reconcile") == []
        for ref in refs:
            admin(sandbox.url, f"/_admin/payments/{ref}/settle", {})
        report = tmp_path / "sweep.csv"
        run = recon("sweep", "--older-than", "0", "--json", "--report", str(report), db_url=db_url, log_level="ERROR",
                    env=env)
        assert run.returncode == 0, run.stderr
        doc = json.loads(run.stdout)
        assert doc["checked"] == 3 and doc["healed_succeeded"] == 3 and doc["money_at_risk"] == []
        lines = report.read_text().splitlines()
        assert lines[0].startswith("merchant_reference,psp,amount") and len(lines) == 4
        assert all(",healed_succeeded," in line for line in lines[1:])
        bad = recon("sweep", "--older-than", "soon", db_url=db_url, log_level="ERROR", env=env)
        assert bad.returncode == 2 and "--older-than" in bad.stderr
        bad_psp = recon("sweep", "--psp", "paypal", db_url=db_url, log_level="ERROR", env=env)
        assert bad_psp.returncode == 2 and "unknown PSP 'paypal'" in bad_psp.stderr
        human = recon("sweep", "--older-than", "0", db_url=db_url, log_level="ERROR", env=env)
        assert human.returncode == 0 and "checked 0" in human.stdout
    httpx.get(sandbox.url + "/_admin/faults", timeout=5)


#: how long a test waits for a subprocess to reach the state it needs: never slept, only a bound on a poll
STARTUP_BOUND_SECONDS = 120


def test_sweep__killed_midway_and_rerun_finishes_the_work(db: Database, db_url: str,
                                                         sandbox: SandboxServer, recon: Runner) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    sandbox.set_faults(Faults(pending_fraction=1.0, settle_after_seconds=0.3, decline_amount_suffix=None))
    ids = create(db, 30)
    with sandbox_adapter(sandbox.url) as adapter:
        drain(db, handlers_for(db, adapter), queues=["charges"])
        time.sleep(0.4)  # the PSP has settled them all; our ledger still says pending
        sandbox.set_faults(Faults(latency_ms=150, decline_amount_suffix=None))
        env = {**os.environ, "RECON_SANDBOX_BASE_URL": sandbox.url, "RECON_ENGINE_LEASE_TTL_SECONDS": "1",
               "RECON_ENGINE_HEARTBEAT_INTERVAL_SECONDS": "0.3"}
        # one job per payment (--mode single), so that a kill can land between heals; bulk: test_bulk_sweep.py
        args = ["--database-url", db_url, "--log-level", "ERROR", "sweep", "--older-than", "0", "--concurrency", "2",
                "--mode", "single", "--json"]
        first = subprocess.Popen([sys.executable, "-m", "recon", *args], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)  # a process of its own, to SIGKILL
        ledger = PaymentStore(db)
        # kill it once it has healed some, not all. The bound is generous: on a loaded machine (load 17+) the
        # process alone took more than 20 s to start; on a quiet one the first heals come within a second or two
        deadline = time.monotonic() + STARTUP_BOUND_SECONDS
        while time.monotonic() < deadline and first.poll() is None:
            if sum(1 for i in ids if ledger.get(i).status is PaymentStatus.SUCCEEDED) >= 3:  # type: ignore[union-attr]
                break
            time.sleep(0.02)
        assert first.poll() is None, f"the sweep ended before it was killed: {first.communicate()[1]}"
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=STARTUP_BOUND_SECONDS)
        healed_before = sum(1 for i in ids if ledger.get(i).status is PaymentStatus.SUCCEEDED)  # type: ignore[union-attr]
        assert 3 <= healed_before < 30
        time.sleep(1.2)  # the killed sweep's leases expire
        second = recon(*args, env=env)  # the rerun needs no process of its own
        assert second.returncode == 0, second.stderr
        assert {ledger.get(i).status for i in ids} == {PaymentStatus.SUCCEEDED}  # type: ignore[union-attr]
        for i in ids:  # each payment healed exactly once: one reconcile event, whatever the crash
            assert [e.source for e in ledger.events(i)].count("reconcile") == 1


def test_reconcile__not_found_while_charge_may_still_send_is_not_failed(db: Database,
                                                                        sandbox: SandboxServer) -> None:
    """Found by the chaos suite: a charge waiting to retry after a 5xx, a sweep finding nothing at the PSP,
    then the retry charging. The payment must not be marked failed while its charge job is unfinished."""
    from recon.rows import EventSource, Transition

    [pid] = create(db, 1)  # its charge job is runnable: it may still send
    ledger = PaymentStore(db)
    with db.begin() as conn:
        ledger.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.PENDING, EventSource.CHARGE))
    with sandbox_adapter(sandbox.url) as adapter:
        summary = sweep_now(db, handlers_for(db, adapter, reconcile_config(grace=0)))
        assert summary.counts == Counter(still_pending=1)
        payment = ledger.get(pid)
        assert payment is not None and payment.status is PaymentStatus.PENDING
        # the charge then runs and succeeds; nothing contradicts it
        drain(db, handlers_for(db, adapter), queues=["charges"])
        payment = ledger.get(pid)
        assert payment is not None and payment.status is PaymentStatus.SUCCEEDED
        assert admin(sandbox.url, "/_admin/charges")["charges"] == 1


def test_sweep_cli__needs_review_exits_1(db: Database, db_url: str, sandbox: SandboxServer, recon: Runner) -> None:
    import json
    import os

    sandbox.set_faults(Faults(pending_fraction=1.0, settle_after_seconds=60, decline_amount_suffix=None))
    [pid] = create(db, 1)
    with sandbox_adapter(sandbox.url) as adapter:
        drain(db, handlers_for(db, adapter), queues=["charges"])
        ref = PaymentStore(db).get(pid).psp_reference  # type: ignore[union-attr]
        admin(sandbox.url, f"/_admin/payments/{ref}/amount", {"amount": 1})
        admin(sandbox.url, f"/_admin/payments/{ref}/settle", {})
        r = recon("sweep", "--older-than", "0", "--json", db_url=db_url, log_level="ERROR",
                  env={**os.environ, "RECON_SANDBOX_BASE_URL": sandbox.url})
        assert r.returncode == 1, r.stderr
        assert json.loads(r.stdout)["needs_review"] == 1


def test_reconcile__snoozes_while_a_charge_job_holds_a_live_lease(db: Database, sandbox: SandboxServer) -> None:
    """The payment and its charge lease are read in one statement; a live lease means: the charge decides."""
    from recon.rows import EventSource, Transition

    [pid] = create(db, 1)
    ledger, store = PaymentStore(db), JobStore(db)
    with db.begin() as conn:
        ledger.apply(conn, Transition(pid, PaymentStatus.CREATED, PaymentStatus.PENDING, EventSource.CHARGE))
    [charge] = store.claim(worker="charger", queues=["charges"], n=1, ttl=60)  # a charge worker is sending
    with sandbox_adapter(sandbox.url) as adapter:
        handler = ReconcileHandler(ledger, lambda _name: adapter, config=reconcile_config(grace=0),
                                   clock=SystemClock())
        [rid] = Client(store, Settings()).enqueue_many([JobSpec("reconcile", {"payment_id": pid}, queue="reconcile")])
        [job] = store.claim(worker="reconciler", queues=["reconcile"], n=1, ttl=60)
        lease = Lease(store, job.id, job.attempts, "reconciler")
        outcome = handler(job, lease)
        assert isinstance(outcome, Snooze) and outcome.reason == "charge job holds a live lease"
        # the charge worker dies: once its lease has expired, reconciliation goes on to ask the PSP
        with db.begin() as conn:
            conn.execute(sa.text("UPDATE jobs SET lease_until = :t WHERE id = :id"),
                         {"id": charge.id, "t": db.to_db(SystemClock().now() - timedelta(seconds=1))})
        outcome = handler(job, lease)
        assert not (isinstance(outcome, Snooze) and outcome.reason == "charge job holds a live lease")
        assert rid == job.id


def test_reconcile__never_reached_counts_the_grace_from_the_last_send_not_from_creation(
        db: Database, sandbox: SandboxServer) -> None:
    """A charge stamped just before its request (payment_touch_if_unfinished), then held up in a paused worker
    whose lease the watcher took back, may still land: 'failed, never reached the PSP' waits the grace period
    after the payment's last change, not after its creation (docs/verification.md, finding 2)."""
    from recon import Complete

    [pid] = create(db, 1, charge=False)  # the PSP never saw it; no charge job is left unfinished
    ledger, store = PaymentStore(db), JobStore(db)
    now = SystemClock().now()

    def stamped(created_ago: timedelta, sent_ago: timedelta) -> None:
        with db.begin() as conn:
            conn.execute(sa.text("UPDATE payments SET created_at = :c, updated_at = :u, key_sent_at = :u "
                                 "WHERE id = :id"),
                         {"id": pid, "c": db.to_db(now - created_ago), "u": db.to_db(now - sent_ago)})

    with sandbox_adapter(sandbox.url) as adapter:
        handler = ReconcileHandler(ledger, lambda _name: adapter, config=reconcile_config(grace=1800),
                                   clock=SystemClock())
        Client(store, Settings()).enqueue_many([JobSpec("reconcile", {"payment_id": pid}, queue="reconcile")])
        [job] = store.claim(worker="reconciler", queues=["reconcile"], n=1, ttl=60)
        lease = Lease(store, job.id, job.attempts, "reconciler")
        stamped(created_ago=timedelta(hours=2), sent_ago=timedelta(minutes=10))  # created long ago, sent lately
        outcome = handler(job, lease)
        assert isinstance(outcome, Snooze) and "grace period" in outcome.reason
        assert timedelta(minutes=19) < outcome.delay <= timedelta(minutes=20)  # 30 minutes after the send
        stamped(created_ago=timedelta(hours=2), sent_ago=timedelta(minutes=31))
        outcome = handler(job, lease)
        assert isinstance(outcome, Complete) and outcome.write is not None  # now: failed, never reached the PSP
