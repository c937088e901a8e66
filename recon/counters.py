"""What a worker process counts, and the counters document it keeps in its ``workers`` row.

How the numbers travel
----------------------
1. **In memory, per process.** ``ProcessMetrics`` is the worker's ``WorkerObserver`` (the engine calls
   ``job_finished`` once an attempt's finish has committed) and the ``PspRecorder`` of the instrumented
   PSP adapters (``recon.payments.instrumented``). It only adds to counters and histogram buckets under a
   lock: the claim loop and the finisher never write to the database for metrics.
2. **The workers table, every few seconds.** Each worker process's presence loop (recon.engine.presence)
   upserts one row: id (its lease owner id), host, pid, queues, slots, busy slots, started_at, last_seen_at,
   stopped_at (a clean shutdown) and ``counters``, a JSON document cumulative since the process started::

       {"v": 1, "claimed": n, "released": n, "stale_finishes": n, "leases_lost": n, "lease_expirations": n,
        "database_outages": n, "database_outage_seconds": s,
        "database_waits": {"checkout" | "write_lock": {"waits": n, "seconds": s, "longest": s}},
        "attempts": [[queue, kind, outcome, error_kind or "", n], ...],
        "job_duration_seconds" | "attempts_per_success" | "psp_request_duration_seconds":
            {"le": [bounds...], "series": [[[label values...], [count per bucket, +Inf last], sum], ...]},
        "psp_throttles": [[psp, n], ...]}

   The first worker process to start forgets the rows of workers not seen for a day
   (recon.engine.observe.WORKER_RETENTION).
3. **Read back from the database**: ``series`` and ``quantile`` read the histograms of that document, for the
   stats document (recon.overview) and the pool's metrics endpoint (recon.metrics).
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from recon.rows import Job

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
ATTEMPT_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 15.0, 20.0)
PSP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: the engine's own counters in the document (recon.engine.presence writes them next to ProcessMetrics')
ENGINE_COUNTERS = ("claimed", "released", "stale_finishes", "leases_lost", "lease_expirations", "database_outages")


class _Histogram:
    """Bucket counts per label tuple (not cumulative; the +Inf bucket last) and the sum of observations."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        counts, total = self.series.setdefault(labels, ([0] * (len(self.bounds) + 1), [0.0]))
        counts[bisect.bisect_left(self.bounds, value)] += 1
        total[0] += value

    def to_json(self) -> dict[str, Any]:
        return {"le": list(self.bounds),
                "series": [[list(k), list(c), round(s[0], 6)] for k, (c, s) in sorted(self.series.items())]}


class ProcessMetrics:
    """One process's counts: the engine's ``WorkerObserver`` and the PSP adapters' ``PspRecorder``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempts: Counter[tuple[str, str, str, str]] = Counter()
        self._durations = _Histogram(DURATION_BUCKETS)
        self._per_success = _Histogram(ATTEMPT_BUCKETS)
        self._psp = _Histogram(PSP_BUCKETS)
        self._throttles: Counter[str] = Counter()

    def job_finished(self, job: Job, *, outcome: str, error_kind: str | None, seconds: float) -> None:
        """An attempt's finish committed (fencing matched); ``seconds`` is the handler's run time."""
        key = (job.queue, job.kind)
        with self._lock:
            self._attempts[(job.queue, job.kind, outcome, error_kind or "")] += 1
            self._durations.observe(key, seconds)
            if outcome == "succeeded":
                self._per_success.observe(key, float(job.attempts))

    def psp_call(self, psp: str, operation: str, *, seconds: float, throttled: bool) -> None:
        with self._lock:
            self._psp.observe((psp, operation), seconds)
            if throttled:
                self._throttles[psp] += 1

    def psp_totals(self) -> dict[str, tuple[int, int]]:
        """psp -> (requests, 429s) so far, for summaries (``recon demo``)."""
        with self._lock:
            requests: Counter[str] = Counter()
            for (psp, _operation), (counts, _sum) in self._psp.series.items():
                requests[psp] += sum(counts)
            names = sorted(set(requests) | set(self._throttles))
            return {psp: (requests[psp], self._throttles[psp]) for psp in names}

    def snapshot(self) -> dict[str, Any]:
        """The JSON counters for this process's ``workers`` row (the engine adds ENGINE_COUNTERS)."""
        with self._lock:
            return {"v": 1, "attempts": [[*k, n] for k, n in sorted(self._attempts.items())],
                    "job_duration_seconds": self._durations.to_json(),
                    "attempts_per_success": self._per_success.to_json(),
                    "psp_request_duration_seconds": self._psp.to_json(),
                    "psp_throttles": [[p, n] for p, n in sorted(self._throttles.items())]}


# --- reading the document back ------------------------------------------------------------------------------


def series(counters: dict[str, Any], name: str) -> Iterator[tuple[list[float], list[str], list[int], float]]:
    """The histogram ``name`` of a workers row's counters: (bounds, label values, counts per bucket, sum) per
    series; a series whose counts do not fit its bounds (a document of another version) is left out."""
    hist = counters.get(name) or {}
    bounds = [float(b) for b in hist.get("le", [])]
    for labels, counts, total in hist.get("series", []):
        if len(counts) == len(bounds) + 1:
            yield bounds, [str(v) for v in labels], [int(c) for c in counts], float(total)


def quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float | None:
    """Prometheus's ``histogram_quantile`` on non-cumulative counts: linear within the bucket."""
    total = sum(counts)
    if not total:
        return None
    rank, seen = q * total, 0
    for i, count in enumerate(counts):
        if count and seen + count >= rank:
            if i == len(bounds):
                return float(bounds[-1]) if bounds else None
            lower = bounds[i - 1] if i else 0.0
            return round(lower + (bounds[i] - lower) * (rank - seen) / count, 6)
        seen += count
    return float(bounds[-1]) if bounds else None
