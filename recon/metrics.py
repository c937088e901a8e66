"""The pool's metrics endpoint: ``recon worker --metrics-port P`` serves ``PoolCollector`` on 127.0.0.1:P.

It never exposes its own process's memory: each scrape (cached for ``REFRESH_SECONDS``) reads the database,
where every worker process keeps its counters (recon.counters: what a process counts and how it gets to its
``workers`` row): queue depth and the oldest due job, the rows of workers seen within ``LIVE_WINDOW_SECONDS``,
the unfinished payments, the review queue, manual resolutions, the schedules' last slots and the close's desk
(open payout exceptions, what they leave unexplained, each PSP's last close). Any one worker's
endpoint therefore shows the whole pool, whichever host the others run on; when several workers on a host are
given the same port, the first binds it and the others log that and carry on without one.

The gauges that ``recon stats`` also shows (oldest runnable age, live workers and utilisation, money at risk,
the review queue) are read from the same sections of the stats document (recon.overview), computed by the
same functions, so the endpoint and ``recon stats --json`` never disagree.

Counters keep a ``worker`` label. A sum over the live workers would fall whenever a worker leaves the
window, which Prometheus takes for a counter reset (and a spurious jump in ``increase()``); per-worker
series simply end. Pool totals are ``sum without (worker) (...)``. The histogram sums give busy time:
``sum(rate(recon_job_duration_seconds_sum[5m])) / sum(recon_worker_slots)`` is the averaged utilisation,
where ``recon_worker_utilisation_ratio`` is the instantaneous one from the last rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from recon.counters import series
from recon.db.close_store import CloseStore
from recon.db.database import Database
from recon.db.dispute_store import DisputeStore
from recon.db.modification_store import ModificationStore
from recon.db.payment_store import PaymentStore
from recon.db.pool_store import PoolStore
from recon.db.refund_store import RefundStore
from recon.db.review_store import ReviewStore
from recon.db.schedule_store import ScheduleStore
from recon.errors import ReconError
from recon.overview import (
    EVIDENCE_SOON,
    LIVE_WINDOW_SECONDS,
    age_seconds,
    captures_section,
    depth_detail,
    disputes_section,
    payments_section,
    payouts_section,
    review_section,
    workers_section,
)
from recon.pool_rows import WorkerRecord
from recon.review_config import ReviewConfig
from recon.review_rows import QueueFilter

log = logging.getLogger(__name__)

REFRESH_SECONDS = 2.0  #: scrapes within this many seconds share one database read
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class PoolCollector:
    """Prometheus collector over the database: the whole pool, whichever process serves it."""

    def __init__(self, store: PoolStore, ledger: PaymentStore, *, live_window: float = LIVE_WINDOW_SECONDS,
                 refresh: float = REFRESH_SECONDS, review_config: ReviewConfig | None = None) -> None:
        self._store, self._ledger = store, ledger
        self._review, self._review_config = ReviewStore(ledger.db, ledger), review_config or ReviewConfig()
        self._live_window, self._refresh = live_window, refresh
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, Any]] | None = None

    def _read(self) -> dict[str, Any]:
        """What the families show, read at most every ``refresh`` seconds: the stats document's sections
        (recon.overview) and what only the endpoint shows (per-worker series, resolutions, schedule slots)."""
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] >= self._refresh:
                pool = self._store.pool_snapshot(workers_within=timedelta(seconds=self._live_window))
                now = pool["now"]
                pool["pool"] = workers_section(pool["workers"], now, self._live_window)
                pool["payments"] = payments_section(self._ledger.money_at_risk(), RefundStore(self._ledger.db).counts())
                held = ModificationStore(self._ledger.db)
                pool["payments"]["captures"] = captures_section(held.counts(), held.authorised_totals())
                pool["review"] = review_section(*self._ledger.review_summary(), now=now)
                pool["review"]["overdue"] = self._review.totals(QueueFilter(overdue=True),
                                                                self._review_config.rules(now)).count
                pool["resolutions"] = self._ledger.resolutions(since=_EPOCH)
                pool["slots"] = ScheduleStore(self._ledger.db).latest()
                disputes = DisputeStore(self._ledger.db)
                pool["disputes"] = disputes_section(disputes.open_totals(soon=now + EVIDENCE_SOON),
                                                    disputes.status_counts())
                closes = CloseStore(self._ledger.db)
                pool["payouts"] = payouts_section(closes.open_by_kind(), closes.open_amounts(), closes.last_runs())
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
        yield from _worker_families(pool)
        yield from _payment_families(pool["payments"])
        yield from _review_families(pool)
        yield from _dispute_families(pool["disputes"])
        yield from _schedule_families(pool)
        yield from _payout_families(pool["payouts"])


def _job_families(pool: dict[str, Any]) -> Iterator[Metric]:
    depth = GaugeMetricFamily("recon_queue_depth", "Unfinished jobs by queue, kind, tenant, priority, state.",
                              labels=["queue", "kind", "tenant", "priority", "state"])
    rows = depth_detail(pool["depth"])
    for row in rows:
        depth.add_metric([row["queue"], row["kind"], row["tenant"], str(row["priority"]), row["state"]],
                         float(row["jobs"]))
    yield depth
    age = GaugeMetricFamily("recon_queue_oldest_runnable_age_seconds",
                            "Age of the oldest job that is due and waiting for a worker (0: none).",
                            labels=["queue"])
    for queue in sorted({row["queue"] for row in rows} | set(pool["oldest_due"])):
        age.add_metric([queue], age_seconds(pool["now"], pool["oldest_due"].get(queue)))
    yield age


def _worker_families(pool: dict[str, Any]) -> Iterator[Metric]:
    section = pool["pool"]
    yield GaugeMetricFamily("recon_workers_live", "Worker processes seen within the live window.",
                            value=float(section["live"]))
    slots = GaugeMetricFamily("recon_worker_slots", "Handler slots of a live worker.",
                              labels=["worker", "host"])
    busy = GaugeMetricFamily("recon_worker_busy_slots", "Busy slots of a live worker at its last update.",
                             labels=["worker", "host"])
    claim = GaugeMetricFamily("recon_worker_claim_batch", "Jobs one claim of a live worker asks for at most "
                              "(its sizer's choice, or the setting).", labels=["worker", "host"])
    prefetch = GaugeMetricFamily("recon_worker_prefetch", "Jobs a live worker may claim beyond its free threads "
                                 "(its sizer's choice, or the setting).", labels=["worker", "host"])
    for w in section["list"]:
        if w["status"] == "live":
            slots.add_metric([w["id"], w["host"]], float(w["slots"]))
            busy.add_metric([w["id"], w["host"]], float(w["busy_slots"]))
            if w.get("sizing"):
                claim.add_metric([w["id"], w["host"]], float(w["sizing"]["claim_batch"]))
                prefetch.add_metric([w["id"], w["host"]], float(w["sizing"]["prefetch"]))
    yield from (slots, busy, claim, prefetch, GaugeMetricFamily("recon_worker_utilisation_ratio",
                                               "Busy slots / slots over the live workers.",
                                               value=float(section["utilisation"])))
    yield from _counter_families(section["list"], pool["workers"])
    for key, name, doc, labels in _HISTOGRAMS:
        family = HistogramMetricFamily(name, doc, labels=["worker", *labels])
        for record in pool["workers"]:
            for bounds, values, counts, total in series(record.counters, key):
                family.add_metric([record.id, *values], _cumulative(bounds, counts), total)
        yield family


def _cumulative(bounds: list[float], counts: list[int]) -> list[tuple[str, float]]:
    out, running = [], 0
    for bound, count in zip([*map(_le, bounds), "+Inf"], counts, strict=True):
        running += count
        out.append((bound, float(running)))
    return out


def _le(bound: float) -> str:
    return repr(float(bound))


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


def _counter_families(listed: Iterable[dict[str, Any]], workers: Iterable[WorkerRecord]) -> Iterator[Metric]:
    """The engine's counters per worker as the workers section lists them; attempts and 429s from the rows."""
    entries = list(listed)
    for key, name, doc in _ENGINE_FAMILIES:
        family = CounterMetricFamily(name, doc, labels=["worker"])
        for entry in entries:
            family.add_metric([entry["id"]], float(entry[key]))
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


def _payment_families(payments: dict[str, Any]) -> Iterator[Metric]:
    unfinished = GaugeMetricFamily("recon_payments_unfinished", "Payments created, processing or pending, by "
                                   "currency and age bucket (lt_1h, 1h_1d, 1d_7d, gt_7d).",
                                   labels=["currency", "age"])
    at_risk = GaugeMetricFamily("recon_money_at_risk_minor_units",
                                "Unfinished payments' and refunds in flight's sum (minor units).",
                                labels=["currency"])
    for row in payments["unfinished"]:
        unfinished.add_metric([row["currency"], row["age"]], float(row["count"]))
    for currency, amount in payments["money_at_risk"].items():
        at_risk.add_metric([currency], float(amount))
    yield unfinished
    yield at_risk
    refunds = GaugeMetricFamily("recon_refunds", "Refunds by status and currency.", labels=["status", "currency"])
    in_flight = GaugeMetricFamily("recon_refunds_in_flight_minor_units",
                                  "Refunds created, processing or pending: their sum (minor units; also in "
                                  "recon_money_at_risk_minor_units).", labels=["currency"])
    for row in payments["refunds"]["rows"]:
        refunds.add_metric([row["status"], row["currency"]], float(row["count"]))
    for currency, amount in payments["refunds"]["in_flight"].items():
        in_flight.add_metric([currency], float(amount))
    yield refunds
    yield in_flight
    yield from _capture_families(payments.get("captures"))


def _capture_families(captures: dict[str, Any] | None) -> Iterator[Metric]:
    if captures is None:
        return
    counts = GaugeMetricFamily("recon_modifications", "Captures and cancels by kind, status and currency.",
                               labels=["kind", "status", "currency"])
    for row in captures["rows"]:
        counts.add_metric([row["kind"], row["status"], row["currency"]], float(row["count"]))
    in_flight = GaugeMetricFamily("recon_captures_in_flight_minor_units",
                                  "Captures created, processing or pending: their sum (minor units).",
                                  labels=["currency"])
    for currency, amount in captures["in_flight"].items():
        in_flight.add_metric([currency], float(amount))
    held = GaugeMetricFamily("recon_authorised_not_captured_minor_units",
                             "Payments authorised for a manual capture and not captured: their sum (minor units).",
                             labels=["currency"])
    for currency, amount in captures["authorised"].items():
        held.add_metric([currency], float(amount))
    yield counts
    yield in_flight
    yield held


def _review_families(pool: dict[str, Any]) -> Iterator[Metric]:
    review = pool["review"]
    yield GaugeMetricFamily("recon_payments_needs_review", "Payments in needs_review.",
                            value=float(review["needs_review"]))
    yield GaugeMetricFamily("recon_review_oldest_age_seconds", "How long the oldest payment in review has waited "
                            "(0: none).", value=float(review["oldest_age_seconds"] or 0.0))
    yield GaugeMetricFamily("recon_review_overdue", "Payments in needs_review past their due-by (the SLA of their "
                            "reason, [review.sla]).", value=float(review.get("overdue", 0)))
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


def _dispute_families(disputes: dict[str, Any]) -> Iterator[Metric]:
    by_status = GaugeMetricFamily("recon_disputes", "Disputes by PSP and status.", labels=["psp", "status"])
    for psp, counts in sorted(disputes["by_psp"].items()):
        for status, n in sorted(counts.items()):
            by_status.add_metric([psp, status], float(n))
    yield by_status
    withdrawn = GaugeMetricFamily("recon_disputes_open_withdrawn_minor_units", "Open disputes: the money the PSPs "
                                  "withdrew (minor units).", labels=["currency"])
    for currency, amount in sorted(disputes["withdrawn"].items()):
        withdrawn.add_metric([currency], float(amount))
    yield withdrawn
    yield GaugeMetricFamily("recon_disputes_evidence_due_soon", f"Open disputes whose evidence is due within "
                            f"{disputes['due_soon_days']} days.", value=float(disputes["due_soon"]))


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


def _payout_families(section: dict[str, Any]) -> Iterator[Metric]:
    """The close's desk, as ``recon stats`` shows it (``recon.overview.payouts_section``)."""
    open_kinds = GaugeMetricFamily("recon_payout_exceptions_open", "Open payout exceptions of the close, by kind.",
                                   labels=["kind"])
    for kind, n in section["open_by_kind"].items():
        open_kinds.add_metric([kind], float(n))
    yield open_kinds
    unmatched = GaugeMetricFamily("recon_payout_unexplained_minor_units", "What open payout exceptions leave "
                                  "unexplained: the payouts' amounts and the bank entries' (debits negative), by "
                                  "currency (minor units).", labels=["currency", "side"])
    for currency, u in section["unmatched"].items():
        unmatched.add_metric([currency, "payouts"], float(u["payouts_amount"]))
        unmatched.add_metric([currency, "bank_entries"], float(u["bank_entries_amount"]))
    yield unmatched
    last = GaugeMetricFamily("recon_close_last_run_timestamp_seconds", "When each PSP's last close ran.",
                             labels=["psp"])
    closed = GaugeMetricFamily("recon_close_last_open_items", "Items each PSP's last close left open (0: closed).",
                               labels=["psp"])
    for c in section["last_close"]:
        last.add_metric([c["psp"]], datetime.fromisoformat(c["ran_at"]).timestamp())
        closed.add_metric([c["psp"]], float(c["open_items"]))
    yield last
    yield closed


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
          refresh: float = REFRESH_SECONDS, review_config: ReviewConfig | None = None) -> MetricsServer | None:
    """Serve the pool's metrics on ``host:port`` (0: any free port); None when the port is taken (another
    worker on this host serves the same pool)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PoolCollector(PoolStore(db), PaymentStore(db), live_window=live_window, refresh=refresh,
                                    review_config=review_config))
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.warning("metrics: cannot listen on %s:%s (%s); another process may serve the pool's metrics "
                    "there", host, port, exc)
        return None
    log.info("metrics: serving the pool's metrics on http://%s:%s/metrics", host, httpd.server_port)
    return MetricsServer(httpd, thread)


