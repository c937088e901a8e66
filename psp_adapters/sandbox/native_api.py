"""The native flavour: the sandbox's own small PSP-shaped JSON API (the shapes are ``wire``'s).

PSP API (``Authorization: Bearer <key>`` required when started with an api key; faults apply here)::

    POST /v1/payments                      Idempotency-Key required; 201 payment | 402 decline | 4xx error
    GET  /v1/payments/{psp_reference}      200 payment | 404
    GET  /v1/payments?merchant_reference=  200 {"object": "list", "data": [payment, …]} (oldest first)
    GET  /v1/payments?created_since=&created_until=[&cursor=&limit=]   payments created_since <= created_at <
                                           created_until, oldest first: 200 {"object": "list", "data": [payment,
                                           …], "has_more": bool, "next_cursor": str | null}
    POST /v1/payments/{psp_reference}/capture  {"amount": N}  Idempotency-Key; 200 payment (succeeded, its
                                           amount_captured N, at most its amount: the rest released) | 400
                                           payment_unexpected_state (not authorized) | 404
    POST /v1/payments/{psp_reference}/cancel   {}  Idempotency-Key; 200 payment (canceled) | 400 | 404
    GET  /v1/settlements?since=&until=[&cursor=&limit=]     final payments, since <= settled_at < until:
                                           200 {"object": "list", "data": [payment, …], "has_more": bool,
                                                "next_cursor": str | null}

Idempotency: the same key and body replay the stored answer (status and body, header ``Idempotent-Replayed:
true``) without a second charge; the same key with another body is 422 ``idempotency_key_reused``; the same key
while the first request still executes is 409. Requests that fail validation, auth or an injected fault store
nothing, so they can be retried with the same key. Keys are kept as long as the state file lives. A payment that
needed authentication (``rate_requires_action``) is a 402 decline with ``decline_code`` ``authentication_required``,
as Stripe answers an off-session charge that needs 3-D Secure.

Manual capture (``"capture_method": "manual"`` on the charge): an approved payment is ``authorized`` until a
capture (once, of at most its amount) or a cancel; one left uncaptured for ``AUTHORIZATION_VALIDITY`` is canceled
(``failure_reason`` ``expired``), as Stripe's 7 days.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import re
import secrets
from collections.abc import Callable
from datetime import date, datetime, timedelta

from psp_adapters.errors import PspProtocolError
from psp_adapters.sandbox import wire
from psp_adapters.sandbox.bank_credits import BankCredit
from psp_adapters.sandbox.cards import card_of
from psp_adapters.sandbox.core import IdempotencyPolicy, Request, Response, Scope, WriteCall, json_response
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.movements import Adjustment
from psp_adapters.sandbox.records import Cursor, PaymentRecord, random_id, ts
from psp_adapters.sandbox.webhook_events import Change
from psp_adapters.sandbox.wire import PaymentStatus

SETTLEMENT_LIMIT_DEFAULT = 100
SETTLEMENT_LIMIT_MAX = 1000
_PAYMENT_PATH = re.compile(r"^/v1/payments/(?P<ref>[^/]+)$")
_MODIFY_PATH = re.compile(r"^/v1/payments/(?P<ref>[^/]+)/(?P<kind>capture|cancel)$")
#: an authorisation left uncaptured this long is canceled (Stripe's window for most card payments)
AUTHORIZATION_VALIDITY = timedelta(days=7)
#: generic error kinds (``core``) -> the native error code
_KINDS = {
    "unauthorized": "invalid_api_key",
    "forbidden": "cross_origin_forbidden",
    "bad_request": "parameter_invalid",
    "rate_limited": "rate_limited",
    "idempotency_key_missing": wire.IDEMPOTENCY_KEY_MISSING,
    "idempotency_key_invalid": wire.IDEMPOTENCY_KEY_MISSING,
    "idempotency_in_flight": wire.IDEMPOTENCY_KEY_IN_FLIGHT,
    "idempotency_mismatch": wire.IDEMPOTENCY_KEY_REUSED,
}


def native_error(code: str, message: str | None = None, **extra: object) -> Response:
    """An error answer from the table in ``wire.ERRORS``; ``retry_after`` becomes the Retry-After header.

    The admin API answers its errors in this shape whatever the server's flavour.
    """
    status, kind, default = wire.ERRORS[code]
    retry_after = extra.pop("retry_after", None)
    headers = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
    error = {"type": kind, "code": code, "message": message or default, **extra}
    return json_response(status, {"error": error}, *headers)


class NativeFlavor:
    """The native wire (see the module docstring)."""

    name = "native"
    idempotency = IdempotencyPolicy(
        required=True, max_length=255, retention=None, compares_body=True, saves_server_errors=False, scope=""
    )
    authorization_validity = AUTHORIZATION_VALIDITY  #: manual-capture payments only; the rest are captured at once

    def __init__(self, ledger: Ledger, *, api_key: bytes | None, now_func: Callable[[], datetime]) -> None:
        self._ledger = ledger
        self._api_key = api_key
        self._now = now_func

    def serves(self, path: str) -> bool:
        return path.startswith("/v1/")

    def writes(self, req: Request) -> bool:
        return req.method == "POST" and (req.path == "/v1/payments" or _MODIFY_PATH.match(req.path) is not None)

    def authorized(self, req: Request) -> bool:
        if self._api_key is None:
            return True
        scheme, _, token = (req.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._api_key)

    def error(
        self, kind: str, message: str | None = None, *, retry_after: int | None = None, saved: bool = False
    ) -> Response:
        extra = {"retry_after": retry_after} if retry_after is not None else {}
        return native_error(_KINDS.get(kind, kind), message, **extra)

    def parse_write(self, req: Request) -> WriteCall | Response:
        if match := _MODIFY_PATH.match(req.path):
            return self._modify(req, match["ref"], match["kind"])
        try:
            payload = json.loads(req.body or b"null")
            charge = wire.parse_charge_body(payload)
        except wire.BadRequest as exc:
            return native_error(exc.code, str(exc))
        except ValueError:
            return native_error("invalid_json")

        def run(scope: Scope) -> Response:
            decision = scope.decide(amount=charge.amount, card=card_of(charge.payment_method))
            status, settle_to = decision.status, decision.settle_to
            if charge.manual_capture:  # approved means authorised: the money waits for a capture
                status = PaymentStatus.AUTHORIZED if status is PaymentStatus.SUCCEEDED else status
                settle_to = PaymentStatus.AUTHORIZED if settle_to is PaymentStatus.SUCCEEDED else settle_to
            record = PaymentRecord.new(
                charge, idempotency_key=scope.key or "", status=status, reason=decision.reason,
                settle_to=settle_to, settle_after=timedelta(seconds=decision.settle_after_seconds),
                now=scope.now, psp_reference=random_id("psp_", alphabet="0123456789abcdef"),
                capture_method="manual" if charge.manual_capture else "automatic",
            )  # fmt: skip
            scope.ledger.insert_payment(record)
            scope.tell(Change("confirmed", record, idempotency_key=scope.key))
            if record.status is PaymentStatus.FAILED:
                return native_error(wire.CARD_DECLINED, decline_code=record.failure_reason, payment=record.to_json())
            return json_response(201, record.to_json())

        return WriteCall(fingerprint=wire.request_digest(payload), run=run)

    def _modify(self, req: Request, reference: str, kind: str) -> WriteCall | Response:
        """A capture (``{"amount": N}``, at most the payment's amount) or a cancel of an authorized payment."""
        try:
            payload = json.loads(req.body or b"{}")
        except ValueError:
            return native_error("invalid_json")
        if not isinstance(payload, dict) or set(payload) - ({"amount"} if kind == "capture" else set()):
            return native_error("parameter_unknown", "a capture takes amount; a cancel nothing")
        wanted = payload.get("amount")
        if wanted is not None and (isinstance(wanted, bool) or not isinstance(wanted, int) or wanted <= 0):
            return native_error("amount_invalid")

        def run(scope: Scope) -> Response:
            record = scope.ledger.get_payment(reference)
            if record is None or record.flavor != self.name:
                return native_error("resource_missing")
            if record.status is not PaymentStatus.AUTHORIZED:
                return native_error("payment_unexpected_state", f"the payment is {record.status.value}")
            amount = record.amount if wanted is None else wanted
            if amount > record.amount:
                return native_error("amount_invalid", f"amount {amount} is more than authorized ({record.amount})")
            if kind == "capture":
                record = dataclasses.replace(record, status=PaymentStatus.SUCCEEDED, amount_captured=amount,
                                             settled_at=scope.now, updated_at=scope.now)
            else:
                record = dataclasses.replace(record, status=PaymentStatus.CANCELED, failure_reason="canceled",
                                             settled_at=scope.now, updated_at=scope.now)
            scope.ledger.save_payment(record)
            scope.tell(Change("captured" if kind == "capture" else "canceled", record, idempotency_key=scope.key))
            return json_response(200, record.to_json())

        return WriteCall(fingerprint=wire.request_digest({"path": req.path, **payload}), run=run)

    def fail_payout(self, scope: Scope, payout_id: str, code: str) -> object | str:
        return "resource_missing"  # the native PSP has no payouts

    def run_payouts(self, scope: Scope) -> list[object]:
        return []

    def bank_credits(self, since: date, until: date) -> list[BankCredit]:
        return []

    def tick(self, scope: Scope) -> None:
        """Nothing of its own."""

    def replay_headers(self, status: int) -> tuple[tuple[str, str], ...]:
        return (("Idempotent-Replayed", "true"),)

    def decorate(self, req: Request, response: Response) -> Response:
        return response

    def route(self, req: Request) -> Response:
        if req.path == "/v1/payments" and req.param("created_since") is not None:
            return self._created(req)
        if req.path == "/v1/payments":
            reference = req.param("merchant_reference")
            if not reference:
                return native_error("parameter_missing", "merchant_reference is required")
            found = self._ledger.find_payments(reference)
            return json_response(200, {"object": "list", "data": [p.to_json() for p in found]})
        if match := _PAYMENT_PATH.match(req.path):
            payment = self._ledger.get_payment(match["ref"])
            if payment is None or payment.flavor != self.name:
                return native_error("resource_missing")
            return json_response(200, payment.to_json())
        if req.path == "/v1/settlements":
            return self._settlements(req)
        return native_error("not_found")

    def _created(self, req: Request) -> Response:
        try:
            since = wire.parse_timestamp(req.param("created_since") or "")
            until = wire.parse_timestamp(req.param("created_until") or "")
            limit = int(req.param("limit") or SETTLEMENT_LIMIT_DEFAULT)
            token = req.param("cursor")
            cursor = Cursor.decode(token) if token else None
        except (PspProtocolError, ValueError):
            return native_error(
                "parameter_invalid",
                "created_since/created_until need ISO-8601 with an offset; limit an int; cursor ours",
            )
        if not 0 < limit <= SETTLEMENT_LIMIT_MAX:
            return native_error("parameter_invalid", f"limit must be 1 to {SETTLEMENT_LIMIT_MAX}")
        page, more = self._ledger.created_page(
            since, until, flavor=self.name, after=cursor, limit=limit, newest_first=False
        )
        next_cursor = more.encode() if more else None
        return json_response(
            200,
            {"object": "list", "data": [p.to_json() for p in page], "has_more": more is not None,
             "next_cursor": next_cursor},
        )

    def _settlements(self, req: Request) -> Response:
        try:
            since = wire.parse_timestamp(req.param("since") or "")
            until = wire.parse_timestamp(req.param("until") or "")
            limit = int(req.param("limit") or SETTLEMENT_LIMIT_DEFAULT)
            token = req.param("cursor")
            cursor = Cursor.decode(token) if token else None
        except (PspProtocolError, ValueError):
            return native_error(
                "parameter_invalid", "since/until need ISO-8601 with an offset; limit an int; cursor ours"
            )
        if not 0 < limit <= SETTLEMENT_LIMIT_MAX:
            return native_error("parameter_invalid", f"limit must be 1 to {SETTLEMENT_LIMIT_MAX}")
        page, more = self._ledger.settlements_page(since, until, after=cursor, limit=limit)
        data = [p.to_json() for p in page]
        next_cursor = more.encode() if more else None
        return json_response(
            200, {"object": "list", "data": data, "has_more": more is not None, "next_cursor": next_cursor}
        )

    def render_payment(self, record: PaymentRecord) -> object:
        return record.to_json()

    def adjustment_id(self, kind: str) -> str:
        return ("rf_" if kind == "refund" else "dp_") + secrets.token_hex(12)

    def render_adjustment(self, adjustment: Adjustment, record: PaymentRecord) -> object:
        return {
            "object": adjustment.kind,
            "id": adjustment.id,
            "psp_reference": record.psp_reference,
            "merchant_reference": record.merchant_reference,
            "amount": adjustment.amount,
            "currency": adjustment.currency,
            "fee": adjustment.fee,
            "reason": adjustment.reason,
            "created_at": ts(adjustment.created_at),
        }
