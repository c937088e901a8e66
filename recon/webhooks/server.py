"""``recon serve``'s ASGI application: the webhook endpoints, their counts at ``/metrics``, and optionally the
console under ``/`` (one process hosting both)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from recon.webhooks.intake import Intake

if TYPE_CHECKING:
    from recon.app import App


def create_app(app: App, *, console: bool = False, console_token: str | None = None,
               intake: Intake | None = None) -> Starlette:
    """The webhook endpoints on ``app`` (its ``[webhooks]`` settings and secrets), ``GET /metrics`` with this
    process's webhook counts, ``GET /healthz``; with ``console``, the console (recon.console) under ``/``."""
    intake = intake or Intake(app.webhooks, app.webhook_config, max_attempts=app.settings.engine.default_max_attempts,
                              max_depth=app.settings.queue(app.webhook_config.queue).max_depth)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(intake.counts)

    def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:  # async: answered on the event loop, no thread hop
        return PlainTextResponse("ok\n")

    routes: list[BaseRoute] = [*intake.routes(), Route("/metrics", metrics), Route("/healthz", healthz)]
    if console:
        from recon.console.server import create_app as console_app

        routes.append(Mount("/", app=console_app(app, token=console_token)))
    app.webhooks  # noqa: B018  # built here, once, not raced for by the first requests' threads
    return Starlette(routes=routes)
