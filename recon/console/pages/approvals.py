"""``/approvals``: four-eyes requests (recon.four_eyes): the pending ones with what they will run, approved or
rejected here by another approver, and the latest decided."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.console.web import Fields, PageError, acting, action, done, page, pages, recon_app
from recon.errors import UsageError
from recon.operator_rows import ApprovalState, Role

log = logging.getLogger("recon.console")

#: requests listed per state
LIST_LIMIT = 100


def approvals_page(request: Request, *, status: int = 200, error: str | None = None) -> Response:
    four_eyes = recon_app(request).four_eyes
    pending = four_eyes.in_state(ApprovalState.PENDING, limit=LIST_LIMIT)
    decided = sorted((a for s in (ApprovalState.APPROVED, ApprovalState.REJECTED, ApprovalState.EXPIRED,
                                  ApprovalState.FAILED) for a in four_eyes.in_state(s, limit=20)),
                     key=lambda a: a.id, reverse=True)[:20]
    return pages(request).render(request, "approvals.html", status=status, pending=pending, decided=decided,
                                 error=error)


def show(request: Request) -> Response:
    return approvals_page(request)


def decide(request: Request, fields: Fields) -> Response:
    approver = acting(request, Role.APPROVER)
    approval_id = _id(request)
    verdict = fields.raw("verdict")
    if verdict not in ("approve", "reject"):
        raise PageError(422, "verdict: approve or reject")
    actions = recon_app(request).actions
    try:
        decided = actions.approve(approval_id, by=approver) if verdict == "approve" else \
            actions.reject(approval_id, by=approver)
    except UsageError as exc:  # its own (NotAllowed: 403), or decided by someone else first, or expired
        status = 403 if "four eyes" in str(exc) else 409
        return approvals_page(request, status=status, error=f"not decided: {exc}")
    log.info("console: approval %d %s by %s", decided.id, decided.state, approver)
    return done(request, "/approvals", f"approval {decided.id} ({decided.action} of {decided.subject}) "
                f"{decided.state} by {approver}" + (f": {decided.result}" if decided.result else ""))


def _id(request: Request) -> int:
    raw: str = request.path_params["id"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise PageError(404, "no such request")
    return int(raw)


ROUTES = [
    Route("/approvals", page(show), methods=["GET"]),
    Route("/approvals/{id}", action(decide), methods=["POST"]),
]
