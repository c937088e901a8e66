"""Bulk reconciliation end to end: window jobs list the sandbox's payments over real HTTP, on both databases.

Expected outcomes come from the reconciliation table of docs/design.md (the same one the per-payment tests
hold the reconcile handler to), and the PSP's side is set through the sandbox's admin API, never by the code
under test.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from psp_adapters.protocol import PspAdapter
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from recon import Client, JobStore, Settings
from recon.counters import ProcessMetrics
from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.engine.handlers import Handlers
from recon.engine.outcome import Snooze
from recon.payments.guard import Permit
from recon.payments.instrumented import instrument
from recon.reconcile import sweep as sw
from recon.reconcile.config import ReconcileConfig
from recon.reconcile.handler import ReconcileHandler
from recon.reconcile.window import WINDOW_KIND, WindowHandler
from recon.rows import JobState, PaymentStatus
from tests.cli import Runner
from tests.integration.payment_flow import admin, create, drain, handlers_for, reconcile_config, sandbox_adapter


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    faults = Faults(pending_fraction=1.0, settle_after_seconds=600, decline_amount_suffix=None)
    with SandboxServer(tmp_path / "psp.db", faults=faults) as server:
        yield server


def bulk_handlers(db: Database, adapter: PspAdapter, rc: ReconcileConfig) -> Handlers:
    from recon.clock import SystemClock

    ledger = PaymentStore(db)
    h = Handlers()
    h.register("reconcile", ReconcileHandler(ledger, lambda _n: adapter, config=rc, clock=SystemClock()))
    h.register(WINDOW_KIND, WindowHandler(ledger, lambda _n: adapter, config=rc))
    return h


def bulk_sweep(db: Database, handlers: Handlers, rc: ReconcileConfig, **options: object) -> sw.Selection:
    selection = sw.enqueue(PaymentStore(db), Client(JobStore(db), Settings()),
                           sw.SweepOptions(older_than=timedelta(0), **options),  # type: ignore[arg-type]
                           queue="reconcile", bulk_psps={"sandbox"}, config=rc)
    burst(db, handlers)
    return selection


def burst(db: Database, handlers: Handlers) -> None:
    """Run the reconcile queue until nothing is claimable (snoozed jobs stay), as `recon sweep` does."""
    from recon import RetryPolicy, Worker
    from recon.classify import classify

    settings = Settings()
    Worker(JobStore(db), handlers, config=settings.engine, policy=RetryPolicy(settings.retry), queues=["reconcile"],
           classify_func=classify).run(burst=True)


def charged_pending(db: Database, sandbox: SandboxServer, n: int, **kw: object) -> list[int]:
    ids = create(db, n, **kw)  # type: ignore[arg-type]
    with sandbox_adapter(sandbox.url) as adapter:
        drain(db, handlers_for(db, adapter), queues=["charges"])
    assert {PaymentStore(db).get(i).status for i in ids} == {PaymentStatus.PENDING}  # type: ignore[union-attr]
    return ids


def test_bulk__one_listing_settles_the_window_as_the_table_says(db: Database, sandbox: SandboxServer) -> None:
    ids = charged_pending(db, sandbox, 6)
    never_sent = create(db, 1, charge=False, prefix="never")
    ledger = PaymentStore(db)
    refs = [ledger.get(i).psp_reference for i in ids]  # type: ignore[union-attr]
    admin(sandbox.url, f"/_admin/payments/{refs[0]}/settle", {})
    admin(sandbox.url, f"/_admin/payments/{refs[1]}/fail", {"reason": "insufficient_funds"})
    admin(sandbox.url, f"/_admin/payments/{refs[2]}/amount", {"amount": 999})
    admin(sandbox.url, f"/_admin/payments/{refs[2]}/settle", {})
    admin(sandbox.url, f"/_admin/payments/{refs[3]}/cancel", {})
    admin(sandbox.url, f"/_admin/payments/{refs[4]}/settle", {})  # refs[5] stays pending at the PSP
    metrics = ProcessMetrics()
    with instrument(sandbox_adapter(sandbox.url), recorder=metrics) as adapter:
        rc = reconcile_config(schedule=(3600,), grace=3600)
        selection = bulk_sweep(db, bulk_handlers(db, adapter, rc), rc)

        after = [ledger.get(i) for i in ids]
        assert [p.status for p in after] == [  # type: ignore[union-attr]
            PaymentStatus.SUCCEEDED, PaymentStatus.FAILED, PaymentStatus.NEEDS_REVIEW, PaymentStatus.FAILED,
            PaymentStatus.SUCCEEDED, PaymentStatus.PENDING]
        assert "amount_mismatch" in (after[2].review_reason or "")  # type: ignore[union-attr]
        # one page lists the whole window; the payment it does not list is looked up by its own job (once)
        assert metrics.psp_totals() == {"sandbox": (2, 0)}
        [window] = JobStore(db).list_jobs(kind=WINDOW_KIND)
        assert window.state is JobState.SUCCEEDED and len(selection.window_job_ids) == 1
        # each heal is its own compare-and-set with its own evidence, written by the window job's finish
        for pid, status in ((ids[0], "succeeded"), (ids[1], "failed"), (ids[3], "failed")):
            event = ledger.events(pid)[-1]
            assert (event.source, event.to_status, event.job_id) == ("reconcile", status, window.id)
            assert event.details and event.details["psp_reference"] == ledger.get(pid).psp_reference  # type: ignore[union-attr]
            assert event.details["listing"]["job_id"] == window.id
        # what the listing did not settle went to its per-payment job: pending waits for the schedule's first
        # check, the payment the PSP never saw is looked up now (and waits inside its grace period)
        fallbacks = {j.payload["payment_id"]: j for j in JobStore(db).list_jobs(kind="reconcile")}
        assert set(fallbacks) == {ids[5], never_sent[0]}
        assert all(j.unique_key == f"reconcile:{pid}" for pid, j in fallbacks.items())
        summary = sw.summarise(ledger, JobStore(db), selection)
        assert summary.counts == Counter(healed_succeeded=2, healed_failed=2, needs_review=1, still_pending=2)


def test_bulk__decides_exactly_as_per_payment_reconciliation(db: Database, sandbox: SandboxServer) -> None:
    """The same PSP answers through both paths end in the same statuses: one decision table."""
    bulk_ids = charged_pending(db, sandbox, 8, prefix="bulk")
    single_ids = charged_pending(db, sandbox, 8, prefix="single")
    ledger = PaymentStore(db)
    for ids in (bulk_ids, single_ids):
        refs = [ledger.get(i).psp_reference for i in ids]  # type: ignore[union-attr]
        for ref, action in zip(refs, ["settle", "fail", "cancel", "settle", "refund", "settle", "fail", "settle"],
                               strict=True):
            if action == "refund":
                admin(sandbox.url, f"/_admin/payments/{ref}/settle", {})
            admin(sandbox.url, f"/_admin/payments/{ref}/{action}", {})
        admin(sandbox.url, f"/_admin/payments/{refs[7]}/amount", {"amount": 5})
    with sandbox_adapter(sandbox.url) as adapter:
        rc = reconcile_config(schedule=(3600,))
        handlers = bulk_handlers(db, adapter, rc)
        bulk = sw.enqueue(ledger, Client(JobStore(db), Settings()), sw.SweepOptions(older_than=timedelta(0), limit=8),
                          queue="reconcile", bulk_psps={"sandbox"}, config=rc)
        assert set(bulk.payment_ids) == set(bulk_ids) and len(bulk.window_job_ids) == 1
        burst(db, handlers)
        single = sw.enqueue(ledger, Client(JobStore(db), Settings()), sw.SweepOptions(older_than=timedelta(0)),
                            queue="reconcile")
        assert set(single.payment_ids) == set(single_ids) and not single.window_job_ids
        burst(db, handlers)
        statuses = [[ledger.get(i).status for i in ids] for ids in (bulk_ids, single_ids)]  # type: ignore[union-attr]
        assert statuses[0] == statuses[1]
        assert statuses[0][:3] == [PaymentStatus.SUCCEEDED, PaymentStatus.FAILED, PaymentStatus.FAILED]
        assert statuses[0][7] is PaymentStatus.NEEDS_REVIEW  # another amount: never auto-healed


def test_bulk__a_payment_whose_charge_holds_a_lease_is_left_to_its_own_job(db: Database,
                                                                          sandbox: SandboxServer) -> None:
    [pid] = charged_pending(db, sandbox, 1)
    ledger = PaymentStore(db)
    admin(sandbox.url, f"/_admin/payments/{ledger.get(pid).psp_reference}/settle", {})  # type: ignore[union-attr]
    with db.begin() as conn:  # a charge job of this payment holds a live lease right now
        conn.execute(sa.text("UPDATE jobs SET state = 'leased', lease_owner = 'elsewhere', "
                             "lease_until = :until WHERE kind = 'charge'"),
                     {"until": db.to_db(db.clock.now() + timedelta(minutes=5))})
    with sandbox_adapter(sandbox.url) as adapter:
        rc = reconcile_config()
        handlers = bulk_handlers(db, adapter, rc)
        sw.enqueue(ledger, Client(JobStore(db), Settings()), sw.SweepOptions(older_than=timedelta(0)),
                   queue="reconcile", bulk_psps={"sandbox"}, config=rc)
        burst(db, handlers)
        assert ledger.get(pid).status is PaymentStatus.PENDING  # type: ignore[union-attr]
        [job] = JobStore(db).list_jobs(kind="reconcile")
        assert job.unique_key == f"reconcile:{pid}" and job.state is JobState.PENDING  # snoozed by its own rule


class SnoozeOnce:
    """A guard that admits ``first`` calls, then holds one back (as a rate limit does), then admits all."""

    def __init__(self, first: int) -> None:
        self.left, self.held = first, False

    def admit(self, psp: str, *, lease: object = None) -> Permit | Snooze:
        if self.left == 0 and not self.held:
            self.held = True
            return Snooze(timedelta(0), reason=f"psp {psp} rate limit")
        self.left -= 1
        return Permit(None, psp)


def test_bulk__snoozed_midway_keeps_its_heals_and_lists_only_the_rest(db: Database, sandbox: SandboxServer,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from psp_adapters.sandbox import adapter as sandbox_module

    monkeypatch.setattr(sandbox_module, "LISTING_PAGE_SIZE", 5)
    ids = charged_pending(db, sandbox, 12)
    ledger = PaymentStore(db)
    for pid in ids:
        booked = admin(sandbox.url, f"/_admin/payments/{ledger.get(pid).psp_reference}/settle", {})  # type: ignore[union-attr]
        with db.begin() as conn:  # our send times in the PSP's booking order (sends run concurrently)
            sent = datetime.fromisoformat(booked["created_at"]) - timedelta(milliseconds=1)
            conn.execute(sa.text("UPDATE payments SET key_sent_at = :at WHERE id = :id"),
                         {"at": db.to_db(sent), "id": pid})
    metrics = ProcessMetrics()
    with instrument(sandbox_adapter(sandbox.url), recorder=metrics) as adapter:
        rc = ReconcileConfig.from_table({"window_slack": "1s"})  # the PSP books a payment just after we send it
        handlers = Handlers()
        handlers.register(WINDOW_KIND, WindowHandler(ledger, lambda _n: adapter, config=rc, guard=SnoozeOnce(1)))
        sw.enqueue(ledger, Client(JobStore(db), Settings()), sw.SweepOptions(older_than=timedelta(0)),
                   queue="reconcile", bulk_psps={"sandbox"}, config=rc)
        burst(db, handlers)  # snoozed after its first page
        burst(db, handlers)
        # the first page (the five oldest: the native listing is oldest first) was healed with the snooze; the
        # second run listed the seven left: two pages
        assert {ledger.get(i).status for i in ids} == {PaymentStatus.SUCCEEDED}  # type: ignore[union-attr]
        assert metrics.psp_totals() == {"sandbox": (3, 0)}
        assert JobStore(db).list_jobs(kind="reconcile") == []


def test_bulk__windows_are_cut_by_time_and_size(db: Database, sandbox: SandboxServer) -> None:
    ids = create(db, 7, charge=False)
    with db.begin() as conn:  # send times: four in one hour, three in the next
        for n, pid in enumerate(ids):
            at = db.clock.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=3 - n // 4, minutes=-n)
            conn.execute(sa.text("UPDATE payments SET key_sent_at = :at WHERE id = :id"), {"at": db.to_db(at),
                                                                                             "id": pid})
    rc = ReconcileConfig.from_table({"window": "1h", "window_max_payments": 3})
    selection = sw.enqueue(PaymentStore(db), Client(JobStore(db), Settings()),
                           sw.SweepOptions(older_than=timedelta(0)), queue="reconcile", bulk_psps={"sandbox"},
                           config=rc)
    jobs = sorted(JobStore(db).list_jobs(kind=WINDOW_KIND), key=lambda j: j.id)
    assert [len(j.payload["ids"]) for j in jobs] == [3, 1, 3]
    assert sorted(i for j in jobs for i in j.payload["ids"]) == sorted(ids) == sorted(selection.payment_ids)
    again = sw.enqueue(PaymentStore(db), Client(JobStore(db), Settings()),
                       sw.SweepOptions(older_than=timedelta(0)), queue="reconcile", bulk_psps={"sandbox"}, config=rc)
    assert list(again.window_job_ids) == list(selection.window_job_ids)  # an overlapping sweep shares them


def test_sweep_cli__modes_count_psp_calls(db: Database, db_url: str, sandbox: SandboxServer, recon: Runner) -> None:
    ids = charged_pending(db, sandbox, 12)
    for pid in ids:
        admin(sandbox.url, f"/_admin/payments/{PaymentStore(db).get(pid).psp_reference}/settle", {})  # type: ignore[union-attr]
    env = {**os.environ, "RECON_SANDBOX_BASE_URL": sandbox.url}
    dry = recon("sweep", "--older-than", "0", "--dry-run", "--json", db_url=db_url, log_level="ERROR", env=env)
    assert json.loads(dry.stdout)["mode"] == {"sandbox": "bulk"}
    human_dry = recon("sweep", "--older-than", "0", "--dry-run", "--mode", "single", db_url=db_url,
                      log_level="ERROR", env=env)
    assert "mode: sandbox single" in human_dry.stdout
    run = recon("sweep", "--older-than", "0", "--mode", "bulk", "--json", db_url=db_url, log_level="ERROR", env=env)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert (doc["healed_succeeded"], doc["psp_calls"], doc["window_jobs"], doc["mode"]) == (
        12, 1, 1, {"sandbox": "bulk"})
    create(db, 3, charge=False, prefix="late")
    single = recon("sweep", "--older-than", "0", "--mode", "single", "--json", db_url=db_url, log_level="ERROR",
                   env=env)
    doc = json.loads(single.stdout)
    assert doc["psp_calls"] == 3 and doc["window_jobs"] == 0 and doc["psp_calls_by_psp"] == {"sandbox": 3}
