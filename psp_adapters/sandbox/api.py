"""The sandbox's shared dispatcher: faults, the idempotent create pipeline and the admin API, for every flavour.

``server.py`` serves it over HTTP; the flavour (``native_api``, ``stripe_api``, ``adyen_api``) supplies the PSP's
wire. Each request to the PSP API goes: auth (401 in the flavour's shape) -> request-level faults (rate limit,
429, 503, and 500 unless the flavour saves 500s) -> for a create: key checks, body validation (an invalid
request saves nothing), claim of the key, latency, [the flavour's late 500, saved under the key], the charge and
its answer written together, an optional hang; for anything else: latency, ``settle_due``, the flavour's route.

Admin API (never faulted, answered in the native error shape whatever the flavour). Reads are open; a POST (a
change) must say ``Content-Type: application/json`` (415 otherwise, even without a body), must not come from
another origin (``Origin`` or ``Sec-Fetch-Site`` naming another site: 403 ``cross_origin_forbidden``: a browser
page must not drive it) and needs the PSP API's own credentials when the server has an api key (the flavour's
scheme: ``Authorization: Bearer`` or ``X-API-Key``; 401)::

    GET|POST /_admin/faults                read / partially update the Faults (JSON object of fields)
    GET  /_admin/charges[?idempotency_key=]  {"keys", "charges", "max_per_key", "per_key": {key: n}}, this
                                           flavour's payments; "without_key": n when some came without a key
    POST /_admin/payments/{ref}/settle|fail|cancel   optional {"reason": "…"}; 200 payment | 404
    POST /_admin/payments/{ref}/amount     {"amount": int, "currency"?: str}; 200 payment | 404
    POST /_admin/payments/{ref}/refund     optional {"amount": int} (default: what is left); 200 refund | 400 | 404
    POST /_admin/payments/{ref}/dispute    the whole amount, once; 200 dispute | 400 | 404
    POST /_admin/reset                     forget all payments and keys, restore the start-up faults
    GET  /_admin/webhooks[?psp_reference=] the webhook messages sent and their fate ({"url", "waiting",
                                           "webhooks": [{event_id, type, state, attempts, last_status, …}]})

Webhooks (``webhooks``; only when the server has a webhook URL): every executed create, every settling of a
pending payment (on time, by the webhook thread's tick) and every admin settle/fail/cancel/refund/dispute is
told to the sender as a ``webhook_events.Change``; replays, saved 500s and amount changes send nothing.

Payments are answered in the flavour's shape (a native payment, a Stripe PaymentIntent, an Adyen
PaymentResponse); refunds and disputes likewise (a Stripe Refund/Dispute; an Adyen modification).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from psp_adapters.sandbox.core import CreateCall, Flavor, Request, Response, json_response
from psp_adapters.sandbox.faults import FaultInjector, Faults
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.native_api import SETTLEMENT_LIMIT_DEFAULT, SETTLEMENT_LIMIT_MAX, native_error
from psp_adapters.sandbox.records import DISPUTE_FEE, Claimed, InFlight, Mismatch, PaymentRecord, ts
from psp_adapters.sandbox.webhook_events import Change
from psp_adapters.sandbox.webhooks import WebhookSender
from psp_adapters.sandbox.wire import PaymentStatus

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
_ADMIN_PAYMENT_PATH = re.compile(
    r"^/_admin/payments/(?P<ref>[^/]+)/(?P<action>settle|fail|cancel|amount|refund|dispute)$"
)
_ADMIN_STATUS = {
    "settle": PaymentStatus.SUCCEEDED,
    "fail": PaymentStatus.FAILED,
    "cancel": PaymentStatus.CANCELED,
}
# the names this module has always exported
_Request = Request
_Response = Response
_error = native_error


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
        webhooks: WebhookSender | None = None,
    ) -> None:
        self.ledger = ledger
        self.flavor = flavor
        self.injector = FaultInjector(faults)
        self.webhooks = webhooks
        self._initial_faults = faults
        self._stopping = stopping
        self._now = now_func
        #: the origins (``scheme://host:port``) of the sandbox itself, the only ones an admin change may come from;
        #: set by the server once its port is bound
        self.origins: frozenset[str] = frozenset()
        self._scheduled: dict[str, str] = {}  # pending payment -> its settle_at, while webhooks are on
        self._scheduled_lock = threading.Lock()

    def handle(self, req: Request) -> Response:
        if req.path.startswith("/_admin/"):
            return self._admin(req)
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
        if not flavor.authorized(req):
            return flavor.error("unauthorized")
        is_create = req.method == "POST" and req.path in flavor.create_paths
        late_500 = is_create and flavor.idempotency.saves_server_errors
        rejection = self.injector.reject(include_500=not late_500)
        if rejection is not None:
            return flavor.error(rejection.code, retry_after=rejection.retry_after)
        if is_create:
            return self._create(req)
        if req.method != "GET":
            return flavor.error("method_not_allowed")
        if self._stopping.wait(self.injector.latency_seconds()):
            return flavor.error("service_unavailable")
        self.ledger.settle_due(now=self._now())
        self.settle_scheduled()  # their webhooks go before anything this request may cause
        return flavor.route(req)

    def _create(self, req: Request) -> Response:
        policy = self.flavor.idempotency
        key = req.headers.get("Idempotency-Key")
        if key is None or key == "":
            if policy.required:
                return self.flavor.error("idempotency_key_missing")
            key = None
        elif len(key) > policy.max_length:
            return self.flavor.error(
                "idempotency_key_invalid", f"Idempotency-Key must be at most {policy.max_length} characters"
            )
        parsed = self.flavor.parse_create(req, key)
        if isinstance(parsed, Response):
            return parsed
        if parsed.key is None:
            return self._execute(None, parsed)._replace(hold_seconds=self.injector.hang_seconds())
        stored_key = policy.scope + parsed.key
        claim = self.ledger.claim_key(
            stored_key,
            parsed.fingerprint,
            now=self._now(),
            retention=policy.retention,
            compare=policy.compares_body,
        )
        if isinstance(claim, Mismatch):
            return self.flavor.error("idempotency_mismatch")
        if isinstance(claim, InFlight):
            return self.flavor.error("idempotency_in_flight")
        if isinstance(claim, Claimed):
            try:
                response = self._execute(stored_key, parsed)
            except BaseException:
                self.ledger.release_key(stored_key)  # nothing was recorded: the key is free for a retry
                raise
        else:
            replayed = self.flavor.replay_headers(claim.status_code)
            response = Response(claim.status_code, claim.body.encode(), replayed)
        return response._replace(hold_seconds=self.injector.hang_seconds())

    def _execute(self, stored_key: str | None, call: CreateCall) -> Response:
        """Execute a create (its key claimed, if any): latency (the key stays in flight), the flavour's late
        500 (saved), then the charge and its answer in one write."""
        if self._stopping.wait(self.injector.latency_seconds()):
            raise _Stopping
        if self.flavor.idempotency.saves_server_errors and self.injector.server_error():
            response = self.flavor.error("internal_error", saved=True)
            if stored_key is not None:
                self.ledger.complete_key(stored_key, status_code=response.status, response=response.body.decode())
            return response
        charge = call.charge
        decision = self.injector.decide(amount=charge.amount, payment_method=charge.payment_method)
        record = PaymentRecord.new(
            charge,
            idempotency_key=call.key or "",
            status=decision.status,
            reason=decision.reason,
            settle_to=decision.settle_to,
            settle_after=timedelta(seconds=decision.settle_after_seconds),
            now=self._now(),
            psp_reference=call.psp_reference,
            flavor=self.flavor.name,
            metadata=call.metadata,
        )
        response = self.flavor.render_create(call, record)
        self.ledger.complete_charge(stored_key, record, status_code=response.status, response=response.body.decode())
        if self.webhooks is not None and record.settle_at is not None:
            with self._scheduled_lock:
                self._scheduled[record.psp_reference] = ts(record.settle_at) or ""
        self._notify(Change("created", record, idempotency_key=call.key))
        return response

    # -- webhooks ------------------------------------------------------------------------------------------

    def _notify(self, change: Change) -> None:
        """Tell the webhook sender; a webhook problem never fails the API request that caused it."""
        if self.webhooks is None:
            return
        try:
            self.webhooks.emit(change, fate_func=self.injector.webhook_fate)
        except Exception:
            logger.exception("sandbox: webhook for %s %s not sent", change.kind, change.record.psp_reference)

    def settle_scheduled(self) -> None:
        """Settle the pending payments whose time has come and send their webhooks (the webhook thread's tick).

        A payment an admin call finalised first is skipped: its webhook went with that call.
        """
        now = self._now()
        stamp = ts(now) or ""
        with self._scheduled_lock:
            due = [(ref, at) for ref, at in self._scheduled.items() if at <= stamp]
            for ref, _ in due:
                del self._scheduled[ref]
        if not due:
            return
        self.ledger.settle_due(now=now)
        for ref, at in due:
            record = self.ledger.get_payment(ref)
            if record is not None and record.status.is_final and ts(record.settled_at) == at:
                self._notify(Change("settled", record))

    # -- admin API -----------------------------------------------------------------------------------------

    def _admin(self, req: Request) -> Response:
        if req.method == "POST":
            refused = self._admin_change_refused(req)
            if refused is not None:
                return refused
        try:
            payload = json.loads(req.body) if req.body else {}
        except ValueError:
            return native_error("invalid_json")
        if not isinstance(payload, Mapping):
            return native_error("parameter_invalid", "the body must be a JSON object")
        route = (req.method, req.path)
        if route == ("GET", "/_admin/faults"):
            return json_response(200, self.injector.faults.to_json())
        if route == ("POST", "/_admin/faults"):
            try:
                self.injector.replace(self.injector.faults.merged(payload))
            except (ValueError, TypeError) as exc:
                return native_error("faults_invalid", str(exc))
            return json_response(200, self.injector.faults.to_json())
        if route == ("GET", "/_admin/charges"):
            return json_response(200, self._charges(req.param("idempotency_key")))
        if route == ("GET", "/_admin/webhooks"):
            doc = self.webhooks.to_json(req.param("psp_reference")) if self.webhooks else {"url": None, "webhooks": []}
            return json_response(200, doc)
        if route == ("POST", "/_admin/reset"):
            self.ledger.reset()
            self.injector.reset(self._initial_faults)
            with self._scheduled_lock:
                self._scheduled.clear()
            if self.webhooks is not None:
                self.webhooks.reset()
            return json_response(200, {"reset": True, "faults": self._initial_faults.to_json()})
        if req.method == "POST" and (match := _ADMIN_PAYMENT_PATH.match(req.path)):
            return self._admin_payment(match["ref"], match["action"], payload)
        return native_error("not_found")

    def _admin_change_refused(self, req: Request) -> Response | None:
        """Why an admin change is refused, if it is: a foreign origin (403), not JSON (415), a wrong key (401).

        A browser sends a cross-site POST without asking first only as a "simple" request (no body, or text/plain,
        a form encoding), always with an ``Origin`` (the Fetch standard); so a change must say
        ``Content-Type: application/json``, which a browser sends cross-site only after a CORS preflight the
        sandbox never grants, and any ``Origin`` or ``Sec-Fetch-Site`` must be the sandbox's own (OWASP, CSRF
        cheat sheet: "Verifying origin with standard headers"). Scripts and SDKs send no Origin. This holds with
        or without an api key: a keyless sandbox on 127.0.0.1 is reachable from every page the user opens.
        """
        origin = req.headers.get("Origin")
        fetch_site = (req.headers.get("Sec-Fetch-Site") or "").strip().lower()
        if (origin is not None and origin.strip().rstrip("/") not in self.origins) or fetch_site not in (
            "", "same-origin", "none"
        ):
            return native_error("cross_origin_forbidden")
        content_type = (req.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            return native_error("unsupported_media_type")
        if not self.flavor.authorized(req):
            return native_error("invalid_api_key", "admin changes need the sandbox's api key")
        return None

    def _charges(self, key: str | None) -> dict[str, object]:
        counts = self.ledger.charge_counts(self.flavor.name)
        without_key = counts.pop("", 0)
        if key is not None:
            counts = {key: counts.get(key, 0)}
        total, most = sum(counts.values()), max(counts.values(), default=0)
        doc: dict[str, object] = {"keys": len(counts), "charges": total, "max_per_key": most, "per_key": counts}
        if without_key and key is None:
            doc["without_key"] = without_key
        return doc

    def _admin_payment(self, ref: str, action: str, payload: Mapping[str, object]) -> Response:
        now = self._now()
        self.ledger.settle_due(now=now)
        self.settle_scheduled()
        existing = self.ledger.get_payment(ref)
        if existing is None or existing.flavor != self.flavor.name:
            return native_error("resource_missing")
        if action in ("refund", "dispute"):
            return self._adjust(existing, action, payload, now)
        if action == "amount":
            amount, currency = payload.get("amount"), payload.get("currency")
            if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
                return native_error("amount_invalid")
            if currency is not None and not isinstance(currency, str):
                return native_error("currency_invalid")
            record = self.ledger.set_amount(ref, amount=amount, currency=currency, now=now)
        else:
            status, reason = _ADMIN_STATUS[action], payload.get("reason")
            if reason is not None and not isinstance(reason, str):
                return native_error("parameter_invalid", "reason must be a string")
            reason = None if status is PaymentStatus.SUCCEEDED else (reason or f"admin_{action}")
            record = self.ledger.set_status(ref, status, reason=reason, now=now)
            with self._scheduled_lock:
                self._scheduled.pop(ref, None)
            if record is not None:
                self._notify(Change("status", record))
        return json_response(200, self.flavor.render_payment(record)) if record else native_error("resource_missing")

    def _adjust(self, payment: PaymentRecord, kind: str, payload: Mapping[str, object], now: datetime) -> Response:
        amount = payload.get("amount")
        if kind == "refund" and amount is not None and (isinstance(amount, bool) or not isinstance(amount, int)):
            return native_error("amount_invalid")
        reason = payload.get("reason")
        if reason is not None and not isinstance(reason, str):
            return native_error("parameter_invalid", "reason must be a string")
        result = self.ledger.add_adjustment(
            kind,
            self.flavor.adjustment_id(kind),
            payment.psp_reference,
            amount=amount if kind == "refund" else None,  # type: ignore[arg-type]
            fee=DISPUTE_FEE if kind == "dispute" else 0,
            now=now,
            reason=reason or ("requested_by_customer" if kind == "refund" else "general"),
        )
        if isinstance(result, str):
            code = "resource_missing" if result == "resource_missing" else "parameter_invalid"
            return native_error(code, f"cannot {kind} {payment.psp_reference}: {result}")
        self._notify(Change(kind, payment, result))
        return json_response(200, self.flavor.render_adjustment(result, payment))


class _Stopping(Exception):
    """The server is stopping while a create waits; nothing was recorded (answered 503)."""
