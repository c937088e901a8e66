"""The claim loop: lease due jobs in batches, as many as there are free slots, and hand them to the runners.

It runs in the thread that called ``Worker.run`` until the stop event is set (or, in a burst, until
nothing is claimable and no lease is held). Commits are the cost of a database queue, so one claim asks
for up to ``min(free slots, claim_batch_size)`` jobs, where the free slots include ``prefetch`` beyond the
handler threads: the next batch is leased while the current one runs. When only a few slots are free
while most run, the loop waits (up to ``GATHER_SECONDS``) for half a batch's worth to free up and claims
them together. With per-queue caps, each capped queue is claimed on its own, never past its cap.

Per job the loop does little: one ``Job`` (the store's), one ``Lease`` and one ``Running``, booked under
one lock per batch and handed to the runners through one queue put. On PostgreSQL it claims through a
dedicated driver connection of its own (``JobStore.dedicated``), closed when the loop ends.

It sleeps on ``Slots.wake`` (set by freed slots, by the LISTEN thread's notifications and by a stop
request) or for ``poll_interval_seconds``; a failed claim is retried after a backoff (recon.db.availability:
0.05 s doubling to 1 s), logged each time unless the database is unavailable (its outage is logged once).

A claim whose answer was lost with its connection (the primary died during the statement) may have committed:
its jobs are then leased to this worker, which never heard of them. Fencing settles it: no other worker runs
them while the lease holds, and this worker never finishes them. Rather than leave them to the lease's expiry
(and spend their attempt), the first claim round after such a failure gives back every lease of this worker
the claim loop does not know (``JobStore.release_unknown_claims``: runnable at once, the attempt not spent). After a
claim that found fewer jobs than it asked for (the queue is drained), the next one waits until
``SETTLE_SECONDS`` have passed since it: under a steady trickle of enqueues (webhooks: a notification for
every group commit, a freed slot for every finish) each wake-up would otherwise claim a job or two, a
statement each, and the claims would cost more than the jobs. A claim that came back full does not wait.

Waiting (a listening worker, ``waiting_func``; docs/design.md, wake-ups): enqueues NOTIFY only the workers that
wait for work. When a claim drains the queues, the loop says so (``workers.waiting`` true) and claims once more
before it sleeps, so a job committed before the flag was seen is claimed rather than left to the poll; once its
claims have come back full, or found no free slot, for ``BUSY_SECONDS`` (more work than room: a notification
would change nothing) it says it no longer waits. Two writes per change between busy and waiting, none per job;
the hysteresis keeps a worker that catches up with an open-loop load every few milliseconds from spending two
round trips of its claim loop each time (a flag left true a moment longer costs producers a NOTIFY). A burst
run never waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from recon.config import EngineConfig
from recon.db.availability import Backoff, log_failure
from recon.db.jobs_store import Dedicated, JobStore
from recon.engine.lease import Lease
from recon.engine.observe import WORKER_LOGGER, WorkerStats
from recon.engine.slots import Running, Slots
from recon.errors import DatabaseUnavailable, StoreError
from recon.rows import Finish, Job

log = logging.getLogger(WORKER_LOGGER)

#: how long the claim loop waits for more slots to free up when only a few are free (see Slots.low_water)
GATHER_SECONDS = 0.002
#: the least time between a claim that drained the queue and the next claim (module docstring)
SETTLE_SECONDS = 0.005
#: how long a waiting worker's claims come back full (or find no free slot) before it says it is busy
BUSY_SECONDS = 0.5


class Claimer:
    """Claims jobs for ``worker`` from ``queues`` into ``slots`` and passes each to ``submit`` (a runner's
    queue). ``queue_caps`` limits how many jobs of a queue execute at once (only caps > 0 count)."""

    def __init__(self, store: JobStore, slots: Slots, *, submit: Callable[[Running], None], stats: WorkerStats,
                 worker: str, config: EngineConfig, queues: Sequence[str],
                 queue_caps: Mapping[str, int] | None = None,
                 waiting_func: Callable[[bool], None] | None = None) -> None:
        self._store = store
        self._slots = slots
        self._submit = submit
        self._stats = stats
        self._worker = worker
        self._config = config
        self._queues = list(queues)
        self._caps = {q: c for q, c in (queue_caps or {}).items() if c > 0 and q in self._queues}
        self._via: Dedicated | None = None
        self._backoff = Backoff()
        #: a claim failed with the database unavailable: it may have committed (module docstring)
        self._unsure = False
        #: jobs of such claims given back
        self.released_unknown = 0
        #: tells the database whether this worker waits for work (module docstring); None: it does not listen
        self._waiting_func = waiting_func
        self.waiting = False
        self._busy_since: float | None = None  #: since when a waiting worker's claims found more work than room

    def run(self, stop: threading.Event, *, burst: bool = False) -> None:
        """Claim until ``stop`` is set; with ``burst``, return once a claim finds nothing and nothing is held."""
        poll = self._config.poll_interval_seconds
        slots, wake = self._slots, self._slots.wake
        self._via = self._store.dedicated()
        drained_at = -SETTLE_SECONDS  # when the last claim found fewer jobs than it asked for
        try:
            while not stop.is_set():
                wake.clear()
                free = slots.free()
                if free <= 0:
                    slots.waited = True  # more work may wait than there is room (the sizer's window)
                    wake.wait(min(poll, BUSY_SECONDS) if self.waiting and self._busy() else poll)
                    continue
                if free < slots.low_water and wake.wait(GATHER_SECONDS):
                    continue  # a few slots are free while most run: let more free up, then claim them together
                settle = drained_at + SETTLE_SECONDS - time.monotonic()
                if settle > 0 and not burst:
                    stop.wait(settle)  # the queue was drained a moment ago: let a few more jobs arrive
                    continue
                # idle before the claim, not after: a finish committed between the two can make a job
                # claimable again (a retry without delay) that this claim did not see
                idle = burst and slots.idle()
                try:
                    if self._unsure:
                        self._release_unknown_claims()
                    asked, claimed = self.claim(free)
                except StoreError as exc:
                    log_failure(log, "claim failed, retrying: %s", exc)
                    self._unsure = self._unsure or isinstance(exc, DatabaseUnavailable)
                    stop.wait(self._backoff.next())
                    continue
                self._backoff.reset()
                if claimed == asked:
                    slots.waited = True  # a full claim: more may be waiting (the sizer's window)
                    if self.waiting:
                        self._busy()
                if claimed < asked:
                    if idle and claimed == 0:
                        return
                    drained_at = time.monotonic()
                    self._busy_since = None
                    if not self.waiting and self._waiting_func is not None and not burst and self._set_waiting(True):
                        continue  # one more claim before sleeping: what committed before the flag showed
                    wake.wait(poll)
        finally:
            if self._via is not None:
                self._via.close()
                self._via = None

    def _busy(self) -> bool:
        """A waiting worker found more work than room: after ``BUSY_SECONDS`` of that, it says it is busy (module
        docstring). True while it still waits."""
        now = time.monotonic()
        if self._busy_since is None:
            self._busy_since = now
        elif now - self._busy_since >= BUSY_SECONDS:
            self._busy_since = None
            self._set_waiting(False)  # busy: it claims again without a notification
        return self.waiting

    def _set_waiting(self, waiting: bool) -> bool:
        """Tell the database whether this worker waits for work; True once it knows. A failure is logged and
        changes nothing here: a flag left true costs producers a NOTIFY, one never set a poll interval."""
        assert self._waiting_func is not None  # nosec B101  # only called for a listening worker
        try:
            self._waiting_func(waiting)
        except StoreError as exc:
            log_failure(log, "could not record whether the worker waits: %s", exc)
            return False
        self.waiting = waiting
        return True

    def _give_back_again(self, again: list[Job], jobs: list[Job]) -> list[Job]:
        """Jobs claimed again while an earlier attempt of theirs still executes here (its lease expired and was
        rescued while the handler went on): given back, the attempt not spent, runnable after a lease's time. (A
        job whose earlier attempt has left its handler and only awaits its slot's release, a retry without delay,
        is run: ``Slots.release`` leaves the newer attempt alone.)
        Run here, the new attempt would take the old one's place in the slots (one entry per job), so the old
        one's end would go unaccounted, its slot never freed, and a burst could end with it still running. The
        old attempt's finish is fenced (stale) as always; the job runs again after it, here or elsewhere."""
        reason = "released: an earlier attempt of this job still runs in this worker"
        finishes = [Finish(id=job.id, attempt=job.attempts, state="runnable", outcome="released",
                           delay=self._config.lease_ttl_seconds, error=reason, bump=1) for job in again]
        try:
            given = self._store.finish(worker=self._worker, finishes=finishes)
        except StoreError as exc:  # left leased: the watcher gives them back when their leases expire
            log_failure(log, f"could not give back {len(again)} jobs claimed again: %s", exc)
            given = set()
        self._stats.released += len(given)
        log.warning("gave back %d jobs claimed again while an earlier attempt still runs here", len(again))
        skip = {job.id for job in again}
        return [job for job in jobs if job.id not in skip]

    def _release_unknown_claims(self) -> None:
        with self._slots.lock:
            held = set(self._slots.running)
        released = self._store.release_unknown_claims(
            worker=self._worker, held=held, reason="released: claimed by a claim whose answer was lost")
        self._unsure = False
        if released:
            self.released_unknown += released
            self._stats.released += released
            log.warning("released %d jobs leased by a claim whose answer was lost with its connection", released)

    def claim(self, free: int) -> tuple[int, int]:
        """One round of claims for ``free`` slots: (how many were asked for, how many were claimed)."""
        batch_size = self._slots.claim_batch
        if not self._caps:
            n = min(free, batch_size)
            return n, self._claim_into(self._queues, n)
        asked = claimed = 0
        for q in self._queues:
            room = free - claimed
            cap = self._caps.get(q)
            if cap is not None:
                room = min(room, self._slots.room(q, cap))
            n = min(room, batch_size)
            if n > 0:
                asked += n
                claimed += self._claim_into([q], n)
        return asked, claimed

    def _claim_into(self, queues: Sequence[str], n: int) -> int:
        store, worker = self._store, self._worker
        jobs = store.claim(worker=worker, queues=queues, n=n, ttl=self._config.lease_ttl_seconds, via=self._via)
        if not jobs:
            return 0
        with self._slots.lock:
            again = [job for job in jobs if job.id in self._slots.executing]
        if again:
            jobs = self._give_back_again(again, jobs)
            if not jobs:
                return 0
        batch = [Running(job, Lease(store, job.id, job.attempts, worker)) for job in jobs]
        self._slots.take(batch)
        submit = self._submit
        for r in batch:
            submit(r)
        self._stats.claimed += len(jobs)
        return len(jobs)
