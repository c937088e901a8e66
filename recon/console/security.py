"""What keeps the console safe to leave running: the access token and its sessions, CSRF, the Host check and
the response headers, as one ASGI middleware (``Gatekeeper``) in front of every route.

**Operators and sessions.** Every request but the login form needs a live session of an enabled operator
(``recon.operators``): ``POST /login`` with an operator's name and password (and TOTP code, when enrolled) opens
one on the server and sets its id in the ``recon_session`` cookie; logout, the idle and the absolute timeouts, and
disabling the operator end it there (``recon.console.session``). With ``RECON_CONSOLE_TOKEN`` set (required for
any non-loopback bind, see ``recon.commands.console``), the token also logs in (the login form's token field) or
authenticates a request by itself (``Authorization: Bearer <token>``, automation; compared with
``hmac.compare_digest``), as the token's own operator (``[console] token_operator``, role ``token_role``).
Anything else gets 401 and the login form, saying why a session ended. ``request.state.actor`` is who acts
(``Actor``): the session's operator with their role as it is now, or the token's operator.

**Cookies** are ``HttpOnly``, ``SameSite=Strict``, ``Path=/``, and ``Secure`` whenever the request came over
TLS (its scheme, or a proxy's ``X-Forwarded-Proto``/``Forwarded``: trusted only to add the flag) or names a
host that is not loopback: a browser then sends them only over HTTPS.

**CSRF.** A POST's ``csrf`` field must equal the token its request is bound to (``csrf_accepts``), else 403 and
nothing is done:

- with a live session, the session's own token (HMAC keyed by the session id, ``recon.console.session``): a
  token of another session, of the login page, or of a session that has ended is refused;
- without one (the login form; a console without a token, which has no sessions; a Bearer client), a signed
  double-submit pair bound to a pre-session value: the cookie ``recon_csrf`` holds ``ISSUED.NONCE.SIG``
  (issue time in Unix seconds, 16 random bytes in hex, ``HMAC-SHA256(secret, "csrf:" + ISSUED + "." + NONCE)``)
  and the field must equal it. The secret is this process's (32 random bytes drawn at start unless
  ``create_app`` is given one); a pair older than the absolute session timeout, or from before a restart, is
  refused ("reload the page") and a new one issued. A page on another site can read neither the cookie nor the
  field, and a cookie it plants (a sibling host, plain HTTP) fails the signature.

On top of that, a POST whose ``Origin`` names another host, or whose ``Sec-Fetch-Site`` says ``cross-site``, is
refused before any form is read.

**Host check.** Without a token, the console answers only requests whose ``Host`` is a loopback name
(``localhost``, ``127.x.x.x``, ``[::1]``): a DNS-rebinding page (evil.example resolving to 127.0.0.1) would
otherwise read the console as its own origin.

**Headers** on every response: a Content-Security-Policy allowing only the console's own inline script and
stylesheet (each by its hash; the script only adds local times beside UTC ones), ``X-Frame-Options: DENY``,
``Referrer-Policy: same-origin``, ``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store`` (pages
show payment data).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from recon.console.session import SESSION_COOKIE, Resumed, ended_message
from recon.operator_rows import Role

if TYPE_CHECKING:
    from recon.console.session import Sessions

log = logging.getLogger("recon.console")

CSRF_COOKIE = "recon_csrf"
#: paths served without the access token: the login form and its POST
OPEN_PATHS = frozenset({"/login"})
#: the shortest RECON_CONSOLE_TOKEN accepted (a guessable token is no protection)
TOKEN_MIN_LENGTH = 16
#: how far ahead of now a pre-session token's issue time may be (one process's clock: only if it was stepped back)
_CSRF_SKEW = timedelta(minutes=1)

#: (request, status, message) -> the page to send instead of the route's
DenyFunc = Callable[[Request, int, str], Response]


def is_loopback(host: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ::1 (brackets allowed)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Csrf:
    """The pre-session token: a signed double-submit pair, valid for ``max_age`` (see the module docstring)."""

    def __init__(self, secret: bytes, *, max_age: timedelta, now_func: Callable[[], datetime]) -> None:
        self._secret = secret
        self._max_age = max_age
        self._now = now_func

    def issue(self) -> str:
        issued = str(int(self._now().timestamp()))
        nonce = secrets.token_hex(16)
        return f"{issued}.{nonce}.{self._sign(issued, nonce)}"

    def valid(self, token: str | None) -> bool:
        """``token`` was issued by this process, less than ``max_age`` ago."""
        parts = (token or "").split(".")
        if len(parts) != 3 or not parts[0].isdigit() or len(parts[0]) > 12 or len(parts[1]) != 32:
            return False
        issued, nonce, sig = parts
        if not hmac.compare_digest(sig.encode(), self._sign(issued, nonce).encode()):
            return False
        age = self._now() - datetime.fromtimestamp(int(issued), tz=UTC)
        return -_CSRF_SKEW <= age < self._max_age

    def _sign(self, issued: str, nonce: str) -> str:
        return hmac.new(self._secret, f"csrf:{issued}.{nonce}".encode(), hashlib.sha256).hexdigest()


def csrf_accepts(request: Request, field: str | None) -> bool:
    """The form's ``field`` is the token this request is bound to, and the browser holds what binds it (a live
    session, or a valid pre-session cookie): set by the Gatekeeper, checked where the form is read."""
    expected: str = getattr(request.state, "csrf", "")
    held: bool = getattr(request.state, "csrf_held", False)
    return held and bool(field) and bool(expected) and hmac.compare_digest((field or "").encode(), expected.encode())


@dataclass(frozen=True, slots=True)
class Actor:
    """Who a request acts as: an operator's name and role, read on this request."""

    name: str
    role: Role


class TokenAuth:
    """The access token, as the login form's field or a Bearer header."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    def check(self, supplied: str) -> bool:
        """``supplied`` (the login form's field) is the token."""
        return hmac.compare_digest(supplied.encode(), self._token)

    def bearer(self, request: Request) -> bool:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.check(value.strip())


def cookie_header(name: str, value: str, *, secure: bool, max_age: int | None = None) -> str:
    cookie: SimpleCookie = SimpleCookie()
    cookie[name] = value
    morsel = cookie[name]
    morsel["path"] = "/"
    morsel["httponly"] = True
    morsel["samesite"] = "Strict"
    if secure:
        morsel["secure"] = True
    if max_age is not None:
        morsel["max-age"] = max_age
    return morsel.OutputString()


def wants_secure(request: Request) -> bool:
    """Should this request's cookies be ``Secure``: it came over TLS (or a proxy says so), or it names a host
    that is not loopback. A forwarded header can only add the flag, so it needs no trust."""
    return _over_tls(request) or not is_loopback(_hostname(request.headers.get("host", "")))


def plain_http_off_loopback(request: Request) -> bool:
    """A request over plain HTTP (as far as the console can tell) to a host that is not loopback: a browser
    keeps no ``Secure`` cookie from it, so its forms cannot work."""
    return not _over_tls(request) and not is_loopback(_hostname(request.headers.get("host", "")))


def _over_tls(request: Request) -> bool:
    forwarded = request.headers.get("forwarded", "").lower().replace(" ", "")
    return (request.url.scheme == "https" or request.headers.get("x-forwarded-proto", "").lower() == "https"
            or "proto=https" in forwarded)


def security_headers(style_hash: str, script_hash: str | None = None) -> list[tuple[bytes, bytes]]:
    """The headers of every response; ``style_hash`` and ``script_hash`` are the base64 SHA-256 of the one
    inline stylesheet and the one inline script (None: no script at all)."""
    scripts = f"'sha256-{script_hash}'" if script_hash else "'none'"
    csp = (f"default-src 'self'; script-src {scripts}; style-src 'sha256-{style_hash}'; img-src 'self' data:; "
           "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
    return [(b"content-security-policy", csp.encode()), (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"same-origin"), (b"x-content-type-options", b"nosniff"),
            (b"cache-control", b"no-store"), (b"cross-origin-opener-policy", b"same-origin")]


class Gatekeeper:
    """The middleware: Host check, token or session, cross-site POSTs, the CSRF binding, the headers.

    The CSRF *field* is checked where the form is read (``recon.console.web``, with ``csrf_accepts``): this
    layer finds the request's session (``request.state.session``: the live row, or None), the token a form
    must carry (``request.state.csrf``), and makes sure the browser holds what binds it.
    """

    def __init__(self, app: ASGIApp, *, csrf: Csrf, auth: TokenAuth | None, sessions: Sessions,
                 style_hash: str, deny_func: DenyFunc, token_actor_func: Callable[[], Actor | None],
                 script_hash: str | None = None) -> None:
        self.app = app
        self.csrf = csrf
        self.auth = auth
        self.sessions = sessions
        self.token_actor = token_actor_func
        self.headers = security_headers(style_hash, script_hash)
        self.deny = deny_func

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        extra = list(self.headers)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        refusal: tuple[int, str] | None
        request.state.actor = None
        try:
            resumed = await self._resume(request)
            if resumed is not None and resumed.live and resumed.session is not None:
                row = resumed.session
                if row.operator_name and row.operator_role:
                    request.state.actor = Actor(row.operator_name, Role(row.operator_role))
            elif self.auth is not None and self.auth.bearer(request):
                request.state.actor = await run_in_threadpool(self.token_actor)
        except Exception as exc:  # the sessions' database: one line on the page, the type in the log
            log.error("console: %s %s: sessions unreadable: %s: %s", request.method, request.url.path,
                      type(exc).__name__, (str(exc).splitlines() or [""])[0][:200])
            resumed, refusal = None, (500, "the console failed on this request; the server log says why")
        else:
            refusal = self._refusal(request, resumed)
        secure = wants_secure(request)
        if resumed is not None and not resumed.live:  # the browser's cookie opens nothing: it goes
            extra.append((b"set-cookie", cookie_header(SESSION_COOKIE, "", secure=secure, max_age=0).encode()))
        self._bind_csrf(request, resumed, extra, secure=secure)
        if refusal is not None:
            await self.deny(request, *refusal)(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    async def _resume(self, request: Request) -> Resumed | None:
        """The request's session, if it sent a session cookie to a console that has sessions."""
        sid = request.cookies.get(SESSION_COOKIE)
        if not sid:
            request.state.session = None
            return None
        resumed: Resumed = await run_in_threadpool(self.sessions.resume, sid)
        request.state.session = resumed.session
        if not resumed.live:
            request.state.session_ended = ended_message(resumed.state, self.sessions.config)
        return resumed

    def _bind_csrf(self, request: Request, resumed: Resumed | None, extra: list[tuple[bytes, bytes]], *,
                   secure: bool) -> None:
        if resumed is not None and resumed.live and resumed.csrf:
            request.state.csrf, request.state.csrf_held = resumed.csrf, True
            return
        token = request.cookies.get(CSRF_COOKIE)
        held = self.csrf.valid(token)
        if not held or not token:
            token = self.csrf.issue()
            extra.append((b"set-cookie", cookie_header(CSRF_COOKIE, token, secure=secure).encode("latin-1")))
        request.state.csrf, request.state.csrf_held = token, held

    def _refusal(self, request: Request, resumed: Resumed | None) -> tuple[int, str] | None:
        host = request.headers.get("host", "")
        if self.auth is None and not is_loopback(_hostname(host)):
            return 400, "this console answers only to a loopback host name (127.0.0.1, localhost, [::1])"
        if request.url.path not in OPEN_PATHS and request.state.actor is None:
            return 401, getattr(request.state, "session_ended", None) or "log in: your operator name and password"
        if request.method == "POST" and _cross_site(request, host):
            return 403, "refused: a form posted from another site"
        return None


def _hostname(host: str) -> str:
    """``host`` of a Host header without its port (``[::1]:8470`` -> ``::1``)."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _cross_site(request: Request, host: str) -> bool:
    """Is this POST from another site? The browser's Fetch Metadata says so when it sends it (a page cannot set
    it): ``same-origin`` and ``none`` (typed, bookmarked) pass, ``same-site`` and ``cross-site`` do not.
    Without it, the Origin: another host, or ``null`` (an opaque origin), is another site. Chromium sends
    ``Origin: null`` on same-origin form posts under ``Referrer-Policy: no-referrer``, so Fetch Metadata comes
    first and the console's policy is ``same-origin``."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    return origin == "null" or urlsplit(origin).netloc.lower() != host.lower()
