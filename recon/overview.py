"""The pool's and the payments' state in one document: ``recon stats --json`` and the console's overview page
are built by this one function, so the two always show the same numbers."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recon.app import App

#: how far back ``recon stats`` counts manual resolutions per day
RESOLUTIONS_WINDOW = timedelta(days=14)
#: how many of the last sweeps ``recon stats`` shows
SWEEPS_SHOWN = 5
#: what the console's overview leaves out: each would read every finished job or attempt of the window
OVERVIEW_LEAVES_OUT = ("attempts", "lease_expirations", "retry_rate", "dead_rate", "kinds", "depth_detail",
                       "attempts_per_success")


def stats_document(app: App, *, window: timedelta, live_window: timedelta, overview: bool = False) -> dict[str, Any]:
    """Queue depth and oldest runnable age per queue, attempt outcomes over ``window``, depth detail, the
    workers (live within ``live_window``), PSP latency and controls, unfinished payments and money at risk, the
    payments in review, manual resolutions per day and operator, and the last sweeps.

    ``overview``: the console's overview, the same document less what needs a scan of every finished job or
    attempt (finished jobs but the dead, attempt outcomes and rates, per-kind durations, depth detail): the
    sections it has are computed exactly as for ``recon stats``."""
    from recon.metrics import stats_extension
    from recon.payments.guard import status_document
    from recon.render import stats_document as jobs_document

    raw = app.jobs.stats(window=window, detail=not overview)
    doc = jobs_document(raw, window=window)
    attempts = (app.pool.attempt_stats(since=raw["now"] - window) if not overview
                else {"by_kind": [], "durations": {}})
    # the oldest due job per queue is the jobs document's already (raw["oldest_due"]): not read twice
    pool = app.pool.pool_snapshot(workers_within=None, depth_detail=not overview, oldest_due=False)
    doc.update(stats_extension(pool, attempts, app.payments.money_at_risk(), window=window,
                               live_window=live_window.total_seconds()))
    # pause, cool-down and breaker per PSP, next to the PSP latency section
    doc["psp_controls"] = status_document(app.controls, app.guard_config, app.psp_names())["psps"]
    doc["review"] = app.review.summary()
    doc["resolutions"] = {"since": (raw["now"] - RESOLUTIONS_WINDOW).isoformat(),
                          "by_day": app.payments.resolutions(since=raw["now"] - RESOLUTIONS_WINDOW)}
    doc["sweeps"] = app.sweeps.latest(SWEEPS_SHOWN)
    # webhook events received in the window by PSP and how applying them ended (unknown_payment: events for
    # payments we have no record of, missing_locally candidates)
    doc["webhooks"] = app.webhooks.counts(since=raw["now"] - window)
    if overview:
        for key in OVERVIEW_LEAVES_OUT:
            doc.pop(key, None)
    return doc
