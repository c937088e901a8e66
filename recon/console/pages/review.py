"""``/review``, ``/review/bulk``, ``/payments/{ref}`` and ``/search``: the review queue (filtered, paged by
keyset, with totals, as CSV), bulk resolve (a preview, then exactly that set), a payment's page with its
resolve, recheck, assign and comment forms, and the payment search, all through the App's review desk
(``recon.review``, ``recon.review_bulk``), as ``recon review …`` are. Every successful write answers with a
redirect to a page (``web.done``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon import review_bulk
from recon.console.csv_export import csv_response
from recon.console.web import (
    TEXT_MAX,
    Fields,
    FormAt,
    PageError,
    acting,
    action,
    done,
    formless,
    page,
    pages,
    recon_app,
    refusal_of,
    totals_cache,
)
from recon.durations import parse_duration
from recon.errors import UsageError
from recon.evidence import event_facts, readable_reason, resolution_sentence
from recon.operator_rows import Approval, Role
from recon.payments.money import format_amount
from recon.redact import identifier, kept_text
from recon.review import LIST_MAX, Difference, ReviewItem
from recon.review_rows import QueueFilter, ReviewKind, Severity
from recon.rows import Payment

log = logging.getLogger("recon.console")

#: payments listed per review page
REVIEW_LIMIT = 100
REVIEW_FILTERS = ("kind", "psp", "older_than", "currency", "assignee", "unassigned", "severity", "overdue")
#: a bulk preview lists at most this many of its payments (all are counted and resolved)
BULK_SHOWN = 200
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CSV_COLUMNS = ("merchant_reference", "psp", "psp_reference", "amount", "currency", "psp_amount", "difference",
               "kind", "severity", "in_review_since", "due_at", "overdue", "assignee", "review_reason")


def typed_filters(fields: Fields) -> dict[str, str]:
    return {name: fields.raw(name).strip()[:100] for name in REVIEW_FILTERS}


def queue_filter(request: Request, typed: dict[str, str]) -> QueueFilter:
    """The desk's filter from the typed one; UsageError names a bad field."""
    older = parse_duration(typed["older_than"], what="older than") if typed["older_than"] else None
    return recon_app(request).review.where(
        kind=typed["kind"] or None, psp=typed["psp"] or None, older_than=older, currency=typed["currency"] or None,
        assignee=typed["assignee"] or None, unassigned=typed["unassigned"] == "1",
        severity=typed["severity"] or None, overdue=typed["overdue"] == "1")


def review_queue(request: Request) -> Response:
    fields = Fields(request.query_params)
    typed = typed_filters(fields)
    app = recon_app(request)
    context: dict[str, Any] = {"filters": typed, "kinds": [k.value for k in ReviewKind], "psps": app.psp_names(),
                               "severities": [s.value for s in Severity], "query": _query(typed),
                               "differences": [d.value for d in Difference],
                               # the close's open exceptions beside the payments: counted by kind, linked
                               "payout_exceptions": app.closes.open_by_kind()}
    try:
        where = queue_filter(request, typed)
        after, before = _cursor(fields.raw("after")), _cursor(fields.raw("before"))
    except UsageError as exc:
        return pages(request).render(request, "review.html", status=422, error=plain(exc), items=[], queue=None,
                                     **context)
    if fields.raw("format") == "csv":
        items = app.review.list(**_list_args(typed), limit=LIST_MAX)
        return csv_response("review-queue.csv", CSV_COLUMNS, (_csv_row(i) for i in items))
    kept = totals_cache(request).get(("review", *sorted(typed.items())), lambda: app.review.totals(where),
                                     now=app.db.clock.now())
    queue = app.review.queue(where, after=after, before=before, limit=REVIEW_LIMIT, totals=kept.value)
    return pages(request).render(request, "review.html", items=queue.items, queue=queue, totals_at=kept.at,
                                 totals_cached=kept.cached,
                                 next_cursor=_cursor_text(queue.next_cursor),
                                 previous_cursor=_cursor_text(queue.previous_cursor),
                                 reasons={i.payment.id: kept_text(readable_reason(i.payment.review_reason),
                                                                   (i.payment.psp_reference,))
                                          for i in queue.items},
                                 **context)


def bulk_preview(request: Request) -> Response:
    """The preview of a bulk resolve, with its form; after a refused apply (``bulk_at``) the refusal beside the
    form and the reason as typed."""
    fields = Fields(request.query_params)
    typed = typed_filters(fields)
    to = fields.raw("as") or "succeeded"
    errors, form = refusal_of(request)
    context: dict[str, Any] = {"filters": typed, "query": _query(typed), "to": to, "bulk_error": errors.get("bulk"),
                               "reason": form.get("reason", "") if errors else ""}
    try:
        shown = review_bulk.preview(recon_app(request).review, queue_filter(request, typed), to=to)
    except UsageError as exc:
        return pages(request).render(request, "review_bulk.html", status=422, preview=None, error=plain(exc),
                                     **context)
    return pages(request).render(request, "review_bulk.html", preview=shown, shown=shown.payments[:BULK_SHOWN],
                                 **context)


def bulk_at(request: Request, fields: Fields) -> FormAt:
    """The bulk form is on the preview of its filter (``bulk_preview``)."""
    typed = {k: v for k, v in typed_filters(fields).items() if v}
    return FormAt("/review/bulk?" + urlencode({**typed, "as": fields.raw("as").strip()[:20]}), "bulk",
                  "nothing resolved", typed={"reason": fields.raw("reason")[:TEXT_MAX]}, words=BULK_WORDS)


def bulk_apply(request: Request, fields: Fields) -> Response:
    """More than ``[four_eyes] bulk_resolve_count`` payments: requested here, run when another operator
    approves it (/approvals). A refusal (nothing resolved) goes back to the preview (``bulk_at``)."""
    typed = typed_filters(fields)
    operator = acting(request, Role.OPERATOR)
    if not fields.flag("confirm"):
        raise UsageError('tick "Yes, resolve exactly these payments" to confirm')
    reason = fields.required("reason")
    where = queue_filter(request, typed)
    resolved = recon_app(request).actions.bulk_resolve(where, to=fields.required("as", label="resolve as",
                                                                                 max_length=20),
                                                       reason=reason, by=operator, expect=fields.raw("digest"))
    if isinstance(resolved, Approval):  # above [four_eyes] bulk_resolve_count
        log.info("console: bulk resolve requested by %s (approval %d)", operator, resolved.id)
        return done(request, "/review?" + _query(typed), f"bulk resolve of {resolved.subject} requested by "
                    f"{operator}: approval {resolved.id} waits for another approver (Approvals)")
    log.info("console: %d payments resolved as %s in bulk by %s", resolved.count, resolved.to, operator)
    return done(request, "/review?" + _query(typed),
                f"resolved {resolved.count} payments as {resolved.to} by {operator}")


def payment_page(request: Request) -> Response:
    """A payment's page; after a refused POST of one of its forms (``web.refused``), the refusal next to that
    form and the values typed into it."""
    app = recon_app(request)
    detail = app.review.detail(payment_reference(request))
    item: ReviewItem | None = None
    if detail.payment.status == "needs_review":
        [item] = app.review.items([detail.payment], now=app.review.clock.now())
    job = request.query_params.get("job", "")
    errors, form = refusal_of(request)
    return pages(request).render(
        request, "payment.html", detail=detail, payment=detail.payment,
        errors=errors, form=form, item=item, reason=kept_text(readable_reason(detail.payment.review_reason),
                                                                (detail.payment.psp_reference,)),
        recheck_job=int(job) if job.isascii() and job.isdigit() and len(job) < 19 else None,
        facts={e.id: event_facts(e.details, keep=(detail.payment.psp_reference,)) for e in detail.events},
        sentences={e.id: resolution_sentence(e.to_status, e.details) for e in detail.events
                   if e.source == "manual" and e.details and "operator" in e.details},
        differences=[d.value for d in Difference], refunds=app.refunds.for_payment(detail.payment.id),
        disputes=app.disputes.for_payment(detail.payment.id), refund_reasons=_refund_reasons(app, detail.payment.psp),
        refundable=detail.payment.captured_amount - detail.payment.refunded_amount
        if detail.payment.status == "succeeded" else 0,
        modifications=app.modifications.for_payment(detail.payment.id),
        capturable=_capturable(detail.payment))


def _capturable(payment: Payment) -> str | None:
    """What an authorised payment can have captured, in major units (the capture form's default); None when it
    is not authorised, or a capture or cancel of it is under way or done (one a payment: ``ModificationStore``)."""
    if payment.status != "authorised" or payment.authorisation_claimed:
        return None
    return format_amount(payment.amount, payment.currency).rsplit(" ", 1)[0]


def _refund_reasons(app: Any, psp: str) -> tuple[str, ...] | None:
    """The PSP's refund reason codes for the form's choice (None: free text, or a PSP recon no longer knows)."""
    try:
        return app.refund_reasons(psp)  # type: ignore[no-any-return]
    except LookupError:
        return None


def show_payment(request: Request) -> Response:
    return payment_page(request)


def payment_form(form: str, anchor: str, failed: str, *typed: str,
                 words: tuple[tuple[str, str], ...] = ()) -> Callable[[Request, Fields], FormAt]:
    """Where a form of the payment page is (``web.FormAt``): its section ``anchor``, the fields ``typed`` kept
    (``name`` or ``name=field``: shown as ``name``, read from the form's ``field``)."""
    def at(request: Request, fields: Fields) -> FormAt:
        kept = {}
        for spec in typed:
            name, _, field_name = spec.partition("=")
            kept[name] = fields.raw(field_name or name)[:TEXT_MAX]
        return FormAt(payment_url(payment_reference(request)) + anchor, form, failed, typed=kept, words=words)

    return at


def resolve(request: Request, fields: Fields) -> Response:
    reference = payment_reference(request)
    operator = acting(request, Role.OPERATOR)
    reason = fields.required("reason")
    to = fields.required("as", label="resolve as", max_length=20)
    resolved = recon_app(request).actions.resolve(reference, to=to, reason=reason, by=operator,
                                                  override=fields.flag("override"),
                                                  difference=fields.text("difference") or None)
    if isinstance(resolved, Approval):  # an override needs four eyes
        log.info("console: payment %s override requested by %s (approval %d)", reference, operator, resolved.id)
        return done(request, payment_url(reference), f"override requested by {operator}: approval {resolved.id} "
                    "waits for another approver (Approvals)")
    log.info("console: payment %s resolved as %s by %s", reference, resolved.payment.status, operator)
    difference = resolved.details.get("difference")
    return done(request, payment_url(reference), f"resolved as {resolved.payment.status} by {operator}"
                + (f"; {difference['sentence']}" if difference else ""))


def recheck(request: Request, fields: Fields) -> Response:
    reference = payment_reference(request)
    operator = acting(request, Role.OPERATOR)
    job_id = recon_app(request).actions.recheck(reference, by=operator)
    log.info("console: payment %s recheck (job %d) by %s", reference, job_id, operator)
    return done(request, payment_url(reference), f"reconcile job {job_id} queued: the PSP is asked again",
                job=job_id)


def assign(request: Request, fields: Fields) -> Response:
    reference = payment_reference(request)
    operator = acting(request, Role.OPERATOR)
    to = fields.text("assignee", label="assign to", max_length=100)
    payment = recon_app(request).actions.assign(reference, to=to, by=operator)
    return done(request, payment_url(reference), f"assigned to {payment.review_assignee}"
                if payment.review_assignee else "unassigned")


def comment(request: Request, fields: Fields) -> Response:
    reference = payment_reference(request)
    operator = acting(request, Role.OPERATOR)
    recon_app(request).actions.comment(reference, text=fields.required("comment", max_length=2000), by=operator)
    return done(request, payment_url(reference) + "#comments", f"comment added by {operator}")


def search(request: Request) -> Response:
    text = Fields(request.query_params).raw("q").strip()[:200]
    found = recon_app(request).review.find(text) if text else []
    return pages(request).render(request, "search.html", q=text, found=found)


def payment_reference(request: Request) -> str:
    """The payment of the path; a 404 page when there is none."""
    reference: str = request.path_params["ref"]
    if recon_app(request).payments.by_reference(reference) is None:
        raise PageError(404, f"payment {reference} not found")
    return reference


def payment_url(reference: str) -> str:
    return "/payments/" + quote(reference, safe="")


def plain(exc: Exception) -> str:
    """The desk's message without the command line's option dashes (``--reason:`` -> ``reason:``)."""
    return formless(str(exc))


def _query(typed: dict[str, str]) -> str:
    return urlencode({k: v for k, v in typed.items() if v})


def _list_args(typed: dict[str, str]) -> dict[str, Any]:
    older = parse_duration(typed["older_than"], what="older than") if typed["older_than"] else None
    return {"kind": typed["kind"] or None, "psp": typed["psp"] or None, "older_than": older,
            "currency": typed["currency"] or None, "assignee": typed["assignee"] or None,
            "unassigned": typed["unassigned"] == "1", "severity": typed["severity"] or None,
            "overdue": typed["overdue"] == "1"}


def _cursor(raw: str) -> tuple[datetime, int] | None:
    """``MICROS.ID`` in base 36 (a page link's cursor) -> (review_since, id); UsageError for anything else.
    Base 36, not decimal: a 16-digit run of microseconds would read as a card number and be masked."""
    raw = raw.strip().lower()
    if not raw:
        return None
    micros, _, ident = raw.partition(".")
    try:
        if len(raw) > 30 or not (micros.isascii() and micros.isalnum() and ident.isascii() and ident.isalnum()):
            raise ValueError(raw)
        return _EPOCH + timedelta(microseconds=int(micros, 36)), int(ident, 36)
    except (ValueError, OverflowError):
        raise UsageError(f"page cursor {raw[:30]!r} is not one this console wrote") from None


def _cursor_text(cursor: tuple[datetime, int] | None) -> str | None:
    if cursor is None:
        return None
    since, ident = cursor
    delta = since - _EPOCH
    return f"{_base36(delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds)}.{_base36(ident)}"


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def _csv_row(item: ReviewItem) -> list[Any]:
    p, answer = item.payment, item.psp_answer or {}
    return [p.merchant_reference, p.psp, identifier(p.psp_reference) if p.psp_reference else None,
            _major(p.amount, p.currency), p.currency,
            _major(answer["psp_amount"], p.currency) if isinstance(answer.get("psp_amount"), int) else None,
            _major(item.difference, p.currency) if item.difference is not None else None, str(item.kind),
            str(item.severity), item.since.isoformat(), item.due_at.isoformat() if item.due_at else None,
            "yes" if item.overdue else "no", p.review_assignee,
            kept_text(p.review_reason, (p.psp_reference,)) if p.review_reason else p.review_reason]


def _major(minor: int, currency: str) -> str:
    return format_amount(minor, currency).split(" ")[0]


#: the desk's words for a resolve's fields, as the form names them (the checkbox, not --override)
RESOLVE_WORDS = (
    ("(--override records a decision against the PSP's answer)",
     "(tick \"override the PSP's answer\" to ask for four eyes on a decision against it)"),
    ("(--override decides without its answer, and records that)",
     "(tick \"override the PSP's answer\" to ask for four eyes on a decision without it)"),
    ("--as:", "resolve as:"), ("--difference:", "the difference:"))
BULK_WORDS = (("--as:", "resolve as:"), ("--psp:", "PSP:"), ("--severity:", "severity:"),
              ("--assignee:", "assignee:"))

ROUTES = [
    Route("/review", page(review_queue), methods=["GET"]),
    Route("/review/bulk", page(bulk_preview), methods=["GET"]),
    Route("/review/bulk", action(bulk_apply, at=bulk_at), methods=["POST"]),
    Route("/search", page(search), methods=["GET"]),
    Route("/payments/{ref:path}/resolve", action(resolve, at=payment_form(
        "resolve", "#resolve", "not resolved", "as", "reason", "override", "difference", words=RESOLVE_WORDS)),
        methods=["POST"]),
    Route("/payments/{ref:path}/recheck", action(recheck, at=payment_form("recheck", "#recheck", "not rechecked")),
          methods=["POST"]),
    Route("/payments/{ref:path}/assign", action(assign, at=payment_form(
        "assign", "#assign", "not assigned", "assignee", words=(("--to:", "assign to:"),))), methods=["POST"]),
    Route("/payments/{ref:path}/comment", action(comment, at=payment_form(
        "comment", "#comments", "not added", "comment", words=(("--text:", "comment:"),))), methods=["POST"]),
    Route("/payments/{ref:path}", page(show_payment), methods=["GET"]),
]
