"""``recon serve``'s ASGI application: the webhook endpoints, their counts at ``/metrics``, and optionally the
console under ``/`` (one process hosting both).

A webhook POST goes straight to its endpoint (``WebhookPaths``), past Starlette's router and middleware: under
load those layers cost more of the server's CPU than the endpoint's own verification (docs/benchmarks.md,
webhooks). Everything else (other methods and paths, lifespan) is Starlette's, as the routes say.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from recon.db.availability import Outage
from recon.webhooks.intake import Intake

if TYPE_CHECKING:
    from recon.app import App


log = logging.getLogger("recon.webhooks")


class WebhookPaths:
    """ASGI: ``POST`` to a webhook path runs its endpoint directly; any other request goes to ``inner``. An
    endpoint's exception is answered 500 and logged, as Starlette's ServerErrorMiddleware would."""

    def __init__(self, endpoints: dict[str, Callable[[Request], Awaitable[Response]]], inner: Starlette) -> None:
        self.endpoints = endpoints
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        endpoint = self.endpoints.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" \
            else None
        if endpoint is None:
            await self.inner(scope, receive, send)
            return
        try:
            response = await endpoint(Request(scope, receive))
        except Exception:
            log.exception("webhook endpoint %s failed", scope["path"])
            response = PlainTextResponse("Internal Server Error", status_code=500)
        await response(scope, receive, send)


class OutageCollector:
    """This process's database outages (recon.db.availability) for an endpoint that serves its own process:
    ``recon serve``'s ``/metrics``, which must say so while the database is away (a worker's endpoint reads
    the pool's counters from the database)."""

    def __init__(self, outage: Outage) -> None:
        self.outage = outage

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("recon_database_outages", "Outages of the database this process saw.",
                                  value=float(self.outage.count))
        yield CounterMetricFamily("recon_database_outage_seconds", "Seconds this process found the database "
                                  "unavailable.", value=self.outage.seconds)
        yield GaugeMetricFamily("recon_database_unavailable", "1 while this process finds the database "
                                "unavailable.", value=float(self.outage.down))


def create_app(app: App, *, console: bool = False, console_token: str | None = None,
               intake: Intake | None = None) -> WebhookPaths:
    """The webhook endpoints on ``app`` (its ``[webhooks]`` settings and secrets), ``GET /metrics`` with this
    process's webhook counts and database outages, ``GET /healthz``; with ``console``, the console
    (recon.console) under ``/``."""
    intake = intake or Intake(app.webhooks, app.webhook_config, max_attempts=app.settings.engine.default_max_attempts,
                              max_depth=app.settings.queue(app.webhook_config.queue).max_depth)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(intake.counts)
    registry.register(OutageCollector(app.db.outage))

    def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:  # async: answered on the event loop, no thread hop
        return PlainTextResponse("ok\n")

    routes: list[BaseRoute] = [*intake.routes(), Route("/metrics", metrics), Route("/healthz", healthz)]
    if console:
        from recon.console.server import create_app as console_app

        routes.append(Mount("/", app=console_app(app, token=console_token)))
    app.webhooks  # noqa: B018  # built here, once, not raced for by the first requests' threads
    return WebhookPaths(intake.endpoints(), Starlette(routes=routes))
