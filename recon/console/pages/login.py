"""``/login`` and ``/logout``: the session cookie of a console started with an access token."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from recon.console.security import SESSION_COOKIE, TokenAuth, cookie_header
from recon.console.web import Fields, action, page, pages

#: how long a login lasts (the cookie's Max-Age)
SESSION_SECONDS = 12 * 3600


def login_form(request: Request) -> Response:
    if _auth(request) is None:
        return RedirectResponse("/", status_code=303)
    return pages(request).render(request, "login.html")


def log_in(request: Request, fields: Fields) -> Response:
    auth = _auth(request)
    if auth is None:
        return RedirectResponse("/", status_code=303)
    if not auth.check(fields.raw("token")):
        return pages(request).render(request, "login.html", status=401, error="wrong access token")
    response = RedirectResponse("/", status_code=303)
    response.headers.append("set-cookie", cookie_header(SESSION_COOKIE, auth.session, max_age=SESSION_SECONDS,
                                                        secure=request.url.scheme == "https"))
    return response


def log_out(request: Request, fields: Fields) -> Response:
    response = RedirectResponse("/login" if _auth(request) else "/", status_code=303)
    response.headers.append("set-cookie", cookie_header(SESSION_COOKIE, "", max_age=0,
                                                        secure=request.url.scheme == "https"))
    return response


def _auth(request: Request) -> TokenAuth | None:
    auth: TokenAuth | None = request.app.state.console_auth
    return auth


ROUTES = [
    Route("/login", page(login_form), methods=["GET"]),
    Route("/login", action(log_in), methods=["POST"]),
    Route("/logout", action(log_out), methods=["POST"]),
]
