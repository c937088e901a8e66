"""Job handlers that integration tests run inside `recon worker --handlers tests.integration.handlers`.

They record each execution as a line ``job_id attempt pid`` appended to the file named in the payload
(O_APPEND writes of one short line are atomic across processes), which is how tests prove exactly-once.
"""

from __future__ import annotations

import os
import signal
import time

from recon import Complete, Handlers, Job, Lease, Retry

handlers = Handlers()


def _record(job: Job, lease: Lease) -> None:
    path = job.payload.get("log")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{job.id} {lease.attempt} {os.getpid()}\n".encode())
        finally:
            os.close(fd)


@handlers.register("record")
def record(job: Job, lease: Lease) -> Complete:
    _record(job, lease)
    return Complete()


@handlers.register("sleep")
def sleep(job: Job, lease: Lease) -> Complete | Retry:
    """Sleeps ``seconds`` in small steps, giving up if the lease is lost."""
    _record(job, lease)
    deadline = time.monotonic() + float(job.payload.get("seconds", 1.0))
    while time.monotonic() < deadline:
        if lease.wait(0.05) and lease.lost:
            return Retry(error_kind="bug", error="lease lost while sleeping")
    return Complete()


@handlers.register("crash")
def crash(job: Job, lease: Lease) -> Complete:
    """Kills its own worker process with SIGKILL, mid-job, every time (a poison job)."""
    _record(job, lease)
    os.kill(os.getpid(), signal.SIGKILL)
    return Complete()


@handlers.register("crash_once")
def crash_once(job: Job, lease: Lease) -> Complete:
    """Kills its worker on the first attempt only."""
    _record(job, lease)
    if lease.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return Complete()
