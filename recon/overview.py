"""The stats document: the pool's and the payments' state, built here alone.

``recon stats --json`` prints ``stats_document``, the console's overview renders it, and the pool's metrics
endpoint (recon.metrics) turns the same sections into gauges: each number is computed by one function of this
module from what the stores return, whoever shows it. The sections:

- ``queues_section``: depth per queue and state, the oldest runnable job's age, attempt outcomes and rates
  over the window (``JobStore.stats``);
- ``pool_section``: depth detail, per-kind rates and durations, the workers (``workers_section``), their
  counters, PSP latency and throttles (``psp_section``), the unfinished payments (``payments_section``);
- ``psp_controls_document``: pause, cool-down and breaker per PSP (also the whole of ``recon psp status --json``);
- ``review_section``, manual resolutions, the last sweeps, webhook events by outcome;
- ``payouts_section``: the close's open exceptions by kind, what they leave unexplained per currency, and each
  PSP's last close (``CloseStore``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from recon.control_rows import PspControl
from recon.counters import ENGINE_COUNTERS, quantile, series
from recon.db.control_store import ControlStore
from recon.dispute_rows import OpenDisputes
from recon.operator_rows import Operator
from recon.payments.psp_limits import GuardConfig, PspLimits
from recon.pool_rows import WorkerRecord
from recon.review_rows import QueueFilter
from recon.rows import PaymentStatus

if TYPE_CHECKING:
    from recon.app import App

#: how far back ``recon stats`` counts manual resolutions per day
RESOLUTIONS_WINDOW = timedelta(days=14)
#: how many of the last sweeps ``recon stats`` shows
SWEEPS_SHOWN = 5
#: an open dispute whose evidence is due within this is "due soon" (stats, metrics, the console's overview)
EVIDENCE_SOON = timedelta(days=7)
#: what the console's overview leaves out: each would read every finished job or attempt of the window
OVERVIEW_LEAVES_OUT = ("attempts", "lease_expirations", "retry_rate", "dead_rate", "kinds", "depth_detail",
                       "attempts_per_success")
#: a worker whose row is older than this is not live (it upserts every <= 5 s)
LIVE_WINDOW_SECONDS = 30.0


def stats_document(app: App, *, window: timedelta, live_window: timedelta, overview: bool = False) -> dict[str, Any]:
    """Queue depth and oldest runnable age per queue, attempt outcomes over ``window``, depth detail, the
    workers (live within ``live_window``), PSP latency and controls, unfinished payments and money at risk, the
    payments in review, manual resolutions per day and operator, and the last sweeps.

    ``overview``: the console's overview, the same document less what needs a scan of every finished job or
    attempt (finished jobs but the dead, attempt outcomes and rates, per-kind durations, depth detail): the
    sections it has are computed exactly as for ``recon stats``."""
    raw = app.jobs.stats(window=window, detail=not overview)
    now: datetime = raw["now"]
    doc = queues_section(raw, window=window)
    attempts = (app.pool.attempt_stats(since=now - window) if not overview
                else {"by_kind": [], "durations": {}})
    # the oldest due job per queue is the queues section's already (raw["oldest_due"]): not read twice
    pool = app.pool.pool_snapshot(workers_within=None, depth_detail=not overview, oldest_due=False)
    doc.update(pool_section(pool, attempts, app.payments.money_at_risk(), window=window,
                            live_window=live_window.total_seconds(), refunds=app.refunds.counts()))
    doc["payments"]["captures"] = captures_section(app.modifications.counts(), app.modifications.authorised_totals())
    # pause, cool-down and breaker per PSP, next to the PSP latency section
    doc["psp_controls"] = psp_controls_document(app.controls, app.guard_config, app.psp_names(),
                                                unconfigured=app.unconfigured_psps())["psps"]
    doc["review"] = review_section(*app.payments.review_summary(), now=now)
    doc["review"]["overdue"] = app.review.totals(QueueFilter(overdue=True)).count
    doc["resolutions"] = {"since": (now - RESOLUTIONS_WINDOW).isoformat(),
                          "by_day": app.payments.resolutions(since=now - RESOLUTIONS_WINDOW)}
    doc["sweeps"] = app.sweeps.latest(SWEEPS_SHOWN)
    doc["disputes"] = disputes_section(app.disputes.open_totals(soon=now + EVIDENCE_SOON), app.disputes.status_counts())
    # webhook events received in the window by PSP and how applying them ended (unknown_payment: events for
    # payments we have no record of, missing_locally candidates)
    doc["webhooks"] = app.webhooks.counts(since=now - window)
    doc["payouts"] = payouts_section(app.closes.open_by_kind(), app.closes.open_amounts(), app.closes.last_runs())
    doc["operators"] = operators_section(app.operators.list())
    if overview:
        for key in OVERVIEW_LEAVES_OUT:
            doc.pop(key, None)
    return doc


def operators_section(operators: Sequence[Operator]) -> dict[str, Any]:
    """The named operators: how many, how many enabled, and their TOTP seeds at rest: sealed, or plain (written
    before sealing; ``recon operators seal-totp`` seals them)."""
    at_rest = [o.totp_at_rest for o in operators]
    return {"count": len(operators), "enabled": sum(o.enabled for o in operators),
            "totp": {"sealed": at_rest.count("sealed"), "plain": at_rest.count("plain")}}


def disputes_section(open_rows: Sequence[OpenDisputes], counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The disputes: per PSP and status; the open ones per currency with the money withdrawn, the fees and how
    many have their evidence due within ``EVIDENCE_SOON`` (``DisputeStore.open_totals``)."""
    return {"by_psp": counts, "open": sum(r.count for r in open_rows),
            "due_soon": sum(r.due_soon for r in open_rows), "due_soon_days": EVIDENCE_SOON.days,
            "withdrawn": {r.currency: r.withdrawn for r in open_rows if r.currency},
            "fees": {r.currency: r.fees for r in open_rows if r.currency and r.fees},
            "rows": [{"currency": r.currency, "open": r.count, "withdrawn": r.withdrawn, "fees": r.fees,
                      "due_soon": r.due_soon} for r in open_rows]}


# --- the jobs ------------------------------------------------------------------------------------------------


def queues_section(raw: dict[str, Any], *, window: timedelta) -> dict[str, Any]:
    """At, queues (depth per state, the oldest runnable job's age), attempt outcomes over ``window`` and the
    retry and dead rates, from ``JobStore.stats()``."""
    now: datetime = raw["now"]
    queues: dict[str, dict[str, Any]] = {}
    for queue, state, count in raw["depth"]:
        queues.setdefault(queue, {"depth": {}, "oldest_runnable_age_seconds": None})["depth"][state] = count
    for queue, oldest in raw["oldest_due"].items():
        entry = queues.setdefault(queue, {"depth": {}, "oldest_runnable_age_seconds": None})
        entry["oldest_runnable_age_seconds"] = round(age_seconds(now, oldest), 3)
    outcomes: dict[str, int] = raw["outcomes"]
    finished = sum(outcomes.values())
    return {
        "at": now.isoformat(),
        "queues": queues,
        "window_seconds": window.total_seconds(),
        "attempts": outcomes,
        "lease_expirations": outcomes.get("lease_expired", 0),
        "retry_rate": round(outcomes.get("retried", 0) / finished, 4) if finished else 0.0,
        "dead_rate": round(outcomes.get("dead", 0) / finished, 4) if finished else 0.0,
    }


def age_seconds(now: datetime, since: datetime | None) -> float:
    """How long ago ``since`` was, never negative (clocks of two hosts); 0 for None."""
    return max((now - since).total_seconds(), 0.0) if since is not None else 0.0


def depth_detail(rows: Iterable[tuple[str, str, str, int, str, int]]) -> list[dict[str, Any]]:
    """Unfinished jobs per queue, kind, tenant, priority and state (``PoolStore.pool_snapshot``'s ``depth``)."""
    return [{"queue": q, "kind": k, "tenant": t, "priority": p, "state": s, "jobs": n} for q, k, t, p, s, n in rows]


# --- the pool ------------------------------------------------------------------------------------------------


def pool_section(pool: dict[str, Any], attempts: dict[str, Any], money: list[dict[str, Any]], *,
                 window: timedelta, live_window: float = LIVE_WINDOW_SECONDS,
                 refunds: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """What `recon stats` adds to the job counts: depth detail, per-kind rates and durations, the workers,
    their counters (rows seen within ``window``), PSP latency and throttles, the unfinished payments and the
    refunds."""
    now = pool["now"]
    recent = [w for w in pool["workers"] if now - w.last_seen_at <= window]
    successes = sum(n for _, outcome, n, _, _ in attempts["by_kind"] if outcome == "succeeded")
    success_attempts = sum(s for _, outcome, _, s, _ in attempts["by_kind"] if outcome == "succeeded")
    return {
        "depth_detail": depth_detail(pool["depth"]),
        "kinds": _kinds(attempts),
        "attempts_per_success": round(success_attempts / successes, 4) if successes else None,
        "workers": workers_section(pool["workers"], now, live_window),
        **{key: sum(int(w.counters.get(key, 0)) for w in recent)
           for key in ("stale_finishes", "leases_lost")},
        "psp": psp_section(recent),
        "payments": payments_section(money, refunds),
    }


def worker_status(w: WorkerRecord, now: datetime, live_window: float) -> str:
    """live; stopped (shut down cleanly); or dead: not seen within the window and never said goodbye."""
    if w.stopped_at is not None:
        return "stopped"
    return "live" if (now - w.last_seen_at).total_seconds() <= live_window else "dead"


def workers_section(workers: Sequence[WorkerRecord], now: datetime, live_window: float) -> dict[str, Any]:
    """The live workers' count, slots, busy slots and utilisation, and every worker row with its status and
    its engine counters."""
    live = [w for w in workers if worker_status(w, now, live_window) == "live"]
    slots, busy = sum(w.slots for w in live), sum(w.busy_slots for w in live)
    return {"live_window_seconds": live_window, "live": len(live), "slots": slots, "busy_slots": busy,
            "utilisation": round(busy / slots, 4) if slots else 0.0,
            "list": [_worker_doc(w, now, live_window) for w in workers]}


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


def _worker_doc(w: WorkerRecord, now: datetime, live_window: float) -> dict[str, Any]:
    return {"id": w.id, "host": w.host, "pid": w.pid, "queues": list(w.queues),
            "status": worker_status(w, now, live_window), "slots": w.slots, "busy_slots": w.busy_slots,
            "started_at": w.started_at.isoformat(), "last_seen_at": w.last_seen_at.isoformat(),
            "stopped_at": w.stopped_at.isoformat() if w.stopped_at else None,
            "last_seen_seconds_ago": round((now - w.last_seen_at).total_seconds(), 3),
            **{key: int(w.counters.get(key, 0)) for key in ENGINE_COUNTERS},
            "database_outage_seconds": float(w.counters.get("database_outage_seconds", 0.0)),
            "sizing": _sizing_doc(w.counters.get("sizing"))}


def _sizing_doc(raw: Any) -> dict[str, Any] | None:
    """A worker's sizing (recon.engine.sizing) as its row carries it: threads, claim batch, prefetch, why."""
    if not isinstance(raw, dict):
        return None  # a worker of a recon before the sizer
    return {"concurrency": int(raw.get("concurrency", 0)), "claim_batch": int(raw.get("claim_batch", 0)),
            "prefetch": int(raw.get("prefetch", 0)), "reason": str(raw.get("reason", "")),
            "seconds": float(raw.get("seconds", 0.0))}


def psp_section(workers: Iterable[WorkerRecord]) -> dict[str, Any]:
    """Per PSP over the workers' rows: requests, 429s, latency p50 / p95 / mean."""
    merged: dict[str, tuple[list[float], list[int], list[float]]] = {}
    throttles: Counter[str] = Counter()
    for w in workers:
        for bounds, (psp, _operation), counts, total in series(w.counters, "psp_request_duration_seconds"):
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


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


# --- the payments --------------------------------------------------------------------------------------------


#: a refund's states that are still in flight (its money may yet leave)
UNFINISHED_STATUSES = frozenset(s.value for s in PaymentStatus if not s.final)


def payments_section(money: list[dict[str, Any]], refunds: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The unfinished payments (``PaymentStore.money_at_risk`` rows: currency, age bucket, count, amount), by
    age, and their sum per currency in minor units; the money at risk adds the refunds in flight (created,
    processing, pending: ``RefundStore.counts`` rows), whose ``refunds`` section counts every refund by status."""
    by_age: Counter[str] = Counter()
    at_risk: Counter[str] = Counter()
    for row in money:
        by_age[row["age"]] += row["count"]
        at_risk[row["currency"]] += row["amount"]
    by_status: Counter[str] = Counter()
    in_flight: Counter[str] = Counter()
    for row in refunds:
        by_status[row["status"]] += row["count"]
        if row["status"] in UNFINISHED_STATUSES:
            in_flight[row["currency"]] += row["amount"]
            at_risk[row["currency"]] += row["amount"]
    return {"unfinished_by_age": dict(sorted(by_age.items())), "money_at_risk": dict(sorted(at_risk.items())),
            "unfinished": money, "refunds": {"by_status": dict(sorted(by_status.items())),
                                             "in_flight": dict(sorted(in_flight.items())), "rows": list(refunds)}}


def captures_section(modifications: Sequence[dict[str, Any]], authorised: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Captures and cancels by kind and status (``ModificationStore.counts`` rows), the captures in flight
    (created, processing, pending) per currency, and the money authorised and not captured (payments
    ``authorised``: ``ModificationStore.authorised_totals`` rows) per currency, in minor units."""
    by_status: Counter[str] = Counter()
    in_flight: Counter[str] = Counter()
    for row in modifications:
        by_status[f"{row['kind']} {row['status']}"] += row["count"]
        if row["kind"] == "capture" and row["status"] in UNFINISHED_STATUSES:
            in_flight[row["currency"]] += row["amount"]
    return {"by_status": dict(sorted(by_status.items())), "in_flight": dict(sorted(in_flight.items())),
            "authorised": {r["currency"]: r["amount"] for r in sorted(authorised, key=lambda r: r["currency"])},
            "authorised_payments": sum(r["count"] for r in authorised), "rows": list(modifications)}


def review_section(count: int, oldest: datetime | None, *, now: datetime) -> dict[str, Any]:
    """How many payments are in needs_review and since when the oldest (``PaymentStore.review_summary``)."""
    return {"needs_review": count, "oldest_since": oldest.isoformat() if oldest else None,
            "oldest_age_seconds": round(age_seconds(now, oldest), 3) if oldest else None}


def payouts_section(open_by_kind: dict[str, int], amounts: Sequence[dict[str, Any]],
                    last_closes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The close's desk: open exceptions by kind and in all; per currency, the amount the payouts with an open
    exception and the bank entries with one of their own leave unexplained (minor units, ``CloseStore
    .open_amounts``); each PSP's last close (``CloseStore.last_runs``)."""
    unmatched: dict[str, dict[str, int]] = {}
    for row in amounts:
        entry = unmatched.setdefault(row["currency"], {"payouts": 0, "payouts_amount": 0, "bank_entries": 0,
                                                       "bank_entries_amount": 0})
        entry[row["side"]] += row["count"]
        entry[f"{row['side']}_amount"] += row["amount"]
    return {"open_exceptions": sum(open_by_kind.values()), "open_by_kind": dict(sorted(open_by_kind.items())),
            "unmatched": dict(sorted(unmatched.items())), "last_close": list(last_closes)}


# --- the PSPs' controls --------------------------------------------------------------------------------------


def psp_controls_document(store: ControlStore, config: GuardConfig, names: Sequence[str], *,
                          unconfigured: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every PSP in ``names`` (and any other with a row): pause (``paused_by``, ``paused_at``, ``pause_reason``
    only while it is paused; once resumed, ``resumed_by``, ``resumed_at`` and the pause that ended in
    ``last_pause``), cool-down, breaker, rate limit, and whether recon can call it
    as configured (``configured``; ``not_configured`` says what is missing, from ``unconfigured``: PSP name ->
    why, ``App.unconfigured_psps``). The ``psp_controls`` section of ``recon stats --json``, the console's PSP
    page and the whole of ``recon psp status --json``."""
    controls, now = store.list_controls()
    by_name = {c.psp: c for c in controls}
    missing = unconfigured or {}
    psps = [{**_psp_status(by_name.get(name) or PspControl(psp=name), config.for_psp(name), now),
             "configured": name not in missing, "not_configured": missing.get(name)}
            for name in sorted(set(names) | set(by_name))]
    return {"at": now.isoformat(), "psps": psps}


def _psp_status(c: PspControl, limits: PspLimits, now: datetime) -> dict[str, Any]:
    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    left = (c.cooldown_until - now).total_seconds() if c.cooldown_until is not None else 0.0
    cooling = left > 0
    # the row keeps the last pause's who, when and why after a resume, and the last resume's during a pause: a
    # reader taking ``paused_by`` for "paused" (or ``resumed_by`` for "flowing") was misled, so each shows only
    # while it is the state; the ended pause reads as ``last_pause``
    paused, flowing = c.paused, not c.paused
    return {
        "psp": c.psp, "paused": c.paused, "paused_by": c.paused_by if paused else None,
        "paused_at": iso(c.paused_at) if paused else None, "pause_reason": c.pause_reason if paused else None,
        "resumed_by": c.resumed_by if flowing else None, "resumed_at": iso(c.resumed_at) if flowing else None,
        "last_pause": ({"by": c.paused_by, "at": iso(c.paused_at), "reason": c.pause_reason}
                       if flowing and c.paused_by is not None else None),
        "cooling_down": cooling, "cooldown_until": iso(c.cooldown_until) if cooling else None,
        "cooldown_seconds_left": round(left, 3) if cooling else 0.0,
        "breaker_state": c.breaker_state, "consecutive_failures": c.failures, "opened_at": iso(c.opened_at),
        "next_probe_at": iso(c.probe_at) if c.breaker_state != "closed" else None,
        "breaker_reason": c.breaker_reason, "rate_limit": limits.rate_limit,
    }
