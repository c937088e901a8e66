"""The book a worker keeps of its slots and leases, and the two hand-offs between its parts.

``Running`` goes from the claim loop to a runner (a claimed job and its lease), and the same object, its
``outcome`` set (``Done``), from the runner to the finisher. ``Slots`` is the state the parts share, under one lock:

- ``running``: every lease this process holds, by job id, from its claim until its finish commits or it is
  released. The heartbeat extends exactly these (``leases()``).
- ``executing``: the ids of ``running`` whose handler is queued for or running in a runner thread: the
  slots. ``executing`` is always a subset of ``running``'s keys.
- ``per_queue``: how many of ``executing`` belong to each queue (for the per-queue caps).

The claim loop adds (``take``), a runner frees a slot when its handler returns (before the finish
commits, so claiming overlaps finishing), the finisher drops the lease once the finish is stored
(``release``). The containers and the ``wake`` event are created once and never replaced, so the parts may
bind them to locals for their per-job loops.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from recon.config import EngineConfig
from recon.engine.lease import Lease
from recon.engine.observe import job_log_fields
from recon.engine.outcome import Outcome
from recon.rows import Job


class Running:
    """A claimed job on its way to (or in) a runner thread, then, once its handler returned, on its way to the
    finisher with the handler's result (``Done`` names it there): one object per job for both hand-offs.

    ``log_fields`` is the job's log context (recon.logs): built when first read (a line logged about the job, a
    ``bind``), not for every job, and the same dict afterwards, so that what a handler bound shows on the
    finisher's lines too.
    """

    __slots__ = ("_log_fields", "job", "lease", "outcome", "seconds")

    def __init__(self, job: Job, lease: Lease, outcome: Outcome | None = None, seconds: float = 0.0,
                 log_fields: dict[str, Any] | None = None) -> None:
        self.job = job
        self.lease = lease
        #: the handler's outcome; None: it found its lease lost (nothing to write), or it has not returned yet
        self.outcome = outcome
        self.seconds = seconds  #: the handler's run time
        self._log_fields = log_fields

    @property
    def log_fields(self) -> dict[str, Any]:
        """The fields of every log line about this attempt (``recon.engine.observe.job_log_fields``)."""
        fields = self._log_fields
        if fields is None:
            fields = self._log_fields = job_log_fields(self.job, self.lease.worker)
        return fields

    def __repr__(self) -> str:
        return f"Running(job={self.job.id}, attempt={self.job.attempts}, outcome={self.outcome!r})"


#: a ``Running`` whose handler returned: its ``outcome`` and ``seconds`` are set (the finisher's input)
Done = Running


class Slots:
    """Slots and leases of one worker process (see the module docstring for the invariants).

    ``capacity`` is how many jobs may be queued for or running in a thread (concurrency plus prefetch);
    ``low_water`` how many free slots the claim loop gathers before it claims while others run;
    ``finish_backlog`` how many results may wait for their finish before claiming pauses. ``wake`` is set
    whenever the claim loop may have something to do: slots freed, a notification, a stop.
    """

    __slots__ = ("capacity", "claim_batch", "executing", "finish_backlog", "lock", "low_water", "per_queue", "ran",
                 "ran_longest", "ran_seconds", "running", "waited", "wake", "wake_at")

    def __init__(self, *, capacity: int, low_water: int, finish_backlog: int, claim_batch: int | None = None) -> None:
        self.capacity = capacity
        self.low_water = low_water
        self.finish_backlog = finish_backlog
        #: jobs one claim asks for at most (the sizer changes it; recon.engine.sizing)
        self.claim_batch = claim_batch if claim_batch is not None else capacity
        #: executing counts at which a runner that just freed a slot wakes the claim loop
        self.wake_at = (capacity - low_water, 0)
        #: the sizer's window (recon.engine.sizing): handlers returned, their seconds, work found waiting
        self.ran = 0
        self.ran_seconds = 0.0
        self.ran_longest = 0.0
        self.waited = False
        self.lock = threading.Lock()
        self.running: dict[int, Running] = {}
        self.executing: set[int] = set()
        self.per_queue: Counter[str] = Counter()
        self.wake = threading.Event()

    @classmethod
    def for_config(cls, config: EngineConfig) -> Slots:
        """Short jobs are claimed in batches rather than one per freed slot: the claim loop waits for half a
        claim's worth of free slots; at most two finish batches of results wait for the finisher."""
        capacity = config.concurrency + config.prefetch
        return cls(capacity=capacity, low_water=max(1, min(config.claim_batch_size, capacity) // 2),
                   finish_backlog=2 * config.finish_batch_size, claim_batch=config.claim_batch_size)

    def resize(self, *, capacity: int, claim_batch: int) -> None:
        """New room and claim size (the sizer's); jobs already held stay, and are never more than room allows
        again until enough of them finish."""
        with self.lock:
            self.capacity = capacity
            self.claim_batch = claim_batch
            self.low_water = max(1, min(claim_batch, capacity) // 2)
            self.wake_at = (capacity - self.low_water, 0)
        self.wake.set()

    def take_window(self) -> tuple[int, float, float, bool]:
        """The sizer's window since the last call: (handlers returned, their seconds, the longest, work found
        waiting)."""
        with self.lock:
            window = (self.ran, self.ran_seconds, self.ran_longest, self.waited)
            self.ran, self.ran_seconds, self.ran_longest, self.waited = 0, 0.0, 0.0, False
        return window

    def free(self) -> int:
        """How many jobs the claim loop may claim now (0 while the finisher's backlog is full)."""
        with self.lock:
            executing = len(self.executing)
            awaiting_finish = len(self.running) - executing
        if awaiting_finish >= self.finish_backlog:
            return 0
        return self.capacity - executing

    def room(self, queue: str, cap: int) -> int:
        """How many more jobs of ``queue`` may execute under its cap."""
        with self.lock:
            return cap - self.per_queue[queue]

    def take(self, batch: Sequence[Running]) -> None:
        """Book freshly claimed jobs: each holds a lease and a slot."""
        with self.lock:
            running, executing, per_queue = self.running, self.executing, self.per_queue
            for r in batch:
                running[r.job.id] = r
                executing.add(r.job.id)
                per_queue[r.job.queue] += 1

    def release(self, jobs: Sequence[Job]) -> None:
        """Forget the leases of finished (or given back) attempts, with their slots if still held; wake the
        claim loop.

        A job claimed again by this worker between its finish's commit and now (a retry or snooze with no
        delay) is left alone: that newer attempt holds the slot and the lease, and dropping it would lose its
        heartbeats and let a burst worker exit with it still running.
        """
        with self.lock:
            running, executing, per_queue = self.running, self.executing, self.per_queue
            for job in jobs:
                current = running.get(job.id)
                if current is not None and current.job.attempts != job.attempts:
                    continue
                running.pop(job.id, None)
                if job.id in executing:
                    executing.discard(job.id)
                    per_queue[job.queue] -= 1
        self.wake.set()

    def leases(self) -> list[Lease]:
        """Every lease held (what the heartbeat extends)."""
        with self.lock:
            return [r.lease for r in self.running.values()]

    def executing_now(self) -> list[Running]:
        """The jobs holding a slot: queued for or running in a runner thread."""
        with self.lock:
            return [self.running[i] for i in self.executing]

    @property
    def in_flight(self) -> int:
        """Leases held: jobs running or waiting for their finish to commit."""
        with self.lock:
            return len(self.running)

    @property
    def busy(self) -> int:
        """Slots taken."""
        with self.lock:
            return len(self.executing)

    def idle(self) -> bool:
        """No lease held."""
        with self.lock:
            return not self.running
