"""The PSP guard against the real sandbox over HTTP, on both databases: the PSP-wide 429 cool-down seen by
another worker process, the circuit breaker (with a fixed clock), auth failures, and the shared rate limit."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from random import Random

import pytest

from psp_adapters.errors import PspError, PspRateLimited, PspTransientError
from psp_adapters.protocol import NotFound, PspRef, Secret
from psp_adapters.sandbox.adapter import SandboxAdapter
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.server import SandboxServer
from recon import FixedClock, Handlers, JobState, JobStore, RetryPolicy, Snooze, Worker
from recon.classify import classify
from recon.control_rows import Admission
from recon.db.control_store import ControlStore
from recon.db.database import Database, connect
from recon.db.payment_store import PaymentStore
from recon.errors import ConfigError
from recon.payments.charge import ChargeHandler
from recon.payments.guard import Permit, PspGuard
from recon.payments.psp_limits import GuardConfig, PspLimits
from recon.rows import PaymentStatus
from tests.integration.payment_flow import admin, create, fast_settings, sandbox_adapter, unfinished

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MISSING = PspRef(psp_reference="psp_missing")  # the sandbox answers 404: NotFound, a good answer


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "psp.db", faults=Faults(decline_amount_suffix=None)) as server:
        yield server


@pytest.fixture
def adapter(sandbox: SandboxServer) -> Iterator[SandboxAdapter]:
    with sandbox_adapter(sandbox.url) as a:
        yield a


def guard_for(db: Database, **limits: float) -> PspGuard:
    return PspGuard(ControlStore(db), GuardConfig(per_psp={"sandbox": PspLimits(**limits)}),  # type: ignore[arg-type]
                    rng=Random(7))


def control(db: Database) -> dict[str, object]:
    controls, _now = ControlStore(db).list_controls()
    [row] = [c for c in controls if c.psp == "sandbox"]
    return {"state": row.breaker_state, "failures": row.failures, "probe_at": row.probe_at,
            "cooldown_until": row.cooldown_until, "reason": row.breaker_reason}


def fetch(permit: Permit | Snooze, adapter: SandboxAdapter) -> object:
    assert isinstance(permit, Permit), permit
    return permit.call(lambda: adapter.fetch_payment(MISSING))


#: how long a test waits for a worker process to do what it needs: a bound on a wait, never slept
PROCESS_BOUND_SECONDS = 120


def test_guard__429_cool_down_is_observed_by_a_second_worker_process(db: Database, db_url: str,
                                                                     sandbox: SandboxServer, tmp_path: Path) -> None:
    """Worker A gets a 429 with Retry-After: 300 s, worker B (another process) snoozes its job until then. The
    cool-down is long (and cooldown_max_seconds raised to let it) so that B, however slowly it starts on a
    loaded machine, runs inside it: with 20 s, a machine at load 17+ took longer than that to run A and
    start B, and B charged. Nothing waits for it: each process is waited for until it exits."""
    retry_after = 300
    sandbox.set_faults(Faults(rate_429=1.0, retry_after_seconds=retry_after, decline_amount_suffix=None))
    config = tmp_path / "recon.toml"
    config.write_text(f"[psp.sandbox]\ncooldown_max_seconds = {2 * retry_after}\n", encoding="utf-8")
    env = {**os.environ, "RECON_SANDBOX_BASE_URL": sandbox.url, "RECON_CONFIG": str(config)}
    worker = [sys.executable, "-m", "recon", "--database-url", db_url, "--log-level", "ERROR", "worker",
              "--burst", "--queues", "charges"]
    [first] = create(db, 1, prefix="a")
    started = datetime.now(UTC)
    a = subprocess.run(worker, env=env, capture_output=True, text=True, timeout=PROCESS_BOUND_SECONDS)
    ended = datetime.now(UTC)
    assert a.returncode == 0, a.stderr
    [job_a] = JobStore(db).list_jobs(kind="charge")
    assert (job_a.state, job_a.last_error_kind) == (JobState.RETRYABLE, "rate_limited")
    cooldown_until = control(db)["cooldown_until"]
    assert isinstance(cooldown_until, datetime)
    # Retry-After from the 429, which A got while it ran (a second of slack for the database's clock)
    slack = timedelta(seconds=1)
    assert started + timedelta(seconds=retry_after) - slack <= cooldown_until
    assert cooldown_until <= ended + timedelta(seconds=retry_after) + slack

    sandbox.set_faults(Faults(decline_amount_suffix=None))  # the PSP would answer now: B must not ask
    [second] = create(db, 1, prefix="b")
    b = subprocess.run(worker, env=env, capture_output=True, text=True, timeout=PROCESS_BOUND_SECONDS)
    assert datetime.now(UTC) < cooldown_until, "B ran after the cool-down: the test proves nothing"
    assert b.returncode == 0, b.stderr
    job_b = next(j for j in JobStore(db).list_jobs(kind="charge") if j.id != job_a.id)
    assert job_b.state is JobState.PENDING and job_b.last_error == "psp sandbox cooling down after a 429"
    assert job_b.max_attempts - job_b.attempts == 12 - 0  # snoozed: no attempt spent (12: the charge default)
    assert job_b.run_after >= cooldown_until
    assert [a.outcome for a in JobStore(db).attempts(job_b.id)] == ["snoozed"]
    assert admin(sandbox.url, "/_admin/charges")["charges"] == 0  # B never called the sandbox
    ledger = PaymentStore(db)
    assert ledger.get(second).status is PaymentStatus.CREATED  # type: ignore[union-attr]  # held before sending
    assert ledger.get(first).status is PaymentStatus.PROCESSING  # type: ignore[union-attr]


def test_guard__breaker_opens_half_opens_and_closes_with_a_fixed_clock(db_url: str, sandbox: SandboxServer,
                                                                       adapter: SandboxAdapter) -> None:
    clock = FixedClock(T0)
    fdb = connect(db_url, clock=clock)
    limits = {"breaker_failures": 3, "breaker_open_seconds": 30.0}
    guard = guard_for(fdb, **limits)
    try:
        sandbox.set_faults(Faults(rate_500=1.0, decline_amount_suffix=None))
        for _ in range(2):
            with pytest.raises(PspTransientError):
                fetch(guard.admit("sandbox"), adapter)
        assert control(fdb)["failures"] == 2
        sandbox.set_faults(Faults(decline_amount_suffix=None))
        assert isinstance(fetch(guard.admit("sandbox"), adapter), NotFound)  # an answer: the count restarts
        assert control(fdb)["failures"] == 0
        sandbox.set_faults(Faults(rate_500=1.0, decline_amount_suffix=None))
        for _ in range(3):
            with pytest.raises(PspTransientError):
                fetch(guard.admit("sandbox"), adapter)
        assert control(fdb) | {"reason": None} == {"state": "open", "failures": 3, "cooldown_until": None,
                                                  "probe_at": T0 + timedelta(seconds=30), "reason": None}
        held = guard.admit("sandbox")
        assert isinstance(held, Snooze) and held.reason == "psp sandbox circuit open"
        assert timedelta(seconds=30) <= held.delay <= timedelta(seconds=33.1)

        clock.advance(30)  # the probe time: many workers race for the one probe slot
        guards = [guard_for(fdb, **limits) for _ in range(6)]
        answers: list[Permit | Snooze] = []
        threads = [threading.Thread(target=lambda g=g: answers.append(g.admit("sandbox"))) for g in guards]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        probes = [p for p in answers if isinstance(p, Permit)]
        assert len(probes) == 1 and probes[0].probe is not None
        losers = {s.reason for s in answers if isinstance(s, Snooze)}
        assert losers == {"psp sandbox circuit half-open: a probe is out"}
        assert control(fdb)["state"] == "half_open"
        with pytest.raises(PspTransientError):
            fetch(probes[0], adapter)  # the probe fails: open again, for another 30 s
        assert control(fdb)["state"] == "open" and control(fdb)["probe_at"] == T0 + timedelta(seconds=60)
        assert isinstance(guard.admit("sandbox"), Snooze)

        clock.advance(30)
        sandbox.set_faults(Faults(decline_amount_suffix=None))
        probe = guard.admit("sandbox")
        assert isinstance(probe, Permit) and probe.probe is not None
        assert isinstance(fetch(probe, adapter), NotFound)  # the probe succeeds: closed
        assert control(fdb) == {"state": "closed", "failures": 0, "probe_at": None, "cooldown_until": None,
                                "reason": None}
        permit = guard.admit("sandbox")
        assert isinstance(permit, Permit) and permit.probe is None
    finally:
        fdb.dispose()


def test_guard__auth_failure_opens_the_breaker_and_later_jobs_snooze(db: Database, tmp_path: Path) -> None:
    calls: list[str] = []

    class Counting(SandboxAdapter):
        def create_payment(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            calls.append("create")
            return super().create_payment(*args, **kwargs)

    faults = Faults(decline_amount_suffix=None)
    with SandboxServer(tmp_path / "auth.db", api_key="sk_right", faults=faults) as server:
        with Counting(server.url, api_key=Secret("sk_wrong"), timeout=2.0) as adapter:
            guard = guard_for(db)  # default threshold 5: auth does not wait for it
            handlers = Handlers()
            handlers.register("charge", ChargeHandler(PaymentStore(db), lambda _n: adapter, guard=guard))
            settings = fast_settings()

            def burst() -> None:
                Worker(JobStore(db), handlers, config=settings.engine, policy=RetryPolicy(settings.retry),
                       queues=["charges"], classify_func=classify).run(burst=True)

            [first] = create(db, 1, prefix="a")
            burst()
            [job] = JobStore(db).list_jobs(kind="charge")
            assert (job.state, job.last_error_kind) == (JobState.DEAD, "auth")
            state = control(db)
            assert state["state"] == "open" and state["failures"] == 1 and "PspAuthError" in str(state["reason"])
            assert "sk_wrong" not in str(state["reason"])
            create(db, 1, prefix="b")
            burst()
            second = next(j for j in JobStore(db).list_jobs(kind="charge") if j.id != job.id)
            assert second.state is JobState.PENDING and second.last_error == "psp sandbox circuit open"
            assert second.max_attempts - second.attempts == 12
            assert calls == ["create"]  # the second job never reached the PSP
    assert PaymentStore(db).get(first).status is PaymentStatus.PROCESSING  # type: ignore[union-attr]


def test_guard__rate_limit_bounds_the_request_rate_across_guards(db: Database, sandbox: SandboxServer,
                                                                 adapter: SandboxAdapter) -> None:
    """Two guards (as two worker processes would) share the PSP's bucket: 20 requests/s in all, against a
    sandbox that answers 429 beyond 25/s. 50 calls from 8 threads take at least (50 - burst - held)/20 s."""
    sandbox.set_faults(Faults(rate_limit=25, decline_amount_suffix=None))
    guards = [guard_for(db, rate_limit=20, rate_wait_seconds=10) for _ in range(2)]
    stamps: list[float] = []
    errors: list[PspError] = []
    tickets = iter(range(50))
    lock = threading.Lock()

    def run(guard: PspGuard) -> None:
        while True:
            with lock:
                if next(tickets, None) is None:
                    return
            permit = guard.admit("sandbox")
            try:
                fetch(permit, adapter)
            except PspError as exc:
                errors.append(exc)
            with lock:
                stamps.append(time.monotonic())

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(guards[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    elapsed = time.monotonic() - started
    assert errors == [] and len(stamps) == 50
    assert not any(isinstance(e, PspRateLimited) for e in errors)
    cap, batch = guards[0].config.for_psp("sandbox").capacity, guards[0].config.for_psp("sandbox").batch
    assert (cap, batch) == (2.0, 1)
    assert elapsed >= (50 - cap - 2 * batch) / 20 - 0.05, elapsed
    assert elapsed < 50 / 20 + 2.0, elapsed
    stamps.sort()  # no second holds more than the rate plus the bucket and the permits held locally
    assert max(sum(1 for s in stamps if t0 <= s < t0 + 1.0) for t0 in stamps) <= 20 + cap + 2 * batch


def test_guard__no_token_within_the_wait_snoozes(db: Database) -> None:
    guard = guard_for(db, rate_limit=1, rate_wait_seconds=0.1)
    assert isinstance(guard.admit("sandbox"), Permit)
    held = guard.admit("sandbox")
    assert isinstance(held, Snooze) and held.reason == "psp sandbox rate limit"
    assert timedelta(seconds=0.5) < held.delay < timedelta(seconds=1.3)


def test_guard__a_spent_permit_is_admitted_again_before_a_second_call(db: Database) -> None:
    """A movement's lookup before it re-sends an old key, then its send: two calls, two tokens. At 1 request/s
    and a bucket of 1, a fresh unspent permit is refreshed as itself; once a call was made through it, its
    refresh is a new admission, which finds no token within 0.1 s and snoozes."""
    guard = guard_for(db, rate_limit=1, rate_burst=1, rate_wait_seconds=0.1)
    permit = guard.admit("sandbox")
    assert isinstance(permit, Permit)
    assert guard.refresh(permit) is permit and guard.counts["readmitted"] == 0
    permit.call(lambda: None)
    again = guard.refresh(permit)
    assert isinstance(again, Snooze) and again.reason == "psp sandbox rate limit"
    assert guard.counts["readmitted"] == 1


class SlowFirstAdmission(ControlStore):
    """A ControlStore whose first admission statement takes 1.5 s (a database under load), longer than the
    1 s the old gate let a thread wait for another thread's statement."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.entered = threading.Event()

    def admit(self, psp: str, *, rate: float | None, capacity: float, batch: int) -> Admission | None:
        if not self.entered.is_set():
            self.entered.set()
            time.sleep(1.5)
        return super().admit(psp, rate=rate, capacity=capacity, batch=batch)


def test_guard__waiting_for_another_threads_statement_is_neither_a_snooze_nor_a_throttle(db: Database) -> None:
    """Threads that wait for another thread's slow admission statement get their permits when it returns: no
    job snoozes and the sizer is told no throttle (the old gate snoozed them and counted each snooze as the PSP
    throttling, so a worker shrank under its own contention)."""
    store = SlowFirstAdmission(db)
    guard = PspGuard(store, GuardConfig(per_psp={"sandbox": PspLimits(rate_limit=100, rate_wait_seconds=0.2)}),
                     rng=Random(7))
    results: list[Permit | Snooze] = []
    lock = threading.Lock()

    def run() -> None:
        outcome = guard.admit("sandbox")
        with lock:
            results.append(outcome)

    first = threading.Thread(target=run)
    first.start()
    assert store.entered.wait(30)
    others = [threading.Thread(target=run) for _ in range(5)]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join(30)
    assert len(results) == 6 and all(isinstance(r, Permit) for r in results), results
    assert guard.pressure().throttles == 0 and guard.pressure().saturated == 0
    assert guard.counts["gate_waits"] >= 1 and guard.counts["snoozed_rate"] == 0


def test_guard__many_threads_in_two_guards_never_pass_the_limit(db: Database) -> None:
    """32 threads in two guards (two processes' worth) take 60 permits at 20/s: the refills run outside the
    gate's lock, one at a time per guard, and the shared bucket still bounds every second: the rate, the
    bucket's capacity, and at most capacity - 1 permits each guard held from before."""
    guards = [guard_for(db, rate_limit=20, rate_wait_seconds=30) for _ in range(2)]
    limits = guards[0].config.for_psp("sandbox")
    cap = limits.capacity
    assert (cap, limits.batch) == (2.0, 1)
    stamps: list[float] = []
    tickets = iter(range(60))
    lock = threading.Lock()

    def run(guard: PspGuard) -> None:
        while True:
            with lock:
                if next(tickets, None) is None:
                    return
            assert isinstance(guard.admit("sandbox"), Permit)
            with lock:
                stamps.append(time.monotonic())

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(guards[i % 2],)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - started
    assert len(stamps) == 60
    assert elapsed >= (60 - cap - 2 * (cap - 1)) / 20 - 0.05, elapsed
    stamps.sort()
    assert max(sum(1 for s in stamps if t0 <= s < t0 + 1.0) for t0 in stamps) <= 20 + cap + 2 * (cap - 1)
    assert sum(g.counts["snoozed_rate"] for g in guards) == 0
    assert sum(g.counts["admitted"] for g in guards) == 60  # counted from 16 threads each: none lost


class SlowAdmissions(ControlStore):
    """A ControlStore whose admission statements each take 0.2 s more (a loaded machine: a wait for a pooled
    connection, for SQLite's write lock, for the interpreter)."""

    def admit(self, psp: str, *, rate: float | None, capacity: float, batch: int) -> Admission | None:
        time.sleep(0.2)
        return super().admit(psp, rate=rate, capacity=capacity, batch=batch)


def test_guard__slow_admission_statements_still_admit_at_the_rate(db: Database) -> None:
    """100 requests/s with a bucket of 10, admission statements of 0.2 s: one statement at a time brings at most
    10 tokens per 0.2 s, 50/s whatever the threads (200 permits: at most (200 - 1) / ((200 - 10 - 5) / 50 s),
    54/s). With several statements in flight 24 threads take them faster than one statement at a time could
    (88/s on a quiet machine, 61-79/s at load 15), and no second holds more than the rate and the bucket."""
    guard = PspGuard(SlowAdmissions(db), GuardConfig(per_psp={"sandbox": PspLimits(
        rate_limit=100, rate_burst=10, rate_wait_seconds=30)}), rng=Random(7))
    stamps: list[float] = []
    tickets = iter(range(200))
    lock = threading.Lock()

    def run() -> None:
        while True:
            with lock:
                if next(tickets, None) is None:
                    return
            assert isinstance(guard.admit("sandbox"), Permit)
            with lock:
                stamps.append(time.monotonic())

    threads = [threading.Thread(target=run) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(stamps) == 200
    stamps.sort()
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    assert rate >= 58, rate
    assert max(sum(1 for s in stamps if t0 <= s < t0 + 1.0) for t0 in stamps) <= 100 + 10


def test_guard__the_bucket_time_never_moves_back(db_url: str) -> None:
    """An admission statement stamped earlier than the last one (it waited for the write lock or the row behind
    it) refills nothing: 10 tokens/s, a bucket of 10, three statements stamped T0+1, T0+0.5 and T0+1 again. The
    second and third find the 0.5 s between them already granted by the first (the bucket refills by rate x
    elapsed from the latest time it was stamped)."""
    fdb = connect(db_url, clock=FixedClock(T0))
    try:
        store = ControlStore(fdb)
        store.ensure("sandbox")
        first = store.admit("sandbox", rate=10, capacity=10, batch=10)  # the bucket starts full
        assert first is not None and first.granted == 10
        fdb.clock = FixedClock(T0 + timedelta(seconds=1))
        second = store.admit("sandbox", rate=10, capacity=10, batch=10)  # 1 s x 10/s
        assert second is not None and second.granted == 10
        fdb.clock = FixedClock(T0 + timedelta(seconds=0.5))
        late = store.admit("sandbox", rate=10, capacity=10, batch=1)
        assert late is not None and late.granted == 0
        fdb.clock = FixedClock(T0 + timedelta(seconds=1))
        third = store.admit("sandbox", rate=10, capacity=10, batch=5)
        assert third is not None and third.granted == 0  # 20 in one second already: the rate and the bucket
    finally:
        fdb.dispose()


class StalledBegin:
    """The handlers' Database while ``release`` is not set: every write transaction (``begin``) waits for it
    first, as a handler waits for a pooled connection or SQLite's write lock under load; everything else is
    the real database's. ``arrivals`` counts the transactions held."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.release = threading.Event()
        self.arrivals = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> object:
        return getattr(self._db, name)

    @contextmanager
    def begin(self) -> Iterator[object]:
        if not self.release.is_set():
            with self._lock:
                self.arrivals += 1
            assert self.release.wait(60)
        with self._db.begin() as conn:
            yield conn


def test_guard__a_stall_before_the_call_releases_no_crowd_at_the_psp(db: Database, sandbox: SandboxServer) -> None:
    """40 charge jobs on 40 threads at 20 requests/s with a burst of 2, while every handler's transaction stalls
    (a database under load) and then all are released at once. The calls reach the PSP within the rate: at most
    20 + 2 in any second, and the sandbox (20/s, a bucket of 20) never answers 429. Before, each handler took
    its rate token, then waited in the stall holding it, and the release sent 40 calls in the same instant
    (56 calls, 16 of them 429s); now a permit older than PERMIT_SECONDS is admitted again before the call."""
    rate, burst, n = 20, 2, 40
    sandbox.set_faults(Faults(rate_limit=rate, decline_amount_suffix=None))
    stamps: list[float] = []

    class Stamping(SandboxAdapter):
        def create_payment(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            stamps.append(time.monotonic())  # list.append is atomic: every thread's call is counted
            return super().create_payment(*args, **kwargs)

    adapter = Stamping(sandbox.url)
    stalled = StalledBegin(db)
    guard = guard_for(db, rate_limit=rate, rate_burst=burst, rate_wait_seconds=30)
    handlers = Handlers()
    handlers.register("charge", ChargeHandler(PaymentStore(stalled), lambda _name: adapter,  # type: ignore[arg-type]
                                              guard=guard))
    ids = create(db, n)
    settings = fast_settings()
    engine = replace(settings.engine, autosize=False, concurrency=n, claim_batch_size=n, prefetch=0)
    store = JobStore(db)
    worker = Worker(store, handlers, config=engine, policy=RetryPolicy(settings.retry), queues=["charges"],
                    classify_func=classify)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + n / rate + 5
        while stalled.arrivals < n and time.monotonic() < deadline:
            time.sleep(0.02)
        assert stalled.arrivals == n
        time.sleep(1.0)  # the stall goes on: the guard's bucket refills, to its capacity at most
        stalled.release.set()
        deadline = time.monotonic() + 30
        while unfinished(store, ["charges"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stalled.release.set()
        worker.request_stop()
        thread.join(30)
        adapter.close()
    ledger = PaymentStore(db)
    assert [ledger.get(i).status for i in ids] == [PaymentStatus.SUCCEEDED] * n  # type: ignore[union-attr]
    assert len(stamps) == n  # one call each: no 429 to retry
    stamps.sort()
    assert max(sum(1 for s in stamps if t0 <= s < t0 + 1.0) for t0 in stamps) <= rate + burst


def test_guard__a_permit_gone_stale_that_finds_no_token_snoozes_and_the_next_attempt_charges_once(
        db: Database, sandbox: SandboxServer) -> None:
    """1 request/s, a bucket of 1, a wait for tokens of at most 0.1 s: the charge takes the only token, marking
    the payment processing stalls 0.6 s (past PERMIT_SECONDS), the permit is admitted again and no token
    comes within 0.1 s: the job snoozes (no attempt spent) with the payment processing, nothing sent. Its
    next attempt re-sends the same key: one charge at the PSP, the payment succeeded."""
    calls: list[str] = []

    class Counting(SandboxAdapter):
        def create_payment(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(kwargs["idempotency_key"])
            return super().create_payment(*args, **kwargs)

    adapter = Counting(sandbox.url)
    stalled = StalledBegin(db)
    guard = guard_for(db, rate_limit=1, rate_burst=1, rate_wait_seconds=0.1)
    handlers = Handlers()
    handlers.register("charge", ChargeHandler(PaymentStore(stalled), lambda _name: adapter,  # type: ignore[arg-type]
                                              guard=guard))
    [payment_id] = create(db, 1)
    settings = fast_settings()
    engine = replace(settings.engine, autosize=False, concurrency=1, prefetch=0)
    store = JobStore(db)
    worker = Worker(store, handlers, config=engine, policy=RetryPolicy(settings.retry), queues=["charges"],
                    classify_func=classify)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while stalled.arrivals < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.6)
        stalled.release.set()
        deadline = time.monotonic() + 30
        while unfinished(store, ["charges"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stalled.release.set()
        worker.request_stop()
        thread.join(30)
        adapter.close()
    [job] = store.list_jobs(kind="charge")
    outcomes = [(a.outcome, a.error) for a in store.attempts(job.id)]
    assert outcomes[0] == ("snoozed", "psp sandbox rate limit") and outcomes[-1][0] == "succeeded", outcomes
    assert guard.counts["readmitted"] >= 1
    payment = PaymentStore(db).get(payment_id)
    assert payment is not None and payment.status is PaymentStatus.SUCCEEDED
    assert calls == [payment.charge_key]  # sent once, after the snooze, under the payment's one key
    assert admin(sandbox.url, "/_admin/charges")["charges"] == 1


def test_guard__unlimited_psp_costs_one_statement_per_batch_of_calls(db: Database) -> None:
    guard = guard_for(db)  # no rate limit: one admission statement serves UNLIMITED_BATCH calls
    for _ in range(100):
        permit = guard.admit("sandbox")
        assert isinstance(permit, Permit)
        permit.call(lambda: None)
    assert guard.store.statements <= 100 // 20 + 2  # + the row's creation


def test_guard__config_reads_its_keys_and_leaves_the_adapters_alone() -> None:
    config = GuardConfig.from_table({"sandbox": {"base_url": "http://127.0.0.1:1", "rate_limit": 500,
                                                 "breaker_failures": 3},
                                     "stripe": {"rate_limit": 0}}, source="r.toml")
    sandbox = config.for_psp("sandbox")
    assert (sandbox.rate_limit, sandbox.capacity, sandbox.batch) == (500, 50.0, 25)
    assert sandbox.breaker_failures == 3
    assert config.for_psp("stripe").rate_limit is None and config.for_psp("adyen") == PspLimits()
    for table, message in (({"rate_limit": -1}, "psp.x.rate_limit: must be > 0"),
                           ({"breaker_failures": 2.5}, "psp.x.breaker_failures: expected an integer"),
                           ({"breaker_open_seconds": 0}, "psp.x.breaker_open_seconds: must be > 0")):
        with pytest.raises(ConfigError, match=message):
            GuardConfig.from_table({"x": table}, source="r.toml")
