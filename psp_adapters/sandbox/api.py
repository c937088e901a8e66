"""The sandbox's shared dispatcher: faults, the idempotent write pipeline and the clock-driven work, for every
flavour (the admin API: ``admin``).

``server.py`` serves it over HTTP; the flavour (``native_api``, ``stripe_api``, ``adyen_api``) supplies the PSP's
wire. Each request to the PSP API goes: auth (401 in the flavour's shape) -> request-level faults (rate limit,
429, 503, and 500 unless the flavour saves 500s) -> for a write: key checks, parameter validation (an invalid
request saves nothing), claim of the key, latency, the clock-driven work, [the flavour's late 500, saved under
the key], the write and its saved answer in one ledger transaction, then what it told (webhooks, Stripe's
events), an optional hang; for a read: latency, the clock-driven work, the flavour's route.

The clock-driven work (``tick``), run before every request and by the webhook thread between deliveries (so that
it happens on time even when nobody polls): pending payments settle, refunds whose status is scheduled to change
change it, authorisations left uncaptured past the flavour's ``authorization_validity`` expire, and the
flavour's own (Adyen: received modifications fall due). Each is told like a write's change.

Webhooks (``webhooks``; only when the server has a webhook URL): every change told is rendered by the
flavour's ``Renderer`` (which also keeps Stripe's events, webhooks or not) and each message whose type the
endpoint takes is queued; replays, saved 500s and amount changes send nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from datetime import datetime

from psp_adapters.sandbox.admin import cross_site, handle_admin
from psp_adapters.sandbox.cards import TestCard
from psp_adapters.sandbox.core import Flavor, Request, Response, WriteCall
from psp_adapters.sandbox.faults import Decision, FaultInjector, Faults
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.movements import REFUND_FAILED
from psp_adapters.sandbox.native_api import SETTLEMENT_LIMIT_DEFAULT, SETTLEMENT_LIMIT_MAX, native_error
from psp_adapters.sandbox.records import Claimed, InFlight, Mismatch
from psp_adapters.sandbox.webhook_events import Change, Renderer
from psp_adapters.sandbox.webhooks import WebhookSender

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_BODY_BYTES",
    "SANDBOX_PORT_DEFAULT",
    "SETTLEMENT_LIMIT_DEFAULT",
    "SETTLEMENT_LIMIT_MAX",
    "_Request",
    "_Response",
    "_SandboxApp",
    "_Stopping",
    "_error",
]

SANDBOX_PORT_DEFAULT = 8787
MAX_BODY_BYTES = 1 << 20
#: a refund that fails after it was booked fails with this reason (Stripe's ``failure_reason``)
REFUND_FAILURE_REASON = "declined"
# the names this module has always exported
_Request = Request
_Response = Response
_error = native_error


class _Scope:
    """A write's view of the server (``core.Scope``): one clock reading, the dice, what it tells."""

    def __init__(self, app: _SandboxApp, key: str | None) -> None:
        self._app = app
        self.now = app.now()
        self.key = key
        self.told: list[Change] = []

    @property
    def ledger(self) -> Ledger:
        return self._app.ledger

    @property
    def faults(self) -> Faults:
        return self._app.injector.faults

    def decide(self, *, amount: int, card: TestCard | None) -> Decision:
        return self._app.injector.decide(amount=amount, card=card)

    def refund_fate(self, *, card: TestCard | None) -> str | None:
        return self._app.injector.refund_fate(card=card)

    def tell(self, change: Change) -> None:
        self.told.append(change)


class _SandboxApp:
    """Request -> response, with no socket in sight. The only writer of the ledger."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        flavor: Flavor,
        faults: Faults,
        stopping: threading.Event,
        now_func: Callable[[], datetime],
        renderer: Renderer | None = None,
        webhooks: WebhookSender | None = None,
        webhook_events: frozenset[str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.flavor = flavor
        self.injector = FaultInjector(faults)
        self.renderer = renderer
        self.webhooks = webhooks
        self.initial_faults = faults
        self._webhook_events = webhook_events  # the types the endpoint takes; None: all
        self._stopping = stopping
        self.now = now_func
        #: the origins (``scheme://host:port``) of the sandbox itself, the only ones an admin change may come from;
        #: set by the server once its port is bound
        self.origins: frozenset[str] = frozenset()

    def handle(self, req: Request) -> Response:
        if req.path.startswith("/_admin/"):
            return handle_admin(self, req)
        if not self.flavor.serves(req.path):
            return self.flavor.decorate(req, self.flavor.error("not_found"))
        return self.flavor.decorate(req, self._api(req))

    def error(self, path: str, kind: str, message: str | None = None) -> Response:
        """An error of the HTTP plumbing (bad Content-Length, shutting down, a crash) in the path's shape."""
        if path.startswith("/_admin/") or not self.flavor.serves(path):
            codes = {"bad_request": "parameter_invalid"}
            return native_error(codes.get(kind, kind), message)
        return self.flavor.error(kind, message)

    # -- PSP API -------------------------------------------------------------------------------------------

    def _api(self, req: Request) -> Response:
        flavor = self.flavor
        if req.method != "GET" and cross_site(req, self.origins):
            # a page the user opened must not charge or refund through a sandbox on their machine (the admin
            # API's rule, for the PSP API's writes too: a keyless sandbox would take them otherwise)
            return flavor.error("forbidden")
        if not flavor.authorized(req):
            return flavor.error("unauthorized")
        write = flavor.writes(req)
        rejection = self.injector.reject(include_500=not (write and flavor.idempotency.saves_server_errors))
        if rejection is not None:
            return flavor.error(rejection.code, retry_after=rejection.retry_after)
        if write:
            return self._write(req)
        if req.method != "GET":
            return flavor.error("method_not_allowed")
        if self._stopping.wait(self.injector.latency_seconds()):
            return flavor.error("service_unavailable")
        self.tick()  # what fell due is settled, and told, before anything this request may cause
        return flavor.route(req)

    def _write(self, req: Request) -> Response:
        policy = self.flavor.idempotency
        key = req.headers.get("Idempotency-Key") or None
        if key is None and policy.required:
            return self.flavor.error("idempotency_key_missing")
        if key is not None and len(key) > policy.max_length:
            return self.flavor.error(
                "idempotency_key_invalid", f"Idempotency-Key must be at most {policy.max_length} characters"
            )
        call = self.flavor.parse_write(req)
        if isinstance(call, Response):
            return call
        if key is None:
            return self._execute(None, None, call)._replace(hold_seconds=self.injector.hang_seconds())
        stored_key = policy.scope + key
        claim = self.ledger.claim_key(
            stored_key, call.fingerprint, now=self.now(), retention=policy.retention, compare=policy.compares_body
        )
        if isinstance(claim, Mismatch):
            return self.flavor.error("idempotency_mismatch")
        if isinstance(claim, InFlight):
            return self.flavor.error("idempotency_in_flight")
        if isinstance(claim, Claimed):
            try:
                response = self._execute(stored_key, key, call)
            except BaseException:
                self.ledger.release_key(stored_key)  # nothing was recorded: the key is free for a retry
                raise
        else:
            response = Response(claim.status_code, claim.body.encode(), self.flavor.replay_headers(claim.status_code))
        return response._replace(hold_seconds=self.injector.hang_seconds())

    def _execute(self, stored_key: str | None, key: str | None, call: WriteCall) -> Response:
        """Execute a write (its key claimed, if any): latency (the key stays in flight), the clock-driven work, the
        flavour's late 500 (saved), then the write and its answer in one transaction; what it told goes after."""
        if self._stopping.wait(self.injector.latency_seconds()):
            raise _Stopping
        self.tick()
        if self.flavor.idempotency.saves_server_errors and self.injector.server_error():
            response = self.flavor.error("internal_error", saved=True)
            if stored_key is not None:
                self.ledger.complete_key(stored_key, status_code=response.status, response=response.body.decode())
            return response
        scope = _Scope(self, key)
        with self.ledger.atomic():
            response = call.run(scope)
            if stored_key is not None:
                self.ledger.complete_key(stored_key, status_code=response.status, response=response.body.decode())
        self.tell(scope.told)
        return response

    # -- what happened, told --------------------------------------------------------------------------------

    def tell(self, changes: list[Change]) -> None:
        """Render each change (Stripe keeps its events) and queue the webhooks the endpoint takes; a webhook problem
        never fails the request that caused it."""
        for change in changes:
            try:
                notifications = self.renderer.render(change) if self.renderer else []
                if self.webhooks is None:
                    continue
                for notification in notifications:
                    if self._webhook_events is None or notification.type in self._webhook_events:
                        self.webhooks.submit(notification, self.injector.webhook_fate())
            except Exception:
                about = change.record.psp_reference if change.record else change.kind
                logger.exception("sandbox: webhook for %s %s not sent", change.kind, about)

    def fail_payout(self, payout_id: str, code: str) -> object | str:
        """The admin API's payout failure, in one transaction, told like a write's change."""
        scope = _Scope(self, None)
        with self.ledger.atomic():
            result = self.flavor.fail_payout(scope, payout_id, code)
        self.tell(scope.told)
        return result

    def run_payouts(self) -> list[object]:
        """The admin API's "pay out now", in one transaction, told like a write's change."""
        scope = _Scope(self, None)
        with self.ledger.atomic():
            made = self.flavor.run_payouts(scope)
        self.tell(scope.told)
        return made

    def tick(self) -> None:
        """The clock-driven work (see the module docstring); safe to run from any thread, any number of times."""
        scope = _Scope(self, None)
        now, ledger = scope.now, self.ledger
        for record in ledger.settle_due(now=now):
            scope.tell(Change("settled", record))
        with ledger.atomic():
            for refund in ledger.due_adjustments(now):
                failed = refund.settle_to == REFUND_FAILED
                moved = dataclasses.replace(
                    refund, status=refund.settle_to or refund.status, settle_to=None, settle_at=None,
                    updated_at=refund.settle_at or now, failure_reason=REFUND_FAILURE_REASON if failed else None,
                )
                ledger.save_adjustment(moved)
                payment = ledger.get_payment(refund.psp_reference)
                scope.tell(Change("refund_updated", payment, moved))
            self.flavor.tick(scope)
        validity = self.flavor.authorization_validity
        if validity is not None:
            for record in ledger.expire_authorizations(flavor=self.flavor.name, authorized_before=now - validity,
                                                       now=now):
                scope.tell(Change("expired", record))
        self.tell(scope.told)


class _Stopping(Exception):
    """The server is stopping while a write waits; nothing was recorded (answered 503)."""
