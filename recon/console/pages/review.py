"""``/review``, ``/payments/{ref}`` and ``/search``: the review queue, a payment's page with its resolve and
recheck forms, and the payment search, all through the App's review desk (``recon.review``), as
``recon review list|show|resolve|recheck`` are."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.console.web import Fields, PageError, acting, action, page, pages, recon_app
from recon.durations import parse_duration
from recon.errors import NotAllowed, ReviewRefused, UsageError
from recon.operator_rows import Approval, Role
from recon.review import ReviewKind

log = logging.getLogger("recon.console")

#: payments listed per review page
REVIEW_LIMIT = 200
REVIEW_FILTERS = ("kind", "psp", "older_than", "currency")


def review_queue(request: Request) -> Response:
    fields = Fields(request.query_params)
    typed = {name: fields.raw(name).strip()[:100] for name in REVIEW_FILTERS}
    app = recon_app(request)
    context: dict[str, Any] = {"filters": typed, "kinds": [k.value for k in ReviewKind], "psps": app.psp_names(),
                               "limit": REVIEW_LIMIT}
    try:
        older = parse_duration(typed["older_than"], what="older than") if typed["older_than"] else None
        items = app.review.list(kind=typed["kind"] or None, psp=typed["psp"] or None, older_than=older,
                                currency=typed["currency"] or None, limit=REVIEW_LIMIT)
    except UsageError as exc:
        return pages(request).render(request, "review.html", status=422, error=_plain(exc),
                                     items=[], **context)
    return pages(request).render(request, "review.html", items=items, **context)


def payment_page(request: Request, *, status: int = 200, notice: str | None = None, error: str | None = None,
                 form: dict[str, Any] | None = None, recheck_job: int | None = None) -> Response:
    detail = recon_app(request).review.detail(_reference(request))
    return pages(request).render(request, "payment.html", status=status, detail=detail, payment=detail.payment,
                                 notice=notice, error=error, form=form or {},
                                 recheck_job=recheck_job)


def show_payment(request: Request) -> Response:
    return payment_page(request)


def resolve(request: Request, fields: Fields) -> Response:
    override = fields.flag("override")
    form: dict[str, Any] = {"as": fields.raw("as"), "reason": fields.raw("reason")[:500], "override": override}
    reference = _reference(request)
    operator = acting(request, Role.OPERATOR)
    try:
        reason = fields.required("reason")
        to = fields.required("as", label="resolve as", max_length=20)
        done = recon_app(request).actions.resolve(reference, to=to, reason=reason, by=operator, override=override)
    except ReviewRefused as exc:
        return payment_page(request, status=409, error=f"not resolved: {exc}", form=form)
    except NotAllowed:
        raise
    except UsageError as exc:
        return payment_page(request, status=422, error=f"not resolved: {_plain(exc)}", form=form)
    if isinstance(done, Approval):  # an override needs four eyes
        log.info("console: payment %s override requested by %s (approval %d)", reference, operator, done.id)
        return payment_page(request, notice=f"override requested by {operator}: approval {done.id} waits for "
                                            "another approver (Approvals)")
    log.info("console: payment %s resolved as %s by %s", reference, done.payment.status, operator)
    return payment_page(request, notice=f"resolved as {done.payment.status} by {operator}"
                        + (" (an override of the PSP's answer, recorded)" if override else ""))


def recheck(request: Request, fields: Fields) -> Response:
    reference = _reference(request)
    operator = acting(request, Role.OPERATOR)
    job_id = recon_app(request).actions.recheck(reference, by=operator)
    log.info("console: payment %s recheck (job %d) by %s", reference, job_id, operator)
    return payment_page(request, notice=f"reconcile job {job_id} queued: the PSP is asked again",
                        recheck_job=job_id)


def search(request: Request) -> Response:
    text = Fields(request.query_params).raw("q").strip()[:200]
    found = recon_app(request).review.find(text) if text else []
    return pages(request).render(request, "search.html", q=text, found=found)


def _reference(request: Request) -> str:
    """The payment of the path; a 404 page when there is none."""
    reference: str = request.path_params["ref"]
    if recon_app(request).payments.by_reference(reference) is None:
        raise PageError(404, f"payment {reference} not found")
    return reference


def _plain(exc: UsageError) -> str:
    """The desk's message without the command line's option dashes (``--reason:`` -> ``reason:``)."""
    return str(exc).replace("--override", "override").replace(": --", ": ").removeprefix("--")


ROUTES = [
    Route("/review", page(review_queue), methods=["GET"]),
    Route("/search", page(search), methods=["GET"]),
    Route("/payments/{ref:path}/resolve", action(resolve), methods=["POST"]),
    Route("/payments/{ref:path}/recheck", action(recheck), methods=["POST"]),
    Route("/payments/{ref:path}", page(show_payment), methods=["GET"]),
]
