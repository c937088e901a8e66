"""``/login`` and ``/logout``: operators' server-side sessions (recon.console.session), opened with an operator's
name and password (and TOTP code when enrolled; recon.operators: the lockout, the audit rows), or with the console's
access token as the token's own operator. A refused login answers with a redirect to the form, which says why
(``web.refused``: a reload never posts the password again, nor counts another failure towards the lockout)."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from recon.audit import entry
from recon.console.config import ConsoleConfig
from recon.console.security import TokenAuth, cookie_header, wants_secure
from recon.console.session import SESSION_COOKIE, Sessions
from recon.console.web import Fields, action, page, pages, recon_app, refusal_of, refused
from recon.operator_rows import Operator

log = logging.getLogger("recon.console")

#: the longest operator name, password or code read from the form
_FIELD_MAX = 1024


def login_form(request: Request) -> Response:
    errors, form = refusal_of(request)
    return pages(request).render(request, "login.html", error=getattr(request.state, "session_ended", None),
                                 token_login=_auth(request) is not None, errors=errors, form=form)


def log_in(request: Request, fields: Fields) -> Response:
    """A new session for the operator; the browser's current one, if live, is revoked (no fixation)."""
    app = recon_app(request)
    source = request.client.host if request.client else "an unknown address"
    token = fields.raw("token")[:_FIELD_MAX]
    operator: Operator | None
    if token:
        operator = _token_login(request, token, source)
        message = "wrong access token"
    else:
        result = app.operators.login(fields.raw("operator").strip()[:_FIELD_MAX], fields.raw("password")[:_FIELD_MAX],
                                     fields.raw("totp").strip()[:16] or None, source=source)
        operator, message = result.operator, result.message
    if operator is None:  # the operator's name kept, never the password, the code or the token
        if token:
            return refused(request, "/login", "token", message)
        return refused(request, "/login", "login", message, operator=fields.raw("operator").strip()[:100])
    sessions = _sessions(request)
    sid = sessions.open(operator=operator, by_token=bool(token), replacing=request.state.session)
    response = RedirectResponse("/", status_code=303)
    response.headers.append("set-cookie", cookie_header(
        SESSION_COOKIE, sid, secure=wants_secure(request),
        max_age=int(sessions.config.absolute_timeout.total_seconds())))
    return response


def _token_login(request: Request, token: str, source: str) -> Operator | None:
    """The token's operator when ``token`` is the console's access token (and its operator is enabled)."""
    app, auth, config = recon_app(request), _auth(request), _config(request)
    if auth is None or not auth.check(token):
        log.warning("console: a login with a wrong access token from %s was refused", source)
        app.audit.record(entry("unknown:access-token", "login.failed", "access token", "refused", source=source))
        return None
    operator = app.operators.get(config.token_operator)
    if operator is None or not operator.enabled:
        app.audit.record(entry(config.token_operator, "login.failed", config.token_operator, "refused",
                               source=source, why="the token's operator is disabled"))
        return None
    app.audit.record(entry(operator.name, "login.succeeded", operator.name, source=source, method="token"))
    return operator


def log_out(request: Request, fields: Fields) -> Response:
    """The session ends on the server (its cookie opens nothing any more), and the browser drops the cookie."""
    session = request.state.session
    if session is not None:
        _sessions(request).end(session)
        actor = getattr(request.state, "actor", None)
        recon_app(request).audit.record(entry(actor.name if actor else "unknown", "logout",
                                              actor.name if actor else "session", session=session.id))
    response = RedirectResponse("/login", status_code=303)
    response.headers.append("set-cookie", cookie_header(SESSION_COOKIE, "", max_age=0, secure=wants_secure(request)))
    return response


def _auth(request: Request) -> TokenAuth | None:
    auth: TokenAuth | None = request.app.state.console_auth
    return auth


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.console_sessions
    return sessions


def _config(request: Request) -> ConsoleConfig:
    config: ConsoleConfig = request.app.state.console_config
    return config


ROUTES = [
    Route("/login", page(login_form), methods=["GET"]),
    Route("/login", action(log_in), methods=["POST"]),
    Route("/logout", action(log_out), methods=["POST"]),
]
