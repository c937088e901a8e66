"""Stripe's wire shapes, built from the sandbox's records: PaymentIntent, Charge, Refund, Dispute,
BalanceTransaction, the error object, and form-encoded parameters.

Field names and types follow Stripe's API reference (docs.stripe.com/api/payment_intents/object,
/api/charges/object, /api/refunds/object, /api/disputes/object, /api/balance_transactions/object,
/api/errors) and Stripe's canonical example objects (the ``fixtures3.json`` of github.com/stripe/openapi); the
tests compare against the latter. Fields the sandbox has nothing for are null, as on a fresh test-mode object.

Ids share one random suffix per payment: ``pi_X`` (intent), ``ch_X`` (its charge), ``txn_X`` (the charge's
balance transaction); a refund ``re_Y`` and a dispute ``dp_Z`` have their own, with ``txn_Y``/``txn_Z``.
Money: integer minor units, currency lower case (Stripe's convention); times: unix seconds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from urllib.parse import parse_qsl

from psp_adapters.sandbox.core import Response, json_response
from psp_adapters.sandbox.records import Adjustment, PaymentRecord
from psp_adapters.sandbox.wire import PENDING_FAILURE_REASON, PaymentStatus

#: a declined payment's reason -> (error code, decline_code, message), as docs.stripe.com/declines/codes and
#: docs.stripe.com/error-codes name them; any other reason is a generic decline
_DECLINES: Mapping[str, tuple[str, str, str]] = {
    "card_declined": ("card_declined", "generic_decline", "Your card was declined."),
    "insufficient_funds": ("card_declined", "insufficient_funds", "Your card has insufficient funds."),
    "expired_card": ("expired_card", "expired_card", "Your card has expired."),
    "authentication_required": (
        "authentication_required",
        "authentication_required",
        "Your card was declined. This transaction requires authentication.",
    ),
    PENDING_FAILURE_REASON: ("card_declined", "generic_decline", "Your card was declined."),
}
_GENERIC_DECLINE = _DECLINES["card_declined"]
_DOCS = "https://stripe.com/docs/error-codes/"


class FormError(ValueError):
    """A form body or query the sandbox cannot read as Stripe parameters."""


def parse_form(text: str) -> dict[str, str | list[str] | dict[str, str]]:
    """Stripe's form encoding: ``a=1``, ``a[k]=v`` (a hash), ``a[]=v`` / ``a[0]=v`` (a list). A deeper name
    (``a[k][j]=v``) lands in ``a``'s hash under ``"k][j"``: the sandbox reads no deeper parameter.

    Raises FormError on a malformed name, or on a name used as two of scalar, list and hash.
    """
    params: dict[str, str | list[str] | dict[str, str]] = {}
    for name, value in parse_qsl(text, keep_blank_values=True):
        base, bracket, rest = name.partition("[")
        if not bracket:
            if name in params:
                raise FormError(f"parameter {name} given twice")
            params[name] = value
            continue
        inner = rest[:-1] if rest.endswith("]") else None
        if inner is None or not base:
            raise FormError(f"unsupported parameter {name}")
        if inner == "" or inner.isdigit():
            listed = params.setdefault(base, [])
            if not isinstance(listed, list):
                raise FormError(f"parameter {base} is not a list")
            listed.append(value)
        else:
            hashed = params.setdefault(base, {})
            if not isinstance(hashed, dict):
                raise FormError(f"parameter {base} is not a hash")
            hashed[inner] = value
    return params


def fingerprint(method: str, path: str, text: str) -> str:
    """The idempotency fingerprint of a request: endpoint and parameters (their order is irrelevant)."""
    pairs = sorted(parse_qsl(text, keep_blank_values=True))
    return hashlib.sha256(json.dumps([method, path, pairs]).encode()).hexdigest()


def error(
    status: int,
    kind: str,
    message: str,
    *,
    code: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    **fields: object,
) -> Response:
    """Stripe's error object (docs.stripe.com/api/errors): ``{"error": {"type", "code", "message", …}}``;
    absent fields are left out, as Stripe does."""
    body: dict[str, object] = {"type": kind, "message": message}
    if code is not None:
        body["code"] = code
        body["doc_url"] = _DOCS + code.replace("_", "-")
    body.update({name: value for name, value in fields.items() if value is not None})
    return json_response(status, {"error": body}, *headers)


def unix(value: datetime) -> int:
    return int(value.timestamp())


def suffix(record: PaymentRecord) -> str:
    return record.psp_reference.removeprefix("pi_")


def decline(record: PaymentRecord) -> tuple[str, str, str] | None:
    """(code, decline_code, message) of a payment that did not go through, else None."""
    if record.status is PaymentStatus.FAILED:
        return _DECLINES.get(record.failure_reason or "", _GENERIC_DECLINE)
    return None


def intent_status(record: PaymentRecord) -> str:
    """docs.stripe.com/payments/paymentintents/lifecycle: a declined off-session payment (authentication
    required included) goes back to ``requires_payment_method``; one still settling is ``processing``."""
    return {
        PaymentStatus.SUCCEEDED: "succeeded",
        PaymentStatus.PENDING: "processing",
        PaymentStatus.FAILED: "requires_payment_method",
        PaymentStatus.CANCELED: "canceled",
    }[record.status]


def last_payment_error(record: PaymentRecord) -> dict[str, object] | None:
    declined = decline(record)
    if declined is None:
        return None
    code, decline_code, message = declined
    return {
        "type": "card_error",
        "code": code,
        "decline_code": decline_code,
        "doc_url": _DOCS + code.replace("_", "-"),
        "message": message,
        "charge": "ch_" + suffix(record),
        "payment_method": _payment_method(record),
    }


def payment_intent(
    record: PaymentRecord, adjustments: Sequence[Adjustment], *, expand_charge: bool = False
) -> dict[str, object]:
    """A PaymentIntent (docs.stripe.com/api/payment_intents/object)."""
    status = intent_status(record)
    charge: object = "ch_" + suffix(record)
    if expand_charge:
        charge = charge_object(record, adjustments)
    canceled = record.status is PaymentStatus.CANCELED
    return {
        "id": record.psp_reference,
        "object": "payment_intent",
        "amount": record.amount,
        "amount_capturable": 0,
        "amount_details": {"tip": {}},
        "amount_received": record.amount if status == "succeeded" else 0,
        "application": None,
        "application_fee_amount": None,
        "automatic_payment_methods": None,
        "canceled_at": unix(record.settled_at) if canceled and record.settled_at else None,
        "cancellation_reason": "abandoned" if canceled else None,
        "capture_method": "automatic",
        "client_secret": f"{record.psp_reference}_secret_{_digest(record.psp_reference)}",
        "confirmation_method": "automatic",
        "created": unix(record.created_at),
        "currency": record.currency.lower(),
        "customer": record.customer_reference,
        "description": record.description,
        "excluded_payment_method_types": None,
        "last_payment_error": last_payment_error(record),
        "latest_charge": charge,
        "livemode": False,
        "metadata": dict(record.metadata),
        "next_action": None,
        "on_behalf_of": None,
        "payment_method": record.payment_method,
        "payment_method_configuration_details": None,
        "payment_method_options": {},
        "payment_method_types": ["card"],
        "processing": None,
        "receipt_email": None,
        "review": None,
        "setup_future_usage": None,
        "shipping": None,
        "source": None,
        "statement_descriptor": None,
        "statement_descriptor_suffix": None,
        "status": status,
        "transfer_data": None,
        "transfer_group": None,
    }


def charge_object(record: PaymentRecord, adjustments: Sequence[Adjustment]) -> dict[str, object]:
    """The intent's Charge (docs.stripe.com/api/charges/object), refunds and dispute as they are now."""
    succeeded = record.status is PaymentStatus.SUCCEEDED
    status = "succeeded" if succeeded else "pending" if record.status is PaymentStatus.PENDING else "failed"
    refunds = [a for a in adjustments if a.kind == "refund"]
    refunded = sum(a.amount for a in refunds)
    declined = decline(record)
    return {
        "id": "ch_" + suffix(record),
        "object": "charge",
        "amount": record.amount,
        "amount_captured": record.amount if succeeded else 0,
        "amount_refunded": refunded,
        "application": None,
        "application_fee": None,
        "application_fee_amount": None,
        "balance_transaction": "txn_" + suffix(record) if succeeded else None,
        "billing_details": {
            "address": dict.fromkeys(("city", "country", "line1", "line2", "postal_code", "state")),
            "email": None,
            "name": None,
            "phone": None,
        },
        "calculated_statement_descriptor": "SANDBOX",
        "captured": succeeded,
        "created": unix(record.created_at),
        "currency": record.currency.lower(),
        "customer": record.customer_reference,
        "description": record.description,
        "disputed": any(a.kind == "dispute" for a in adjustments),
        "failure_balance_transaction": None,
        "failure_code": declined[0] if declined else None,
        "failure_message": declined[2] if declined else None,
        "fraud_details": {},
        "livemode": False,
        "metadata": dict(record.metadata),
        "on_behalf_of": None,
        "outcome": _outcome(record, declined),
        "paid": succeeded,
        "payment_intent": record.psp_reference,
        "payment_method": record.payment_method,
        "payment_method_details": {"type": "card", "card": {"brand": "visa", "last4": "4242", "network": "visa"}},
        "receipt_email": None,
        "receipt_number": None,
        "receipt_url": None,
        "refunded": succeeded and refunded >= record.amount,
        "refunds": {
            "object": "list",
            "data": [refund_object(a, record) for a in reversed(refunds)],
            "has_more": False,
            "url": f"/v1/charges/ch_{suffix(record)}/refunds",
        },
        "review": None,
        "shipping": None,
        "source_transfer": None,
        "statement_descriptor": None,
        "statement_descriptor_suffix": None,
        "status": status,
        "transfer_data": None,
        "transfer_group": None,
    }


def refund_object(adjustment: Adjustment, record: PaymentRecord) -> dict[str, object]:
    """A Refund (docs.stripe.com/api/refunds/object); refunds succeed at once in the sandbox."""
    return {
        "id": adjustment.id,
        "object": "refund",
        "amount": adjustment.amount,
        "balance_transaction": "txn_" + adjustment.id.removeprefix("re_"),
        "charge": "ch_" + suffix(record),
        "created": unix(adjustment.created_at),
        "currency": adjustment.currency.lower(),
        "metadata": {},
        "payment_intent": record.psp_reference,
        "reason": adjustment.reason,
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": "succeeded",
        "transfer_reversal": None,
    }


def dispute_object(
    adjustment: Adjustment, record: PaymentRecord, *, with_transactions: bool = True
) -> dict[str, object]:
    """A Dispute (docs.stripe.com/api/disputes/object): funds withdrawn, evidence never submitted."""
    return {
        "id": adjustment.id,
        "object": "dispute",
        "amount": adjustment.amount,
        "balance_transactions": [balance_transaction(adjustment, record)] if with_transactions else [],
        "charge": "ch_" + suffix(record),
        "created": unix(adjustment.created_at),
        "currency": adjustment.currency.lower(),
        "evidence": {},
        "evidence_details": {
            "due_by": unix(adjustment.created_at) + 21 * 86400,
            "has_evidence": False,
            "past_due": False,
            "submission_count": 0,
        },
        "is_charge_refundable": False,
        "livemode": False,
        "metadata": {},
        "payment_intent": record.psp_reference,
        "payment_method_details": None,
        "reason": adjustment.reason or "general",
        "status": "needs_response",
    }


def balance_transaction(
    item: PaymentRecord | Adjustment,
    record: PaymentRecord,
    adjustments: Sequence[Adjustment] = (),
    *,
    expand_source: bool = False,
) -> dict[str, object]:
    """A BalanceTransaction (docs.stripe.com/api/balance_transactions/object) of a succeeded charge, a refund
    (type and reporting_category "refund") or a dispute (type "adjustment", reporting_category "dispute");
    available at once (the sandbox pays out instantly)."""
    if isinstance(item, PaymentRecord):
        assert item.settled_at is not None  # nosec B101  # type narrowing, not a check
        at, amount, fee = item.settled_at, record.amount, record.booked_fee
        txn, kind, category = "txn_" + suffix(record), "charge", "charge"
        description = record.description
        source: object = charge_object(record, adjustments) if expand_source else "ch_" + suffix(record)
    elif item.kind == "refund":
        at, amount, fee = item.created_at, -item.amount, item.fee
        txn, kind, category = "txn_" + item.id.removeprefix("re_"), "refund", "refund"
        description = f"REFUND FOR CHARGE ({record.description or 'ch_' + suffix(record)})"
        source = refund_object(item, record) if expand_source else item.id
    else:
        at, amount, fee = item.created_at, -item.amount, item.fee
        txn, kind, category = "txn_" + item.id.removeprefix("dp_"), "adjustment", "dispute"
        description = f"Chargeback withdrawal for ch_{suffix(record)}"
        source = dispute_object(item, record, with_transactions=False) if expand_source else item.id
    fee_details = (
        [
            {
                "amount": fee,
                "application": None,
                "currency": record.currency.lower(),
                "description": "Stripe processing fees" if kind == "charge" else "Dispute fee",
                "type": "stripe_fee",
            }
        ]
        if fee
        else []
    )
    return {
        "id": txn,
        "object": "balance_transaction",
        "amount": amount,
        "available_on": unix(at),
        "balance_type": "payments",
        "created": unix(at),
        "currency": record.currency.lower(),
        "description": description,
        "exchange_rate": None,
        "fee": fee,
        "fee_details": fee_details,
        "net": amount - fee,
        "reporting_category": category,
        "source": source,
        "status": "available",
        "type": kind,
    }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _payment_method(record: PaymentRecord) -> dict[str, object] | None:
    if record.payment_method is None:
        return None
    return {
        "id": record.payment_method,
        "object": "payment_method",
        "type": "card",
        "customer": record.customer_reference,
    }


def _outcome(record: PaymentRecord, declined: tuple[str, str, str] | None) -> dict[str, object] | None:
    if record.status is PaymentStatus.PENDING:
        return None
    if declined is None:
        return {
            "network_status": "approved_by_network",
            "reason": None,
            "risk_level": "normal",
            "seller_message": "Payment complete.",
            "type": "authorized",
        }
    return {
        "network_status": "declined_by_network",
        "reason": declined[1],
        "risk_level": "normal",
        "seller_message": "The bank did not return any further details with this decline.",
        "type": "issuer_declined",
    }
