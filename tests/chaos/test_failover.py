"""PostgreSQL failover under load: the primary dies (SIGKILL) mid-run, its standby is promoted, the old primary
is rewound (pg_rewind) into a standby of the new one, and the pair fails back once. No payment lost or charged
twice, no acknowledged webhook lost, every job finished or recoverable: proven against the sandbox's ledger.

Servers of the test's own (tests/pgcluster.py: Debian's PostgreSQL binaries, free ports, a temporary
directory), never the shared server on 5432. recon reaches them over one multi-host URL,
``?host=127.0.0.1:A&host=127.0.0.1:B&target_session_attrs=read-write``: two `recon worker`s, the cron's
`recon sweep`, `recon serve` receiving the Stripe sandbox's webhooks (10 % dropped, 10 % twice, 10 %
reordered), and payments created all along, with the sandbox injecting 5xx, hangs after charging and slow
settlement. The timeline (each step bounded):

1. load; SIGKILL the primary ``a``; promote ``b`` (``pg_ctl promote``);
2. synchronous: ``b`` kept ``synchronous_standby_names`` from its base backup, so its commits wait for a
   standby that is gone: the test waits until recon's own commits are seen waiting (``SyncRep``), then clears
   the setting as Patroni does outside strict mode (docs/operations.md, the trap);
3. measured: promotion -> the first job finished on ``b`` (goal < 10 s);
4. ``a`` rewound (pg_rewind, ``wal_log_hints``) and streaming from ``b`` (synchronous again, when it was);
5. fail back: ``b`` shut down cleanly (a switchover: its WAL reaches ``a`` first), ``a`` promoted, ``b``
   rewound into its standby; measured again;
6. settle (sweeps until every payment is final), then the invariants (tests/chaos/invariants.py) and these:
   every payment whose creation committed exists; every webhook recon answered 2xx is stored; no job leased
   with an expired lease, every unfinished job claimable again.

Asynchronous replication loses what the standby had not received. That run stalls the standby's WAL
sender on the primary (SIGSTOP) for two seconds of load before the primary dies, a standby that lags as one
behind a slow network would, and counts the recovery point: payments whose creation the database forgot
(those the PSP charged found by `recon report`'s listing as ``missing_locally``; declined ones took no money
and are listed nowhere), payment outcomes it forgot (the sweep and
the charge jobs, re-run under the same idempotency key, find them again at the PSP: never charged twice),
acknowledged webhooks it forgot (polling heals their payments all the same).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from recon.db.database import Database, connect, upgrade
from recon.errors import ReconError
from tests import pgcluster
from tests.chaos import invariants
from tests.chaos.harness import (
    Sandbox,
    ServeProcess,
    WorkerProcess,
    admin_headers,
    base_env,
    psp_env,
    recon,
    webhook_flags,
    write_config,
)
from tests.chaos.test_chaos import COMPRESSED, create_payments, settle

pytestmark = pytest.mark.chaos

PSP = "stripe"
FAULTS = ("--rate-500", "0.02", "--rate-hang", "0.02", "--hang-seconds", "1", "--pending-fraction", "0.1",
          "--settle-after", "2", "--rate-decline", "0.03", "--decline-suffix", "off")
#: payments created per batch, the pause between batches, and the most a run creates
BATCH, PAUSE, MOST = 10, 0.2, 700
#: seconds of load (from the workers' first finished job) before the kill, between the rewind and the
#: fail-back, and after it
BEFORE_KILL, BEFORE_FAILBACK, AFTER_FAILBACK = 3.0, 2.5, 2.0
#: how long the asynchronous run's standby stops receiving WAL before the primary dies
STALL = 2.0
GOAL_SECONDS = 10.0


@dataclass
class Failover:
    """One promotion: when, how long until a job finished on the new primary, and (synchronous runs) how many of
    recon's sessions were seen waiting on the kept ``synchronous_standby_names`` before it was cleared."""

    name: str
    first_finish_seconds: float
    syncrep_waiters: int = 0
    cleared_after_seconds: float = 0.0


@dataclass
class Load:
    """Payments created during the run (``created``: their batch committed; ``uncertain``: the batch failed, it
    may have committed) and the cron's sweeps."""

    db: Database
    created: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)
    sweeps: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, url: str, env: dict[str, str]) -> None:
        """Payments from now on, and the cron (the first batch is created before, so that the workers find
        work the moment they are up)."""
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._cron, args=(url, env), daemon=True)]
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(90)

    def _produce(self) -> None:
        start = len(self.created)
        while not self.stop.is_set() and start < MOST:
            refs = [f"chaos-{i:05d}" for i in range(start, start + BATCH)]
            try:
                create_payments(self.db, start, BATCH, PSP)
                self.created.extend(refs)
            except ReconError:  # no primary right now: a producer retries later, with new payments
                self.uncertain.extend(refs)
            start += BATCH
            self.stop.wait(PAUSE)

    def _cron(self, url: str, env: dict[str, str]) -> None:
        while not self.stop.wait(2.0):
            self.sweeps.append(recon(url, env, "sweep", "--older-than", "2s", "--json", timeout=60,
                                     module=COMPRESSED).returncode)


def promote(new: pgcluster.Node, *, synchronous: bool, name: str) -> Failover:
    """Promote ``new``; a synchronous run then shows the trap and clears it; measures promotion -> the first
    job finished there."""
    new.promote()
    promoted = time.monotonic()
    before = succeeded_jobs(new)
    waiters, cleared = 0, 0.0
    if synchronous:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not waiters:  # recon's commits, held by the kept setting
            waiters = int(new.query("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")[0][0])
            time.sleep(0.02)
        new.query("ALTER SYSTEM RESET synchronous_standby_names")
        new.query("SELECT pg_reload_conf()")
        cleared = time.monotonic() - promoted
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # seen from outside: a finish that committed (not one held by SyncRep)
        if succeeded_jobs(new) > before:
            return Failover(name, time.monotonic() - promoted, waiters, cleared)
        time.sleep(0.02)
    raise AssertionError(f"{name}: no job finished on {new} within 60 s of its promotion")


def make_synchronous(primary: pgcluster.Node, standby: pgcluster.Node) -> None:
    primary.query(f"ALTER SYSTEM SET synchronous_standby_names = '{standby.name}'")
    primary.query("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 20
    while not primary.query("SELECT 1 FROM pg_stat_replication WHERE application_name = %s "
                            "AND sync_state = 'sync'", (standby.name,)):
        assert time.monotonic() < deadline, f"{standby} did not become synchronous"
        time.sleep(0.05)


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout} s: {what}"
        time.sleep(0.05)


def succeeded_jobs(node: pgcluster.Node) -> int:
    return int(node.query("SELECT count(*) FROM jobs WHERE state = 'succeeded'", database="recon")[0][0])


@dataclass
class Outcome:
    report: invariants.Report
    failovers: list[Failover]
    extra: dict[str, list[Any]]
    counts: dict[str, Any]


def run_failover(tmp_path: Path, request: pytest.FixtureRequest, *, synchronous: bool) -> Outcome:
    reason = pgcluster.available()
    if reason:
        pytest.skip(reason)
    cluster = pgcluster.Cluster()
    request.addfinalizer(cluster.close)  # registered first: runs last, after every process below stopped
    a = cluster.primary("a")
    if synchronous:  # before the base backup, as a deployment is: the standby keeps a copy (the trap)
        a.query("ALTER SYSTEM SET synchronous_standby_names = 'b'")
        a.query("SELECT pg_reload_conf()")
    b = cluster.standby("b", of=a)
    if synchronous:
        make_synchronous(a, b)
    a.query("CREATE DATABASE recon")
    url = (f"postgresql+psycopg://postgres@/recon?host=127.0.0.1:{a.port}&host=127.0.0.1:{b.port}"
           f"&target_session_attrs=read-write")
    db = connect(url)
    upgrade(db)

    config = write_config(tmp_path / "recon.toml")
    serve = ServeProcess(url, {})
    sandbox = Sandbox(tmp_path / "psp.db", *FAULTS, "--seed", "11", *webhook_flags(PSP, serve.url), psp=PSP)
    env = base_env(config, sandbox.url, **psp_env(PSP, sandbox.url))
    serve.env = env
    serve.start()
    request.addfinalizer(serve.stop)
    sandbox.start()
    request.addfinalizer(sandbox.stop)
    load = Load(db)
    create_payments(db, 0, BATCH, PSP)
    load.created.extend(f"chaos-{i:05d}" for i in range(BATCH))
    workers = [WorkerProcess(url, env, tmp_path / f"worker-{i}.log", module=COMPRESSED) for i in range(2)]
    for w in workers:
        request.addfinalizer(w.stop)
        w.start()
    failovers: list[Failover] = []
    counts: dict[str, Any] = {}
    started = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = round(time.monotonic() - started, 1)

    wait_for(lambda: succeeded_jobs(a) >= 1, 60, "the workers' first job")  # python's start, on a busy machine
    phase("first job")
    load.start(url, env)
    request.addfinalizer(load.finish)
    time.sleep(BEFORE_KILL)
    snapshot: dict[str, str] = {}
    if not synchronous:  # the standby falls behind: the primary's WAL sender stops for STALL seconds of load
        sender = a.walsender_pid(b)
        assert sender is not None
        os.kill(sender, signal.SIGSTOP)
        time.sleep(STALL)
        snapshot = dict(a.query("SELECT merchant_reference, status FROM payments", database="recon"))
        behind = a.query("SELECT pg_current_wal_lsn() - %s::pg_lsn",
                         (b.query("SELECT pg_last_wal_receive_lsn()")[0][0],))[0][0]
        counts["standby behind at the kill (WAL bytes)"] = int(behind)
    a.kill()  # the stopped WAL sender with it
    phase("killed")
    counts["payments created before the kill"] = len(load.created)
    failovers.append(promote(b, synchronous=synchronous, name="failover a -> b"))
    if not synchronous:
        forgotten_status = [ref for ref, status in b.query("SELECT merchant_reference, status FROM payments",
                                                           database="recon")
                            if snapshot.get(ref) in invariants.FINAL and status not in invariants.FINAL]
        counts["payment outcomes the new primary forgot"] = len(forgotten_status)

    phase("promoted")
    cluster.rewind(a, source=b)  # the old primary, a standby of the new one
    phase("rewound")
    if synchronous:
        make_synchronous(b, a)
    phase("synchronous again")
    time.sleep(BEFORE_FAILBACK)
    b.stop("fast")  # a planned switchover: b's WAL reaches a before b stops
    failovers.append(promote(a, synchronous=False, name="fail-back b -> a"))
    phase("failed back")
    cluster.rewind(b, source=a)
    if synchronous:
        make_synchronous(a, b)
    phase("rewound again")
    time.sleep(AFTER_FAILBACK)
    load.finish()
    phase("load stopped")
    chaos_seconds = time.monotonic() - started

    db.engine.dispose()  # this test's own pooled connections went with the servers that stopped
    sandbox.set_faults(rate_500=0, rate_hang=0)  # calm, so the run can settle
    settle(db, url, env, module=COMPRESSED, timeout=60)
    wait_for(lambda: httpx.get(f"{sandbox.url}/_admin/webhooks", headers=admin_headers(PSP), timeout=10)
             .json()["waiting"] == 0, 30, "the sandbox to send every webhook")
    for w in workers:
        w.stop()
    serve.stop()
    recon(url, env, "watch", "--once", module=COMPRESSED)
    report = invariants.check(db, sandbox.url, PSP)
    extra = extra_checks(db, sandbox.url, load, synchronous=synchronous, counts=counts, url=url, env=env)
    counts.update({"chaos seconds, measured": round(chaos_seconds, 1), "seconds settling":
                   round(time.monotonic() - started - chaos_seconds, 1), "cron sweeps": len(load.sweeps),
                   "payments created (batch committed)": len(load.created),
                   "payments whose batch failed (may exist)": len(load.uncertain),
                   "outage lines per worker log": [outage_lines(w.log) for w in workers], "phases (s)": phases})
    db.dispose()
    sandbox.stop()
    return Outcome(report, failovers, extra, counts)


def outage_lines(log: Path) -> int:
    """The worker's "database unavailable" warnings: one an outage (recon.db.availability)."""
    return sum("database unavailable (" in line for line in log.read_text(errors="replace").splitlines())


def extra_checks(db: Database, sandbox_url: str, load: Load, *, synchronous: bool, counts: dict[str, Any],
                 url: str, env: dict[str, str]) -> dict[str, list[Any]]:
    """The failover's own invariants (module docstring); for an asynchronous run, the recovery point counted
    into ``counts`` instead of payments and webhooks the database forgot."""
    with db.begin() as conn:
        refs = {str(r[0]) for r in conn.execute(sa.text("SELECT merchant_reference FROM payments"))}
        events = {str(r[0]) for r in conn.execute(sa.text("SELECT event_id FROM webhook_events"))}
        unfinished = [tuple(r) for r in conn.execute(sa.text(
            "SELECT id, kind, state, lease_until FROM jobs WHERE state NOT IN ('succeeded', 'dead', 'canceled') "
            "AND NOT (state IN ('runnable', 'retryable', 'pending') AND lease_owner IS NULL)"))]
        spent = conn.execute(sa.text(  # attempts the database's own failures cost (never a PSP's)
            "SELECT count(*) FROM job_attempts WHERE outcome = 'lease_expired' OR error_kind = 'db_transient'"
        )).scalar_one()
    hooks = httpx.get(f"{sandbox_url}/_admin/webhooks", headers=admin_headers(PSP), timeout=10).json()["webhooks"]
    acknowledged = {h["event_id"] for h in hooks if h["state"] == "delivered"}
    lost_payments = sorted(set(load.created) - refs)
    lost_hooks = sorted(acknowledged - events)
    counts.update({"webhooks acknowledged": len(acknowledged),
                   "webhooks never acknowledged (sandbox gave up)": sum(h["state"] == "failed" for h in hooks),
                   "attempts spent on the database (leases expired, db_transient)": spent})
    extra: dict[str, list[Any]] = {"every job finished or claimable again": unfinished}
    if synchronous:
        extra["every payment whose creation committed exists"] = lost_payments
        extra["every webhook answered 2xx is stored"] = lost_hooks
        return extra
    # asynchronous: what the database forgot, and that the PSP's side of it is found again
    at_psp = invariants.psp_payments_of(sandbox_url, PSP, lost_payments)
    charged = {p["merchant_reference"] for p in at_psp if p["status"] == "succeeded"}
    listed = missing_locally(url, env)
    counts.update({"payments whose creation the database forgot": len(lost_payments),
                   "  of them sent to the PSP": len(at_psp),
                   "  of them charged (succeeded at the PSP)": len(charged),
                   "  of them listed by `recon report` as missing_locally": len(charged & listed),
                   "acknowledged webhooks the database forgot": len(lost_hooks)})
    extra["every forgotten payment the PSP charged is listed by recon report"] = sorted(charged - listed)
    return extra


def missing_locally(url: str, env: dict[str, str]) -> set[str]:
    """The merchant references `recon report --psp stripe` lists as ``missing_locally`` (the PSP charged them,
    we have no such payment) over yesterday and today."""
    today = datetime.now(UTC).date()
    done = recon(url, env, "report", "--psp", PSP, "--since", (today - timedelta(days=1)).isoformat(), "--until",
                 (today + timedelta(days=1)).isoformat(), "--format", "json", timeout=120, module=COMPRESSED)
    assert done.returncode in (0, 1), done.stderr
    return {item["merchant_reference"] for item in json.loads(done.stdout)["items"]
            if item["category"] == "missing_locally"}


def render(outcome: Outcome, title: str) -> str:
    lines = [f"\n[{title}]", outcome.report.render()]
    lines += [f"{k}: {v}" for k, v in outcome.counts.items()]
    for name, rows in outcome.extra.items():
        lines.append(f"{'OK  ' if not rows else 'FAIL'} {name}" + (f" ({len(rows)})" if rows else ""))
        lines.extend(f"      {row}" for row in rows[:20])
    for f in outcome.failovers:
        trap = (f"; {f.syncrep_waiters} of recon's sessions waited on the kept synchronous_standby_names until it "
                f"was cleared {f.cleared_after_seconds:.2f} s after the promotion") if f.syncrep_waiters else ""
        lines.append(f"{f.name}: promotion -> first finished job {f.first_finish_seconds:.2f} s{trap}")
    return "\n".join(lines)


def test_failover__synchronous_standby__nothing_lost_nothing_charged_twice(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    outcome = run_failover(tmp_path, request, synchronous=True)
    text = render(outcome, "failover, synchronous standby")
    print(text)
    assert outcome.report.ok, text
    assert not any(outcome.extra.values()), text
    assert all(f.first_finish_seconds < GOAL_SECONDS for f in outcome.failovers), text
    assert outcome.failovers[0].syncrep_waiters > 0, text  # the trap was real, with recon's own commits
    assert outcome.counts["attempts spent on the database (leases expired, db_transient)"] == 0, text
    assert all(n <= 2 for n in outcome.counts["outage lines per worker log"]), text  # one an outage, two outages
    assert outcome.counts["payments created before the kill"] >= 50, text


def test_failover__asynchronous_standby_behind__what_the_database_forgot_is_found_again(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    outcome = run_failover(tmp_path, request, synchronous=False)
    violations = outcome.report.violations
    strangers = violations.pop("every PSP charge maps to exactly one payment")
    sent = outcome.counts["  of them sent to the PSP"]
    # the PSP's only payments we do not have are those whose creation the database forgot (counted above)
    violations["every PSP charge maps to exactly one payment, or to one the database forgot"] = \
        [] if len(strangers) == sent else strangers
    text = render(outcome, "failover, asynchronous standby stalled for 2 s")
    print(text)
    assert not any(violations.values()) and not any(outcome.extra.values()), text
    assert all(n <= 2 for n in outcome.counts["outage lines per worker log"]), text
    assert all(f.first_finish_seconds < GOAL_SECONDS for f in outcome.failovers), text
    assert outcome.counts["standby behind at the kill (WAL bytes)"] > 0, text
