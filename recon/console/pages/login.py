"""``/login`` and ``/logout``: the server-side sessions of a console started with an access token
(recon.console.session)."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from recon.console.security import TokenAuth, cookie_header, wants_secure
from recon.console.session import SESSION_COOKIE, Sessions
from recon.console.web import Fields, action, page, pages

log = logging.getLogger("recon.console")


def login_form(request: Request) -> Response:
    if _auth(request) is None:
        return RedirectResponse("/", status_code=303)
    return pages(request).render(request, "login.html", error=getattr(request.state, "session_ended", None))


def log_in(request: Request, fields: Fields) -> Response:
    """A new session for the token's holder; the browser's current one, if live, is revoked (no fixation)."""
    auth, sessions = _auth(request), _sessions(request)
    if auth is None or sessions is None:
        return RedirectResponse("/", status_code=303)
    if not auth.check(fields.raw("token")):
        log.warning("console: a login with a wrong access token from %s was refused",
                    request.client.host if request.client else "an unknown address")
        return pages(request).render(request, "login.html", status=401, error="wrong access token")
    sid = sessions.open(replacing=request.state.session)
    response = RedirectResponse("/", status_code=303)
    response.headers.append("set-cookie", cookie_header(
        SESSION_COOKIE, sid, secure=wants_secure(request),
        max_age=int(sessions.config.absolute_timeout.total_seconds())))
    return response


def log_out(request: Request, fields: Fields) -> Response:
    """The session ends on the server (its cookie opens nothing any more), and the browser drops the cookie."""
    sessions = _sessions(request)
    if sessions is not None and request.state.session is not None:
        sessions.end(request.state.session)
    response = RedirectResponse("/login" if sessions else "/", status_code=303)
    response.headers.append("set-cookie", cookie_header(SESSION_COOKIE, "", max_age=0, secure=wants_secure(request)))
    return response


def _auth(request: Request) -> TokenAuth | None:
    auth: TokenAuth | None = request.app.state.console_auth
    return auth


def _sessions(request: Request) -> Sessions | None:
    sessions: Sessions | None = request.app.state.console_sessions
    return sessions


ROUTES = [
    Route("/login", page(login_form), methods=["GET"]),
    Route("/login", action(log_in), methods=["POST"]),
    Route("/logout", action(log_out), methods=["POST"]),
]
