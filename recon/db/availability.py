"""Is the database there: which driver errors mean it is not (``error_class``), an outage as one process sees it
(one warning when the database stops answering, one when it is back, a count and a duration for the metrics),
and the backoff every loop waits between its tries.

``error_class`` sorts a driver error into ``DatabaseUnavailable`` (the connection is lost or refused, the server
shuts down or is still starting, or it is read-only: SQLSTATE class 08, 57P01-57P03, 25006; any error on a
connection the driver found broken; a connection attempt that failed before the server said anything), the
other transient ``DatabaseTransientError`` (deadlock, serialization failure, lock not available, SQLite busy)
and ``StoreError``. An unavailable error means "this connection, or this server, will not take our writes":
the connection is dropped, and the next one goes through libpq's host list again
(``target_session_attrs=read-write`` picks the new primary).

A worker has a claim loop, a finisher, a heartbeat, a watcher, a presence thread, a LISTEN thread and its
handlers, each on connections of its own. When the primary dies (or is shut down, or a failover leaves recon
connected to a read-only server) they all fail, each once per try; logged each time, a ten-second failover
wrote a hundred warnings. Every failure and success of a statement goes through ``Database`` (recon.db.database),
which tells its ``Outage``: the first ``DatabaseUnavailable`` opens the outage (one warning, counted), the
first statement that succeeds afterwards closes it (one warning with its length), and the loops log their own
failures of that kind at debug level only (``log_failure``).

Only a call that began after the outage did can end it (``epoch``: read it before the call, hand it to
``succeeded``): a statement that was answered before the primary died, and whose caller tells of it a moment
later, says nothing about the server that is there now.

A failure within ``QUIET_SECONDS`` of the end of an outage belongs to it (a pooled connection opened before it,
used for the first time after it): it reopens the outage without a new line or count, and its end is logged at
debug level.

Hazard: the outage is this process's view. Two workers on two hosts each log and count their own.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from recon.errors import DatabaseTransientError, DatabaseUnavailable, StoreError

log = logging.getLogger("recon.db")

#: SQLSTATEs after which the server will not take our writes on this connection: admin shutdown, crash
#: shutdown, cannot connect now (starting up, shutting down, in recovery), read-only transaction (a standby, or
#: a primary being demoted); and every connection exception (class 08)
UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "25006"})
#: SQLSTATEs worth another try on the same server: serialization failure, deadlock, lock not available
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03"})

#: a failure this soon after the end of an outage is the same outage (module docstring)
QUIET_SECONDS = 5.0
#: the first wait after a failure, and the longest (every loop doubles its wait up to it, with full jitter)
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 1.0


class Outage:
    """Whether this process's database answers (``down``), the outages so far (``count``) and their
    seconds (``seconds``, the one in progress included). ``epoch`` changes when an outage begins. Thread-safe;
    ``succeeded`` is a bool check when nothing is wrong, for the hot paths."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, logger: logging.Logger = log) -> None:
        self._clock = clock
        self._log = logger
        self._lock = threading.Lock()
        self.down = False
        self.epoch = 0
        self.count = 0
        self._seconds = 0.0
        self._since = 0.0  # when the outage in progress began
        self._failures = 0  # failed calls in the outage in progress
        self._silent = False  # the outage in progress reopened a recent one: its end is not worth a warning
        self._quiet_until = 0.0

    @property
    def seconds(self) -> float:
        with self._lock:
            return self._seconds + (self._clock() - self._since if self.down else 0.0)

    def failed(self, exc: DatabaseUnavailable) -> None:
        """A call found the database unavailable: the first one opens an outage."""
        with self._lock:
            self._failures += 1
            if self.down:
                return
            now = self._clock()
            self.down, self._since, self._failures = True, now, 1
            self.epoch += 1
            self._silent = now < self._quiet_until
            if not self._silent:
                self.count += 1
        if self._silent:
            self._log.debug("database unavailable again right after an outage: %s", exc)
        else:
            self._log.warning("database unavailable (%s); every connection retries with backoff until a server takes "
                        "writes again", exc)

    def succeeded(self, epoch: int | None = None) -> None:
        """A call succeeded: the outage in progress, if any, is over, unless the call began before it
        (``epoch``: the value of ``self.epoch`` when the call began; None: a call that began just now)."""
        if not self.down or (epoch is not None and epoch != self.epoch):
            return
        with self._lock:
            if not self.down or (epoch is not None and epoch != self.epoch):
                return
            now = self._clock()
            lasted, failures, silent = now - self._since, self._failures, self._silent
            self.down, self._seconds, self._quiet_until = False, self._seconds + lasted, now + QUIET_SECONDS
        (self._log.debug if silent else self._log.warning)(
            "database available again after %.1f s (%d failed calls meanwhile)", lasted, failures)


def error_class(orig: BaseException | None, *, operational: bool, broken: bool = False) -> type[StoreError]:
    """What a driver error ``orig`` means: ``DatabaseUnavailable``, ``DatabaseTransientError`` or ``StoreError``
    (module docstring). ``operational``: it is the driver's OperationalError; ``broken``: the driver found its
    connection broken or closed."""
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if broken or (code is not None and (code in UNAVAILABLE_SQLSTATES or code.startswith("08"))):
        return DatabaseUnavailable
    if code:
        return DatabaseTransientError if code in TRANSIENT_SQLSTATES else StoreError
    if not operational:
        return StoreError
    message = str(orig).lower()
    if "locked" in message or "busy" in message:  # SQLite's SQLITE_BUSY
        return DatabaseTransientError
    if "connection" in message or "closed" in message or "server" in message:
        return DatabaseUnavailable  # psycopg: connection refused, server closed the connection, no server
    return StoreError


def log_failure(logger: logging.Logger, message: str, exc: StoreError) -> None:
    """``logger.warning(message, exc)``, at debug level for an outage (its ``Outage`` has said it once)."""
    (logger.debug if isinstance(exc, DatabaseUnavailable) else logger.warning)(message, exc)


class Backoff:
    """The waits of one loop between its failed tries: a random wait in the upper half of a ceiling that doubles from
    ``base`` to ``cap`` with each failure in a row; ``reset()`` after a success."""

    def __init__(self, *, base: float = BACKOFF_BASE_SECONDS, cap: float = BACKOFF_CAP_SECONDS,
                 rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0
        self._rng = rng or random.Random()  # nosec B311  # jitter, not a secret

    def next(self) -> float:
        """The wait before the next try (and one more failure in a row)."""
        ceiling = min(self.cap, self.base * 2 ** min(self.failures, 32))
        self.failures += 1
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0
