"""``/payouts``, ``/payouts/{id}`` and ``/payouts/exceptions``: the close as finance ops look at it: payouts per
arrival day, matched or open; one payout with its lines, the bank entries it matched, its exceptions (each with
its resolve form) and its history; the open exceptions. Read from the payout store as ``recon payouts
list|show|exceptions`` read it; a GET never runs the close (that writes: ``recon close``); the resolve form goes
through ``recon.actions`` (the signed-in operator's role checked, one audit row), as ``recon payouts resolve``
does."""

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
from recon.console.web import Fields, PageError, acting, action, page, pages, recon_app
from recon.errors import NotAllowed, ReviewRefused, UsageError
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


def payout_page(request: Request, *, status: int = 200, notice: str | None = None,
                error: str | None = None) -> Response:
    payout_id = _payout_id(request)
    app = recon_app(request)
    store, closes = app.payouts, app.closes
    payout = store.get(payout_id)
    if payout is None:
        raise PageError(404, f"payout {payout_id} not found")
    return pages(request).render(request, "payout.html", status=status, notice=notice, error=error, payout=payout,
                                 lines=list(islice(store.lines(payout_id), LINES_MAX)), lines_max=LINES_MAX,
                                 entries=closes.matched_entries(payout_id), exceptions=closes.exceptions_of(payout_id),
                                 events=store.events(payout_id))


def show_payout(request: Request) -> Response:
    return payout_page(request)


def exceptions_page(request: Request) -> Response:
    found = list(islice(recon_app(request).closes.iter_exceptions(state="open"), EXCEPTIONS_MAX))
    return pages(request).render(request, "payout_exceptions.html", exceptions=found, limit=EXCEPTIONS_MAX)


def resolve(request: Request, fields: Fields) -> Response:
    exception_id = _int(request.path_params["eid"])
    found = recon_app(request).closes.exception(exception_id)
    if found is None:
        raise PageError(404, f"payout exception {exception_id} not found")
    operator = acting(request, Role.OPERATOR)
    try:
        reason = fields.required("reason", max_length=500)
        done = recon_app(request).actions.resolve_payout_exception(exception_id, by=operator, reason=reason)
    except ReviewRefused as exc:
        return _after(request, found.payout_id, status=409, error=f"not resolved: {exc}")
    except NotAllowed:
        raise  # the console's 403 page
    except UsageError as exc:
        return _after(request, found.payout_id, status=422, error=f"not resolved: {exc}")
    log.info("console: payout exception %s (%s) resolved by %s", done.id, done.kind.value, operator)
    return _after(request, found.payout_id, notice=f"exception {done.id} ({done.kind.value}) resolved by {operator}")


def _after(request: Request, payout_id: int | None, **kw: Any) -> Response:
    """The payout's page after a resolve (the exceptions page for a credit's exception)."""
    if payout_id is None:
        found = list(islice(recon_app(request).closes.iter_exceptions(state="open"), EXCEPTIONS_MAX))
        return pages(request).render(request, "payout_exceptions.html", exceptions=found, limit=EXCEPTIONS_MAX,
                                     **kw)
    request.path_params["pid"] = str(payout_id)
    return payout_page(request, **kw)


def _payout_id(request: Request) -> int:
    return _int(request.path_params["pid"])


def _int(text: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise PageError(404, "no such payout")
    return int(text)


ROUTES = [
    Route("/payouts", page(payouts_page), methods=["GET"]),
    Route("/payouts/exceptions", page(exceptions_page), methods=["GET"]),
    Route("/payouts/exceptions/{eid}/resolve", action(resolve), methods=["POST"]),
    Route("/payouts/{pid}", page(show_payout), methods=["GET"]),
]
