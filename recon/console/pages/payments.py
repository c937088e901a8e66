"""``/payments``: every payment through filters (status or "unfinished", PSP, currency, age, amount range in
major units, reference prefix, case-insensitive, an open dispute or one whose evidence is due soon), newest first,
paged by id, with the filter's totals and a CSV export. The overview's figures link here, so every number leads to
the payments behind it."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.console.csv_export import csv_response
from recon.console.web import Fields, page, pages, recon_app, totals_cache
from recon.console_rows import PaymentListFilter
from recon.db.payment_list_store import PaymentListStore, age_bounds
from recon.db.schema import PAYMENT_STATUSES
from recon.durations import parse_duration
from recon.errors import UsageError
from recon.overview import EVIDENCE_SOON
from recon.payments.money import MINOR_UNITS, check_currency, format_amount
from recon.redact import identifier, kept_text
from recon.review_config import SCALE
from recon.rows import Payment

PAGE_SIZE = 100
#: a CSV export holds at most this many payments (narrow the filter for more)
CSV_MAX = 10_000
FILTERS = ("status", "psp", "currency", "age", "older_than", "min_amount", "max_amount", "reference", "dispute")
#: the dispute filter: payments with an open dispute, or with one whose evidence is due within EVIDENCE_SOON
DISPUTES = {"open": "an open dispute", "due_soon": "evidence due soon"}
AGES = {"lt_1h": "under 1 hour", "1h_1d": "1 hour to 1 day", "1d_7d": "1 to 7 days", "gt_7d": "over 7 days"}
CSV_COLUMNS = ("merchant_reference", "merchant_account", "psp", "psp_reference", "amount", "currency", "status",
               "created_at", "updated_at", "review_reason", "failure_reason")


def exponents() -> dict[str, tuple[str, ...]]:
    by: dict[int, list[str]] = {}
    for code, exponent in sorted(MINOR_UNITS.items()):
        by.setdefault(exponent, []).append(code)
    return {f"exponent_{e}": tuple(by.get(e, ())) for e in (0, 3, 4)}


def read_filter(request: Request, typed: dict[str, str]) -> PaymentListFilter:
    """The store's filter from the typed one; UsageError names a bad field."""
    app = recon_app(request)
    status = typed["status"] or None
    if status is not None and status not in (*PAYMENT_STATUSES, "unfinished"):
        raise UsageError(f"status: {status!r} is not a payment status")
    psp = typed["psp"] or None
    if psp is not None and psp not in app.psp_names():
        raise UsageError(f"psp: unknown PSP {psp!r}")
    currency = check_currency(typed["currency"]) if typed["currency"] else None
    now = app.db.clock.now()
    before, after = age_bounds(now, typed["age"]) if typed["age"] else (None, None)
    if typed["age"] and typed["age"] not in AGES:
        raise UsageError(f"age: {typed['age']!r} is not one of {', '.join(AGES)}")
    if typed["older_than"]:
        older = now - parse_duration(typed["older_than"], what="older than")
        before = min(before, older) if before else older
    dispute = typed["dispute"] or None
    if dispute is not None and dispute not in DISPUTES:
        raise UsageError(f"dispute: {dispute!r} is not one of {', '.join(DISPUTES)}")
    return PaymentListFilter(status=status, psp=psp, currency=currency, created_before=before, created_after=after,
                             min_scaled=_scaled(typed["min_amount"], "from amount"),
                             max_scaled=_scaled(typed["max_amount"], "to amount"),
                             reference_prefix=typed["reference"] or None, dispute=dispute,
                             evidence_before=now + EVIDENCE_SOON if dispute == "due_soon" else None)


def payments_page(request: Request) -> Response:
    fields = Fields(request.query_params)
    typed = {name: fields.raw(name).strip()[:100] for name in FILTERS}
    app = recon_app(request)
    context: dict[str, Any] = {"filters": typed, "statuses": ["unfinished", *PAYMENT_STATUSES], "ages": AGES,
                               "disputes": DISPUTES,
                               "psps": app.psp_names(), "query": urlencode({k: v for k, v in typed.items() if v})}
    store = PaymentListStore(app.db, app.payments)
    try:
        where = read_filter(request, typed)
        before, after = _id(fields.raw("before")), _id(fields.raw("after"))
    except UsageError as exc:
        return pages(request).render(request, "payments.html", status=422, error=str(exc), found=[], totals=None,
                                     **context)
    if fields.raw("format") == "csv":
        found = store.page(where, exponents(), limit=CSV_MAX)
        return csv_response("payments.csv", CSV_COLUMNS, (_csv_row(p) for p in found))
    found = store.page(where, exponents(), before_id=before, after_id=after, limit=PAGE_SIZE + 1)
    if after is not None:
        more_newer, found = len(found) > PAGE_SIZE, found[-PAGE_SIZE:]
        more_older = True
    else:
        more_older, found = len(found) > PAGE_SIZE, found[:PAGE_SIZE]
        more_newer = before is not None
    kept = totals_cache(request).get(("payments", *sorted(typed.items())), lambda: store.totals(where, exponents()),
                                     now=app.db.clock.now())
    return pages(request).render(request, "payments.html", found=found, totals=kept.value, totals_at=kept.at,
                                 totals_cached=kept.cached,
                                 older=found[-1].id if more_older and found else None,
                                 newer=found[0].id if more_newer and found else None, **context)


def _scaled(raw: str, label: str) -> int | None:
    if not raw:
        return None
    try:
        value = Decimal(raw)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value < 0 or value > 10**15:
        raise UsageError(f"{label}: {raw!r} is not an amount in major units (such as 100 or 99.50)")
    return int(value * SCALE)


def _id(raw: str) -> int | None:
    raw = raw.strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise UsageError(f"page cursor {raw[:20]!r} is not a payment id")
    return int(raw)


def _csv_row(p: Payment) -> list[Any]:
    return [p.merchant_reference, p.merchant_account, p.psp, identifier(p.psp_reference) if p.psp_reference else None,
            format_amount(p.amount, p.currency).split(" ")[0], p.currency, str(p.status), p.created_at.isoformat(),
            p.updated_at.isoformat(),
            *(kept_text(r, (p.psp_reference,)) if r else r for r in (p.review_reason, p.failure_reason))]


ROUTES = [Route("/payments", page(payments_page), methods=["GET"])]
