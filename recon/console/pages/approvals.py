"""``/approvals``: four-eyes requests (recon.four_eyes): the pending ones with what they will run, approved or
rejected here by another approver, and the latest decided. A refused decision answers with a redirect to the
list, which shows why beside the request."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.console.web import Fields, FormAt, PageError, acting, action, done, page, pages, recon_app, refusal_of
from recon.operator_rows import ApprovalState, Role

log = logging.getLogger("recon.console")

#: requests listed per state
LIST_LIMIT = 100


def approvals_page(request: Request) -> Response:
    """The requests; after a refused decision (``decision_at``) the refusal beside the request's buttons, or
    above the list when the request is no longer pending."""
    four_eyes = recon_app(request).four_eyes
    pending = four_eyes.in_state(ApprovalState.PENDING, limit=LIST_LIMIT)
    decided = sorted((a for s in (ApprovalState.APPROVED, ApprovalState.REJECTED, ApprovalState.EXPIRED,
                                  ApprovalState.FAILED) for a in four_eyes.in_state(s, limit=20)),
                     key=lambda a: a.id, reverse=True)[:20]
    errors, form = refusal_of(request)
    return pages(request).render(request, "approvals.html", pending=pending, decided=decided,
                                 refusal=errors.get("approval"), refused_id=form.get("id", ""),
                                 pending_ids={str(a.id) for a in pending})


def show(request: Request) -> Response:
    return approvals_page(request)


def decision_at(request: Request, fields: Fields) -> FormAt:
    """A request's buttons: in its row of /approvals."""
    approval_id = _id(request)
    return FormAt(f"/approvals#approval-{approval_id}", "approval", "not decided", typed={"id": str(approval_id)})


def decide(request: Request, fields: Fields) -> Response:
    """Its own request (four eyes), one decided by someone else first or expired: refused (UsageError)."""
    approver = acting(request, Role.APPROVER)
    approval_id = _id(request)
    verdict = fields.raw("verdict")
    if verdict not in ("approve", "reject"):
        raise PageError(422, "verdict: approve or reject")
    actions = recon_app(request).actions
    decided = actions.approve(approval_id, by=approver) if verdict == "approve" else \
        actions.reject(approval_id, by=approver)
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
    Route("/approvals/{id}", action(decide, at=decision_at), methods=["POST"]),
]
