"""The sandbox's PSP and admin API: routing, idempotency, faults and the answers, independent of HTTP
plumbing (``server.py`` serves it). The endpoints are listed in ``server.py``'s docstring."""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from email.message import Message
from typing import NamedTuple

from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import ChargeRequest, Secret
from psp_adapters.sandbox import wire
from psp_adapters.sandbox.faults import FaultInjector, Faults
from psp_adapters.sandbox.ledger import Claimed, Cursor, InFlight, Ledger, Mismatch, PaymentRecord
from psp_adapters.sandbox.wire import PaymentStatus

logger = logging.getLogger(__name__)

SANDBOX_PORT_DEFAULT = 8787
SETTLEMENT_LIMIT_DEFAULT = 100
SETTLEMENT_LIMIT_MAX = 1000
MAX_BODY_BYTES = 1 << 20
_PAYMENT_PATH = re.compile(r"^/v1/payments/(?P<ref>[^/]+)$")
_ADMIN_PAYMENT_PATH = re.compile(r"^/_admin/payments/(?P<ref>[^/]+)/(?P<action>settle|fail|cancel|amount)$")
_ADMIN_STATUS = {
    "settle": PaymentStatus.SUCCEEDED,
    "fail": PaymentStatus.FAILED,
    "cancel": PaymentStatus.CANCELED,
}


class _Request(NamedTuple):
    method: str
    path: str
    query: dict[str, list[str]]
    headers: Message
    body: bytes

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


class _Response(NamedTuple):
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    hold_seconds: float | None = None  #: an injected hang: wait this long before answering


def _json(status: int, doc: object, *headers: tuple[str, str]) -> _Response:
    return _Response(status, json.dumps(doc, separators=(",", ":")).encode(), headers)


def _error(code: str, message: str | None = None, **extra: object) -> _Response:
    """An error answer from the table in ``wire.ERRORS``; ``retry_after`` becomes the Retry-After header."""
    status, kind, default = wire.ERRORS[code]
    retry_after = extra.pop("retry_after", None)
    headers = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
    error = {"type": kind, "code": code, "message": message or default, **extra}
    return _json(status, {"error": error}, *headers)


class _SandboxApp:
    """Request -> response, with no socket in sight. The only writer of the ledger."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        faults: Faults,
        api_key: Secret | None,
        stopping: threading.Event,
        now_func: Callable[[], datetime],
    ) -> None:
        self.ledger = ledger
        self.injector = FaultInjector(faults)
        self._initial_faults = faults
        self._api_key = api_key.reveal().encode() if api_key else None
        self._stopping = stopping
        self._now = now_func

    def handle(self, req: _Request) -> _Response:
        if req.path.startswith("/_admin/"):
            return self._admin(req)
        if req.path.startswith("/v1/"):
            return self._api(req)
        return _error("not_found")

    # -- PSP API -------------------------------------------------------------------------------------------

    def _api(self, req: _Request) -> _Response:
        if self._api_key is not None and not self._authorized(req.headers.get("Authorization") or ""):
            return _error("invalid_api_key")
        rejection = self.injector.reject()
        if rejection is not None:
            return _error(rejection.code, retry_after=rejection.retry_after)
        if req.method == "POST" and req.path == "/v1/payments":
            return self._create(req)
        if req.method != "GET":
            return _error("method_not_allowed")
        if self._stopping.wait(self.injector.latency_seconds()):
            return _error("service_unavailable")
        self.ledger.settle_due(now=self._now())
        if req.path == "/v1/payments":
            reference = req.param("merchant_reference")
            if not reference:
                return _error("parameter_missing", "merchant_reference is required")
            found = self.ledger.find_payments(reference)
            return _json(200, {"object": "list", "data": [p.to_json() for p in found]})
        if match := _PAYMENT_PATH.match(req.path):
            payment = self.ledger.get_payment(match["ref"])
            return _json(200, payment.to_json()) if payment else _error("resource_missing")
        if req.path == "/v1/settlements":
            return self._settlements(req)
        return _error("not_found")

    def _authorized(self, header: str) -> bool:
        scheme, _, token = header.partition(" ")
        assert self._api_key is not None
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._api_key)

    def _create(self, req: _Request) -> _Response:
        key = req.headers.get("Idempotency-Key") or ""
        if not 0 < len(key) <= 255:
            return _error(wire.IDEMPOTENCY_KEY_MISSING)
        try:
            payload = json.loads(req.body or b"null")
            charge = wire.parse_charge_body(payload)
        except wire.BadRequest as exc:
            return _error(exc.code, str(exc))
        except ValueError:
            return _error("invalid_json")
        claim = self.ledger.claim_key(key, wire.request_digest(payload), now=self._now())
        if isinstance(claim, Mismatch):
            return _error(wire.IDEMPOTENCY_KEY_REUSED)
        if isinstance(claim, InFlight):
            return _error(wire.IDEMPOTENCY_KEY_IN_FLIGHT)
        if isinstance(claim, Claimed):
            try:
                response = self._charge(key, charge)
            except BaseException:
                self.ledger.release_key(key)  # nothing was recorded: the key is free for a retry
                raise
        else:
            response = _Response(claim.status_code, claim.body.encode(), (("Idempotent-Replayed", "true"),))
        return response._replace(hold_seconds=self.injector.hang_seconds())

    def _charge(self, key: str, charge: ChargeRequest) -> _Response:
        """Execute a claimed create: latency (the key stays in flight), then charge + answer in one write."""
        if self._stopping.wait(self.injector.latency_seconds()):
            raise _Stopping
        decision = self.injector.decide(amount=charge.amount, payment_method=charge.payment_method)
        record = PaymentRecord.new(
            charge,
            idempotency_key=key,
            status=decision.status,
            reason=decision.reason,
            settle_to=decision.settle_to,
            settle_after=timedelta(seconds=decision.settle_after_seconds),
            now=self._now(),
        )
        if decision.status is PaymentStatus.FAILED:
            response = _error(wire.CARD_DECLINED, decline_code=decision.reason, payment=record.to_json())
        else:
            response = _json(201, record.to_json())
        self.ledger.complete_charge(key, record, status_code=response.status, response=response.body.decode())
        return response

    def _settlements(self, req: _Request) -> _Response:
        try:
            since = wire.parse_timestamp(req.param("since") or "")
            until = wire.parse_timestamp(req.param("until") or "")
            limit = int(req.param("limit") or SETTLEMENT_LIMIT_DEFAULT)
            token = req.param("cursor")
            cursor = Cursor.decode(token) if token else None
        except (PspProtocolError, ValueError):
            return _error(
                "parameter_invalid", "since/until need ISO-8601 with an offset; limit an int; cursor ours"
            )
        if not 0 < limit <= SETTLEMENT_LIMIT_MAX:
            return _error("parameter_invalid", f"limit must be 1 to {SETTLEMENT_LIMIT_MAX}")
        page, more = self.ledger.settlements_page(since, until, after=cursor, limit=limit)
        data = [p.to_json() for p in page]
        next_cursor = more.encode() if more else None
        return _json(
            200, {"object": "list", "data": data, "has_more": more is not None, "next_cursor": next_cursor}
        )

    # -- admin API -----------------------------------------------------------------------------------------

    def _admin(self, req: _Request) -> _Response:
        try:
            payload = json.loads(req.body) if req.body else {}
        except ValueError:
            return _error("invalid_json")
        if not isinstance(payload, Mapping):
            return _error("parameter_invalid", "the body must be a JSON object")
        route = (req.method, req.path)
        if route == ("GET", "/_admin/faults"):
            return _json(200, self.injector.faults.to_json())
        if route == ("POST", "/_admin/faults"):
            try:
                self.injector.replace(self.injector.faults.merged(payload))
            except (ValueError, TypeError) as exc:
                return _error("faults_invalid", str(exc))
            return _json(200, self.injector.faults.to_json())
        if route == ("GET", "/_admin/charges"):
            return _json(200, self._charges(req.param("idempotency_key")))
        if route == ("POST", "/_admin/reset"):
            self.ledger.reset()
            self.injector.reset(self._initial_faults)
            return _json(200, {"reset": True, "faults": self._initial_faults.to_json()})
        if req.method == "POST" and (match := _ADMIN_PAYMENT_PATH.match(req.path)):
            return self._admin_payment(match["ref"], match["action"], payload)
        return _error("not_found")

    def _charges(self, key: str | None) -> dict[str, object]:
        counts = self.ledger.charge_counts()
        if key is not None:
            counts = {key: counts.get(key, 0)}
        total, most = sum(counts.values()), max(counts.values(), default=0)
        return {"keys": len(counts), "charges": total, "max_per_key": most, "per_key": counts}

    def _admin_payment(self, ref: str, action: str, payload: Mapping[str, object]) -> _Response:
        now = self._now()
        self.ledger.settle_due(now=now)
        if action == "amount":
            amount, currency = payload.get("amount"), payload.get("currency")
            if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
                return _error("amount_invalid")
            if currency is not None and not isinstance(currency, str):
                return _error("currency_invalid")
            record = self.ledger.set_amount(ref, amount=amount, currency=currency, now=now)
        else:
            status, reason = _ADMIN_STATUS[action], payload.get("reason")
            if reason is not None and not isinstance(reason, str):
                return _error("parameter_invalid", "reason must be a string")
            reason = None if status is PaymentStatus.SUCCEEDED else (reason or f"admin_{action}")
            record = self.ledger.set_status(ref, status, reason=reason, now=now)
        return _json(200, record.to_json()) if record else _error("resource_missing")

class _Stopping(Exception):
    """The server is stopping while a create waits; nothing was recorded (answered 503)."""
