"""Metrics: what each worker process counts, the ``workers`` table that pools it, one endpoint for the pool.

How the numbers travel
----------------------
1. **In memory, per process.** ``ProcessMetrics`` is the worker's ``WorkerObserver`` (the engine calls
   ``job_finished`` once an attempt's finish has committed) and the ``PspRecorder`` of the instrumented
   PSP adapters (``recon.payments.instrumented``). It only adds to counters and histogram buckets under a
   lock: the claim loop and the finisher never write to the database for metrics.
2. **The workers table, every few seconds.** Each worker process's presence thread (recon.engine.worker)
   upserts one row: id (its lease owner id), host, pid, queues, slots, busy slots, started_at, last_seen_at,
   stopped_at (a clean shutdown) and ``counters``, a JSON document cumulative since the process started::

       {"v": 1, "claimed": n, "released": n, "stale_finishes": n, "leases_lost": n, "lease_expirations": n,
        "database_outages": n, "database_outage_seconds": s,
        "attempts": [[queue, kind, outcome, error_kind or "", n], ...],
        "job_duration_seconds" | "attempts_per_success" | "psp_request_duration_seconds":
            {"le": [bounds...], "series": [[[label values...], [count per bucket, +Inf last], sum], ...]},
        "psp_throttles": [[psp, n], ...]}

   The first worker process to start forgets the rows of workers not seen for ``WORKER_RETENTION``.
3. **One endpoint for the pool.** ``recon worker --metrics-port P`` serves ``PoolCollector`` on
   127.0.0.1:P. It never exposes its own process's memory: each scrape (cached for ``REFRESH_SECONDS``)
   reads the database: queue depth and oldest due job, the rows of workers seen within
   ``LIVE_WINDOW_SECONDS``, and the unfinished payments. Any one worker's endpoint therefore shows the whole
   pool, whichever host the others run on; when several workers on a host are given the same port, the
   first binds it and the others log that and carry on without one.
4. ``recon stats`` reads the same table (``stats_extension``), over the ``--window``, and lists stopped
   and dead (silent) workers too.

Counters keep a ``worker`` label. A sum over the live workers would fall whenever a worker leaves the
window, which Prometheus takes for a counter reset (and a spurious jump in ``increase()``); per-worker
series simply end. Pool totals are ``sum without (worker) (...)``. The histogram sums give busy time:
``sum(rate(recon_job_duration_seconds_sum[5m])) / sum(recon_worker_slots)`` is the averaged utilisation,
where ``recon_worker_utilisation_ratio`` is the instantaneous one from the last rows.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from recon.db.database import Database
from recon.db.payment_store import PaymentStore
from recon.db.pool_store import PoolStore
from recon.db.schedule_store import ScheduleStore
from recon.errors import ReconError
from recon.pool_rows import WorkerRecord
from recon.rows import Job

log = logging.getLogger(__name__)

LIVE_WINDOW_SECONDS = 30.0  #: a worker whose row is older than this is not live (it upserts every <= 5 s)
REFRESH_SECONDS = 2.0  #: scrapes within this many seconds share one database read
WORKER_RETENTION = timedelta(days=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
ATTEMPT_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 15.0, 20.0)
PSP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
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


# --- reading the workers table ----------------------------------------------------------------------------


def worker_status(w: WorkerRecord, now: Any, live_window: float) -> str:
    """live; stopped (shut down cleanly); or dead: not seen within the window and never said goodbye."""
    if w.stopped_at is not None:
        return "stopped"
    return "live" if (now - w.last_seen_at).total_seconds() <= live_window else "dead"


def _series(counters: dict[str, Any], name: str) -> Iterator[tuple[list[float], list[str], list[int], float]]:
    hist = counters.get(name) or {}
    bounds = [float(b) for b in hist.get("le", [])]
    for labels, counts, total in hist.get("series", []):
        if len(counts) == len(bounds) + 1:
            yield bounds, [str(v) for v in labels], [int(c) for c in counts], float(total)


def _cumulative(bounds: list[float], counts: list[int]) -> list[tuple[str, float]]:
    out, running = [], 0
    for bound, count in zip([*map(_le, bounds), "+Inf"], counts, strict=True):
        running += count
        out.append((bound, float(running)))
    return out


def _le(bound: float) -> str:
    return repr(float(bound))


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


# --- the endpoint -------------------------------------------------------------------------------------------


class PoolCollector:
    """Prometheus collector over the database: the whole pool, whichever process serves it."""

    def __init__(self, store: PoolStore, ledger: PaymentStore, *, live_window: float = LIVE_WINDOW_SECONDS,
                 refresh: float = REFRESH_SECONDS) -> None:
        self._store, self._ledger = store, ledger
        self._live_window, self._refresh = live_window, refresh
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, Any]] | None = None

    def _read(self) -> dict[str, Any]:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] >= self._refresh:
                pool = self._store.pool_snapshot(workers_within=timedelta(seconds=self._live_window))
                pool["money"] = self._ledger.money_at_risk()
                pool["review"] = self._ledger.review_summary()
                pool["resolutions"] = self._ledger.resolutions(since=_EPOCH)
                pool["slots"] = ScheduleStore(self._ledger.db).latest()
                self._cached = (time.monotonic(), pool)
            return self._cached[1]

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("recon_database_up", "1 when this scrape could read the database.")
        try:
            pool = self._read()
        except ReconError as exc:
            log.warning("metrics: cannot read the database: %s", exc)
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from _job_families(pool)
        yield from _worker_families(pool, self._live_window)
        yield from _payment_families(pool["money"])
        yield from _review_families(pool)
        yield from _schedule_families(pool)


def _job_families(pool: dict[str, Any]) -> Iterator[Metric]:
    depth = GaugeMetricFamily("recon_queue_depth", "Unfinished jobs by queue, kind, tenant, priority, state.",
                              labels=["queue", "kind", "tenant", "priority", "state"])
    for queue, kind, tenant, priority, state, n in pool["depth"]:
        depth.add_metric([queue, kind, tenant, str(priority), state], float(n))
    yield depth
    age = GaugeMetricFamily("recon_queue_oldest_runnable_age_seconds",
                            "Age of the oldest job that is due and waiting for a worker (0: none).",
                            labels=["queue"])
    now = pool["now"]
    for queue in sorted({row[0] for row in pool["depth"]} | set(pool["oldest_due"])):
        oldest = pool["oldest_due"].get(queue)
        age.add_metric([queue], max((now - oldest).total_seconds(), 0.0) if oldest else 0.0)
    yield age


def _worker_families(pool: dict[str, Any], live_window: float) -> Iterator[Metric]:
    workers: list[WorkerRecord] = pool["workers"]
    live = [w for w in workers if worker_status(w, pool["now"], live_window) == "live"]
    yield GaugeMetricFamily("recon_workers_live", "Worker processes seen within the live window.",
                            value=float(len(live)))
    slots = GaugeMetricFamily("recon_worker_slots", "Handler slots of a live worker.",
                              labels=["worker", "host"])
    busy = GaugeMetricFamily("recon_worker_busy_slots", "Busy slots of a live worker at its last update.",
                             labels=["worker", "host"])
    for w in live:
        slots.add_metric([w.id, w.host], float(w.slots))
        busy.add_metric([w.id, w.host], float(w.busy_slots))
    total_slots = sum(w.slots for w in live)
    ratio = sum(w.busy_slots for w in live) / total_slots if total_slots else 0.0
    yield from (slots, busy, GaugeMetricFamily("recon_worker_utilisation_ratio",
                                               "Busy slots / slots over the live workers.", value=ratio))
    yield from _counter_families(workers)
    for key, name, doc, labels in _HISTOGRAMS:
        family = HistogramMetricFamily(name, doc, labels=["worker", *labels])
        for w in workers:
            for bounds, values, counts, total in _series(w.counters, key):
                family.add_metric([w.id, *values], _cumulative(bounds, counts), total)
        yield family


_ENGINE_FAMILIES = (
    ("claimed", "recon_job_claims", "Jobs claimed."),
    ("lease_expirations", "recon_lease_expirations", "Expired leases rescued by this worker's watcher."),
    ("stale_finishes", "recon_stale_finishes", "Finishes rejected by fencing: the lease was no longer ours."),
    ("leases_lost", "recon_leases_lost", "Leases found lost by a heartbeat while their handler ran."),
    ("database_outages", "recon_database_outages",
     "Outages of the database this worker saw: no server took its writes (connection lost or refused, shut "
     "down, failing over, read-only) until one did again."),
    ("database_outage_seconds", "recon_database_outage_seconds", "Seconds this worker found the database "
     "unavailable."),
)
_HISTOGRAMS = (
    ("job_duration_seconds", "recon_job_duration_seconds", "Handler run time per attempt.",
     ["queue", "kind"]),
    ("attempts_per_success", "recon_job_attempts_per_success",
     "Attempts (claims) a job took, observed when it succeeds.", ["queue", "kind"]),
    ("psp_request_duration_seconds", "recon_psp_request_duration_seconds",
     "PSP call latency, errors included.", ["psp", "operation"]),
)


def _counter_families(workers: Iterable[WorkerRecord]) -> Iterator[Metric]:
    workers = list(workers)
    for key, name, doc in _ENGINE_FAMILIES:
        family = CounterMetricFamily(name, doc, labels=["worker"])
        for w in workers:
            family.add_metric([w.id], float(w.counters.get(key, 0)))
        yield family
    attempts = CounterMetricFamily("recon_job_attempts", "Attempts ended, by outcome (succeeded, retried, "
                                   "snoozed, dead, canceled) and error kind.",
                                   labels=["worker", "queue", "kind", "outcome", "error_kind"])
    throttles = CounterMetricFamily("recon_psp_throttles", "PSP answers HTTP 429 (PspRateLimited).",
                                    labels=["worker", "psp"])
    for w in workers:
        for *labels, n in w.counters.get("attempts", []):
            attempts.add_metric([w.id, *map(str, labels)], float(n))
        for psp, n in w.counters.get("psp_throttles", []):
            throttles.add_metric([w.id, psp], float(n))
    yield attempts
    yield throttles


def _payment_families(money: list[dict[str, Any]]) -> Iterator[Metric]:
    unfinished = GaugeMetricFamily("recon_payments_unfinished", "Payments created, processing or pending, by "
                                   "currency and age bucket (lt_1h, 1h_1d, 1d_7d, gt_7d).",
                                   labels=["currency", "age"])
    at_risk = GaugeMetricFamily("recon_money_at_risk_minor_units", "Unfinished payments' sum (minor units).",
                                labels=["currency"])
    per_currency: Counter[str] = Counter()
    for row in money:
        unfinished.add_metric([row["currency"], row["age"]], float(row["count"]))
        per_currency[row["currency"]] += row["amount"]
    for currency, amount in sorted(per_currency.items()):
        at_risk.add_metric([currency], float(amount))
    yield unfinished
    yield at_risk


def _review_families(pool: dict[str, Any]) -> Iterator[Metric]:
    count, oldest = pool["review"]
    yield GaugeMetricFamily("recon_payments_needs_review", "Payments in needs_review.", value=float(count))
    yield GaugeMetricFamily("recon_review_oldest_age_seconds", "How long the oldest payment in review has waited "
                            "(0: none).", value=max((pool["now"] - oldest).total_seconds(), 0.0) if oldest else 0.0)
    resolved = CounterMetricFamily("recon_review_resolutions", "Payments resolved out of needs_review by hand, by "
                                   "operator, new status and whether the PSP's answer was overridden.",
                                   labels=["operator", "status", "override"])
    totals: Counter[tuple[str, str, str]] = Counter()
    for row in pool["resolutions"]:
        totals[(row["operator"] or "", row["status"], "false")] += row["count"] - row["overrides"]
        totals[(row["operator"] or "", row["status"], "true")] += row["overrides"]
    for labels, n in sorted(totals.items()):
        if n:
            resolved.add_metric(list(labels), float(n))
    yield resolved


def _schedule_families(pool: dict[str, Any]) -> Iterator[Metric]:
    lag = GaugeMetricFamily("recon_schedule_lag_seconds", "How late the last slot of each [schedule.NAME] was "
                            "queued after its time.", labels=["schedule"])
    last = GaugeMetricFamily("recon_schedule_last_slot_timestamp_seconds", "The time of each schedule's last "
                             "claimed slot (alert when it falls behind its period).", labels=["schedule"])
    for name, slot in sorted(pool["slots"].items()):
        lag.add_metric([name], max((slot.enqueued_at - slot.slot_at).total_seconds(), 0.0))
        last.add_metric([name], slot.slot_at.timestamp())
    yield lag
    yield last


class MetricsServer:
    """The HTTP endpoint's server thread; ``close()`` stops it."""

    def __init__(self, httpd: Any, thread: threading.Thread) -> None:
        self._httpd, self._thread = httpd, thread
        self.port: int = httpd.server_port

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def serve(db: Database, *, port: int, host: str = "127.0.0.1", live_window: float = LIVE_WINDOW_SECONDS,
          refresh: float = REFRESH_SECONDS) -> MetricsServer | None:
    """Serve the pool's metrics on ``host:port`` (0: any free port); None when the port is taken (another
    worker on this host serves the same pool)."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(PoolCollector(PoolStore(db), PaymentStore(db), live_window=live_window, refresh=refresh))
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.warning("metrics: cannot listen on %s:%s (%s); another process may serve the pool's metrics "
                    "there", host, port, exc)
        return None
    log.info("metrics: serving the pool's metrics on http://%s:%s/metrics", host, httpd.server_port)
    return MetricsServer(httpd, thread)


# --- `recon stats` ------------------------------------------------------------------------------------------


def stats_extension(pool: dict[str, Any], attempts: dict[str, Any], money: list[dict[str, Any]], *,
                    window: timedelta, live_window: float = LIVE_WINDOW_SECONDS) -> dict[str, Any]:
    """What `recon stats` adds to the job counts: depth detail, per-kind rates and durations, the workers,
    their counters (rows seen within ``window``), PSP latency and throttles, and the unfinished payments."""
    now = pool["now"]
    recent = [w for w in pool["workers"] if now - w.last_seen_at <= window]
    live = [w for w in pool["workers"] if worker_status(w, now, live_window) == "live"]
    slots, busy = sum(w.slots for w in live), sum(w.busy_slots for w in live)
    successes = sum(n for _, outcome, n, _, _ in attempts["by_kind"] if outcome == "succeeded")
    success_attempts = sum(s for _, outcome, _, s, _ in attempts["by_kind"] if outcome == "succeeded")
    return {
        "depth_detail": [{"queue": q, "kind": k, "tenant": t, "priority": p, "state": s, "jobs": n}
                         for q, k, t, p, s, n in pool["depth"]],
        "kinds": _kinds(attempts),
        "attempts_per_success": round(success_attempts / successes, 4) if successes else None,
        "workers": {"live_window_seconds": live_window, "live": len(live), "slots": slots, "busy_slots": busy,
                    "utilisation": round(busy / slots, 4) if slots else 0.0,
                    "list": [_worker_doc(w, now, live_window) for w in pool["workers"]]},
        **{key: sum(int(w.counters.get(key, 0)) for w in recent)
           for key in ("stale_finishes", "leases_lost")},
        "psp": _psp_doc(recent),
        "payments": _payments_doc(money),
    }


def _kinds(attempts: dict[str, Any]) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for kind, outcome, n, attempt_sum, attempt_max in attempts["by_kind"]:
        entry = kinds.setdefault(kind, {"attempts": {}, "successes": 0, "attempts_per_success": None,
                                        "max_attempts_per_success": None, "duration_seconds": None})
        entry["attempts"][outcome] = n
        if outcome == "succeeded":
            entry.update(successes=n, attempts_per_success=round(attempt_sum / n, 4),
                         max_attempts_per_success=attempt_max)
    for kind, entry in kinds.items():
        ended = sum(entry["attempts"].values())
        entry["retry_rate"] = round(entry["attempts"].get("retried", 0) / ended, 4) if ended else 0.0
        entry["dead_rate"] = round(entry["attempts"].get("dead", 0) / ended, 4) if ended else 0.0
        d = attempts["durations"].get(kind)
        if d:
            entry["duration_seconds"] = {"count": d["count"], "p50": _r(d["p50"]), "p95": _r(d["p95"]),
                                         "max": _r(d["max"]), "mean": _r((d["sum"] or 0.0) / d["count"])}
    return kinds


def _worker_doc(w: WorkerRecord, now: Any, live_window: float) -> dict[str, Any]:
    return {"id": w.id, "host": w.host, "pid": w.pid, "queues": list(w.queues),
            "status": worker_status(w, now, live_window), "slots": w.slots, "busy_slots": w.busy_slots,
            "started_at": w.started_at.isoformat(), "last_seen_at": w.last_seen_at.isoformat(),
            "stopped_at": w.stopped_at.isoformat() if w.stopped_at else None,
            "last_seen_seconds_ago": round((now - w.last_seen_at).total_seconds(), 3),
            **{key: int(w.counters.get(key, 0)) for key in ENGINE_COUNTERS},
            "database_outage_seconds": float(w.counters.get("database_outage_seconds", 0.0))}


def _psp_doc(workers: Iterable[WorkerRecord]) -> dict[str, Any]:
    merged: dict[str, tuple[list[float], list[int], list[float]]] = {}
    throttles: Counter[str] = Counter()
    for w in workers:
        for bounds, (psp, _operation), counts, total in _series(w.counters, "psp_request_duration_seconds"):
            _, acc, acc_sum = merged.setdefault(psp, (bounds, [0] * len(counts), [0.0]))
            if len(acc) == len(counts):
                acc[:] = [a + c for a, c in zip(acc, counts, strict=True)]
                acc_sum[0] += total
        for psp, n in w.counters.get("psp_throttles", []):
            throttles[psp] += int(n)
    out = {}
    for psp in sorted(set(merged) | set(throttles)):
        bounds, counts, seconds = merged.get(psp, ([], [], [0.0]))
        requests = sum(counts)
        out[psp] = {"requests": requests, "throttles": throttles[psp], "latency_seconds": {
            "p50": quantile(0.5, bounds, counts), "p95": quantile(0.95, bounds, counts),
            "mean": _r(seconds[0] / requests) if requests else None}}
    return out


def _payments_doc(money: list[dict[str, Any]]) -> dict[str, Any]:
    by_age: Counter[str] = Counter()
    at_risk: Counter[str] = Counter()
    for row in money:
        by_age[row["age"]] += row["count"]
        at_risk[row["currency"]] += row["amount"]
    return {"unfinished_by_age": dict(sorted(by_age.items())), "money_at_risk": dict(sorted(at_risk.items())),
            "unfinished": money}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
