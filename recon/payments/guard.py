"""PspGuard: what stands between a job handler and a PSP call.

The PSP-calling handlers ask ``guard.admit(psp, lease=lease)`` before anything changes and make the call
through the ``Permit`` it returns, which records how it went. A handler that writes between the two (the
charge marks its payment processing, a refund, capture or cancel claims its send: ``recon.payments.movement``) or
makes a second call (a movement's send after its lookup) asks ``guard.refresh(permit, lease=lease)`` right before
the call: a permit spent already, or admitted longer than PERMIT_SECONDS ago (the write waited for a pooled
connection, for SQLite's write lock), is admitted again, so a stall there never releases the calls admitted
before it in one crowd: the calls stay within the bucket's rate however long the handlers waited (the old token
is spent unused), and every call takes a token of its own. The
state is PSP-wide, in the PSP's ``psp_controls`` row (``recon.db.control_store``), so every worker on every
host obeys it:

| before the call                                     | the handler gets                                   |
| --------------------------------------------------- | -------------------------------------------------- |
| paused (``recon psp pause``)                        | Snooze(pause_snooze_seconds); resume wakes it      |
| cooling down (a worker got a 429)                   | Snooze until the cool-down ends                    |
| breaker open, probe time not come                   | Snooze until the probe time                        |
| breaker open/half-open, probe time come             | the one worker whose conditional UPDATE wins gets  |
|                                                     | the half-open probe Permit; the others Snooze      |
| rate limit: a token within rate_wait_seconds        | a Permit (after waiting; the lease keeps beating)  |
| rate limit: no token within rate_wait_seconds       | Snooze until one is due                            |

| after the call                                  | effect                                                 |
| ----------------------------------------------- | ------------------------------------------------------ |
| 429 (PspRateLimited)                            | PSP-wide cool-down for Retry-After (no header:         |
|                                                 | cooldown_default_seconds), at most cooldown_max_seconds|
| network, unknown outcome, 5xx, busy (transient) | failures + 1; breaker_failures in a row open the       |
|                                                 | breaker for breaker_open_seconds                       |
| 401/403 (PspAuthError)                          | the breaker opens at once; logged as an error          |
| the probe fails / succeeds                      | re-opens / closes the breaker                          |
| any other answer (success, decline, rejection)  | the PSP is up: the failure count restarts              |

A Snooze does not spend an attempt, so a paused or cooling PSP never kills jobs. The job that received the
429 or the 5xx still returns what ``recon.classify`` says (a Retry): the guard only adds the PSP-wide part.

Cost: the rate-limit bucket lives in the same row, and one admission statement both reads the state and
takes a *batch* of tokens (50 ms worth, more when the statement itself is slower: twice its own duration's
worth, at most the burst), which this process's threads then share as local permits (valid
PERMIT_SECONDS). So a rate-limited PSP costs at most rate/batch statements per second per process, an
unlimited one at most one per UNLIMITED_BATCH calls; a success costs nothing unless failures were counted.
The price of the batch: a pause or an open breaker decided elsewhere reaches this process after at most
``batch`` calls or PERMIT_SECONDS. Across processes nothing changes: every permit is a token taken from the
shared bucket, so in any second the calls stay within the rate, the bucket's capacity and the permits each
process held from before (fewer than a batch each).

Threads: the per-PSP gate's lock is held only to hand out a local permit, never across a statement or a
sleep. One thread at a time (the refiller) runs the admission statement, and waits for the bucket's next
tokens if it is empty; the others wait on the gate and are handed the batch it brings. When a statement
takes longer than a full bucket lasts (capacity / rate: 0.1 s by default), up to MAX_REFILLERS run at once
(one would cap the process at capacity / statement seconds; the shared bucket still bounds every second).
A job snoozes for the rate only when the bucket stayed empty for ``rate_wait_seconds``; waiting for another
thread's statement (a slow database, many threads) is this process's own contention: it never snoozes a job
and is not reported to the sizer as the PSP throttling (``pressure``, ``counts["gate_waits"]``).

Configuration: ``recon.payments.psp_limits`` (the ``[psp.NAME]`` tables of the config file).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from psp_adapters.errors import PspAuthError, PspError, PspRateLimited
from recon.classify import ErrorKind, classify, error_text
from recon.control_rows import Admission
from recon.db.control_store import ControlStore
from recon.engine.lease import Lease
from recon.engine.outcome import Snooze
from recon.engine.sizing import Pressure
from recon.errors import StoreError
from recon.payments.psp_limits import GuardConfig, PspLimits

log = logging.getLogger(__name__)

T = TypeVar("T")

#: local permits expire after this long, so a pause or an open breaker decided elsewhere is seen soon
PERMIT_SECONDS = 0.25
#: a thread waiting for another thread's admission statement looks at its lease this often (it never snoozes
#: for that wait: it is local contention, not the PSP's limit)
GATE_POLL_SECONDS = 0.5
#: while another worker's half-open probe is out, look again after at most this long
HALF_OPEN_RECHECK_SECONDS = 5.0
#: weight of the newest admission statement in its seconds average (``PspGuard._batch``)
STATEMENT_SECONDS_WEIGHT = 0.2
#: an admission statement takes the tokens of this many of its own durations (``PspGuard._batch``)
STATEMENT_HEADROOM = 2.0
#: admission statements one process may have in flight for one PSP when they are slow (``PspGuard._refillers``)
MAX_REFILLERS = 8
#: that many statements in flight per full bucket a statement's duration lets in (they need not be evenly spread)
REFILLERS_HEADROOM = 2.0
#: weight of the newest call in a PSP's call-seconds average (``PspGuard.pressure``)
CALL_SECONDS_WEIGHT = 0.05
#: failures of these kinds feed the breaker (the PSP is unreachable or failing), others mean it answered
BREAKER_KINDS = frozenset({ErrorKind.NETWORK, ErrorKind.UNKNOWN_OUTCOME, ErrorKind.PSP_UNAVAILABLE,
                           ErrorKind.PSP_BUSY})


def pause_reason(psp: str) -> str:
    """The snooze reason of a paused PSP's jobs; ``recon psp resume`` wakes the jobs that carry it."""
    return f"psp {psp} paused"


# --- the guard -------------------------------------------------------------------------------------------


class _Gate:
    """This process's view of one PSP: local permits, the refill in progress and the failure count last seen.

    ``cond`` guards the fields and is never held across a database statement or a sleep: one thread at a time
    (``refilling``; more while the statements are slow: ``PspGuard._refillers``) runs the admission statement
    or waits for the bucket's next tokens, outside it; the others wait on ``cond`` and are handed the permits
    it brings (``notify``, first come first served)."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.permits = 0
        self.permits_until = 0.0
        self.refilling = 0  #: threads in ``PspGuard._refill``
        #: the refiller is waiting for the bucket's next tokens (not in a statement) until this instant
        self.empty_until = 0.0
        self.failures = 0
        self.known = False  #: the PSP's row exists
        self.call_seconds: float | None = None  #: moving average of a call's duration (``PspGuard.pressure``)
        self.statement_seconds: float | None = None  #: moving average of an admission statement's duration

    def take(self, now: float) -> bool:
        if self.permits > 0 and now < self.permits_until:
            self.permits -= 1
            return True
        return False

    def clear(self) -> None:
        self.permits = 0


@dataclass(slots=True)
class Permit:
    """Leave to call the PSP once. ``call(func)`` runs the call and tells the guard how it went; a
    ``probe`` permit is the breaker's half-open probe (its value is the probe slot's token); ``admitted``
    when its rate token was taken (the guard's monotonic clock: ``PspGuard.refresh``); ``spent`` once a call
    was made through it (a second call, e.g. a movement's send after its lookup, needs ``refresh``)."""

    guard: PspGuard | None
    psp: str
    probe: datetime | None = None
    admitted: float = 0.0
    spent: bool = False

    def call(self, func: Callable[[], T]) -> T:
        """``func()``; PspErrors are recorded and re-raised. Recording never raises (a database problem is
        logged): the PSP's answer matters more than the bookkeeping."""
        self.spent = True
        if self.guard is None:
            return func()
        started = time.monotonic()
        try:
            result = func()
        except PspError as exc:
            self.guard._timed(self.psp, time.monotonic() - started)
            self.guard._after_error(self, exc)
            raise
        self.guard._timed(self.psp, time.monotonic() - started)
        self.guard._after_answer(self)
        return result


class Unguarded:
    """The guard of handlers built without one (tests, the demo): every call admitted, nothing recorded."""

    def admit(self, psp: str, *, lease: Lease | None = None) -> Permit | Snooze:
        return Permit(None, psp)

    def refresh(self, permit: Permit, *, lease: Lease | None = None) -> Permit | Snooze:
        return permit


class PspGuard:
    """Thread-safe; one per worker process, shared by its handlers (``recon.app.App.guard``)."""

    def __init__(self, store: ControlStore, config: GuardConfig, *, rng: random.Random | None = None,
                 monotonic_func: Callable[[], float] = time.monotonic,
                 sleep_func: Callable[[float], Any] = time.sleep) -> None:
        self.store = store
        self.config = config
        #: what the guard did, by name (admitted, readmitted, gate_waits, rate_waits, snoozed_WHY, cooldowns,
        #: probes...); incremented from many threads, so only under ``_counts_lock`` (``_count``)
        self.counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self._rng = rng or random.Random()  # nosec B311  # jitter and simulation, not security
        self._monotonic = monotonic_func
        self._sleep = sleep_func
        self._gates: dict[str, _Gate] = {}
        self._gates_lock = threading.Lock()

    def _count(self, name: str) -> None:
        with self._counts_lock:  # Counter's += is a read and a write: two threads could lose one
            self.counts[name] += 1

    # --- before the call ------------------------------------------------------------------------------

    def refresh(self, permit: Permit, *, lease: Lease | None = None) -> Permit | Snooze:
        """Right before every PSP call after the first of a handler, and after the handler's own writes (the
        charge's, the movements' sends: ``recon.payments.charge``, ``recon.payments.movement``): ``permit``
        itself when it was admitted within PERMIT_SECONDS (or is the breaker's probe) and no call was made
        through it yet, else a new admission (``admit``: a Permit, or the Snooze the job should return). A
        permit held across a stall (a pooled connection, SQLite's write lock) is not spent late: the calls of
        every thread the stall held would reach the PSP together, beyond the bucket's rate, and its 429s cool
        every worker down. A spent one (a movement's lookup before re-sending an old key) is never spent twice:
        each call takes its own token."""
        if permit.guard is None:
            return permit
        if not permit.spent and (permit.probe is not None
                                 or self._monotonic() - permit.admitted <= PERMIT_SECONDS):
            return permit
        self._count("readmitted")
        return self.admit(permit.psp, lease=lease)

    def admit(self, psp: str, *, lease: Lease | None = None) -> Permit | Snooze:
        """A Permit to call ``psp`` now, or the Snooze the job should return. May wait up to the PSP's
        ``rate_wait_seconds`` for a rate-limit token (returning early if the lease is lost: LeaseLost).

        Only an empty bucket makes a job snooze for the rate: a thread waiting for another thread's admission
        statement (local contention, a slow database) waits for it however long it takes and counts a
        ``gate_waits``, which is neither a snooze nor a throttle (``pressure``)."""
        limits = self.config.for_psp(psp)
        gate = self._gate(psp)
        with gate.cond:
            outcome, deadline = self._take_or_wait(psp, limits, gate, lease)
        if outcome is not None:
            return outcome
        # this thread is the refiller: the statement (and any wait for tokens) runs outside the condition
        try:
            return self._refill(psp, limits, gate, deadline, lease)
        finally:
            with gate.cond:
                gate.refilling -= 1
                if not gate.refilling:
                    gate.empty_until = 0.0
                gate.cond.notify(max(gate.permits, 1))  # the permits brought, or the next refiller

    def _take_or_wait(self, psp: str, limits: PspLimits, gate: _Gate,
                      lease: Lease | None) -> tuple[Permit | Snooze | None, float | None]:
        """Under ``gate.cond``: a local permit, or the rate Snooze when the bucket stayed empty for
        ``rate_wait_seconds`` (or its next tokens come later), or None when this thread is to refill
        (``gate.refilling`` is then set); with the deadline of the wait for tokens so far (None: not begun: the
        time spent waiting for another thread's statement does not count)."""
        waited, deadline = False, None
        while True:
            now = self._monotonic()
            if gate.take(now):
                self._count("admitted")
                return Permit(self, psp, admitted=now), deadline
            if gate.refilling < self._refillers(limits, gate) and not gate.empty_until:
                gate.refilling += 1
                return None, deadline
            if gate.empty_until > 0:  # the bucket is empty: the refiller waits for its next tokens
                if deadline is None:
                    deadline = now + limits.rate_wait_seconds
                if gate.empty_until > deadline or now >= deadline:
                    assert limits.rate_limit is not None  # nosec B101  # empty_until is only set under a rate limit
                    return self._snooze(psp, max(gate.empty_until - now, limits.batch / limits.rate_limit),
                                        f"psp {psp} rate limit", "rate"), deadline
            if not waited:
                waited = True
                self._count("gate_waits")
            gate.cond.wait(GATE_POLL_SECONDS)
            if lease is not None:
                lease.check()  # lost while waiting: LeaseLost, the handler writes nothing

    def _refill(self, psp: str, limits: PspLimits, gate: _Gate, deadline: float | None,
                lease: Lease | None) -> Permit | Snooze:
        """The refiller's part: admission statements (waiting for the bucket's next tokens, within the deadline,
        between them) until tokens are granted (the batch, or the whole tokens the bucket held): this thread's
        Permit (the rest left in the gate for the others), or a Snooze."""
        while True:
            batch = self._batch(limits, gate)
            admission = self._admission(psp, limits, gate, batch)
            held = self._held(psp, limits, admission)
            if held is not None:
                return held
            if admission.granted:
                now = self._monotonic()
                with gate.cond:
                    gate.permits = (gate.permits if now < gate.permits_until else 0) + admission.granted - 1
                    gate.permits_until = now + PERMIT_SECONDS
                self._count("admitted")
                return Permit(self, psp, admitted=now)
            assert limits.rate_limit is not None  # nosec B101  # type narrowing, not a check
            # for this refiller's share of a batch: with several in flight, each takes what came since the last
            wanted = max(1.0, batch / self._refillers(limits, gate))
            wait = max((wanted - admission.tokens) / limits.rate_limit, 0.001)
            now = self._monotonic()
            if deadline is None:  # the wait for tokens begins now
                deadline = now + limits.rate_wait_seconds
            if now + wait > deadline:
                return self._snooze(psp, wait, f"psp {psp} rate limit", "rate")
            with gate.cond:
                gate.empty_until = now + wait
            self._count("rate_waits")
            if self._wait(lease, wait):
                return Snooze(timedelta(0), reason="cancel requested while waiting for a PSP token")
            with gate.cond:
                gate.empty_until = 0.0

    def _admission(self, psp: str, limits: PspLimits, gate: _Gate, batch: int) -> Admission:
        if not gate.known:
            self.store.ensure(psp)
            gate.known = True
        rate, capacity = limits.rate_limit, limits.capacity
        started = self._monotonic()
        admission = self.store.admit(psp, rate=rate, capacity=capacity, batch=batch)
        if admission is None:  # the row went away (tests truncate the table): make it again
            self.store.ensure(psp)
            admission = self.store.admit(psp, rate=rate, capacity=capacity, batch=batch)
        assert admission is not None  # nosec B101  # type narrowing, not a check
        seconds, last = self._monotonic() - started, gate.statement_seconds
        gate.statement_seconds = seconds if last is None else last + STATEMENT_SECONDS_WEIGHT * (seconds - last)
        gate.failures = admission.failures
        return admission

    @staticmethod
    def _refillers(limits: PspLimits, gate: _Gate) -> int:
        """Admission statements this process may have in flight for one PSP at once: one while a statement takes
        less than a full bucket lasts (capacity / rate), more when it takes longer (a loaded machine: a pool
        wait, SQLite's write lock, a busy interpreter), since one at a time then caps the process at capacity /
        statement seconds, below the rate. At most MAX_REFILLERS. Safe for the limit: every grant comes from
        the shared bucket, which never gives more than the rate plus its capacity in any second."""
        if limits.rate_limit is None or gate.statement_seconds is None:
            return 1
        behind = limits.rate_limit * gate.statement_seconds / limits.capacity
        return max(1, min(MAX_REFILLERS, 1 + math.ceil(REFILLERS_HEADROOM * behind) if behind > 1 else 1))

    @staticmethod
    def _batch(limits: PspLimits, gate: _Gate) -> int:
        """Tokens the next admission statement takes: ``limits.batch`` (50 ms worth), more when the statement
        itself takes longer than a batch lasts (tokens per second <= batch x statements in flight / statement
        seconds: ``_refillers``), so that a slow database does not cap a process below the rate; at most the
        bucket's capacity, which bounds every process's burst anyway."""
        if limits.rate_limit is None or gate.statement_seconds is None:
            return limits.batch
        wanted = math.ceil(limits.rate_limit * gate.statement_seconds * STATEMENT_HEADROOM)
        return max(limits.batch, min(wanted, math.floor(limits.capacity)))

    def _held(self, psp: str, limits: PspLimits, a: Admission) -> Permit | Snooze | None:
        """The Snooze (or the probe Permit) when the PSP is paused, cooling down or its breaker not closed."""
        if a.paused:
            return self._snooze(psp, limits.pause_snooze_seconds, pause_reason(psp), "paused")
        if a.cooldown_until is not None and a.cooldown_until > a.now:
            return self._snooze(psp, (a.cooldown_until - a.now).total_seconds(),
                                f"psp {psp} cooling down after a 429", "cooldown")
        if a.breaker_state == "closed":
            return None
        half_open = f"psp {psp} circuit half-open: a probe is out"
        left = (a.probe_at - a.now).total_seconds() if a.probe_at is not None else 0.0
        if left <= 0:  # the probe time has come (or a probe's slot expired): one worker wins it
            token = self.store.claim_probe(psp, probe_for=limits.breaker_open_seconds)
            if token is not None:
                log.warning("psp %s: circuit half-open, one probe call goes out", psp)
                self._count("probes")
                return Permit(self, psp, probe=token)
            return self._snooze(psp, HALF_OPEN_RECHECK_SECONDS, half_open, "breaker")
        if a.breaker_state == "half_open":
            return self._snooze(psp, min(left, HALF_OPEN_RECHECK_SECONDS), half_open, "breaker")
        return self._snooze(psp, left, f"psp {psp} circuit open", "breaker")

    def _snooze(self, psp: str, seconds: float, reason: str, why: str) -> Snooze:
        # jitter, so that the jobs held back together do not all come back at the same instant
        seconds = max(seconds, 0.0)
        self._count(f"snoozed_{why}")
        return Snooze(timedelta(seconds=seconds + self._rng.uniform(0.0, min(0.1 * seconds, 5.0) + 0.05)),
                      reason=reason)

    def _wait(self, lease: Lease | None, seconds: float) -> bool:
        """Sleep while the heartbeater keeps the lease; True when a cancel was requested meanwhile."""
        if lease is None:
            self._sleep(seconds)
            return False
        if lease.wait(seconds):
            lease.check()  # lost: raises LeaseLost, the handler writes nothing
            return True
        return False

    def _gate(self, psp: str) -> _Gate:
        with self._gates_lock:
            gate = self._gates.get(psp)
            if gate is None:
                gate = self._gates[psp] = _Gate()
            return gate

    def pressure(self) -> Pressure:
        """What the PSPs ask of a worker that sizes itself (recon.engine.sizing): the handler threads their rate
        limits keep busy (rate x average call seconds, summed over the rate-limited PSPs called so far; None:
        none yet), the 429s so far and the snoozes for an empty rate-limit bucket so far. A thread that waited
        for another thread's admission statement (``gate_waits``) is in neither: that is this process's own
        contention, not the PSP throttling."""
        demand: float | None = None
        with self._gates_lock:
            gates = list(self._gates.items())
        for psp, gate in gates:
            rate = self.config.for_psp(psp).rate_limit
            if rate is not None and gate.call_seconds is not None:
                demand = (demand or 0.0) + rate * gate.call_seconds
        with self._counts_lock:
            throttles, saturated = self.counts["cooldowns"], self.counts["snoozed_rate"]
        return Pressure(demand=demand, throttles=throttles, saturated=saturated)

    # --- after the call -------------------------------------------------------------------------------

    def _timed(self, psp: str, seconds: float) -> None:
        gate = self._gate(psp)
        last = gate.call_seconds  # a race between two threads loses one sample: an average does not mind
        gate.call_seconds = seconds if last is None else last + CALL_SECONDS_WEIGHT * (seconds - last)

    def _after_error(self, permit: Permit, exc: PspError) -> None:
        try:
            if exc.replayed:
                # a saved answer replayed under its idempotency key (Stripe replays a saved 500 for 24 h):
                # it says nothing about the PSP's health now, so neither a failure nor a success
                return
            if isinstance(exc, PspRateLimited):
                self._cool_down(permit.psp, exc.retry_after)
                self._after_answer(permit)  # a 429 is an answer: the PSP is up
            elif isinstance(exc, PspAuthError):
                log.error("psp %s refused our credentials (%s): circuit open, its jobs wait; fix the key",
                          permit.psp, error_text(exc))
                self._failure(permit, exc, force=True)
            elif classify(exc).error_kind in BREAKER_KINDS:
                self._failure(permit, exc, force=False)
            else:
                self._after_answer(permit)  # a rejection or an odd answer: the PSP is up
        except StoreError as store_exc:
            log.warning("psp %s: could not record %s: %s", permit.psp, type(exc).__name__, store_exc)

    def _after_answer(self, permit: Permit) -> None:
        gate = self._gate(permit.psp)
        try:
            if permit.probe is not None:
                if self.store.close_if_probe(permit.psp, token=permit.probe):
                    log.warning("psp %s: probe succeeded, circuit closed", permit.psp)
                    gate.failures = 0
                return
            if gate.failures > 0:
                gate.failures = 0
                self.store.reset_failures(permit.psp)
        except StoreError as exc:
            log.warning("psp %s: could not record a success: %s", permit.psp, exc)

    def _failure(self, permit: Permit, exc: PspError, *, force: bool) -> None:
        limits = self.config.for_psp(permit.psp)
        gate = self._gate(permit.psp)
        reason = error_text(exc)
        if permit.probe is not None:
            again = self.store.reopen_if_probe(permit.psp, token=permit.probe,
                                               open_for=limits.breaker_open_seconds, reason=reason)
            if again is not None:
                log.warning("psp %s: probe failed (%s), circuit open again until %s", permit.psp, reason,
                            again.isoformat())
                gate.clear()
                return
        record = self.store.record_failure(permit.psp, threshold=limits.breaker_failures, force=force,
                                           open_for=limits.breaker_open_seconds, reason=reason)
        gate.failures = record.failures
        if record.breaker_state != "closed":
            gate.clear()
        if record.opened:
            self._count("breaker_opened")
            log.warning("psp %s: circuit open after %d failures in a row (%s); next probe at %s", permit.psp,
                        record.failures, reason, record.probe_at.isoformat() if record.probe_at else "?")

    def _cool_down(self, psp: str, retry_after: float | None) -> None:
        limits = self.config.for_psp(psp)
        seconds = limits.cooldown_default_seconds if retry_after is None else retry_after
        seconds = min(max(seconds, 0.0), limits.cooldown_max_seconds)
        self._gate(psp).clear()
        if seconds <= 0:
            return
        until = self.store.cool_down(psp, seconds=seconds)
        self._count("cooldowns")
        log.warning("psp %s answered 429: every worker backs off until %s", psp, until.isoformat())


Guard = PspGuard | Unguarded


# --- operators (`recon psp …`) --------------------------------------------------------------------------


def pause(store: ControlStore, psp: str, *, by: str, reason: str | None) -> None:
    """Stop all traffic to ``psp``: its jobs snooze (no attempt spent) until ``resume``."""
    store.pause(psp, by=by, reason=reason)


def resume(store: ControlStore, psp: str, *, by: str) -> tuple[bool, int]:
    """Let traffic to ``psp`` flow again (resumed by ``by``) and wake the jobs the pause put to sleep: (was
    paused, woken)."""
    return store.resume(psp, by=by, snooze_reason=pause_reason(psp))
