"""The console's ASGI application (``create_app``) and its server (``run``: uvicorn on one bound socket).

Every read and every write goes through the ``App`` the command line uses: the same stores, the same
audited functions (``guard.pause``, ``replay``, the review desk). ``recon.console.security`` describes the
access token, CSRF and the headers.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from recon.asgi import serve
from recon.console.config import ConsoleConfig
from recon.console.pages import approvals, dead, jobs, login, movements, overview, payments, payouts, psps, review
from recon.console.security import Actor, Csrf, Gatekeeper, TokenAuth
from recon.console.session import Sessions, token_principal
from recon.console.totals import TotalsCache
from recon.console.web import Pages
from recon.db.console_session_store import ConsoleSessionStore

if TYPE_CHECKING:
    from recon.app import App

log = logging.getLogger("recon.console")

#: the largest request body accepted (forms are a few short fields)
MAX_BODY_BYTES = 64 * 1024


def create_app(app: App, *, token: str | None = None, secret: bytes | None = None) -> Starlette:
    """The console on ``app``: every request needs an operator's session, or with ``token`` the token itself (see
    ``recon.console.security`` and ``recon.console.session``; ``[console]`` sets the sessions' timeouts and the
    token's operator);
    ``secret`` keys the pre-session CSRF pairs (default: 32 random bytes, new each process)."""
    key = secret or secrets.token_bytes(32)
    config = ConsoleConfig.load(app.settings.extra.get("console"), source=app.settings.source)
    rendered = Pages()
    auth = TokenAuth(token) if token else None
    sessions = Sessions(ConsoleSessionStore(app.db), principal=token_principal(token) if token else None,
                        config=config)
    csrf = Csrf(key, max_age=config.absolute_timeout, now_func=lambda: app.db.clock.now())
    if token:  # the token's own operator, created or brought to its configured role
        app.operators.ensure_token_operator(config.token_operator, config.token_role)
    for line in app.operators.totp_warnings():  # a configured TOTP key that is unusable: TotpKeyError (exit 2) now
        log.warning("console: %s", line)

    def token_actor() -> Actor | None:
        """The token's operator as it is now: None when disabled (the token then opens nothing)."""
        found = app.operators.get(config.token_operator)
        return Actor(found.name, found.role) if found is not None and found.enabled else None

    def deny(request: Request, status: int, message: str) -> Response:
        return rendered.error(request, status, message)

    async def not_served(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "the console failed on this request"
        return rendered.error(request, status, "no such page" if status == 404 else str(detail))

    web = Starlette(routes=[*overview.ROUTES, *payments.ROUTES, *movements.ROUTES, *review.ROUTES, *dead.ROUTES,
                            *jobs.ROUTES, *psps.ROUTES, *payouts.ROUTES, *login.ROUTES, *approvals.ROUTES],
                    middleware=[Middleware(Gatekeeper, csrf=csrf, auth=auth, sessions=sessions,
                                           style_hash=rendered.style_hash, script_hash=rendered.script_hash,
                                           deny_func=deny, token_actor_func=token_actor)],
                    exception_handlers={HTTPException: not_served}, max_body_size=MAX_BODY_BYTES)
    web.state.console_recon = app
    web.state.console_key = key
    web.state.console_pages = rendered
    web.state.console_auth = auth
    web.state.console_sessions = sessions
    web.state.console_config = config
    web.state.console_totals = TotalsCache(config.totals_ttl)
    _warm(app)
    return web


def run(app: App, *, host: str, port: int, token: str | None,
        on_ready_func: Callable[[str], None] | None = None) -> None:
    """Serve the console on ``host:port`` until SIGINT or SIGTERM (recon.asgi.serve). ``on_ready_func`` gets
    the URL once the socket is bound (port 0: the one chosen)."""
    serve(create_app(app, token=token), host=host, port=port, on_ready_func=on_ready_func)


def _warm(app: App) -> None:
    """Build the App's stores now, in one thread, rather than racing to in the first requests' threads."""
    for name in ("jobs", "payments", "pool", "controls", "guard_config"):
        getattr(app, name)
