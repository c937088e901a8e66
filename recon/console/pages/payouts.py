"""``/payouts``, ``/payouts/{id}`` and ``/payouts/exceptions``: the close as finance ops look at it: payouts per
arrival day, matched or open; one payout with its lines, the bank entries it matched, its exceptions (each with
its resolve form) and its history; the open exceptions. Read from the payout store as ``recon payouts
list|show|exceptions`` read it; a GET never runs the close (that writes: ``recon close``); the resolve form goes
through ``recon.actions`` (the signed-in operator's role checked, one audit row), as ``recon payouts resolve``
does, and answers with a redirect to the page of the exception: resolved, or refused beside its form."""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import date, timedelta
from itertools import islice
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recon.clock import SystemClock
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
from recon.operator_rows import Role
from recon.payout_rows import Payout

log = logging.getLogger("recon.console")

#: payouts a day page lists at most; lines a payout page shows at most
PAYOUTS_MAX = 500
LINES_MAX = 500
EXCEPTIONS_MAX = 500
DAYS_DEFAULT = 14


def payouts_page(request: Request) -> Response:
    fields = Fields(request.query_params)
    app = recon_app(request)
    typed = {"psp": fields.raw("psp").strip()[:100], "since": fields.raw("since").strip()[:10],
             "until": fields.raw("until").strip()[:10]}
    today = SystemClock().now().date()
    try:
        since = date.fromisoformat(typed["since"]) if typed["since"] else today - timedelta(days=DAYS_DEFAULT)
        until = date.fromisoformat(typed["until"]) if typed["until"] else today + timedelta(days=2)
    except ValueError:
        return pages(request).render(request, "payouts.html", status=422, error="since/until: days, YYYY-MM-DD",
                                     days=[], filters=typed, psps=app.psp_names(), since=None, until=None, more=False)
    found = list(islice(app.payouts.iter_payouts(psp=typed["psp"] or None, since=since, until=until), PAYOUTS_MAX))
    days: dict[date, list[dict[str, Any]]] = defaultdict(list)
    for p in found:
        days[p.arrival_date].append(_row(request, p))
    listed = [{"day": d, "payouts": rows, "matched": sum(r["state"] == "matched" for r in rows),
               "open": sum(r["state"] != "matched" for r in rows)} for d, rows in sorted(days.items(), reverse=True)]
    return pages(request).render(request, "payouts.html", days=listed, filters=typed, psps=app.psp_names(),
                                 since=since, until=until, more=len(found) >= PAYOUTS_MAX)


def _row(request: Request, p: Payout) -> dict[str, Any]:
    """A payout as the day list shows it: ``state`` matched (a bank entry, no open exception), else the kind of
    its first open exception, else ``awaiting_bank``."""
    closes = recon_app(request).closes
    exceptions = [e for e in closes.exceptions_of(p.id) if e.state.value == "open"]
    entries = closes.matched_entries(p.id)
    state = exceptions[0].kind.value if exceptions else "matched" if entries or p.amount == 0 else "awaiting_bank"
    return {"payout": p, "state": state, "entries": entries}


def payout_page(request: Request) -> Response:
    """One payout; after a refused resolve of one of its exceptions (``exception_at``) the refusal in the
    exception's row and the reason as typed."""
    payout_id = _payout_id(request)
    app = recon_app(request)
    store, closes = app.payouts, app.closes
    payout = store.get(payout_id)
    if payout is None:
        raise PageError(404, f"payout {payout_id} not found")
    errors, form = refusal_of(request)
    return pages(request).render(request, "payout.html", errors=errors, form=form, payout=payout,
                                 lines=list(islice(store.lines(payout_id), LINES_MAX)), lines_max=LINES_MAX,
                                 entries=closes.matched_entries(payout_id), exceptions=closes.exceptions_of(payout_id),
                                 events=store.events(payout_id))


def show_payout(request: Request) -> Response:
    return payout_page(request)


def exceptions_page(request: Request) -> Response:
    found = list(islice(recon_app(request).closes.iter_exceptions(state="open"), EXCEPTIONS_MAX))
    errors, form = refusal_of(request)
    return pages(request).render(request, "payout_exceptions.html", exceptions=found, limit=EXCEPTIONS_MAX,
                                 errors=errors, form=form)


def exception_at(request: Request, fields: Fields) -> FormAt:
    """An exception's resolve form: in its row of its payout's page (of the exceptions page for a credit's
    exception, which has no payout); its 404 page when there is no such exception."""
    exception_id = _int(request.path_params["eid"])
    found = recon_app(request).closes.exception(exception_id)
    if found is None:
        raise PageError(404, f"payout exception {exception_id} not found")
    return FormAt(f"{_page_of(found.payout_id)}#exception-{exception_id}", f"exception-{exception_id}",
                  "not resolved", typed={"reason": fields.raw("reason")[:TEXT_MAX]})


def resolve(request: Request, fields: Fields) -> Response:
    exception_id = _int(request.path_params["eid"])
    found = recon_app(request).closes.exception(exception_id)
    if found is None:
        raise PageError(404, f"payout exception {exception_id} not found")
    operator = acting(request, Role.OPERATOR)
    reason = fields.required("reason", max_length=500)
    resolved = recon_app(request).actions.resolve_payout_exception(exception_id, by=operator, reason=reason)
    log.info("console: payout exception %s (%s) resolved by %s", resolved.id, resolved.kind.value, operator)
    return done(request, f"{_page_of(found.payout_id)}#exception-{exception_id}",
                f"exception {resolved.id} ({resolved.kind.value}) resolved by {operator}")


def _page_of(payout_id: int | None) -> str:
    """The page an exception is shown on: its payout's, or the open exceptions' for a credit's."""
    return "/payouts/exceptions" if payout_id is None else f"/payouts/{payout_id}"


def _payout_id(request: Request) -> int:
    return _int(request.path_params["pid"])


def _int(text: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise PageError(404, "no such payout")
    return int(text)


ROUTES = [
    Route("/payouts", page(payouts_page), methods=["GET"]),
    Route("/payouts/exceptions", page(exceptions_page), methods=["GET"]),
    Route("/payouts/exceptions/{eid}/resolve", action(resolve, at=exception_at), methods=["POST"]),
    Route("/payouts/{pid}", page(show_payout), methods=["GET"]),
]
