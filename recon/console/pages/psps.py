"""``/psps``: pause, cool-down and breaker of every PSP (``recon psp status``), and pause / resume, through
``recon.payments.guard`` as ``recon psp pause|resume`` does."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.console.web import Fields, PageError, acting, action, done, page, pages, recon_app
from recon.errors import UsageError
from recon.operator_rows import Role
from recon.overview import psp_controls_document

log = logging.getLogger("recon.console")


def psp_page(request: Request, *, status: int = 200, errors: dict[str, str] | None = None) -> Response:
    app = recon_app(request)
    unconfigured = app.unconfigured_psps()
    doc = psp_controls_document(app.controls, app.guard_config, app.psp_names(), unconfigured=unconfigured)
    return pages(request).render(request, "psps.html", status=status, doc=doc, errors=errors or {},
                                 unconfigured=unconfigured)


def psp_status(request: Request) -> Response:
    return psp_page(request)


def pause(request: Request, fields: Fields) -> Response:
    """A pause needs four eyes: it is requested here and runs when another operator approves it (/approvals)."""
    name = _known(request)
    operator = acting(request, Role.OPERATOR)
    try:
        reason = fields.required("reason")
        if not fields.flag("confirm"):
            raise UsageError(f'tick "Yes, stop all calls to {name}" to confirm')
    except UsageError as exc:
        return psp_page(request, status=422, errors={name: f"not paused: {exc}"})
    asked = recon_app(request).actions.pause(name, reason=reason, by=operator)
    log.info("console: psp %s pause requested by %s (approval %d)", name, operator, asked.id)
    return done(request, "/psps", f"pause of {name} requested by {operator}: approval {asked.id} waits for "
                                  "another approver (Approvals)")


def resume(request: Request, fields: Fields) -> Response:
    name = _known(request)
    operator = acting(request, Role.OPERATOR)
    was_paused, woken = recon_app(request).actions.resume(name, by=operator)
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
