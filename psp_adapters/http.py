"""Shared HTTP plumbing for PSP adapters: the httpx client factory and status-code triage.

Every adapter talks to its PSP through a client from ``make_client`` (an explicit ``httpx.Timeout``, a
``transport=`` for tests) and turns failures into the PspError tree with the two functions here:

- ``transport_errors(psp=…, may_have_taken_effect=…)`` wraps a call and translates httpx exceptions, most
  specific first, with ``raise … from exc``. A failure before the request left (connect error, connect or
  pool timeout) is a ``PspTransientError``; a failure after it left (read/write timeout, reset, protocol
  error) is a ``PspUnknownOutcome`` when the call may have moved money, else a ``PspTransientError``.
- ``error_from_response(response, psp=…, now=…)`` maps a non-2xx answer to the right PspError subclass.

Credentials travel only in the client's headers. Nothing here puts a header, a request or a URL into an
error message, and ``scrub`` removes a known secret from any text an adapter wants to quote (a PSP may
echo part of a key back, e.g. Stripe's "Invalid API Key provided: sk_test_…").
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from psp_adapters.errors import (
    PspAuthError,
    PspError,
    PspIdempotencyError,
    PspProtocolError,
    PspRateLimited,
    PspRejectedError,
    PspTransientError,
    PspUnknownOutcome,
)

logger = logging.getLogger(__name__)

#: a sane default: connecting is quick or broken; a PSP may take a while to answer a charge
DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=30.0, write=10.0, pool=5.0)
#: connections one client may hold open (and keep alive). A call holds one for its whole duration, and a worker's
#: calls in flight are bounded by its handler threads (``[engine] max_concurrency``, at most 1,024) and by the
#: PSP's rate limit, so the pool must not be a tighter bound: httpx's default (100, 20 kept alive) held a worker
#: at 100 calls in flight, 50 calls/s at 2 s a call, and reconnected for most calls
MAX_CONNECTIONS = 1024
#: the client's connections are split among this many pools (``ShardedTransport``), MAX_CONNECTIONS // SHARDS each
SHARDS = 16
#: the longest PSP text quoted in an error message
MESSAGE_LIMIT = 300

_BUSY = frozenset({408, 421, 423, 425})
_UNAVAILABLE = frozenset({424, 500, 502, 503, 504})
_AUTH = frozenset({401, 403})


def make_client(
    base_url: str,
    *,
    headers: Mapping[str, str],
    timeout: httpx.Timeout,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """An ``httpx.Client`` for one PSP.

    ``timeout`` must set all four phases (connect, read, write, pool): an unset phase would wait forever.
    Redirects are not followed: httpx drops ``Authorization`` on a cross-origin redirect but not custom
    credential headers such as ``X-API-Key``, so a redirect is answered as an error by the adapter.
    Raises ValueError when a phase of ``timeout`` is None.
    """
    missing = [name for name in ("connect", "read", "write", "pool") if getattr(timeout, name) is None]
    if missing:
        raise ValueError(f"timeout must set every phase; unset: {', '.join(missing)}")
    return httpx.Client(
        base_url=base_url,
        headers=dict(headers),
        timeout=timeout,
        transport=transport if transport is not None else ShardedTransport(SHARDS, MAX_CONNECTIONS // SHARDS),
        follow_redirects=False,
    )


class ShardedTransport(httpx.BaseTransport):
    """httpx's transport split into ``shards`` connection pools of ``per_shard`` connections each, every thread
    sending through one pool (handed out in turn at its first request), so that a pool serves a few threads.

    Why: httpcore's pool, under one lock, walks all its connections at every request it starts and ends, and for
    each idle one counts the others (quadratic) and polls its socket; with a worker's 200-250 threads each holding
    a connection through a 2 s call, that walk was 60 % of the worker's GIL time and the worker's CPU the bound on
    its charge rate (docs/benchmarks.md, issue 29: "the PSP client's pool, sharded"). With ``shards`` pools a
    walk covers a sixteenth of the connections. Threads are spread evenly, so as long as a process has at most
    ``shards * per_shard`` threads no pool is ever short of a connection that another one has idle."""

    def __init__(self, shards: int, per_shard: int) -> None:
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        tls = httpx.create_ssl_context()  # one for all pools: each one's own would cost ~30 ms (the CA bundle)
        self._pools = [httpx.HTTPTransport(verify=tls, limits=limits) for _ in range(shards)]
        self._turn = itertools.count()
        self._local = threading.local()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        pool: httpx.HTTPTransport | None = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = self._pools[next(self._turn) % len(self._pools)]
        return pool.handle_request(request)

    def close(self) -> None:
        for pool in self._pools:
            pool.close()


def timeout_from_seconds(
    *, connect: float = 5.0, read: float = 30.0, write: float = 10.0, pool: float = 5.0
) -> httpx.Timeout:
    """An explicit ``httpx.Timeout`` from per-phase seconds (what settings carry)."""
    return httpx.Timeout(connect=connect, read=read, write=write, pool=pool)


def system_now() -> datetime:
    """The wall clock, aware UTC: the default ``now_func`` of adapters (tests inject their own)."""
    return datetime.now(UTC)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After header value (RFC 9110 §10.2.3), or None when absent or bad.

    Accepts delay-seconds ("120") and every HTTP-date form (IMF-fixdate, RFC 850, asctime; a date without
    a zone is GMT). A date in the past gives 0.0. ``now`` must be aware. Never raises on bad input.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():  # isdigit() alone: also "²" (superscript), which float() refuses
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # asctime has no zone; HTTP-dates are always GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def scrub(text: str, *, secrets: Iterable[str] = ()) -> str:
    """``text`` without any of ``secrets`` and cut to MESSAGE_LIMIT characters."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    if len(text) > MESSAGE_LIMIT:
        text = text[: MESSAGE_LIMIT - 1] + "…"
    return text


@contextmanager
def transport_errors(*, psp: str, may_have_taken_effect: bool) -> Iterator[None]:
    """Translate httpx exceptions raised inside the block into PspErrors (always ``raise … from exc``).

    ``may_have_taken_effect`` is True for calls that create money movement: once the request may have
    reached the PSP, not knowing the answer is a ``PspUnknownOutcome`` (retry with the same idempotency
    key), never a failure. Messages name the failure class only, never the request.
    """
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise PspTransientError(
            f"{psp}: connect failed ({type(exc).__name__}); request not sent", psp=psp
        ) from exc
    except (
        httpx.ReadTimeout,
        httpx.WriteTimeout,
        httpx.RemoteProtocolError,
        httpx.ReadError,
        httpx.WriteError,
    ) as exc:
        raise _after_send(psp, exc, may_have_taken_effect=may_have_taken_effect) from exc
    except httpx.TransportError as exc:  # proxy, protocol and other network failures: assume it may have left
        raise _after_send(psp, exc, may_have_taken_effect=may_have_taken_effect) from exc
    except (httpx.DecodingError, httpx.TooManyRedirects) as exc:
        raise PspProtocolError(f"{psp}: unreadable response ({type(exc).__name__})", psp=psp) from exc


def _after_send(psp: str, exc: Exception, *, may_have_taken_effect: bool) -> PspTransientError:
    what = type(exc).__name__
    if may_have_taken_effect:
        return PspUnknownOutcome(
            f"{psp}: no answer after the request was sent ({what}); outcome unknown", psp=psp
        )
    return PspTransientError(f"{psp}: no answer ({what})", psp=psp)


def error_from_response(
    response: httpx.Response,
    *,
    psp: str,
    now: datetime,
    code: str | None = None,
    message: str | None = None,
    key_reused: bool = False,
    in_flight: bool = False,
    should_retry: bool | None = None,
    saved: bool = False,
    secrets: Iterable[str] = (),
) -> PspError:
    """The PspError for a non-2xx ``response``; the caller raises it.

    ``code`` and ``message`` are the PSP's own, parsed by the adapter from its error body. ``key_reused``
    says the body reports an idempotency key reused with other parameters (-> PspIdempotencyError on any
    4xx); ``in_flight`` says it reports the same key still executing (-> PspTransientError, like a 409).
    ``should_retry`` is an explicit PSP hint; when None, Stripe's ``Stripe-Should-Retry`` header is read.
    ``saved`` says the PSP stored this answer under the idempotency key (a retry would replay it); an
    ``Idempotent-Replayed: true`` header marks the error ``replayed`` (not news about the PSP's health).

    Table: 429 -> PspRateLimited(retry_after); 408/421/423/425 and 409 -> PspTransientError;
    424/500/502/503/504 and other 5xx -> PspTransientError; 401/403 -> PspAuthError (the PSP's message is
    not quoted: it may echo the key); 400/422 and other 4xx -> PspRejectedError.
    """
    status = response.status_code
    hint = should_retry if should_retry is not None else _header_bool(response, "Stripe-Should-Retry")
    replayed = _header_bool(response, "Idempotent-Replayed") is True
    kwargs: dict[str, object] = {"psp": psp, "status_code": status, "code": code, "should_retry": hint,
                                 "saved": saved or replayed, "replayed": replayed}
    text = _describe(psp, status, code, None if status in _AUTH else message, secrets=secrets)
    logger.debug("%s answered HTTP %s (code %s)", psp, status, code)
    if status in _AUTH:
        return PspAuthError(text, **kwargs)  # type: ignore[arg-type]
    if key_reused and 400 <= status < 500:
        return PspIdempotencyError(text, **kwargs)  # type: ignore[arg-type]
    if status == 429:
        retry_after = parse_retry_after(response.headers.get("Retry-After"), now)
        return PspRateLimited(text, retry_after=retry_after, **kwargs)
    if status in _BUSY or status == 409 or in_flight or status in _UNAVAILABLE or status >= 500:
        return PspTransientError(text, **kwargs)  # type: ignore[arg-type]
    if 400 <= status < 500:
        return PspRejectedError(text, **kwargs)  # type: ignore[arg-type]
    # 1xx/3xx: a redirect we do not follow, or something stranger
    return PspProtocolError(text, **kwargs)  # type: ignore[arg-type]


def json_body(response: httpx.Response, *, psp: str) -> object:
    """The decoded JSON body; raises PspProtocolError when it is not JSON."""
    try:
        return json.loads(response.content)
    except ValueError as exc:
        raise PspProtocolError(
            f"{psp}: HTTP {response.status_code} body is not JSON", psp=psp, status_code=response.status_code
        ) from exc


def _describe(psp: str, status: int, code: str | None, message: str | None, *, secrets: Iterable[str]) -> str:
    parts = [f"{psp}: HTTP {status}"]
    if code:
        parts.append(code)
    if message:
        parts.append(message)
    return scrub(": ".join(parts), secrets=secrets)


def _header_bool(response: httpx.Response, name: str) -> bool | None:
    value = response.headers.get(name)
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return None
