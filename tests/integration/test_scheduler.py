"""Periodic jobs: several schedulers on one database, a frozen clock, each slot run once, on both backends."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from recon.app import App
from recon.clock import FixedClock
from recon.db.database import Database, connect
from recon.db.payment_store import PaymentStore
from recon.db.schedule_store import ScheduleStore
from recon.engine.client import Client
from recon.engine.handlers import Handlers
from recon.reconcile.periodic import SweepJob
from recon.rows import NewPayment
from recon.scheduler import Schedule, Scheduler, load_schedules, status
from tests.cli import Runner

START = datetime(2026, 12, 1, 12, 7, 30, tzinfo=UTC)
EVERY_15 = Schedule(name="sweep", kind="sweep", queue="default", payload={"older_than": "15m"},
                    every=timedelta(minutes=15))


def jobs_of(db: Database, kind: str = "sweep") -> list[tuple[int, str]]:
    with db.begin() as conn:
        return [(int(r[0]), str(r[1])) for r in conn.execute(
            sa.text("SELECT id, state FROM jobs WHERE kind = :k ORDER BY id"), {"k": kind})]


def sweep_audit_rows(db: Database) -> list[tuple[str, str, str, dict[str, object]]]:
    with db.begin() as conn:
        return [(r[0], r[1], r[2], r[3] if isinstance(r[3], dict) else json.loads(r[3])) for r in conn.execute(
            sa.text("SELECT actor, subject, outcome, evidence FROM audit_log WHERE action = 'sweep' ORDER BY id"))]


def schedulers(db_url: str, clock: FixedClock, schedule: Schedule, n: int) -> tuple[list[Scheduler], list[Database]]:
    """``n`` schedulers, each on its own engine (as on separate hosts), sharing one frozen clock."""
    dbs = [connect(db_url, clock=clock) for _ in range(n)]
    return [Scheduler(ScheduleStore(d), [schedule], scheduler_id=f"host-{i}", clock=clock)
            for i, d in enumerate(dbs)], dbs


def race(group: list[Scheduler]) -> None:
    """Every scheduler ticks at once."""
    barrier = threading.Barrier(len(group))

    def tick(s: Scheduler) -> None:
        barrier.wait()
        s.run_once()

    threads = [threading.Thread(target=tick, args=(s,)) for s in group]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def test_scheduler__each_slot_runs_once_across_schedulers_also_after_its_job_finished(db_url: str,
                                                                                       db: Database) -> None:
    clock = FixedClock(START)
    group, dbs = schedulers(db_url, clock, EVERY_15, 4)
    race(group)
    [(first, _)] = jobs_of(db)  # 12:00 claimed once, by one of four
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET state = 'succeeded', finished_at = created_at WHERE id = :i"),
                     {"i": first})
    clock.advance(timedelta(minutes=5))  # still the 12:00 slot; its job finished
    race(group)
    restarted, more = schedulers(db_url, clock, EVERY_15, 2)  # new processes, nothing cached
    race(restarted)
    assert len(jobs_of(db)) == 1
    clock.set(datetime(2026, 12, 1, 12, 15, 0, tzinfo=UTC))  # the next slot, exactly on time
    race(group + restarted)
    assert len(jobs_of(db)) == 2
    with db.begin() as conn:
        slots = conn.execute(sa.text("SELECT slot_at, job_id FROM schedule_slots ORDER BY slot_at")).all()
    assert [db.from_db(s) for s, _ in slots] == [datetime(2026, 12, 1, 12, 0, tzinfo=UTC),
                                                  datetime(2026, 12, 1, 12, 15, tzinfo=UTC)]
    for d in dbs + more:
        d.dispose()


@pytest.mark.parametrize("catch_up, runs", [("once", 1), ("skip", 0)])
def test_scheduler__after_downtime_the_missed_slots_run_once_or_are_skipped_never_n_times(
        db_url: str, db: Database, catch_up: str, runs: int) -> None:
    clock = FixedClock(START)
    schedule = Schedule(name="sweep", kind="sweep", queue="default", every=timedelta(minutes=15), catch_up=catch_up,
                        misfire_grace=timedelta(minutes=1))
    clock.set(datetime(2026, 12, 1, 12, 0, 10, tzinfo=UTC))
    group, dbs = schedulers(db_url, clock, schedule, 3)
    race(group)
    before = len(jobs_of(db))
    assert before == 1  # 10 s late: within the grace, runs whatever the policy
    clock.advance(timedelta(hours=2, minutes=7))  # eight slots pass while every worker is down
    fresh, more = schedulers(db_url, clock, schedule, 3)
    race(fresh)
    assert len(jobs_of(db)) - before == runs
    [row] = status([schedule], ScheduleStore(db).latest(), clock.now())
    assert row["last_slot"] == "2026-12-01T14:00:00+00:00"
    assert row["last_outcome"] in (("runnable", "pending") if runs else ("skipped",))
    assert row["next_slot"] == "2026-12-01T14:15:00+00:00"
    for d in dbs + more:
        d.dispose()


def test_schedule__cron_in_a_time_zone_follows_its_daylight_saving_time() -> None:
    [s] = load_schedules({"daily": {"cron": "30 6 * * *", "timezone": "Europe/Berlin", "kind": "report",
                                    "payload": {"psp": "sandbox"}}})
    winter = s.latest_slot(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    summer = s.latest_slot(datetime(2026, 7, 1, 12, 0, tzinfo=UTC))
    assert winter == datetime(2026, 12, 1, 5, 30, tzinfo=UTC)  # CET: UTC+1
    assert summer == datetime(2026, 7, 1, 4, 30, tzinfo=UTC)  # CEST: UTC+2
    assert s.next_slot(datetime(2026, 12, 1, 5, 30, tzinfo=UTC)) == datetime(2026, 12, 2, 5, 30, tzinfo=UTC)
    assert s.latest_slot(datetime(2026, 12, 1, 5, 30, tzinfo=UTC)) == datetime(2026, 12, 1, 5, 30, tzinfo=UTC)


@pytest.mark.parametrize("table, message", [
    ("every = \"15m\"\ncron = \"* * * * *\"\nkind = \"sweep\"", "set exactly one of every"),
    ("cron = \"61 * * * *\"\nkind = \"sweep\"", "is not a cron expression"),
    ("every = \"15m\"\nkind = \"sweep\"\ntimezone = \"Mars/Base\"", "is not an IANA time zone"),
    ("every = \"15m\"\nkind = \"sweep\"\ncatchup = \"once\"", "did you mean 'catch_up'"),
    ("every = \"15m\"\nkind = \"sweep\"\ncatch_up = \"twice\"", "catch_up: must be"),
    ("every = \"15m\"\nkind = \"sweep\"\npayload = { psp = \"nope\" }", "unknown PSP 'nope'"),
    ("every = \"0s\"\nkind = \"sweep\"", "every: must be at least 1s"),
    ("every = \"15m\"", "kind: required"),
])
def test_schedule__bad_config_exits_2_naming_file_schedule_and_key(tmp_path: Path, db_url: str, recon: Runner,
                                                                   table: str, message: str) -> None:
    config = tmp_path / "recon.toml"
    config.write_text(f"[schedule.every-15]\n{table}\n", encoding="utf-8")
    r = recon("--config", str(config), "schedule", "list", db_url=db_url)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{config}: schedule.every-15" in r.stderr and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_schedule_list_and_a_worker_that_runs_the_scheduled_sweep(tmp_path: Path, db_url: str, db: Database,
                                                                  recon: Runner) -> None:
    config = tmp_path / "recon.toml"
    config.write_text('[schedule.sweep]\nevery = "1h"\nkind = "sweep"\npayload = { older_than = "0s" }\n'
                      '[schedule.nightly]\ncron = "0 3 * * *"\ntimezone = "Europe/Berlin"\nkind = "report"\n'
                      'catch_up = "skip"\npayload = { psp = "sandbox", directory = "reports" }\n', encoding="utf-8")
    PaymentStore(db).create([NewPayment("shop", "order-1", 1000, "EUR", "sandbox")], charge=False)
    listed = json.loads(recon("--config", str(config), "schedule", "list", "--json", db_url=db_url).stdout)
    assert [(s["name"], s["last_slot"]) for s in listed["schedules"]] == [("sweep", None), ("nightly", None)]
    store = ScheduleStore(db)
    [sweep, nightly] = load_schedules({"sweep": {"every": "1h", "kind": "sweep", "payload": {"older_than": "0s"}},
                                       "nightly": {"cron": "0 3 * * *", "kind": "report", "catch_up": "skip",
                                                   "payload": {"psp": "sandbox"}}})
    fired = Scheduler(store, [sweep, nightly], scheduler_id="t").run_once()
    assert {f.schedule for f in fired} == {"sweep", "nightly"}
    assert [f.job_id is None for f in fired if f.schedule == "nightly"] == [True]  # hours late: skipped
    r = recon("--config", str(config), "worker", "--burst", "--queues", "default,reconcile", db_url=db_url,
              env={"RECON_SANDBOX_BASE_URL": "http://127.0.0.1:9"}, log_level="ERROR")
    assert r.returncode == 0, r.stderr
    listed = json.loads(recon("--config", str(config), "schedule", "list", "--json", db_url=db_url).stdout)
    by_name = {s["name"]: s for s in listed["schedules"]}
    assert by_name["sweep"]["last_outcome"] == "succeeded" and by_name["nightly"]["last_outcome"] == "skipped"
    with db.begin() as conn:
        kinds = sorted(r[0] for r in conn.execute(sa.text("SELECT kind FROM jobs")))
    assert kinds == ["reconcile_window", "sweep"]  # the scheduled sweep queued a window job (the sandbox lists)
    stats = json.loads(recon("stats", "--json", db_url=db_url).stdout)
    assert stats["sweeps"][0]["operator"] == "schedule" and stats["sweeps"][0]["summary"]["enqueued"] == 1
    with db.begin() as conn:
        [sweep_job] = [int(r[0]) for r in conn.execute(sa.text("SELECT id FROM jobs WHERE kind = 'sweep'"))]
        [run] = [int(r[0]) for r in conn.execute(sa.text("SELECT id FROM sweep_runs"))]
    # the scheduled sweep is in the audit trail as the system, with its outcome (as `recon sweep` is)
    assert sweep_audit_rows(db) == [("system:schedule", f"sweep run {run}", "done",
                                     {"run": run, "job": sweep_job, "exit_code": 0, "enqueued": 1, "window_jobs": 1})]
    text = recon("--config", str(config), "schedule", "list", db_url=db_url).stdout
    assert "every 1h" in text and "0 3 * * * (Europe/Berlin)" in text


def test_worker__refuses_a_schedule_whose_kind_it_cannot_run(tmp_path: Path, db_url: str, recon: Runner) -> None:
    config = tmp_path / "recon.toml"
    config.write_text('[schedule.x]\nevery = "1h"\nkind = "nightly_export"\n', encoding="utf-8")
    r = recon("--config", str(config), "worker", "--burst", db_url=db_url)
    assert r.returncode == 2 and "schedule.x: kind 'nightly_export' has no handler" in r.stderr


def test_scheduler__the_app_s_workers_schedule_except_in_a_burst_run(tmp_path: Path, db_url: str,
                                                                     db: Database) -> None:
    """Every worker App.worker builds runs the scheduler of ``[schedule.NAME]`` in a background loop, but a burst
    run (`recon sweep`, `recon worker --burst`) does not schedule (docs/operations.md)."""
    config = tmp_path / "recon.toml"
    config.write_text('[schedule.tick]\nevery = "1s"\nkind = "tick"\n', encoding="utf-8")
    handlers = Handlers()
    handlers.register("tick", lambda job, lease: None)
    handlers.register("slow", lambda job, lease: time.sleep(1.5))  # a burst run long enough for a slot
    app = App(database_url=db_url, config_path=str(config))
    try:
        Client(app.jobs, app.settings).enqueue("slow")
        burst = app.worker(["default"], handlers=handlers)
        assert [loop.name for loop in burst.loops][-1] == "scheduler"
        burst.run(burst=True)
        assert jobs_of(db, "tick") == [] and ScheduleStore(db).latest() == {}
        worker = app.worker(["default"], handlers=handlers)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not any(state == "succeeded" for _, state in jobs_of(db, "tick")) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker.request_stop()
        thread.join(10)
    finally:
        app.close()
    assert not thread.is_alive()
    assert "succeeded" in [state for _, state in jobs_of(db, "tick")]
    assert list(ScheduleStore(db).latest()) == ["tick"]


def test_scheduled_sweep__a_failed_enqueue_is_audited_as_failed_and_raised_to_the_worker(db_url: str,
                                                                                        db: Database) -> None:
    """The enqueue raises (here: the PSP listing lookup): the run's row and its audit row say failed, and the
    error reaches the worker (which retries the job, as it does any error a handler did not classify)."""
    app = App(database_url=db_url)
    try:
        def broken() -> set[str]:
            raise RuntimeError("listing lookup failed")

        handler = SweepJob(app.payments, app.client(), app.sweeps, app.audit, reconcile_queue="reconcile",
                           psp_names=app.psp_names(), listing_func=broken)
        job_id = Client(app.jobs, app.settings).enqueue("sweep", {"older_than": "0s"})
        job = app.jobs.get(job_id)
        assert job is not None
        with pytest.raises(RuntimeError, match="listing lookup failed"):
            handler(job, None)  # type: ignore[arg-type]  # the handler never touches its lease
    finally:
        app.close()
    with db.begin() as conn:
        [(run, outcome)] = [(int(r[0]), r[1]) for r in conn.execute(sa.text("SELECT id, outcome FROM sweep_runs"))]
    assert outcome == "failed"
    assert sweep_audit_rows(db) == [("system:schedule", f"sweep run {run}", "failed", {"run": run, "job": job_id})]
