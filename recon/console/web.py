"""The console's request plumbing: the template environment, pages, form fields, and the two kinds of
endpoint (``page`` for a GET, ``action`` for a POST), which turn every error into a page, never a traceback.

Templates are autoescaped, and every value a template prints passes through ``recon.redact.redact`` on its
way out (the environment's ``finalize``), so a card number or a key that reached the database some other
way is masked on the page too: a last line of defence behind the stores' own redaction. Only values marked
safe by the console itself (its SVG charts, its stylesheet, its hidden CSRF field) skip it, and a PSP's own
identifiers where a page shows them as such (the ``ident`` filter: ``recon.redact.Identifier``), which are
escaped but never masked: a Luhn-valid Adyen reference reads as itself, not as ``[card]``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from importlib.resources import files
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from recon.console.security import Actor, csrf_accepts, plain_http_off_loopback
from recon.console.totals import TotalsCache
from recon.errors import InvalidJobState, JobNotFound, NotAllowed, UsageError
from recon.evidence import options_facts, sweep_facts
from recon.operator_rows import Role
from recon.payments.money import format_amount, group_digits
from recon.redact import Identifier, identifier, kept_text, redact, redact_value

if TYPE_CHECKING:
    from recon.app import App

log = logging.getLogger("recon.console")

#: the longest free-text field accepted (reasons)
TEXT_MAX = 500
#: form limits: no files, a few fields
FORM_MAX_FIELDS = 30
#: the longest typed value a refusal's redirect keeps for its form (longer ones are cut)
TYPED_MAX = 1000
#: a refused POST's statuses, shown next to its form after a redirect (FormAt); any other is a page of its own
REFUSALS = frozenset({403, 409, 422})

Endpoint = Callable[[Request], Any]


class PageError(Exception):
    """A request the console cannot serve: the status and the one line shown."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class FormAt:
    """Where a POST's form is, for its refusals (``action(..., at=...)``): the page (and anchor) a refusal
    redirects to, the form's name on that page (``form_error``'s), the words every refusal of it starts with
    ("not resolved"), the values typed into it that the form shows again, and the desk's wording of a field
    (a command-line option, "--as") replaced by the form's ("resolve as"), in order."""

    url: str
    form: str
    failed: str
    typed: Mapping[str, str] = field(default_factory=dict)
    words: tuple[tuple[str, str], ...] = ()

    def message(self, text: str) -> str:
        """``text`` (an exception's) as the form shows it: its own words, no command-line option left."""
        text = text.removeprefix("refused: ")
        for cli, form in self.words:
            text = text.replace(cli, form)
        return f"{self.failed}: {formless(text)}"


def formless(text: str) -> str:
    """A desk message without the command line's option dashes (``--older-than`` -> ``older than``)."""
    return _OPTION.sub(lambda m: m.group(1).replace("-", " "), text)


_OPTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")


class Fields:
    """Form or query fields, read with the checks every page shares; bad input raises UsageError (422)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = {k: v for k, v in data.items() if isinstance(v, str)}

    def text(self, name: str, *, label: str | None = None, required: bool = False,
             max_length: int = TEXT_MAX) -> str | None:
        """The stripped value, None when empty (UsageError when ``required``, or longer than ``max_length``)."""
        value = self._data.get(name, "").strip()
        what = label or name
        if not value:
            if required:
                raise UsageError(f"{what} is required")
            return None
        if len(value) > max_length:
            raise UsageError(f"{what} is too long (at most {max_length} characters)")
        if any(ord(c) < 32 for c in value):
            raise UsageError(f"{what} contains control characters")
        return value

    def required(self, name: str, *, label: str | None = None, max_length: int = TEXT_MAX) -> str:
        value = self.text(name, label=label, required=True, max_length=max_length)
        if value is None:  # text() raised already; this tells the type checker
            raise UsageError(f"{label or name} is required")
        return value

    def flag(self, name: str) -> bool:
        return self._data.get(name, "") not in ("", "0", "off", "false")

    def raw(self, name: str) -> str:
        return self._data.get(name, "")


class Pages:
    """The template environment and the pages rendered from it."""

    def __init__(self) -> None:
        self.env = Environment(loader=PackageLoader("recon.console", "templates"),
                               autoescape=select_autoescape(default=True, default_for_string=True),
                               undefined=StrictUndefined, finalize=_redacted, trim_blocks=True, lstrip_blocks=True)
        css = (files("recon.console") / "templates" / "console.css").read_text(encoding="utf-8")
        self.css = Markup(css)  # nosec B704  # our own stylesheet, not input
        self.style_hash = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
        js = (files("recon.console") / "templates" / "console.js").read_text(encoding="utf-8")
        self.js = Markup(js)  # nosec B704  # our own script, not input; allowed by its hash alone (CSP)
        self.script_hash = base64.b64encode(hashlib.sha256(js.encode()).digest()).decode()
        self.env.filters.update(money=_money, ts=_timestamp, age=age_text, pretty=_pretty, grouped=group_digits,
                                when=_when, sweep_facts=sweep_facts, options_facts=options_facts, ident=_ident,
                                kept=_kept)

    def render(self, request: Request, name: str, *, status: int = 200, **context: Any) -> HTMLResponse:
        csrf = getattr(request.state, "csrf", "")
        base = {"request": request, "css": self.css, "js": self.js, "path": request.url.path,
                "csrf_field": Markup('<input type="hidden" name="csrf" value="%s">') % csrf,  # %-formatting escapes
                "logged_in": getattr(request.state, "session", None) is not None,
                "actor": getattr(request.state, "actor", None), "notice": notice_of(request),
                "error": None, "signed_in": signed_in(request), "refresh": _refresh(request)}
        html = self.env.get_template(name).render({**base, **context})
        return HTMLResponse(html, status_code=status)

    def error(self, request: Request, status: int, message: str) -> HTMLResponse:
        if status == 401:
            return self.render(request, "login.html", status=401, error=message, errors={}, form={})
        return self.render(request, "error.html", status=status, status_code=status, message=message)


def acting(request: Request, needs: Role) -> str:
    """The signed-in operator's name when their role allows ``needs`` (recon.operators); a 403 page otherwise
    (nothing done). The App's actions check the operator again, in the database."""
    actor: Actor | None = getattr(request.state, "actor", None)
    if actor is None:
        raise PageError(401, "log in: your operator name and password")
    if not actor.role.allows(needs):
        raise PageError(403, f"refused: {actor.name} has the role {actor.role}; this takes {needs} or above")
    return actor.name


def signed_in(request: Request) -> str | None:
    """Who is signed in: the operator of the request's session (or of the console's access token), None
    without one (a loopback console with no token). The one place the console asks who is signed in."""
    actor: Actor | None = getattr(request.state, "actor", None)
    return actor.name if actor is not None else None


def done(request: Request, url: str, notice: str, **params: str | int) -> RedirectResponse:
    """POST -> redirect -> GET: a 303 to ``url`` carrying ``notice`` (signed, so a link cannot forge one) and
    ``params``; reloading the page it leads to repeats nothing, and the address bar holds a page's URL."""
    query = {**{k: str(v) for k, v in params.items()}, "notice": notice, "ns": _notice_sig(request, notice)}
    return _see_other(url, query)


def refused(request: Request, url: str, form: str, message: str, **typed: str) -> RedirectResponse:
    """POST -> redirect -> GET for a refusal: a 303 to ``url`` carrying ``message`` for the form named ``form``
    and the values ``typed`` into it, all signed together (a link can neither forge a refusal nor prefill a
    form); the page shows the message next to that form (``refusal_of``), and reloading it repeats nothing.
    Message and values are redacted first: they travel in the address bar and the browser's history."""
    message = redact(message)[:500]
    values = {name: redact(value)[:TYPED_MAX] for name, value in sorted(typed.items())}
    query = {"refused": form, "refusal": message, **{f"typed_{k}": v for k, v in values.items()},
             "rs": _notice_sig(request, _refusal_text(form, message, values))}
    return _see_other(url, query)


def refusal_of(request: Request) -> tuple[dict[str, str], dict[str, str]]:
    """The refusal a ``refused`` redirect carried, when its signature holds: ({form: message}, typed values);
    two empty dicts otherwise."""
    params = request.query_params
    form, message = params.get("refused", ""), params.get("refusal", "")
    values = {k.removeprefix("typed_"): v for k, v in sorted(params.items()) if k.startswith("typed_")}
    if not form or not message or len(message) > 1000:
        return {}, {}
    if not hmac.compare_digest(params.get("rs", ""), _notice_sig(request, _refusal_text(form, message, values))):
        return {}, {}
    return {form: message}, values


def _refusal_text(form: str, message: str, values: Mapping[str, str]) -> str:
    return "\0".join(["refused", form, message, *(f"{k}={v}" for k, v in sorted(values.items()))])


def _see_other(url: str, query: Mapping[str, str]) -> RedirectResponse:
    url, hash_, fragment = url.partition("#")
    url = url.rstrip("?&")
    sep = "&" if "?" in url else "?"
    return RedirectResponse(url + sep + urlencode(query) + hash_ + fragment, status_code=303)


def notice_of(request: Request) -> str | None:
    """The notice a ``done`` redirect carried, when its signature holds; None otherwise."""
    text = request.query_params.get("notice")
    if not text or len(text) > 1000:
        return None
    return text if hmac.compare_digest(request.query_params.get("ns", ""), _notice_sig(request, text)) else None


def _notice_sig(request: Request, text: str) -> str:
    key: bytes = _state(request, "key")
    return hmac.new(key, b"notice\0" + text.encode(), hashlib.sha256).hexdigest()[:32]


def _refresh(request: Request) -> int | None:
    """``?refresh=N`` (10 to 600 seconds) on a page: the page reloads itself that often (a meta refresh)."""
    raw = request.query_params.get("refresh", "")
    return int(raw) if raw.isascii() and raw.isdigit() and 10 <= int(raw) <= 600 else None


def recon_app(request: Request) -> App:
    app: App = _state(request, "recon")
    return app


def totals_cache(request: Request) -> TotalsCache:
    """The console's kept totals (recon.console.totals): every POST clears them."""
    found: TotalsCache = _state(request, "totals")
    return found


def pages(request: Request) -> Pages:
    found: Pages = _state(request, "pages")
    return found


def page(func: Callable[[Request], Response]) -> Endpoint:
    """A GET endpoint: ``func`` runs in the thread pool; errors become pages."""
    async def endpoint(request: Request) -> Response:
        return await _guarded(request, lambda: run_in_threadpool(func, request))

    return endpoint


def action(func: Callable[[Request, Fields], Response], *,
           at: Callable[[Request, Fields], FormAt] | None = None) -> Endpoint:
    """A POST endpoint: the form is read (no files, few fields), its CSRF field checked against the token the
    request is bound to (its session's, else the pre-session cookie's: ``recon.console.security``; 403 and
    nothing done when it does not match), then ``func(request, fields)`` runs in the thread pool.

    ``at`` says where the form is (``FormAt``; its own 404 page when that page does not exist): a refusal of
    ``func`` (bad input, a role or state that does not allow it, the desk's refusals: ``UsageError`` and its
    kinds, ``InvalidJobState``, a ``PageError`` of 403, 409 or 422) answers with a redirect to that page, which
    shows the message next to the form, the typed values kept (``refused``: POST -> redirect -> GET, so a reload
    or the back button repeats nothing). Without ``at`` (login, logout) a refusal is a page of its own."""
    async def endpoint(request: Request) -> Response:
        async def run() -> Response:
            form = await request.form(max_files=0, max_fields=FORM_MAX_FIELDS, max_part_size=64 * 1024)
            fields = Fields(form)
            if not csrf_accepts(request, fields.raw("csrf")):
                hint = "; this console's cookies are Secure: reach it over HTTPS" if plain_http_off_loopback(
                    request) else ""
                raise PageError(403, "refused: the form's CSRF token is missing or stale; reload the page and "
                                     f"submit it again{hint}")
            try:
                if at is None:
                    return await run_in_threadpool(func, request, fields)
                where = await run_in_threadpool(at, request, fields)
                try:
                    return await run_in_threadpool(func, request, fields)
                except (UsageError, InvalidJobState) as exc:
                    message = str(exc)
                except PageError as exc:
                    if exc.status not in REFUSALS:
                        raise
                    message = exc.message
                log.info("console: %s %s refused: %s", request.method, request.url.path, redact(message)[:200])
                return refused(request, where.url, where.form, where.message(message), **where.typed)
            finally:  # a write may have been made: the kept totals are stale (recon.console.totals)
                totals_cache(request).clear()

        return await _guarded(request, run)

    return endpoint


async def _guarded(request: Request, run: Callable[[], Any]) -> Response:
    try:
        response: Response = await run()
        return response
    except PageError as exc:
        return pages(request).error(request, exc.status, exc.message)
    except HTTPException as exc:
        return pages(request).error(request, exc.status_code, str(exc.detail))
    except JobNotFound as exc:
        return pages(request).error(request, 404, str(exc))
    except NotAllowed as exc:
        return pages(request).error(request, 403, f"refused: {exc}")
    except InvalidJobState as exc:
        return pages(request).error(request, 409, str(exc))
    except UsageError as exc:
        return pages(request).error(request, 422, str(exc))
    except Exception as exc:  # one line on the page; the type in the log, never the form
        log.error("console: %s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__,
                  (str(exc).splitlines() or [""])[0][:200])
        log.debug("console: traceback", exc_info=exc)
        return pages(request).error(request, 500, "the console failed on this request; the server log says why")


def _state(request: Request, name: str) -> Any:
    return getattr(request.app.state, f"console_{name}")


def _redacted(value: Any) -> Any:
    """Every printed value but the console's own markup and a PSP's identifiers, redacted (see the module
    docstring); autoescaping still escapes an identifier."""
    if isinstance(value, Markup | Identifier) or not isinstance(value, str):
        return "" if value is None else value
    return redact(value)


def _ident(value: str | None, default: str = "") -> str:
    """``{{ payment.psp_reference | ident("-") }}``: a PSP's identifier, shown exactly (``recon.redact.
    identifier``); ``default`` when there is none."""
    return identifier(value) if value else default


def _kept(text: str | None, *identifiers: str | None) -> str:
    """``{{ p.review_reason | kept(p.psp_reference) }}``: recon's own text about a record, its PSP identifiers
    (``identifiers``, which the record stores exactly) shown as themselves, every other card-like run masked
    (``recon.redact.kept_text``); "" when there is none."""
    return kept_text(text, identifiers) if text else ""


def _money(minor: int, currency: str) -> str:
    """Major units with digit grouping: 6157000, "EUR" -> "61,570.00 EUR"."""
    return format_amount(int(minor), currency, grouped=True)


def _timestamp(value: datetime | str | None) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _when(value: datetime | str | None) -> Markup:
    """A time as ``<time datetime=ISO>… UTC</time>``: the console's script adds the browser's own time beside it."""
    if value is None or value == "":
        return Markup("-")
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return Markup('<time datetime="%s">%s</time>') % (value.isoformat(), _timestamp(value))


def age_text(seconds: float | None) -> str:
    """90061 -> "1d 1h": the two largest units, as people read an age."""
    if seconds is None:
        return "-"
    left = int(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size}{unit}")
            left %= size
    return " ".join(parts[:2])


def _pretty(value: Any) -> str:
    """A JSON-like value as indented JSON, secret-named fields masked whole (``redact_value``)."""
    if value is None or value == {}:
        return ""
    return json.dumps(redact_value(value), indent=1, sort_keys=True, default=str)
