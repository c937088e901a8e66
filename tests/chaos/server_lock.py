"""The shared PostgreSQL server as a readers-writer lock between the tests of a chaos run, so that they can run
two at a time (``pytest -n 2 -m chaos``): a test that restarts the server (marked ``restarts_postgresql``) holds
it alone; every other test on it, and each pytest process's own database while tests/conftest.py's
``pg_migrated`` makes or drops it, shares it; the failover tests, on servers of their own (tests/pgcluster.py),
take nothing and run beside any of them.

An ``flock`` on a file named after the server, in the temporary directory: the kernel releases it when its
holder exits, however it exits; a test waiting for it waits as long as the tests holding it run (each bounded)."""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url


def lock_path(url: str) -> Path:
    parsed = make_url(url)
    return Path(tempfile.gettempdir()) / f"recon-tests-postgresql-{parsed.host or 'socket'}-{parsed.port or 5432}.lock"


@contextlib.contextmanager
def holding(url: str, *, alone: bool) -> Iterator[None]:
    """The server of ``url``, alone (no other holder) or shared (with other sharers), for the ``with`` block."""
    with lock_path(url).open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
