"""Client: the producer side of the engine (enqueue, cancel, retry, inspect).

Enqueue is all-or-nothing per call: a batch is one transaction and one statement per 5,000 jobs. A queue
with ``max_depth`` refuses a batch that would pass it (``QueueFull``): producers get backpressure, not an
unbounded queue. A ``unique_key`` held by an unfinished job returns that job's id instead of a new job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, timedelta
from typing import Any

from recon.config import Settings
from recon.db.jobs_store import JobStore
from recon.engine.jobs import JobSpec
from recon.errors import InvalidJobState, JobNotFound, UnknownJobKind, UsageError
from recon.rows import AttemptRecord, EnqueueRow, Job

#: json.dumps(payload, separators=(",", ":"), allow_nan=False) without building an encoder per job
_encode_payload = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


class Client:
    """Enqueue and manage jobs. ``known_kinds``, when given, rejects kinds no worker can run."""

    def __init__(self, store: JobStore, settings: Settings, *, known_kinds: Iterable[str] | None = None) -> None:
        self.store = store
        self.settings = settings
        self._known = set(known_kinds) if known_kinds is not None else None

    def enqueue(self, kind: str, payload: dict[str, Any] | None = None, **options: Any) -> int:
        """Enqueue one job; returns its id (or the id of the unfinished job holding ``unique_key``)."""
        return self.enqueue_many([JobSpec(kind=kind, payload=payload or {}, **options)])[0]

    def enqueue_many(self, specs: Sequence[JobSpec]) -> list[int]:
        """Enqueue a batch in one transaction; ids in the order of ``specs``."""
        rows = [self._row(i, s) for i, s in enumerate(specs)]
        if not rows:
            return []
        if len(rows) == 1:  # a producer's single enqueue: no set of queues to build
            queue = rows[0].queue
            return self.store.enqueue(rows, max_depth={queue: self.settings.queue(queue).max_depth})
        depth = {q: self.settings.queue(q).max_depth for q in {r.queue for r in rows}}
        return self.store.enqueue(rows, max_depth=depth)

    def _row(self, index: int, spec: JobSpec) -> EnqueueRow:
        where = f"job #{index + 1} (kind {spec.kind!r})"
        if not spec.kind or not isinstance(spec.kind, str):
            raise UsageError(f"job #{index + 1}: kind must be a non-empty string")
        if self._known is not None and spec.kind not in self._known:
            raise UnknownJobKind(f"{where}: no handler is registered for this kind "
                                 f"(known: {', '.join(sorted(self._known)) or 'none'})")
        if not isinstance(spec.payload, dict):
            raise UsageError(f"{where}: payload must be a JSON object (dict), got {type(spec.payload).__name__}")
        try:
            payload_json = _encode_payload(spec.payload)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{where}: payload is not JSON-serialisable: {exc}") from None
        max_attempts = spec.max_attempts if spec.max_attempts is not None else self.settings.engine.default_max_attempts
        if max_attempts < 1:
            raise UsageError(f"{where}: max_attempts must be >= 1")
        if spec.run_at is not None and spec.run_at.tzinfo is None:
            raise UsageError(f"{where}: run_at must be timezone-aware")
        delay = spec.delay or timedelta(0)
        if delay < timedelta(0):
            raise UsageError(f"{where}: delay must not be negative")
        return EnqueueRow(
            queue=spec.queue or self.settings.engine.default_queue, kind=spec.kind, payload_json=payload_json,
            priority=int(spec.priority), run_at=spec.run_at.astimezone(UTC) if spec.run_at else None,
            delay=delay.total_seconds(), max_attempts=max_attempts, unique_key=spec.unique_key, tenant=spec.tenant,
        )

    def get(self, job_id: int) -> Job:
        job = self.store.get(job_id)
        if job is None:
            raise JobNotFound(f"job {job_id} not found")
        return job

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        self.get(job_id)
        return self.store.attempts(job_id)

    def cancel(self, job_id: int) -> str:
        """"canceled" (it was not running) or "requested" (its worker is told through the heartbeat)."""
        result = self.store.cancel(job_id)
        if result is None:
            job = self.get(job_id)
            raise InvalidJobState(f"job {job_id} is {job.state}: only unfinished jobs can be canceled")
        return result

    def retry(self, job_id: int) -> None:
        """Make a dead, canceled or waiting job runnable now (with one more attempt if its budget is spent)."""
        if not self.store.retry_now(job_id):
            job = self.get(job_id)
            raise InvalidJobState(f"job {job_id} is {job.state}: only dead, canceled, retryable or pending "
                                  f"jobs can be retried")
