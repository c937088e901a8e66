"""``/psps``: pause, cool-down and breaker of every PSP (``recon psp status``), and pause / resume, through
``recon.payments.guard`` as ``recon psp pause|resume`` does."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.console.web import Fields, PageError, acting_operator, action, done, page, pages, recon_app
from recon.errors import UsageError
from recon.overview import psp_controls_document
from recon.payments import guard

log = logging.getLogger("recon.console")


def psp_page(request: Request, *, status: int = 200, errors: dict[str, str] | None = None) -> Response:
    app = recon_app(request)
    doc = psp_controls_document(app.controls, app.guard_config, app.psp_names())
    return pages(request).render(request, "psps.html", status=status, doc=doc, errors=errors or {},
                                 unconfigured=app.unconfigured_psps())


def psp_status(request: Request) -> Response:
    return psp_page(request)


def pause(request: Request, fields: Fields) -> Response:
    name = _known(request)
    try:
        operator = acting_operator(request, fields)
        reason = fields.required("reason")
        if not fields.flag("confirm"):
            raise UsageError(f'tick "Yes, stop all calls to {name}" to confirm')
    except UsageError as exc:
        return psp_page(request, status=422, errors={name: f"not paused: {exc}"})
    guard.pause(recon_app(request).controls, name, by=operator, reason=reason)
    log.info("console: psp %s paused by %s", name, operator)
    return done(request, "/psps", f"psp {name} paused by {operator}: {reason}")


def resume(request: Request, fields: Fields) -> Response:
    name = _known(request)
    try:
        operator = acting_operator(request, fields)
    except UsageError as exc:
        return psp_page(request, status=422, errors={name: f"not resumed: {exc}"})
    was_paused, woken = guard.resume(recon_app(request).controls, name)
    log.info("console: psp %s resumed by %s", name, operator)
    return done(request, "/psps", f"psp {name} resumed by {operator}; {woken} waiting jobs are due now"
                if was_paused else f"psp {name} was not paused")


def _known(request: Request) -> str:
    name: str = request.path_params["name"]
    if name not in recon_app(request).psp_names():
        raise PageError(404, f"unknown PSP {name!r}")
    return name


ROUTES = [
    Route("/psps", page(psp_status), methods=["GET"]),
    Route("/psps/{name}/pause", action(pause), methods=["POST"]),
    Route("/psps/{name}/resume", action(resume), methods=["POST"]),
]
