"""What keeps the console safe to leave running: the access token, CSRF, the Host check and the response
headers, as one ASGI middleware (``Gatekeeper``) in front of every route.

**Access token.** With ``RECON_CONSOLE_TOKEN`` set (required for any non-loopback bind, see
``recon.commands.console``), every request but the login form needs either ``Authorization: Bearer <token>``
or the session cookie ``recon_session`` that ``POST /login`` sets (HttpOnly, SameSite=Strict). The cookie
holds ``HMAC(secret, "session:" + token)``, never the token itself; both are compared with
``hmac.compare_digest``. Anything else gets 401 and the login form.

**CSRF: a signed double-submit token.** Every response carries the cookie ``recon_csrf`` (HttpOnly,
SameSite=Strict) holding ``NONCE.SIG``: 16 random bytes in hex and ``HMAC-SHA256(secret, "csrf:" + NONCE)``
in hex. Every form the console renders carries the same value in its hidden field ``csrf``. A POST is
accepted only when the field and the cookie are equal (``compare_digest``) and the signature verifies with
this process's secret (32 random bytes drawn at start, unless ``create_app`` is given one). A page on another
site cannot read the cookie (nor, by the same-origin policy, a page holding the field), so it cannot send a
matching pair; a cookie planted by someone else (a sibling host, a man in the middle on plain HTTP) fails the
signature, since the secret never leaves the process. A restart draws a new secret: forms rendered before
it are refused (403, "reload the page"). On top of that, a POST whose ``Origin`` names another host, or
whose ``Sec-Fetch-Site`` says ``cross-site``, is refused before any form is read.

**Host check.** Without a token, the console answers only requests whose ``Host`` is a loopback name
(``localhost``, ``127.x.x.x``, ``[::1]``): a DNS-rebinding page (evil.example resolving to 127.0.0.1) would
otherwise read the console as its own origin.

**Headers** on every response: a Content-Security-Policy allowing no script at all and only the console's
own inline stylesheet (by its hash), ``X-Frame-Options: DENY``, ``Referrer-Policy: same-origin``,
``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store`` (pages show payment data).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Callable
from http.cookies import SimpleCookie
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_COOKIE = "recon_csrf"
CSRF_FIELD = "csrf"
SESSION_COOKIE = "recon_session"
#: paths served without the access token: the login form and its POST
OPEN_PATHS = frozenset({"/login"})
#: the shortest RECON_CONSOLE_TOKEN accepted (a guessable token is no protection)
TOKEN_MIN_LENGTH = 16

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
    """The signed double-submit token (see the module docstring)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def issue(self) -> str:
        nonce = secrets.token_hex(16)
        return f"{nonce}.{self._sign(nonce)}"

    def valid(self, token: str | None) -> bool:
        """``token`` was issued by this process."""
        nonce, dot, sig = (token or "").partition(".")
        return bool(dot) and len(nonce) == 32 and hmac.compare_digest(sig.encode(), self._sign(nonce).encode())

    def matches(self, cookie: str | None, field: str | None) -> bool:
        """The form's field equals the cookie, and the cookie is ours."""
        if not cookie or not field:
            return False
        return hmac.compare_digest(cookie.encode(), field.encode()) and self.valid(cookie)

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._secret, b"csrf:" + nonce.encode(), hashlib.sha256).hexdigest()


class TokenAuth:
    """The access token: a Bearer header or the session cookie ``POST /login`` sets."""

    def __init__(self, token: str, secret: bytes) -> None:
        self._token = token.encode()
        self.session = hmac.new(secret, b"session:" + self._token, hashlib.sha256).hexdigest()

    def check(self, supplied: str) -> bool:
        """``supplied`` (the login form's field) is the token."""
        return hmac.compare_digest(supplied.encode(), self._token)

    def allows(self, request: Request) -> bool:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.check(value.strip()):
            return True
        cookie = request.cookies.get(SESSION_COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie.encode(), self.session.encode())


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


def security_headers(style_hash: str) -> list[tuple[bytes, bytes]]:
    """The headers of every response; ``style_hash`` is the base64 SHA-256 of the one inline stylesheet."""
    csp = (f"default-src 'self'; script-src 'none'; style-src 'sha256-{style_hash}'; img-src 'self' data:; "
           "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
    return [(b"content-security-policy", csp.encode()), (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"same-origin"), (b"x-content-type-options", b"nosniff"),
            (b"cache-control", b"no-store"), (b"cross-origin-opener-policy", b"same-origin")]


class Gatekeeper:
    """The middleware: Host check, token, cross-site POSTs, the CSRF cookie, the headers.

    The CSRF *field* is checked where the form is read (``recon.console.web``): this layer makes sure every
    page has a token to render (``request.state.csrf``) and that the browser holds it as a cookie.
    """

    def __init__(self, app: ASGIApp, *, csrf: Csrf, auth: TokenAuth | None, style_hash: str,
                 deny_func: DenyFunc) -> None:
        self.app = app
        self.csrf = csrf
        self.auth = auth
        self.headers = security_headers(style_hash)
        self.deny = deny_func

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        token = request.cookies.get(CSRF_COOKIE)
        fresh = not self.csrf.valid(token)
        if fresh:
            token = self.csrf.issue()
        request.state.csrf = token
        extra = list(self.headers)
        if fresh and token:
            extra.append((b"set-cookie", cookie_header(CSRF_COOKIE, token, secure=request.url.scheme == "https")
                          .encode("latin-1")))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        refusal = self._refusal(request)
        if refusal is not None:
            await self.deny(request, *refusal)(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, request: Request) -> tuple[int, str] | None:
        host = request.headers.get("host", "")
        if self.auth is None and not is_loopback(_hostname(host)):
            return 400, "this console answers only to a loopback host name (127.0.0.1, localhost, [::1])"
        if self.auth is not None and request.url.path not in OPEN_PATHS and not self.auth.allows(request):
            return 401, "log in with the console's access token"
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
