"""Proof under fire: money is never lost or taken twice, whatever crashes.

On real PostgreSQL, with the PSP sandbox injecting 429s (with Retry-After), 5xx, hangs after charging, slow
settlement and declines: several `recon worker` processes killed with SIGKILL at random and restarted while
payments are created and sweeps run from a simulated cron; one worker frozen with SIGSTOP past its lease and
resumed; the sandbox restarted once; PostgreSQL restarted once. Then the invariants (tests/chaos/invariants.py).

The main scenario runs once per PSP adapter, with the same faults, disruptions and invariants:

- ``sandbox``: the sandbox's native wire, ``--chaos-seconds`` of chaos, up to 400 payments. The only run that
  restarts PostgreSQL (a restart costs seconds of a short run, and three would cost the suite its budget).
- ``stripe`` and ``adyen``: recon's real adapters against ``recon psp-sandbox --flavor stripe|adyen``,
  ``FLAVOR_SHARE`` of that chaos each (15 s by default) and up to ``FLAVOR_PAYMENTS``. Through Stripe an
  injected 500 on a create is saved under its key (replayed, ``Stripe-Should-Retry: false``): the charge leaves
  the payment pending and reconciliation's search by merchant reference heals it. Through Adyen 5xx are
  transient (retried with the same key) and reconciliation reads the Payment accounting report, which the
  sandbox serves for today. Two timings follow the chaos time scale there, so that these runs settle in
  seconds: the circuit breaker opens for 3 s (``[psp.stripe|adyen]`` in the config, default 30 s) and the
  reconcile handler's fixed 30 s snooze behind a charge's live lease is one lease TTL (tests/chaos/compressed.py).
  These two runs also hear the PSP's webhooks: the sandbox signs and sends them to a `recon serve` process (10 %
  dropped, 10 % delivered twice, 10 % reordered; `recon serve` killed and restarted once), so webhooks and
  polling heal together under the same invariants, and some payments must have been moved by a webhook.

Bounded: ``--chaos-seconds`` (default 20) of chaos, then at most 90 s to settle, per run. ``--chaos-seconds
120`` for a longer run. The planted bug (tests/chaos/unfenced_worker.py: fencing removed) must make the
invariants fail.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from recon.db.database import Database, connect
from recon.db.payment_store import PaymentStore
from recon.rows import NewPayment
from tests.chaos import invariants
from tests.chaos.harness import (
    MERCHANT_ACCOUNT,
    Sandbox,
    ServeProcess,
    WorkerProcess,
    base_env,
    can_restart_postgres,
    psp_env,
    recon,
    restart_postgres,
    webhook_flags,
    write_config,
)

pytestmark = pytest.mark.chaos
FAULT_FLAGS = ("--rate-429", "0.05", "--retry-after", "1", "--rate-500", "0.03", "--rate-503", "0.02",
               "--rate-hang", "0.04", "--hang-seconds", "1.5", "--pending-fraction", "0.15", "--settle-after", "2",
               "--pending-fail-fraction", "0.3", "--rate-decline", "0.05", "--decline-suffix", "off")
#: the share of ``--chaos-seconds`` each run through a real PSP adapter gets, and its payments
FLAVOR_SHARE = 0.75
FLAVOR_PAYMENTS = 200
#: the entry point those runs use instead of `recon` (tests/chaos/compressed.py)
COMPRESSED = "tests.chaos.compressed"


@pytest.fixture
def pg(pg_migrated: str) -> Iterator[Database]:
    db = connect(pg_migrated)
    with db.begin() as conn:
        conn.execute(sa.text("TRUNCATE payment_events, payments, job_attempts, jobs RESTART IDENTITY CASCADE"))
    yield db
    db.dispose()


def create_payments(db: Database, start: int, n: int, psp: str = "sandbox") -> None:
    """Payments ``chaos-START`` .. for ``psp``, with what its real adapter needs: Stripe a PaymentMethod and a
    Customer id; Adyen a stored payment method, a shopper reference and a merchant account (MERCHANT_ACCOUNT)."""
    rng = random.Random(start)
    payments = []
    for i in range(start, start + n):
        method, customer = _instrument(psp, i)
        payments.append(NewPayment(MERCHANT_ACCOUNT, f"chaos-{i:05d}", rng.randint(100, 50_000),
                                   rng.choice(["EUR", "USD", "JPY"]), psp, payment_method=method,
                                   customer_reference=customer))
    PaymentStore(db).create(payments)


def _instrument(psp: str, i: int) -> tuple[str | None, str | None]:
    """(payment method, customer reference) of payment ``i`` as ``psp``'s adapter wants them."""
    if psp == "stripe":
        return "pm_card_visa", f"cus_chaos{i:05d}"
    if psp == "adyen":
        return f"{8315_0000_0000_0000 + i}", f"shopper-{i:05d}"
    return None, None


def settle(db: Database, db_url: str, env: dict[str, str], timeout: float = 90, module: str = "recon") -> None:
    """After the chaos: sweep from "cron" until every payment is final (or needs review), bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with db.begin() as conn:
            open_ = conn.execute(sa.text(
                "SELECT count(*) FROM payments WHERE status IN ('created', 'processing', 'pending')")).scalar_one()
            busy = conn.execute(sa.text(
                "SELECT count(*) FROM jobs WHERE state NOT IN ('succeeded', 'dead', 'canceled') AND kind = 'charge'"
            )).scalar_one()
        if open_ == 0 and busy == 0:
            return
        recon(db_url, env, "sweep", "--older-than", "1s", "--json", timeout=60, module=module)
        time.sleep(0.5)


def webhooks_met(db: Database) -> dict[str, int]:
    """What the PSP pushed and what it did: events stored (once each), by how they were applied, and payments
    whose final state came from a webhook rather than a charge's answer or a sweep."""
    with db.begin() as conn:
        states = {str(r[0]): int(r[1]) for r in conn.execute(
            sa.text("SELECT state, count(*) FROM webhook_events GROUP BY state"))}
        by_hook = conn.execute(sa.text(
            "SELECT count(DISTINCT payment_id) FROM payment_events WHERE source = 'webhook' "
            "AND from_status <> to_status")).scalar_one()
    return {**{f"webhook events {k}": int(v) for k, v in sorted(states.items())},
            "payments moved by a webhook": int(by_hook)}


def faults_met(db: Database) -> dict[str, int]:
    """What the run went through, as recon recorded it: failed attempts per error kind, declines, answers the
    PSP saved under a key (Stripe's 500s), payments that waited on the PSP (pending at some point), and jobs
    whose last snooze was the PSP guard's (a 429's cool-down, the circuit breaker)."""
    with db.begin() as conn:
        kinds = conn.execute(sa.text(
            "SELECT error_kind, count(*) FROM job_attempts WHERE error_kind IS NOT NULL GROUP BY error_kind")).all()
        guarded = conn.execute(sa.text(
            "SELECT count(*) FROM jobs WHERE last_error LIKE 'psp % cooling down after a 429' "
            "OR last_error LIKE 'psp % circuit %'")).scalar_one()
        declines = conn.execute(sa.text(
            "SELECT count(*) FROM payments WHERE failure_reason LIKE 'declined:%'")).scalar_one()
        saved = conn.execute(sa.text(
            "SELECT count(*) FROM payment_events WHERE details->>'saved_answer' = 'true'")).scalar_one()
        waited = conn.execute(sa.text(
            "SELECT count(DISTINCT payment_id) FROM payment_events WHERE to_status = 'pending'")).scalar_one()
    return {**{f"attempts failed: {kind}": n for kind, n in sorted(kinds)}, "declined": declines,
            "saved answers": saved, "payments pending at some point": waited,
            "jobs last held back by a 429 cool-down or the breaker": guarded}


#: the native run restarts the shared server: it holds it alone (tests/chaos/server_lock.py)
@pytest.mark.parametrize("psp", [pytest.param("sandbox", marks=pytest.mark.restarts_postgresql), "stripe", "adyen"])
def test_chaos__money_is_never_lost_or_taken_twice(pg: Database, pg_migrated: str, tmp_path: Path,
                                                   request: pytest.FixtureRequest, psp: str) -> None:
    native = psp == "sandbox"
    seconds = float(request.config.getoption("--chaos-seconds")) * (1 if native else FLAVOR_SHARE)
    most = 400 if native else FLAVOR_PAYMENTS
    rng = random.Random(20261130)
    config = write_config(tmp_path / "recon.toml")
    serve = None
    hooks: tuple[str, ...] = ()
    if not native:  # the PSP pushes its webhooks (some dropped, duplicated, reordered) to `recon serve`
        serve = ServeProcess(pg_migrated, {})  # its port now (the sandbox sends there), its env below
        hooks = webhook_flags(psp, serve.url)
    sandbox = Sandbox(tmp_path / "psp.db", *FAULT_FLAGS, "--seed", "7", *hooks, psp=psp)
    env = base_env(config, sandbox.url, **psp_env(psp, sandbox.url))
    if serve is not None:
        serve.env = env
        serve.start()
        request.addfinalizer(serve.stop)
    sandbox.start()
    request.addfinalizer(sandbox.stop)  # also when the run fails half-way: no process outlives the test
    entry = "recon" if native else COMPRESSED  # the runs through real adapters: CHARGE_BUSY_SNOOZE compressed
    workers = [WorkerProcess(pg_migrated, env, tmp_path / f"worker-{i}.log", module=entry) for i in range(3)]
    for w in workers:
        request.addfinalizer(w.stop)
        w.start()
    stop = threading.Event()
    created = [0]
    sweeps: list[int] = []

    def producer() -> None:
        while not stop.is_set() and created[0] < most:
            try:
                create_payments(pg, created[0], 10, psp)
                created[0] += 10
            except Exception:  # PostgreSQL is restarting: a producer retries, as any would
                pass
            stop.wait(0.25)

    def cron() -> None:
        while not stop.wait(2.0):
            sweeps.append(recon(pg_migrated, env, "sweep", "--older-than", "2s", "--json", timeout=60,
                                module=entry).returncode)

    threads = [threading.Thread(target=producer), threading.Thread(target=cron)]
    for t in threads:
        t.start()
    started = time.monotonic()
    events = {"freeze": 0.25, "postgres": 0.5, "webhooks": 0.6, "sandbox": 0.75}
    done: set[str] = set()
    try:
        while (elapsed := time.monotonic() - started) < seconds:
            progress = elapsed / seconds
            if "freeze" not in done and progress >= events["freeze"]:
                done.add("freeze")
                workers[0].freeze()
                time.sleep(4.5)  # past the 2 s lease: its jobs are rescued and run elsewhere
                workers[0].thaw()
            elif "postgres" not in done and progress >= events["postgres"] and native and can_restart_postgres():
                done.add("postgres")
                restart_postgres()
                pg.engine.dispose()  # this test's own pooled connections died with the server
            elif "webhooks" not in done and progress >= events["webhooks"] and serve is not None:
                done.add("webhooks")
                serve.restart()  # deliveries meanwhile fail and the sandbox retries them
            elif "sandbox" not in done and progress >= events["sandbox"]:
                done.add("sandbox")
                sandbox.restart()
            else:
                victim = rng.choice(workers[1:])
                victim.kill()
                victim.start()
            time.sleep(rng.uniform(0.5, 1.5))
    finally:
        stop.set()
        for t in threads:
            t.join(90)
    chaos_done = time.monotonic()
    try:
        sandbox.set_faults(rate_429=0, rate_500=0, rate_503=0, rate_hang=0)  # calm, so the run can settle
        settle(pg, pg_migrated, env, module=entry)
    finally:
        for w in workers:
            w.stop()
    settled = time.monotonic()
    recon(pg_migrated, env, "watch", "--once", module=entry)
    report = invariants.check(pg, sandbox.url, psp)
    sandbox.stop()
    faults = {**faults_met(pg), **(webhooks_met(pg) if not native else {})}
    report.counts.update({"chaos seconds": int(seconds), "worker kills": sum(w.kills for w in workers),
                          "cron sweeps": len(sweeps), "disruptions": len(done),
                          "chaos seconds, measured": int(chaos_done - started),
                          "seconds settling": int(settled - chaos_done), **faults})
    print(f"\n[{psp}]\n" + report.render())
    assert created[0] >= 50 and report.counts["sandbox charges"] > 0
    assert report.ok, report.render()
    if not native:  # the faults reached recon through the real adapter (each is expected ~10 times a run;
        # which error kinds the attempts record depends on how often the guard held calls back)
        failed_attempts = sum(n for k, n in faults.items() if k.startswith("attempts failed: "))
        assert failed_attempts and faults["declined"] and faults["payments pending at some point"], report.render()
        # webhooks and polling together: events were stored once each and some moved payments first
        assert faults.get("webhook events applied", 0) and faults["payments moved by a webhook"], report.render()


def stale_worker_scenario(pg: Database, pg_migrated: str, tmp_path: Path, *,
                          unfenced: bool = False) -> invariants.Report:
    """Deterministic: worker A sends charges, the PSP answers "pending" slowly, A is frozen past its lease;
    worker B re-runs the jobs (same keys: the PSP replays "pending"); a sweep heals the payments to
    succeeded once the PSP settles; then A thaws and delivers its stale "pending" answers."""
    sandbox = Sandbox(tmp_path / "psp.db", "--latency-ms", "600", "--pending-fraction", "1", "--settle-after", "1",
                      "--decline-suffix", "off")
    sandbox.start()
    env = base_env(write_config(tmp_path / "recon.toml"), sandbox.url)
    a = WorkerProcess(pg_migrated, env, tmp_path / "a.log", "--queues", "charges", unfenced=unfenced)
    b = WorkerProcess(pg_migrated, env, tmp_path / "b.log", "--queues", "charges", unfenced=unfenced)
    try:
        create_payments(pg, 0, 6)
        a.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # A has claimed the charges and is waiting on the PSP
            with pg.begin() as conn:
                mine = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE state = 'leased' AND lease_owner LIKE :p"),
                                    {"p": f"%:{a.pid}:%"}).scalar_one()
            if mine >= 6:
                break
            time.sleep(0.05)
        time.sleep(0.2)
        a.freeze()
        b.start()
        # A's leases expire and B re-runs the charges (the PSP replays "pending"): every charge job finished
        wait_until(lambda: count(pg, "SELECT count(*) FROM jobs WHERE kind = 'charge' AND state = 'succeeded'") >= 6,
                   30, "B to re-run the six charges")
        sandbox.set_faults(latency_ms=0)
        deadline = time.monotonic() + 20
        while True:  # the PSP settles them (1 s after each charge): sweeps heal all six to succeeded
            assert recon(pg_migrated, env, "sweep", "--older-than", "0", "--json").returncode in (0, 1)
            if count(pg, "SELECT count(*) FROM payments WHERE status = 'succeeded'") >= 6:
                break
            assert time.monotonic() < deadline, "the sweeps did not heal the six payments within 20 s"
            time.sleep(0.2)
        a.thaw()
        a.stop()  # SIGTERM: A drains, delivering its stale answers (read from the PSP while frozen), and exits
    finally:
        a.stop()
        b.stop()
    recon(pg_migrated, env, "watch", "--once")
    report = invariants.check(pg, sandbox.url)
    sandbox.stop()
    print("\n" + report.render())
    return report


def count(db: Database, sql: str) -> int:
    with db.begin() as conn:
        return int(conn.execute(sa.text(sql)).scalar_one())


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout} s: {what}"
        time.sleep(0.05)


def test_chaos__stale_worker_cannot_undo_a_heal(pg: Database, pg_migrated: str, tmp_path: Path) -> None:
    report = stale_worker_scenario(pg, pg_migrated, tmp_path)
    assert report.ok, report.render()
    assert report.counts["  succeeded"] == 6


def test_chaos__planted_fencing_bug_is_caught(pg: Database, pg_migrated: str, tmp_path: Path) -> None:
    """With fencing removed (tests.chaos.unfenced_worker), the same run must violate the invariants."""
    report = stale_worker_scenario(pg, pg_migrated, tmp_path, unfenced=True)
    assert not report.ok, "the planted bug went unnoticed:\n" + report.render()
    broken = report.violations["every status change has its audit event"] + \
        report.violations["local status equals the PSP's for every final payment"] + \
        report.violations["every payment is final or needs_review"]
    assert broken, report.render()
