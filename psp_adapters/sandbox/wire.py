"""The sandbox PSP's wire format: status strings, error codes, and their mapping to protocol outcomes.

Both halves of the sandbox use this module: the server writes these strings, the adapter reads them. It is the
only place where a sandbox JSON document becomes a ``PaymentOutcome`` or a ``SettlementLine``.

A payment on the wire::

    {"object": "payment", "psp_reference": "psp_…", "merchant_reference": "order-1", "amount": 1250,
     "currency": "EUR", "merchant_account": null, "payment_method": null, "status": "succeeded",
     "failure_reason": null, "created_at": "2024-05-01T12:00:00.000000+00:00", "updated_at": "…",
     "settled_at": "…" | null}

An error on the wire (any 4xx/5xx)::

    {"error": {"type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds",
               "message": "…", "payment": {…}}}      # "payment" only in a 402 decline
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, assert_never

from psp_adapters._wire import JsonFields
from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import (
    Authorised,
    ChargeRequest,
    Failed,
    ModificationRequest,
    PaymentOutcome,
    Pending,
    SettlementLine,
    Succeeded,
    Unknown,
)

PSP_NAME = "sandbox"

#: the JSON validators (psp_adapters._wire), naming the sandbox in their errors; a JSON ``true`` is no amount
_json = JsonFields(PSP_NAME)

#: error codes the server sends and the adapter recognises
IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
IDEMPOTENCY_KEY_IN_FLIGHT = "idempotency_request_in_progress"
IDEMPOTENCY_KEY_MISSING = "idempotency_key_missing"
CARD_DECLINED = "card_declined"
#: ``failure_reason`` of a pending payment that settled to failed
PENDING_FAILURE_REASON = "async_declined"

_INVALID = "invalid_request_error"
#: every error the server sends: code -> (HTTP status, error type, default message)
ERRORS: Mapping[str, tuple[int, str, str]] = {
    "invalid_json": (400, _INVALID, "the body is not valid JSON"),
    "unsupported_media_type": (415, _INVALID, "admin changes must be JSON (Content-Type: application/json)"),
    "parameter_invalid": (400, _INVALID, "a parameter is invalid"),
    "parameter_missing": (400, _INVALID, "a required parameter is missing"),
    "parameter_unknown": (400, _INVALID, "unknown parameter"),
    "amount_invalid": (400, _INVALID, "amount must be a positive integer in minor units"),
    "currency_invalid": (400, _INVALID, "currency must be an upper-case ISO-4217 code"),
    "faults_invalid": (400, _INVALID, "bad fault configuration"),
    IDEMPOTENCY_KEY_MISSING: (400, _INVALID, "an Idempotency-Key header of 1 to 255 characters is required"),
    "invalid_api_key": (401, "authentication_error", "invalid or missing API key"),
    "cross_origin_forbidden": (403, _INVALID, "admin changes are refused from another origin (a browser page)"),
    CARD_DECLINED: (402, "card_error", "the card was declined"),
    "resource_missing": (404, _INVALID, "no such payment"),
    "payment_unexpected_state": (400, _INVALID, "the payment is not authorized for a capture or a cancel"),
    "not_found": (404, _INVALID, "no such endpoint"),
    "method_not_allowed": (405, _INVALID, "method not allowed"),
    IDEMPOTENCY_KEY_IN_FLIGHT: (
        409,
        "idempotency_error",
        "a request with this Idempotency-Key is in progress",
    ),
    IDEMPOTENCY_KEY_REUSED: (422, "idempotency_error", "this Idempotency-Key was used with another request"),
    "rate_limited": (429, "rate_limit_error", "too many requests"),
    "internal_error": (500, "api_error", "internal error"),
    "service_unavailable": (503, "api_error", "service unavailable"),
}


class PaymentStatus(enum.Enum):
    """``payment.status`` as the sandbox writes it."""

    SUCCEEDED = "succeeded"  #: the money was taken (captured, perhaps only in part: ``amount_captured``)
    PENDING = "pending"  #: no final answer yet; it settles to succeeded or failed later
    FAILED = "failed"  #: declined, or failed while pending; ``failure_reason`` says why
    CANCELED = "canceled"  #: canceled before completion (an authorisation released, or expired)
    #: created, not confirmed yet (a Stripe PaymentIntent before its confirm); no charge was attempted
    OPEN = "open"
    #: authorised, waiting for a capture (Stripe ``requires_capture``, Adyen with manual capture); expires
    AUTHORIZED = "authorized"

    @property
    def is_final(self) -> bool:
        return self in (PaymentStatus.SUCCEEDED, PaymentStatus.FAILED, PaymentStatus.CANCELED)


def charge_body(request: ChargeRequest) -> dict[str, object]:
    """The JSON body of ``POST /v1/payments`` for ``request`` (amount stays in integer minor units)."""
    body: dict[str, object] = {
        "merchant_reference": request.merchant_reference,
        "amount": request.amount,
        "currency": request.currency,
    }
    optional = {
        "merchant_account": request.merchant_account,
        "payment_method": request.payment_method,
        "description": request.description,
    }
    body.update({name: value for name, value in optional.items() if value is not None})
    if request.manual_capture:  # authorise only: the payment waits, authorized, for a capture or a cancel
        body["capture_method"] = "manual"
    return body


def modification_body(request: ModificationRequest) -> dict[str, object]:
    """The JSON body of ``POST /v1/payments/{psp_reference}/capture`` (the amount) or ``/cancel`` (empty)."""
    return {"amount": request.amount} if request.kind == "capture" else {}


def modification_outcome(kind: str, payload: object) -> PaymentOutcome:
    """The payment document as the answer about a capture or a cancel of it: a capture is done when the payment
    succeeded (``amount`` what it captured), a cancel when it was canceled; the other way round is a failure;
    authorized: neither yet (Pending)."""
    outcome = to_outcome(payload)
    doc = _json.as_object(payload, "payment")
    fields = {"psp_reference": outcome.psp_reference, "amount": outcome.amount, "currency": outcome.currency,
              "raw_status": outcome.raw_status, "merchant_reference": outcome.merchant_reference}
    captured = _json.optional(doc, "amount_captured", int)
    if outcome.raw_status == PaymentStatus.SUCCEEDED.value:
        if kind == "capture":
            return Succeeded(**{**fields, "amount": captured if captured is not None else outcome.amount})  # type: ignore[arg-type]
        return Failed(**fields, reason="already captured")  # type: ignore[arg-type]
    if outcome.raw_status == PaymentStatus.CANCELED.value:
        if kind == "cancel":
            return Succeeded(**fields)  # type: ignore[arg-type]
        return Failed(**fields, reason=_json.optional(doc, "failure_reason", str) or "canceled")  # type: ignore[arg-type]
    if isinstance(outcome, Authorised):
        return Pending(**fields)  # type: ignore[arg-type]
    return outcome


def to_outcome(payload: object) -> PaymentOutcome:
    """Map one payment document to an outcome.

    An unrecognised ``status`` becomes ``Unknown(raw_status=…)``, never a guess.
    Raises PspProtocolError when the document is not an object or misses a typed field.
    """
    doc = _json.as_object(payload, "payment")
    raw_status = _json.require(doc, "status", str)
    common = {
        "psp_reference": _json.require(doc, "psp_reference", str),
        "amount": _json.amount(doc, "amount"),
        "currency": _json.require(doc, "currency", str),
        "raw_status": raw_status,
        "merchant_reference": _json.optional(doc, "merchant_reference", str),
    }
    reason = _json.optional(doc, "failure_reason", str)
    try:
        status = PaymentStatus(raw_status)
    except ValueError:
        return Unknown(**common)  # type: ignore[arg-type]
    match status:
        case PaymentStatus.SUCCEEDED:
            return Succeeded(**common)  # type: ignore[arg-type]
        case PaymentStatus.AUTHORIZED:
            return Authorised(**common)  # type: ignore[arg-type]  # held for a capture (capture_method manual)
        case PaymentStatus.PENDING | PaymentStatus.OPEN:
            return Pending(**common)  # type: ignore[arg-type]  # money not taken yet: no final answer
        case PaymentStatus.FAILED:
            return Failed(**common, reason=reason)  # type: ignore[arg-type]
        case PaymentStatus.CANCELED:
            return Failed(**common, reason=reason or "canceled")  # type: ignore[arg-type]
        case _:
            assert_never(status)


def decline_to_outcome(payload: object) -> PaymentOutcome:
    """Map a 402 decline body to an outcome: the embedded payment, with the decline code as the reason."""
    error = error_fields(payload)
    payment = error.get("payment")
    if payment is None:
        raise PspProtocolError(f"{PSP_NAME}: decline without a payment", psp=PSP_NAME, status_code=402)
    outcome = to_outcome(payment)
    if isinstance(outcome, Failed) and outcome.reason is None:
        reason = _json.optional(error, "decline_code", str) or _json.optional(error, "code", str) or CARD_DECLINED
        return Failed(**_outcome_fields(outcome), reason=reason)  # type: ignore[arg-type]
    return outcome


def error_fields(payload: object) -> Mapping[str, object]:
    """The ``error`` object of an error body; raises PspProtocolError when there is none."""
    doc = _json.as_object(payload, "error body")
    return _json.as_object(doc.get("error"), "error")


def to_settlement_line(payload: object) -> SettlementLine:
    """Map one item of ``GET /v1/settlements`` to a SettlementLine (``settled_at`` aware UTC)."""
    doc = _json.as_object(payload, "settlement item")
    return SettlementLine(
        psp_reference=_json.require(doc, "psp_reference", str),
        merchant_reference=_json.optional(doc, "merchant_reference", str),
        amount=_json.amount(doc, "amount"),
        currency=_json.require(doc, "currency", str),
        status=_json.require(doc, "status", str),
        settled_at=parse_timestamp(_json.require(doc, "settled_at", str)),
        raw=dict(doc),
    )


def parse_timestamp(value: str) -> datetime:
    """An ISO-8601 timestamp with an offset, as aware UTC; raises PspProtocolError on anything else."""
    return _json.instant(value, "timestamp")


def format_timestamp(value: datetime) -> str:
    """The wire form of an aware datetime: UTC, microseconds, so that strings sort like instants."""
    if value.tzinfo is None:
        raise ValueError("naive datetime")
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _outcome_fields(outcome: Failed) -> dict[str, object]:
    return {
        "psp_reference": outcome.psp_reference,
        "amount": outcome.amount,
        "currency": outcome.currency,
        "raw_status": outcome.raw_status,
        "merchant_reference": outcome.merchant_reference,
    }


class BadRequest(ValueError):
    """A request the sandbox server refuses with 400; ``code`` goes on the wire."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


_CHARGE_FIELDS = frozenset(
    {"merchant_reference", "amount", "currency", "merchant_account", "payment_method", "description",
     "capture_method"}
)
MAX_AMOUNT = 99_999_999


def request_digest(payload: object) -> str:
    """The idempotency fingerprint of a request body: its canonical JSON, hashed (key order is irrelevant)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def parse_charge_body(payload: object) -> ChargeRequest:
    """The server side of ``charge_body``: validate a ``POST /v1/payments`` body; raises BadRequest."""
    if not isinstance(payload, Mapping):
        raise BadRequest("parameter_invalid", "the body must be a JSON object")
    unknown = sorted(set(payload) - _CHARGE_FIELDS)
    if unknown:
        raise BadRequest("parameter_unknown", f"unknown parameter(s): {', '.join(unknown)}")
    reference = payload.get("merchant_reference")
    if not isinstance(reference, str) or not 0 < len(reference) <= 255:
        raise BadRequest("parameter_missing", "merchant_reference must be a string of 1 to 255 characters")
    amount = payload.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount <= MAX_AMOUNT:
        raise BadRequest("amount_invalid", f"amount must be an integer in minor units, 1 to {MAX_AMOUNT}")
    currency = payload.get("currency")
    if (
        not isinstance(currency, str)
        or len(currency) != 3
        or not currency.isalpha()
        or not currency.isupper()
    ):
        raise BadRequest("currency_invalid", "currency must be an upper-case ISO-4217 code")
    optional: dict[str, Any] = {}
    for name in ("merchant_account", "payment_method", "description"):
        value = payload.get(name)
        if value is not None and not isinstance(value, str):
            raise BadRequest("parameter_invalid", f"{name} must be a string")
        optional[name] = value
    capture = payload.get("capture_method", "automatic")
    if capture not in ("automatic", "manual"):
        raise BadRequest("parameter_invalid", "capture_method must be automatic or manual")
    return ChargeRequest(merchant_reference=reference, amount=amount, currency=currency,
                         manual_capture=capture == "manual", **optional)
