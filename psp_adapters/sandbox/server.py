"""The sandbox PSP: a real HTTP server on 127.0.0.1 speaking one PSP's wire, with fault injection.

One flavour per server (``flavor=``): ``native`` (the sandbox's own JSON API, ``native_api``), ``stripe``
(Stripe's v1 API: PaymentIntents, refunds, charges, customers, payment methods, events, the balance, payouts,
form-encoded, ``stripe_api``) or ``adyen`` (Adyen's Checkout v71 and v72: payments, details, payment methods,
modifications, the Payment accounting report and the Settlement details report, ``adyen_api``). Their endpoints,
auth, error shapes and idempotency rules are listed in those modules; faults, the idempotent write pipeline and
the clock-driven work in ``api``; the admin API (``/_admin/…``, the same for every flavour) in ``admin``; the
HTTP plumbing in ``httpd``. State lives in
memory, or in one SQLite file (``ledger``) that survives restarts. Stripe's events are kept in either; with
``webhooks=WebhookConfig(…)`` the Stripe and Adyen flavours also send their PSP's webhooks to that URL
(``webhooks``, ``stripe_events``, ``adyen_events``); the native flavour sends none.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any
from zoneinfo import ZoneInfo

from psp_adapters.protocol import Secret
from psp_adapters.sandbox.adyen_api import AdyenFlavor, ReportCredentials
from psp_adapters.sandbox.adyen_events import AdyenBasicAuth, AdyenNotifications
from psp_adapters.sandbox.api import (  # noqa: F401  (re-exported: the sandbox's public constants)
    MAX_BODY_BYTES,
    SANDBOX_PORT_DEFAULT,
    SETTLEMENT_LIMIT_DEFAULT,
    SETTLEMENT_LIMIT_MAX,
    _SandboxApp,
)
from psp_adapters.sandbox.core import Flavor
from psp_adapters.sandbox.faults import Faults
from psp_adapters.sandbox.httpd import HttpServer, own_origins
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.native_api import NativeFlavor
from psp_adapters.sandbox.records import FLAVORS
from psp_adapters.sandbox.stripe_api import StripeFlavor
from psp_adapters.sandbox.stripe_events import DEFAULT_WEBHOOK_EVENTS, StripeEvents, StripeSignature
from psp_adapters.sandbox.webhook_events import Renderer
from psp_adapters.sandbox.webhooks import WebhookConfig, WebhookSender

logger = logging.getLogger(__name__)

#: the key each flavour's PSP API requires when ``recon psp-sandbox`` is given none (documented test values, not
#: secrets: ``docs/psps.md``); native and Stripe take it as ``Authorization: Bearer``, Adyen as ``X-API-Key``
DEFAULT_API_KEYS = {"native": "recon_sandbox_test_key", "stripe": "sk_test_recon_sandbox", "adyen": "AQE_recon_sandbox"}
#: the Adyen flavour's report user when ``recon psp-sandbox`` is given no report credential (basic auth)
DEFAULT_REPORT_USERNAME = "report@Company.SandboxCompany"
DEFAULT_REPORT_PASSWORD = "recon_sandbox_report"  # nosec B105  # a documented test value (docs/psps.md)


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
        self._httpd: HttpServer | None = None
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
        flavor = self._make_flavor(self._ledger)
        self._sender = self._make_sender()
        app = _SandboxApp(
            self._ledger,
            flavor=flavor,
            faults=self._faults,
            stopping=self._stopping,
            now_func=self._now,
            renderer=self._make_renderer(flavor),
            webhooks=self._sender,
            webhook_events=self._webhook_events(),
        )
        try:
            self._httpd = HttpServer(self._address, app, self._stopping)
        except BaseException:
            self._ledger.close()
            raise
        app.origins = own_origins(self._address[0], self._httpd.server_port)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="psp-sandbox", daemon=True
        )
        self._thread.start()
        if self._sender is not None:
            self._sender.start(tick_func=app.tick)
        return self

    def _make_renderer(self, flavor: Flavor) -> Renderer | None:
        """Stripe's events are kept whether or not webhooks are on; Adyen's notifications exist only to be sent."""
        if isinstance(flavor, StripeFlavor):
            return StripeEvents(flavor.books)
        if self._webhooks is None or self.flavor != "adyen":
            return None
        return AdyenNotifications(
            hmac_key=_hmac_key(self._webhooks),
            zone=ZoneInfo(self._report_timezone),
            base_url_func=lambda: self.url,
            now_func=self._now,
        )

    def _make_sender(self) -> WebhookSender | None:
        config = self._webhooks
        if config is None:
            return None
        if self.flavor == "stripe":
            return WebhookSender(config, endpoint=StripeSignature(config.secret))
        return WebhookSender(config, endpoint=AdyenBasicAuth(config.username, config.password))

    def _webhook_events(self) -> frozenset[str] | None:
        """The event types the endpoint takes: as configured (``*``: all), else Stripe's default set or, for
        Adyen, every event code."""
        events = self._webhooks.events if self._webhooks else None
        if events is not None:
            return None if "*" in events else events
        return DEFAULT_WEBHOOK_EVENTS if self.flavor == "stripe" else None

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
