"""CPU per job of one worker draining no-op jobs in this process, split by thread (figures, not a test).

One JSON line: the process's CPU (``time.process_time``) over ``Worker.run(burst=True)`` per job, and each part's
own (``time.thread_time`` around the claim loop, the runner threads and the finisher), with the claims' and the
finish batches' mean sizes. The drain is bench/engine.py's drain_1p (64 threads, claims and prefetch of 64,
autosize off) without its processes, so that recon's own code can be compared A/B: run it with another checkout
first on ``PYTHONPATH`` from a virtualenv without recon's editable install (docs/benchmarks.md, "SQLite drain, CPU
per job (fourth pass)").

Usage: python bench/drain_cpu.py [--jobs N] [--backend sqlite|postgresql] [--concurrency C]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from exits import failed  # bench/exits.py (run as python bench/NAME.py)
from scratch import scratch_database  # bench/scratch.py (run as python bench/NAME.py)

import recon
from recon import Client, Handlers, JobSpec, JobStore, RetryPolicy, Settings, Worker, connect
from recon.engine.claimer import Claimer
from recon.engine.finisher import Finisher
from recon.engine.runners import Runners

CPU: collections.Counter[str] = collections.Counter()
COUNTS: collections.Counter[str] = collections.Counter()
_LOCK = threading.Lock()


def _timed(cls: Any, name: str, label: str) -> None:
    """Add the calling thread's CPU inside ``cls.name`` to ``CPU[label]``."""
    inner: Callable[..., Any] = getattr(cls, name)

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return inner(self, *args, **kwargs)
        finally:
            with _LOCK:
                CPU[label] += time.thread_time() - start

    setattr(cls, name, timed)


def _counted(cls: Any, name: str, label: str, size: Callable[[Any, tuple[Any, ...]], int]) -> None:
    inner: Callable[..., Any] = getattr(cls, name)

    def counted(self: Any, *args: Any) -> Any:
        result = inner(self, *args)
        COUNTS[label] += 1
        COUNTS[label + "_items"] += size(result, args)
        return result

    setattr(cls, name, counted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    n, c = args.jobs, args.concurrency
    _timed(Claimer, "run", "claim_loop")
    _timed(Runners, "run", "runners")
    _timed(Finisher, "run", "finisher")
    _counted(Claimer, "_claim_into", "claims", lambda claimed, _args: claimed)
    _counted(Finisher, "finish_batch", "finish_batches", lambda _r, a: len(a[0]))
    with scratch_database(args.backend, "drain-cpu") as url:
        db = connect(url, pool_size=c + 12)
        settings = Settings()
        Client(JobStore(db), settings).enqueue_many([JobSpec("noop", {"i": i}) for i in range(n)])
        handlers = Handlers()
        handlers.register("noop", lambda job, lease: None)
        config = replace(settings.engine, concurrency=c, claim_batch_size=c, prefetch=c, poll_interval_seconds=0.01,
                         autosize=False)
        worker = Worker(JobStore(db), handlers, config=config, policy=RetryPolicy(settings.retry), run_watcher=False)
        with db.begin() as conn:
            conn.execute(sa.text("SELECT 1"))
        load = os.getloadavg()[0]
        cpu, wall = time.process_time(), time.perf_counter()
        worker.run(burst=True)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        with db.begin() as conn:
            done = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE state = 'succeeded'")).scalar_one()
        db.dispose()
    if done != n:
        failed(f"drain incomplete: {done}/{n} succeeded")
    print(json.dumps({
        "case": "drain_cpu", "backend": args.backend, "jobs": n, "concurrency": c,
        "recon": os.path.dirname(recon.__file__),
        "cpu_us_per_job": round(cpu / n * 1e6, 2), "jobs_per_s": round(n / wall, 1),
        "thread_cpu_us_per_job": {k: round(v / n * 1e6, 2) for k, v in sorted(CPU.items())},
        "claim_mean": round(COUNTS["claims_items"] / max(1, COUNTS["claims"]), 1),
        "finish_batch_mean": round(COUNTS["finish_batches_items"] / max(1, COUNTS["finish_batches"]), 1),
        "load_average": round(load, 2)}), flush=True)


if __name__ == "__main__":
    main()
