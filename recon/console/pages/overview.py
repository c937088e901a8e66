"""``/``: the overview, built from ``recon.overview.stats_document``, the document ``recon stats --json``
prints, so the two always agree (as of the time the page names: the document is kept a few seconds, see
``overview``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.console.charts import BUCKET_LABELS, BUCKETS, money_at_risk_chart, money_by_currency
from recon.console.web import page, pages, recon_app, totals_cache
from recon.overview import stats_document

#: the windows of ``recon stats``' defaults: attempts over the last hour, workers seen within 30 s
WINDOW = timedelta(hours=1)
LIVE_WINDOW = timedelta(seconds=30)
#: the job states shown per queue, in the order a job moves
STATES = ("pending", "runnable", "retryable", "leased", "dead")


def overview(request: Request) -> Response:
    """The overview's document is kept ``[console] totals_ttl`` like a list's totals (recon.console.totals):
    at 100,000 unfinished payments and as many in review its aggregates cost most of a render, while a reload,
    the live refresh or coming back to the page within seconds asks for the same figures. The heading says when
    they were computed (the document's ``at``) and, when kept, that they are; any write of the console clears
    them, so an operator sees their own change at once."""
    app = recon_app(request)
    kept = totals_cache(request).get(
        ("overview",), lambda: stats_document(app, window=WINDOW, live_window=LIVE_WINDOW, overview=True),
        now=app.db.clock.now())
    doc = kept.value
    return pages(request).render(request, "overview.html", doc=doc, kept=kept.cached, figures=figures(doc),
                                 states=STATES,
                                 chart=money_at_risk_chart(doc["payments"]["unfinished"]),
                                 money=money_by_currency(doc["payments"]["unfinished"]), buckets=BUCKETS,
                                 bucket_labels=BUCKET_LABELS, review=doc.get("review"),
                                 sweeps=_listed(doc.get("sweeps")), resolutions=doc.get("resolutions"),
                                 unconfigured=recon_app(request).unconfigured_psps())


def figures(doc: dict[str, Any]) -> dict[str, Any]:
    """The headline figures, each derived from the document alone (the browser tests derive them the same
    way from ``recon stats --json``)."""
    psps = doc["psp_controls"]
    return {
        "unfinished": sum(doc["payments"]["unfinished_by_age"].values()),
        "dead": sum(q["depth"].get("dead", 0) for q in doc["queues"].values()),
        "workers_live": doc["workers"]["live"],
        "utilisation": doc["workers"]["utilisation"],
        "psps_paused": sum(1 for p in psps if p["paused"]),
        "psps_unhealthy": sum(1 for p in psps if p["cooling_down"] or p["breaker_state"] != "closed"),
        "disputes_open": doc["disputes"]["open"],
        "disputes_due_soon": doc["disputes"]["due_soon"],
    }


def _listed(value: Any) -> list[Any] | None:
    """``sweeps`` as a list of rows, whether the document gives a list or a dict holding one."""
    if isinstance(value, dict):
        for key in ("last", "recent", "list", "sweeps"):
            if isinstance(value.get(key), list):
                return list(value[key])
        return [value]
    return list(value) if isinstance(value, list) else None


ROUTES = [Route("/", page(overview), methods=["GET"], name="overview")]
