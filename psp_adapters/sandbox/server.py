"""The sandbox PSP: a real HTTP server on 127.0.0.1 speaking one PSP's wire, with fault injection.

One flavour per server (``flavor=``): ``native`` (the sandbox's own JSON API, ``native_api``), ``stripe``
(Stripe's PaymentIntents, search and balance transactions, form-encoded, ``stripe_api``) or ``adyen`` (Adyen's
Checkout v71 and v72 ``/payments`` and the Payment accounting report, ``adyen_api``). Their endpoints, auth, error
shapes and idempotency rules are listed in those modules; faults, the idempotent create pipeline and the admin
API (``/_admin/…``, the same for every flavour) in ``api``. State lives in one SQLite file (``ledger``) and
survives restarts. With ``webhooks=WebhookConfig(…)`` the Stripe and Adyen flavours also send their PSP's
webhooks to that URL (``webhooks``, ``webhook_events``); the native flavour sends none.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

from psp_adapters.protocol import Secret
from psp_adapters.sandbox.adyen_api import AdyenFlavor, ReportCredentials
from psp_adapters.sandbox.api import (  # noqa: F401  (re-exported: the sandbox's public constants)
    MAX_BODY_BYTES,
    SANDBOX_PORT_DEFAULT,
    SETTLEMENT_LIMIT_DEFAULT,
    SETTLEMENT_LIMIT_MAX,
    _error,
    _Request,
    _Response,
    _SandboxApp,
    _Stopping,
)
from psp_adapters.sandbox.core import Flavor
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.native_api import NativeFlavor
from psp_adapters.sandbox.records import FLAVORS
from psp_adapters.sandbox.stripe_api import StripeFlavor
from psp_adapters.sandbox.webhook_events import AdyenBasicAuth, AdyenNotifications, StripeEvents, StripeSignature
from psp_adapters.sandbox.webhooks import WebhookConfig, WebhookSender

logger = logging.getLogger(__name__)

#: the key each flavour's PSP API requires when ``recon psp-sandbox`` is given none (documented test values, not
#: secrets: ``docs/psps.md``); native and Stripe take it as ``Authorization: Bearer``, Adyen as ``X-API-Key``
DEFAULT_API_KEYS = {"native": "recon_sandbox_test_key", "stripe": "sk_test_recon_sandbox", "adyen": "AQE_recon_sandbox"}
#: the Adyen flavour's report user when ``recon psp-sandbox`` is given no report credential (basic auth)
DEFAULT_REPORT_USERNAME = "report@Company.SandboxCompany"
DEFAULT_REPORT_PASSWORD = "recon_sandbox_report"


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive plumbing around ``_SandboxApp``."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes; Nagle would add 40 ms per answer
    timeout = 60  # an idle keep-alive connection is closed after this long
    server_version = "recon-psp-sandbox/1"
    sys_version = ""
    server: _HttpServer

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self.connection)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        url = urlsplit(self.path)
        app = self.server.app
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True  # the unread body would be taken for the next request
            return self._send(app.error(url.path, "bad_request", "bad or too large Content-Length"))
        body = self.rfile.read(length) if length else b""
        request = _Request(self.command, url.path, parse_qs(url.query), self.headers, body)
        try:
            response = app.handle(request)
        except _Stopping:
            response = app.error(url.path, "service_unavailable", "shutting down")
        except Exception:
            logger.exception("sandbox: unhandled error on %s %s", self.command, url.path)
            response = app.error(url.path, "internal_error")
        if response.hold_seconds and self.server.stopping.wait(response.hold_seconds):
            self.close_connection = True  # stopping during a hang: the client never gets an answer
            return None
        self._send(response)
        return None

    def _send(self, response: _Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers:
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(response.body)

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("sandbox: %s " + format, self.address_string(), *args)


class _HttpServer(ThreadingHTTPServer):
    """A thread per connection; ``stop`` joins them all (none is a daemon), after unblocking idle ones."""

    daemon_threads = False
    block_on_close = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: _SandboxApp, stopping: threading.Event) -> None:
        self.app = app
        self.stopping = stopping
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, conn: socket.socket) -> None:
        with self._connections_lock:
            if self.stopping.is_set():
                _shutdown(conn)
            self._connections.add(conn)

    def untrack(self, conn: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(conn)

    def close_connections(self) -> None:
        with self._connections_lock:
            for conn in self._connections:
                _shutdown(conn)

    def handle_error(self, request: object, client_address: object) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return  # the client went away (e.g. it timed out during an injected hang)
        logger.error("sandbox: error serving %s", client_address, exc_info=exc)


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class SandboxServer:
    """The sandbox PSP on ``host:port`` (port 0: any free port), its state in the SQLite file ``db_path``.

    ``flavor``: "native" (default), "stripe" or "adyen". ``api_key``: the key the PSP API requires (native and
    Stripe: ``Authorization: Bearer``; Adyen: ``X-API-Key``); None: any request is accepted. Adyen only: the
    report user's credential (``report_username`` + ``report_password`` for HTTP basic auth, and/or
    ``report_api_key`` for ``X-API-Key``; none configured: any request may download reports), the reports'
    ``report_timezone`` (an IANA zone, default "CET") and ``company_account`` (their Company Account column).
    ``now_func`` is the server's clock (key expiry, timestamps, report days). ``webhooks``: where the Stripe or
    Adyen flavour sends its webhooks (``WebhookConfig``; Adyen: ``secret`` is the hex HMAC key); None: none.

    ``db_path=None`` keeps the state in memory: every server starts fresh and forgets it all on ``stop()``. With a
    file, state survives a restart on the same file.
    ``start()`` returns once the socket listens; ``stop()`` unblocks hanging and idle connections, joins every
    thread and closes the database, so tests leak neither sockets nor threads. It starts once; for a restart,
    make a new one on the same file.
    """

    def __init__(
        self,
        db_path: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: Faults | None = None,
        api_key: Secret | str | None = None,
        now_func: Callable[[], datetime] | None = None,
        flavor: str = "native",
        report_username: str | None = None,
        report_password: Secret | str | None = None,
        report_api_key: Secret | str | None = None,
        report_timezone: str = "CET",
        company_account: str = "SandboxCompany",
        webhooks: WebhookConfig | None = None,
    ) -> None:
        if flavor not in FLAVORS:
            raise ValueError(f"unknown sandbox flavor {flavor!r}; known: {', '.join(FLAVORS)}")
        if webhooks is not None:
            check_webhooks(flavor, webhooks)
        if (report_username is None) != (report_password is None):
            raise ValueError("report_username and report_password go together")
        self.flavor = flavor
        self._report = ReportCredentials.of(report_username, report_password, report_api_key)
        self._report_timezone = AdyenFlavor.check_timezone(report_timezone)
        self._company_account = company_account
        self.db_path = Path(db_path) if db_path is not None else None  #: the state file; None: in memory
        self._address = (host, port)
        self._faults = faults or Faults()
        self._api_key = Secret(api_key) if isinstance(api_key, str) else api_key
        self._now = now_func or (lambda: datetime.now(UTC))
        self._stopping = threading.Event()
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._ledger: Ledger | None = None
        self._webhooks = webhooks
        self._sender: WebhookSender | None = None

    def __repr__(self) -> str:
        where = str(self.db_path) if self.db_path else None
        return f"SandboxServer(db_path={where!r}, address={self._address!r}, flavor={self.flavor!r})"

    @property
    def url(self) -> str:
        """``http://host:port`` once started."""
        if self._httpd is None:
            raise RuntimeError("the sandbox server is not started")
        return f"http://{self._address[0]}:{self._httpd.server_port}"

    @property
    def faults(self) -> Faults:
        return self._app().injector.faults if self._httpd else self._faults

    def set_faults(self, faults: Faults) -> None:
        """Change the faults of a running server (the in-process twin of ``POST /_admin/faults``)."""
        self._app().injector.replace(faults)

    def start(self) -> SandboxServer:
        if self._httpd is not None or self._stopping.is_set():
            raise RuntimeError("a SandboxServer starts once")
        self._ledger = Ledger(self.db_path)
        self._sender = self._make_sender(self._ledger)
        app = _SandboxApp(
            self._ledger,
            flavor=self._make_flavor(self._ledger),
            faults=self._faults,
            stopping=self._stopping,
            now_func=self._now,
            webhooks=self._sender,
        )
        try:
            self._httpd = _HttpServer(self._address, app, self._stopping)
        except BaseException:
            self._ledger.close()
            raise
        app.origins = own_origins(self._address[0], self._httpd.server_port)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="psp-sandbox", daemon=True
        )
        self._thread.start()
        if self._sender is not None:
            self._sender.start(tick_func=app.settle_scheduled)
        return self

    def _make_sender(self, ledger: Ledger) -> WebhookSender | None:
        config = self._webhooks
        if config is None:
            return None
        if self.flavor == "stripe":
            return WebhookSender(
                config, renderer=StripeEvents(ledger, now_func=self._now), endpoint=StripeSignature(config.secret)
            )
        renderer = AdyenNotifications(
            hmac_key=_hmac_key(config),
            zone=ZoneInfo(self._report_timezone),
            base_url_func=lambda: self.url,
            now_func=self._now,
        )
        return WebhookSender(config, renderer=renderer, endpoint=AdyenBasicAuth(config.username, config.password))

    @property
    def webhooks(self) -> WebhookSender | None:
        """The webhook sender once started (None without webhooks): ``to_json()`` is ``GET /_admin/webhooks``."""
        return self._sender

    def _make_flavor(self, ledger: Ledger) -> Flavor:
        key = self._api_key.reveal().encode() if self._api_key else None
        if self.flavor == "stripe":
            return StripeFlavor(ledger, api_key=key, now_func=self._now)
        if self.flavor == "adyen":
            return AdyenFlavor(
                ledger,
                api_key=key,
                now_func=self._now,
                report=self._report,
                timezone=self._report_timezone,
                company_account=self._company_account,
            )
        return NativeFlavor(ledger, api_key=key, now_func=self._now)

    def stop(self) -> None:
        """Stop serving; idempotent."""
        if self._stopping.is_set() and self._httpd is None:
            return
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.close_connections()
            self._httpd.server_close()  # joins the connection threads
            self._httpd = None
        if self._thread is not None:
            self._thread.join()
        if self._sender is not None:
            self._sender.stop()  # before the ledger closes: its tick reads and settles payments
        if self._ledger is not None:
            self._ledger.close()

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _app(self) -> _SandboxApp:
        if self._httpd is None:
            raise RuntimeError("the sandbox server is not started")
        return self._httpd.app


def own_origins(host: str, port: int) -> frozenset[str]:
    """The origins a browser would name for pages served by this sandbox: its host, and on loopback the other
    loopback names (an admin page opened as ``localhost`` is still the sandbox's own)."""
    hosts = {host}
    if host in _LOOPBACK:
        hosts |= _LOOPBACK
    return frozenset(f"http://{name}:{port}" for name in hosts)


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "[::1]"})


def check_webhooks(flavor: str, config: WebhookConfig) -> None:
    """Raise ValueError unless ``flavor`` sends webhooks and ``config`` suits it (Adyen: a hex HMAC key)."""
    if flavor not in ("stripe", "adyen"):
        raise ValueError(f"the {flavor} flavour sends no webhooks (only stripe and adyen do)")
    if flavor == "adyen":
        _hmac_key(config)


def _hmac_key(config: WebhookConfig) -> bytes:
    """Adyen's HMAC key: the bytes of its hex form."""
    try:
        return bytes.fromhex(config.secret.reveal())
    except ValueError:
        raise ValueError("the Adyen webhook secret is the HMAC key in hex (e.g. 44782DEF…)") from None


def serve_forever(
    db_path: str | os.PathLike[str] | None,
    *,
    host: str = "127.0.0.1",
    port: int = SANDBOX_PORT_DEFAULT,
    faults: Faults | None = None,
    api_key: Secret | str | None = None,
    stop: threading.Event | None = None,
    on_ready_func: Callable[[str], None] | None = None,
    **options: Any,
) -> None:
    """Run the sandbox until ``stop`` is set or Ctrl-C; ``on_ready_func(url)`` is called once it listens.

    ``options``: the other ``SandboxServer`` arguments (``flavor``, the report credentials, ``report_timezone``,
    ``company_account``, ``webhooks``). The CLI entry point (``recon psp-sandbox``). SIGTERM is not handled here: a
    CLI that wants a graceful SIGTERM sets ``stop`` from its signal handler.
    """
    stop = stop or threading.Event()
    with SandboxServer(db_path, host=host, port=port, faults=faults, api_key=api_key, **options) as server:
        if on_ready_func is not None:
            on_ready_func(server.url)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
