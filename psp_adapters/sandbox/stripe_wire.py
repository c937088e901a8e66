"""Stripe's money objects, built from the sandbox's records: PaymentIntent, Charge, Refund, Dispute,
BalanceTransaction (customers, payment methods, the balance and events: ``stripe_objects``).

Field names and types follow Stripe's API reference (docs.stripe.com/api/payment_intents/object,
/api/charges/object, /api/refunds/object, /api/disputes/object, /api/balance_transactions/object) and Stripe's
canonical example objects (the ``fixtures3.json`` of github.com/stripe/openapi); the tests compare against the
latter. Fields the sandbox has nothing for are null, as on a fresh test-mode object. The card of a payment is
passed in (``cards.TestCard``): it is the test card its payment method names.

Ids share one random suffix per payment: ``pi_X`` (intent), ``ch_X`` (its charge), ``txn_X`` (the charge's
balance transaction); a refund ``re_Y`` and a dispute ``dp_Z`` have their own, with ``txn_Y``/``txn_Z``, and a
refund that failed after it was booked ``txn_F…`` for the money coming back (``refund_failure``).
Money: integer minor units, currency lower case (Stripe's convention); times: unix seconds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta

from psp_adapters.sandbox.cards import DECLINES, TestCard
from psp_adapters.sandbox.movements import REFUND_FAILED, Adjustment
from psp_adapters.sandbox.records import PaymentRecord
from psp_adapters.sandbox.stripe_form import unix
from psp_adapters.sandbox.stripe_objects import payment_method, public
from psp_adapters.sandbox.wire import PaymentStatus

_DOCS = "https://stripe.com/docs/error-codes/"
#: how long a card authorisation waits for its capture (docs.stripe.com/payments/place-a-hold-on-a-payment-method)
AUTHORIZATION_VALIDITY = timedelta(days=7)
#: ``cancellation_reason`` values the sandbox shows as stored (the API reference's enum, less ``expired``: an
#: authorisation the sandbox lets expire is canceled ``automatic``); any other stored reason is ``abandoned``
CANCELLATION_REASONS = ("abandoned", "automatic", "duplicate", "failed_invoice", "fraudulent",
                        "requested_by_customer", "void_invoice")
_INTENT_STATUS = {
    PaymentStatus.SUCCEEDED: "succeeded",
    PaymentStatus.PENDING: "processing",
    PaymentStatus.FAILED: "requires_payment_method",
    PaymentStatus.CANCELED: "canceled",
    PaymentStatus.AUTHORIZED: "requires_capture",
}


def suffix(record: PaymentRecord) -> str:
    return record.psp_reference.removeprefix("pi_")


def charge_id(record: PaymentRecord) -> str:
    return "ch_" + suffix(record)


def decline(record: PaymentRecord) -> tuple[str, str, str] | None:
    """(code, decline_code, message) of a payment that did not go through, else None (docs.stripe.com/testing:
    the declined cards' codes; any reason the table lacks is a generic decline)."""
    if record.status is not PaymentStatus.FAILED:
        return None
    found = DECLINES.get(record.failure_reason or "", DECLINES["card_declined"])
    return found.code, found.decline_code, found.message


def intent_status(record: PaymentRecord) -> str:
    """docs.stripe.com/payments/paymentintents/lifecycle: a declined attempt goes back to
    ``requires_payment_method``; one still settling is ``processing``; an authorisation is ``requires_capture``;
    an intent not confirmed yet waits for a payment method or for its confirm."""
    if record.status is PaymentStatus.OPEN:
        return "requires_confirmation" if record.payment_method else "requires_payment_method"
    return _INTENT_STATUS[record.status]


def last_payment_error(record: PaymentRecord, card: TestCard) -> dict[str, object] | None:
    declined = decline(record)
    if declined is None:
        return None
    code, decline_code, message = declined
    found = DECLINES.get(record.failure_reason or "")
    error: dict[str, object] = {
        "type": "card_error", "code": code, "decline_code": decline_code, "doc_url": _DOCS + code.replace("_", "-"),
        "message": message, "charge": charge_id(record),
        "payment_method": public(payment_method(
            record.payment_method, card, created=record.created_at, customer=record.customer_reference, metadata={},
            token=record.payment_method)) if record.payment_method else None,
    }  # fmt: skip
    if found is not None and found.param:
        error["param"] = found.param
    return error


def payment_intent(record: PaymentRecord, card: TestCard) -> dict[str, object]:
    """A PaymentIntent (docs.stripe.com/api/payment_intents/object); ids where Stripe has ids (expansions:
    ``stripe_expand``)."""
    status = intent_status(record)
    canceled = record.status is PaymentStatus.CANCELED
    reason = _cancellation_reason(record.failure_reason)
    return {
        "id": record.psp_reference,
        "object": "payment_intent",
        "amount": record.amount,
        "amount_capturable": record.amount if record.status is PaymentStatus.AUTHORIZED else 0,
        "amount_details": {"tip": {}},
        "amount_received": record.captured,
        "application": None,
        "application_fee_amount": None,
        "automatic_payment_methods": None,
        "canceled_at": unix(record.settled_at) if canceled and record.settled_at else None,
        "cancellation_reason": reason if canceled else None,
        "capture_method": record.capture_method,
        "client_secret": f"{record.psp_reference}_secret_{_digest(record.psp_reference)}",
        "confirmation_method": "automatic",
        "created": unix(record.created_at),
        "currency": record.currency.lower(),
        "customer": record.customer_reference,
        "customer_account": None,
        "description": record.description,
        "excluded_payment_method_types": None,
        "last_payment_error": last_payment_error(record, card),
        "latest_charge": charge_id(record) if record.charged else None,
        "livemode": False,
        "managed_payments": {"enabled": False},
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


def charge_object(record: PaymentRecord, adjustments: Sequence[Adjustment], card: TestCard) -> dict[str, object]:
    """The intent's Charge (docs.stripe.com/api/charges/object), captured, refunded and disputed as it is now.

    An authorisation is a ``succeeded`` charge not ``captured`` yet; released uncaptured (a cancel, an expiry) it is
    refunded whole, as Stripe books a canceled authorisation."""
    authorized = record.status is PaymentStatus.AUTHORIZED or record.authorized_at is not None
    released = record.status is PaymentStatus.CANCELED and record.authorized_at is not None
    status = "failed"
    if record.status in (PaymentStatus.SUCCEEDED, PaymentStatus.AUTHORIZED) or released:
        status = "succeeded"
    elif record.status is PaymentStatus.PENDING:
        status = "pending"
    refunds = [a for a in adjustments if a.kind == "refund"]
    refunded = record.amount if released else sum(a.amount for a in refunds if a.holds_money)
    declined = decline(record)
    captured = record.status is PaymentStatus.SUCCEEDED
    failed_refunds = [a for a in refunds if a.status == REFUND_FAILED]
    return {
        "id": charge_id(record),
        "object": "charge",
        "amount": record.amount,
        "amount_captured": record.captured,
        "amount_refunded": refunded,
        "application": None,
        "application_fee": None,
        "application_fee_amount": None,
        "balance_transaction": "txn_" + suffix(record) if captured else None,
        "billing_details": {
            "address": dict.fromkeys(("city", "country", "line1", "line2", "postal_code", "state")),
            "email": None, "name": None, "phone": None, "tax_id": None,
        },
        "calculated_statement_descriptor": "SANDBOX",
        "captured": captured,
        "created": unix(record.charged_at or record.created_at),
        "currency": record.currency.lower(),
        "customer": record.customer_reference,
        "description": record.description,
        "disputed": any(a.kind == "dispute" for a in adjustments),
        "failure_balance_transaction": "txn_F" + failed_refunds[-1].id.removeprefix("re_") if failed_refunds else None,
        "failure_code": declined[0] if declined else None,
        "failure_message": declined[2] if declined else None,
        "fraud_details": {},
        "livemode": False,
        "metadata": dict(record.metadata),
        "on_behalf_of": None,
        "outcome": _outcome(record, declined),
        "paid": status == "succeeded",
        "payment_intent": record.psp_reference,
        "payment_method": record.payment_method,
        "payment_method_details": {"card": card_details(record, card, authorized=authorized), "type": "card"},
        "receipt_email": None,
        "receipt_number": None,
        "receipt_url": None,
        "refunded": (captured or released) and refunded >= (record.amount if released else record.captured),
        "refunds": {
            "object": "list",
            "data": [refund_object(a, record) for a in reversed(refunds)],
            "has_more": False,
            "url": f"/v1/charges/{charge_id(record)}/refunds",
        },
        "review": None,
        "shipping": None,
        "source": None,
        "source_transfer": None,
        "statement_descriptor": None,
        "statement_descriptor_suffix": None,
        "status": status,
        "transfer_data": None,
        "transfer_group": None,
    }


def card_details(record: PaymentRecord, card: TestCard, *, authorized: bool) -> dict[str, object]:
    """``payment_method_details.card``: the test card, and for an authorisation when it must be captured by."""
    details: dict[str, object] = {
        "amount_authorized": record.amount if record.charged else None,
        "brand": card.brand,
        "checks": {"address_line1_check": None, "address_postal_code_check": None, "cvc_check": "pass"},
        "country": card.country,
        "exp_month": 12,
        "exp_year": 2034,
        "fingerprint": _digest(card.brand + card.last4)[:16],
        "funding": card.funding,
        "last4": card.last4,
        "network": card.brand,
        "three_d_secure": None,
        "wallet": None,
    }
    if authorized and record.authorized_at is not None:  # documented for manual capture only
        details["capture_before"] = unix(record.authorized_at + AUTHORIZATION_VALIDITY)
    return details


def refund_object(adjustment: Adjustment, record: PaymentRecord) -> dict[str, object]:
    """A Refund (docs.stripe.com/api/refunds/object), in its status now; a failed one says why and names the
    balance transaction that gave the money back."""
    doc: dict[str, object] = {
        "id": adjustment.id,
        "object": "refund",
        "amount": adjustment.amount,
        "balance_transaction": "txn_" + adjustment.id.removeprefix("re_"),
        "charge": charge_id(record),
        "created": unix(adjustment.created_at),
        "currency": adjustment.currency.lower(),
        "customer": record.customer_reference,
        "customer_account": None,
        "destination_details": {"card": {"type": "refund"}, "type": "card"},
        "metadata": dict(adjustment.metadata),
        "payment_intent": record.psp_reference,
        "payment_method": record.payment_method,
        "reason": adjustment.reason,
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": adjustment.status,
        "transfer_reversal": None,
    }
    if adjustment.status == REFUND_FAILED:
        doc["failure_reason"] = adjustment.failure_reason or "unknown"
        doc["failure_balance_transaction"] = "txn_F" + adjustment.id.removeprefix("re_")
    return doc


def dispute_object(
    adjustment: Adjustment, record: PaymentRecord, *, with_transactions: bool = True
) -> dict[str, object]:
    """A Dispute (docs.stripe.com/api/disputes/object): funds withdrawn, evidence never submitted."""
    return {
        "id": adjustment.id,
        "object": "dispute",
        "amount": adjustment.amount,
        "balance_transactions": [balance_transaction(adjustment, record)] if with_transactions else [],
        "charge": charge_id(record),
        "created": unix(adjustment.created_at),
        "currency": adjustment.currency.lower(),
        "enhanced_eligibility_types": [],
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
        "status": adjustment.status,
    }


def balance_transaction(
    item: PaymentRecord | Adjustment, record: PaymentRecord, *, failure: bool = False
) -> dict[str, object]:
    """A BalanceTransaction (docs.stripe.com/api/balance_transactions/object) of a captured charge, a refund (type
    and reporting_category "refund"), a refund that failed after it was booked (``failure``: "refund_failure",
    the money back) or a dispute (type "adjustment", reporting_category "dispute"); available at once
    (``stripe_payouts`` pays them out daily). ``source`` is an id (``stripe_expand`` expands it)."""
    if isinstance(item, PaymentRecord):
        assert item.settled_at is not None  # nosec B101  # type narrowing, not a check
        at, amount, fee = item.settled_at, record.captured, record.booked_fee
        txn, kind, category, source = "txn_" + suffix(record), "charge", "charge", charge_id(record)
        description = record.description
    elif item.kind == "refund" and failure:
        at, amount, fee = item.updated_at or item.created_at, item.amount, 0
        txn, kind, category, source = "txn_F" + item.id.removeprefix("re_"), "refund_failure", "refund_failure", item.id
        description = f"REFUND FAILURE FOR REFUND ({item.id})"
    elif item.kind == "refund":
        at, amount, fee = item.created_at, -item.amount, item.fee
        txn, kind, category, source = "txn_" + item.id.removeprefix("re_"), "refund", "refund", item.id
        description = f"REFUND FOR CHARGE ({record.description or charge_id(record)})"
    else:
        at, amount, fee = item.created_at, -item.amount, item.fee
        txn, kind, category, source = "txn_" + item.id.removeprefix("dp_"), "adjustment", "dispute", item.id
        description = f"Chargeback withdrawal for {charge_id(record)}"
    fee_details = [{
        "amount": fee, "application": None, "currency": record.currency.lower(),
        "description": "Stripe processing fees" if kind == "charge" else "Dispute fee", "type": "stripe_fee",
    }] if fee else []  # fmt: skip
    return {
        "id": txn, "object": "balance_transaction", "amount": amount, "available_on": unix(at),
        "balance_type": "payments", "created": unix(at), "currency": record.currency.lower(),
        "description": description, "exchange_rate": None, "fee": fee, "fee_details": fee_details,
        "net": amount - fee, "reporting_category": category, "source": source, "status": "available", "type": kind,
    }  # fmt: skip


def _cancellation_reason(stored: str | None) -> str | None:
    """What ``cancellation_reason`` says: the reason given (None: none was), ``automatic`` for an expired
    authorisation, ``abandoned`` for a cancel by the sandbox's admin API."""
    if stored is None or stored in CANCELLATION_REASONS:
        return stored
    return "automatic" if stored == "expired" else "abandoned"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _outcome(record: PaymentRecord, declined: tuple[str, str, str] | None) -> dict[str, object] | None:
    if record.status is PaymentStatus.PENDING:
        return None
    if declined is None:
        return {"advice_code": None, "network_advice_code": None, "network_decline_code": None,
                "network_status": "approved_by_network", "reason": None, "seller_message": "Payment complete.",
                "type": "authorized"}
    blocked = declined[1] == "fraudulent"
    return {
        "advice_code": None if blocked else "try_again_later",
        "network_advice_code": None,
        "network_decline_code": None,
        "network_status": "not_sent_to_network" if blocked else "declined_by_network",
        "reason": "highest_risk_level" if blocked else declined[1],
        "seller_message": "Stripe blocked this payment as too risky." if blocked else
        "The bank did not return any further details with this decline.",
        "type": "blocked" if blocked else "issuer_declined",
    }
