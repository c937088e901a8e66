"""The run the refund chaos test and the capture chaos test share (tests/chaos/test_refund_chaos.py,
tests/chaos/test_capture_chaos.py): the Stripe sandbox with faults, three ``recon worker`` processes on the chaos
time scale (``tests.chaos.compressed``), payments charged (or authorised) first, then two writers racing to ask
movements of the same payments while workers are killed with SIGKILL at random and one is frozen with SIGSTOP
past its lease and resumed; then the faults off and sweeps from a simulated cron until every movement is final or
in review. Each test says what it asks (``ask_func``) and checks the books afterwards.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from recon.db.database import Database, connect
from recon.db.payment_store import PaymentStore
from recon.rows import NewPayment, Payment
from tests.chaos.harness import Sandbox, WorkerProcess, base_env, psp_env, recon, write_config

NEVER_REACHED = "never reached the PSP (not found after the grace period)"
#: what one ask does: (the database, the writer's random, a payment ready for it, a reference of its own)
AskFunc = Callable[[Database, random.Random, Payment, str], None]


@contextmanager
def emptied(pg_migrated: str, tables: Sequence[str]) -> Iterator[Database]:
    """The chaos database with ``tables`` (constant names) emptied, disposed of afterwards."""
    db = connect(pg_migrated)
    with db.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
    yield db
    db.dispose()


def unfinished(db: Database, *, table: str, job_kinds: Sequence[str]) -> tuple[int, int]:
    """How many movements of ``table`` (a constant) are unfinished, and how many of their jobs."""
    with db.begin() as conn:
        movements = conn.execute(sa.text(
            f"SELECT count(*) FROM {table} WHERE status IN ('created', 'processing', 'pending')")).scalar_one()
        jobs = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE kind IN :kinds "
                                    "AND state NOT IN ('succeeded', 'dead', 'canceled')").bindparams(
            sa.bindparam("kinds", expanding=True)), {"kinds": list(job_kinds)}).scalar_one()
    return int(movements), int(jobs)


@dataclass(frozen=True)
class MovementChaos:
    faults: tuple[str, ...]  #: the sandbox's faults
    sandbox_seed: int
    payments: Callable[[random.Random], list[NewPayment]]  #: made before the workers charge them
    ready: str  #: the payment status a movement is asked of ("succeeded", "authorised")
    ask_func: AskFunc  #: raises one of ``refused`` when the store refuses
    refused: tuple[type[Exception], ...]
    table: str  #: the movements' table
    job_kinds: tuple[str, ...]  #: the jobs that must all have finished


@dataclass(frozen=True)
class ChaosRun:
    sandbox: Sandbox  #: still serving: the books to check
    asked: dict[str, Any]  #: what the writers asked: ``created``, ``refused`` and any ``errors``
    kills: int  #: how many times a worker was killed


def run(chaos: MovementChaos, pg: Database, pg_migrated: str, tmp_path: Path, request: pytest.FixtureRequest, *,
        rng: random.Random) -> ChaosRun:
    """The whole run (module docstring)."""
    sandbox = Sandbox(tmp_path / "psp.db", *chaos.faults, "--seed", str(chaos.sandbox_seed), psp="stripe")
    sandbox.start()
    request.addfinalizer(sandbox.stop)
    env = base_env(write_config(tmp_path / "recon.toml"), sandbox.url, **psp_env("stripe", sandbox.url))
    env.pop("RECON_STRIPE_WEBHOOK_SECRET", None)
    workers = [WorkerProcess(pg_migrated, env, tmp_path / f"worker-{i}.log", module="tests.chaos.compressed")
               for i in range(3)]
    for w in workers:
        request.addfinalizer(w.stop)
        w.start()
    PaymentStore(pg).create(chaos.payments(rng))
    deadline = time.monotonic() + 60  # the charges first (through the same faults): movements need them
    while time.monotonic() < deadline and sum(1 for _ in PaymentStore(pg).iter_payments(status=chaos.ready)) < 30:
        time.sleep(0.5)
    stop = threading.Event()
    asked: dict[str, Any] = {"created": 0, "refused": 0, "errors": []}

    def writer(seed: int) -> None:
        """Movements of random payments ready for one, racing the other writer for the same payments."""
        mine = random.Random(seed)
        n = 0
        while not stop.is_set():
            try:
                ready = list(PaymentStore(pg).iter_payments(status=chaos.ready))
            except Exception as exc:  # recorded: the assertion of the test shows it
                asked["errors"].append(repr(exc)[:200])
                ready = []
            if ready:
                try:
                    chaos.ask_func(pg, mine, mine.choice(ready), f"{seed}-{n}")
                    asked["created"] += 1
                except chaos.refused:
                    asked["refused"] += 1
                n += 1
            stop.wait(0.05)

    threads = [threading.Thread(target=writer, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    started = time.monotonic()
    frozen = False
    try:
        while time.monotonic() - started < 25:
            if not frozen and time.monotonic() - started > 8:
                frozen = True
                workers[0].freeze()
                time.sleep(4.5)  # past the 2 s lease: its jobs are rescued and run elsewhere
                workers[0].thaw()
            else:
                victim = rng.choice(workers[1:])
                victim.kill()
                victim.start()
            time.sleep(rng.uniform(0.5, 1.5))
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    sandbox.set_faults(rate_429=0, rate_500=0, rate_hang=0)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and unfinished(pg, table=chaos.table, job_kinds=chaos.job_kinds) != (0, 0):
        recon(pg_migrated, env, "sweep", "--older-than", "1s", "--json", timeout=60, module="tests.chaos.compressed")
        time.sleep(0.5)
    for w in workers:
        w.stop()
    return ChaosRun(sandbox, asked, sum(w.kills for w in workers))
