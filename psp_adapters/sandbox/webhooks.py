"""The sandbox's webhook sender: a bounded in-memory queue and one delivery thread per server.

The dispatcher (``api``) renders each change of a payment with the flavour's renderer (``webhook_events``) and
submits the messages the endpoint takes (``WebhookSender.submit``); the webhook faults (``Faults.webhook_*``,
rolled on the server's seeded dice) decide each one's fate, and the thread POSTs them to the configured URL with
httpx, one at a time,
in the order they became due. A message the receiver does not acknowledge (the flavour's rule: Stripe any 2xx,
Adyen a 2xx with ``[accepted]``), or a connection error or timeout, is retried after ``backoff_seconds``,
doubled after each failure (at most ``BACKOFF_MAX_SECONDS``), until ``max_attempts``; then it is ``failed``.
Other messages go out meanwhile, so a retried message arrives after later ones, as with a real PSP.

Faults: ``webhook_drop_fraction`` (never sent: state ``dropped``), ``webhook_duplicate_fraction`` (two copies of
the same message, one after the other), ``webhook_delay_seconds`` (every message waits that long before its
first attempt), ``webhook_reorder`` (the message is held until the next one is queued, then goes right after
it; at most ``REORDER_HOLD_SECONDS``). The thread also runs the dispatcher's ``tick_func`` between deliveries
(every ``TICK_SECONDS`` when idle): pending payments settle on time and announce it, even when nobody polls.

Bounds: at most ``queue_limit`` messages wait (beyond it a message is ``overflow``, never sent); the log that
``GET /_admin/webhooks`` serves keeps the last ``LOG_LIMIT`` messages. Nothing survives a restart: messages
still queued when the server stops are abandoned (polling is what heals then). ``stop()`` joins the thread;
a delivery in flight finishes first, within ``timeout_seconds``.

Connections: each delivery is one request on a connection of its own (``Connection: close``), as a PSP delivers
webhooks, never a kept-alive one: the receiver's side of a connection our client's pool kept open stayed busy
for as long as the pool held it (httpx keeps an idle connection until its next use finds it expired), so a
receiver in the same process (the tests' ``recon serve`` stand-ins) had a thread nobody was using.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from psp_adapters.protocol import Secret
from psp_adapters.sandbox.faults import WebhookFate
from psp_adapters.sandbox.webhook_events import Endpoint, Notification

logger = logging.getLogger(__name__)

TICK_SECONDS = 0.05
REORDER_HOLD_SECONDS = 2.0
BACKOFF_MAX_SECONDS = 30.0
LOG_LIMIT = 10_000
#: every delivery's connection ends with its answer (module docstring, Connections)
CLOSE = ("Connection", "close")
QUEUE_LIMIT_DEFAULT = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookConfig:
    """Where and how the sandbox sends its webhooks. Validated on construction (ValueError names the field)."""

    url: str  #: the receiving endpoint, http(s)
    secret: Secret  #: Stripe: the endpoint's signing secret (``whsec_…``); Adyen: the HMAC key, in hex
    username: str | None = None  #: Adyen: HTTP basic auth user (with ``password``)
    password: Secret | None = None
    max_attempts: int = 6  #: attempts per message, the first included
    backoff_seconds: float = 0.5  #: before the first retry; doubled after each further failure
    timeout_seconds: float = 5.0  #: per attempt (connect, read, write, pool)
    queue_limit: int = QUEUE_LIMIT_DEFAULT
    #: the event types the endpoint takes (Stripe's ``enabled_events``; ``"*"`` for all); None: the PSP's default
    #: (Stripe: ``stripe_events.DEFAULT_WEBHOOK_EVENTS``; Adyen: every event code)
    events: frozenset[str] | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"webhook url must be an http(s) URL, got {self.url!r}")
        if not self.secret:
            raise ValueError("a webhook secret is required: PSPs sign every webhook")
        if (self.username is None) != (self.password is None):
            raise ValueError("webhook username and password go together")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise ValueError(f"max_attempts must be an integer, got {self.max_attempts!r}")
        if not 1 <= self.max_attempts <= 100:
            raise ValueError(f"max_attempts must be 1 to 100, got {self.max_attempts}")
        for name in ("backoff_seconds", "timeout_seconds"):
            value = getattr(self, name)
            if not 0 <= value <= 600 or not math.isfinite(value):
                raise ValueError(f"{name} must be 0 to 600 seconds, got {value!r}")
        if self.timeout_seconds <= 0 or not 1 <= self.queue_limit <= 1_000_000:
            raise ValueError("timeout_seconds must be > 0 and queue_limit 1 to 1,000,000")

    def __repr__(self) -> str:
        return f"WebhookConfig(url={self.url!r}, username={self.username!r})"


@dataclass(slots=True, kw_only=True)
class _Delivery:
    """One copy of a message and its fate so far (mutated under the sender's lock)."""

    notification: Notification
    copy: int  #: 1, or 2 for a duplicate
    generation: int  #: the sender's reset count when it was queued
    state: str = "queued"  #: held | queued | sending | retrying | delivered | failed | dropped | overflow
    due: float = 0.0
    attempts: int = 0
    last_status: int | None = None
    last_error: str | None = None
    reordered: bool = False

    def to_json(self) -> dict[str, object]:
        n = self.notification
        return {
            "event_id": n.event_id,
            "type": n.type,
            "psp_reference": n.psp_reference,
            "copy": self.copy,
            "state": self.state,
            "attempts": self.attempts,
            "last_status": self.last_status,
            "last_error": self.last_error,
            "reordered": self.reordered,
        }


class WebhookSender:
    """Queues, signs and delivers one server's webhooks (see the module docstring). Thread-safe."""

    def __init__(
        self,
        config: WebhookConfig,
        *,
        endpoint: Endpoint,
        monotonic_func: Callable[[], float] = time.monotonic,
        wall_func: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._endpoint = endpoint
        self._monotonic = monotonic_func
        self._wall = wall_func
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, _Delivery]] = []
        self._order = itertools.count()
        self._held: tuple[list[_Delivery], float] | None = None  # reordered copies and when they were held
        self._log: deque[_Delivery] = deque(maxlen=LOG_LIMIT)
        self._generation = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, *, tick_func: Callable[[], None] | None = None) -> None:
        """Start the delivery thread; ``tick_func`` runs between deliveries (see the module docstring)."""
        if self._thread is not None:
            raise RuntimeError("a WebhookSender starts once")
        self._thread = threading.Thread(target=self._run, args=(tick_func,), name="psp-sandbox-webhooks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (idempotent); what is still queued is abandoned."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def submit(self, notification: Notification, fate: WebhookFate) -> None:
        """Queue one message (two copies when duplicated), or log it as dropped or overflowing."""
        with self._cond:
            if fate.drop:
                self._log.append(self._new(notification, 1, state="dropped"))
                return
            copies = [
                self._new(notification, n, due=self._monotonic() + fate.delay_seconds)
                for n in range(1, 3 if fate.duplicate else 2)
            ]
            self._log.extend(copies)
            if self._waiting() + len(copies) > self.config.queue_limit:
                logger.warning("sandbox webhooks: queue full, %s %s not sent", notification.type, notification.event_id)
                for delivery in copies:
                    delivery.state = "overflow"
                return
            if fate.reorder and self._held is None:
                for delivery in copies:
                    delivery.state, delivery.reordered = "held", True
                self._held = (copies, self._monotonic())
                return
            for delivery in copies:
                self._push(delivery)
            self._release_held(after=copies[-1].due)
            self._cond.notify_all()

    def reset(self) -> None:
        """Forget every queued message and the log (``POST /_admin/reset``); a delivery in flight is not retried."""
        with self._cond:
            self._generation += 1
            self._queue.clear()
            self._held = None
            self._log.clear()

    def to_json(self, psp_reference: str | None = None) -> dict[str, object]:
        """``GET /_admin/webhooks``: the log, oldest first (only one payment's with ``psp_reference``)."""
        with self._cond:
            rows = [d.to_json() for d in self._log if psp_reference in (None, d.notification.psp_reference)]
            waiting = self._waiting()
        return {"url": self.config.url, "waiting": waiting, "webhooks": rows}

    # -- the thread ----------------------------------------------------------------------------------------

    def _run(self, tick_func: Callable[[], None] | None) -> None:
        timeout = httpx.Timeout(self.config.timeout_seconds)
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
            while not self._stopping.is_set():
                if tick_func is not None:
                    try:
                        tick_func()
                    except Exception:
                        logger.exception("sandbox webhooks: the tick failed")
                delivery = self._next_due()
                if delivery is not None:
                    self._deliver(client, delivery)

    def _next_due(self) -> _Delivery | None:
        """The next message whose time has come, marked ``sending``; else wait a tick (or until woken)."""
        with self._cond:
            now = self._monotonic()
            if self._held is not None and now - self._held[1] >= REORDER_HOLD_SECONDS:
                self._release_held(after=now)
            if self._queue and self._queue[0][0] <= now:
                delivery = heapq.heappop(self._queue)[2]
                delivery.state = "sending"
                return delivery
            wait = min(TICK_SECONDS, self._queue[0][0] - now) if self._queue else TICK_SECONDS
            self._cond.wait(max(wait, 0.001))
            return None

    def _deliver(self, client: httpx.Client, delivery: _Delivery) -> None:
        body = delivery.notification.body
        status: int | None = None
        try:
            headers = [*self._endpoint.headers(body, now=self._wall()), CLOSE]
            response = client.post(self.config.url, content=body, headers=headers)
            status = response.status_code
            ok = self._endpoint.accepted(status, response.text)
            error = None if ok else f"not acknowledged: HTTP {status} {response.text[:80]!r}"
        except httpx.HTTPError as exc:
            ok, error = False, f"{type(exc).__name__}: {exc}"[:200]
        with self._cond:
            delivery.attempts += 1
            delivery.last_status, delivery.last_error = status, error
            if ok:
                delivery.state = "delivered"
            elif delivery.attempts >= self.config.max_attempts:
                delivery.state = "failed"
                logger.warning(
                    "sandbox webhooks: %s %s failed after %d attempts: %s",
                    delivery.notification.type,
                    delivery.notification.event_id,
                    delivery.attempts,
                    error,
                )
            elif delivery.generation == self._generation:
                backoff = self.config.backoff_seconds * 2 ** (delivery.attempts - 1)
                delivery.state, delivery.due = "retrying", self._monotonic() + min(backoff, BACKOFF_MAX_SECONDS)
                self._push(delivery)

    # -- queue helpers (the caller holds the lock) ------------------------------------------------------------

    def _new(self, notification: Notification, copy: int, *, state: str = "queued", due: float = 0.0) -> _Delivery:
        return _Delivery(notification=notification, copy=copy, generation=self._generation, state=state, due=due)

    def _push(self, delivery: _Delivery) -> None:
        if delivery.state == "held":
            delivery.state = "queued"
        heapq.heappush(self._queue, (delivery.due, next(self._order), delivery))

    def _release_held(self, *, after: float) -> None:
        if self._held is None:
            return
        held, self._held = self._held[0], None
        for delivery in held:
            delivery.due = max(delivery.due, after)
            self._push(delivery)

    def _waiting(self) -> int:
        return len(self._queue) + (len(self._held[0]) if self._held else 0)
