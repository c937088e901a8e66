"""``/psps``: pause, cool-down and breaker of every PSP (``recon psp status``), and pause / resume, through
``recon.payments.guard`` as ``recon psp pause|resume`` does; a refusal answers with a redirect to /psps, which
shows it in the PSP's row."""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.console.web import (
    TEXT_MAX,
    Fields,
    FormAt,
    PageError,
    acting,
    action,
    done,
    page,
    pages,
    recon_app,
    refusal_of,
)
from recon.errors import UsageError
from recon.operator_rows import Role
from recon.overview import psp_controls_document

log = logging.getLogger("recon.console")


def psp_status(request: Request) -> Response:
    """The PSPs' controls; after a refused pause or resume (``psp_form``) the refusal in the PSP's row, and the
    pause's reason as typed."""
    app = recon_app(request)
    unconfigured = app.unconfigured_psps()
    doc = psp_controls_document(app.controls, app.guard_config, app.psp_names(), unconfigured=unconfigured)
    errors, form = refusal_of(request)
    return pages(request).render(request, "psps.html", doc=doc, errors=errors, form=form, unconfigured=unconfigured)


def psp_form(failed: str) -> Callable[[Request, Fields], FormAt]:
    """A PSP's pause or resume form: in its row of /psps (its 404 page for an unknown PSP)."""
    def at(request: Request, fields: Fields) -> FormAt:
        name = _known(request)
        return FormAt(f"/psps#psp-{name}", name, failed, typed={"reason": fields.raw("reason")[:TEXT_MAX]}
                      if failed == "not paused" else {})

    return at


def pause(request: Request, fields: Fields) -> Response:
    """A pause needs four eyes: it is requested here and runs when another operator approves it (/approvals)."""
    name = _known(request)
    operator = acting(request, Role.OPERATOR)
    reason = fields.required("reason")
    if not fields.flag("confirm"):
        raise UsageError(f'tick "Yes, stop all calls to {name}" to confirm')
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
    Route("/psps/{name}/pause", action(pause, at=psp_form("not paused")), methods=["POST"]),
    Route("/psps/{name}/resume", action(resume, at=psp_form("not resumed")), methods=["POST"]),
]
