"""Stripe's account objects as the sandbox keeps them: Customer, PaymentMethod, Balance and Event
(docs.stripe.com/api/customers/object, /api/payment_methods/object, /api/balance/balance_object,
/api/events/object), with the fields of Stripe's canonical example objects (``fixtures3.json``).

Customers and attached payment methods are documents (``ledger_documents``): their body is the object as the API
serves it, written whole on every change. A test PaymentMethod id (``pm_card_visa``) is served as a fresh,
unattached PaymentMethod of its card; attaching one to a customer makes a PaymentMethod of its own (a new
``pm_…`` id that remembers the test card it came from, as Stripe's test mode does).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from datetime import datetime

from psp_adapters.sandbox.cards import TestCard
from psp_adapters.sandbox.stripe_form import unix

#: the ``api_version`` of the sandbox's events and of requests that name none: the version stripe-python 16 pins
#: (recon's default ``Stripe-Version``)
STRIPE_API_VERSION = "2026-10-28.endive"


def customer(
    customer_id: str, *, created: datetime, fields: Mapping[str, object], metadata: Mapping[str, str]
) -> dict[str, object]:
    """A new Customer; ``fields``: email, name, phone, description, invoice_settings' default payment method."""
    return {
        "id": customer_id,
        "object": "customer",
        "address": None,
        "balance": 0,
        "created": unix(created),
        "currency": None,
        "default_source": None,
        "delinquent": False,
        "description": fields.get("description"),
        "discount": None,
        "email": fields.get("email"),
        "invoice_prefix": secrets.token_hex(4).upper()[:7],
        "invoice_settings": {
            "custom_fields": None,
            "default_payment_method": fields.get("default_payment_method"),
            "footer": None,
            "rendering_options": None,
        },
        "livemode": False,
        "metadata": dict(metadata),
        "name": fields.get("name"),
        "next_invoice_sequence": 1,
        "phone": fields.get("phone"),
        "preferred_locales": [],
        "shipping": None,
        "tax_exempt": "none",
        "test_clock": None,
    }


def payment_method(
    method_id: str, card: TestCard, *, created: datetime, customer: str | None, metadata: Mapping[str, str],
    token: str,
) -> dict[str, object]:
    """A card PaymentMethod; ``token``: the test PaymentMethod it was made from, kept in the document as
    ``sandbox_token`` (``public`` leaves it out of every answer)."""
    return {
        "id": method_id,
        "object": "payment_method",
        "allow_redisplay": "unspecified",
        "billing_details": {
            "address": dict.fromkeys(("city", "country", "line1", "line2", "postal_code", "state")),
            "email": None, "name": None, "phone": None, "tax_id": None,
        },
        "card": {
            "brand": card.brand,
            "checks": {"address_line1_check": None, "address_postal_code_check": None, "cvc_check": "pass"},
            "country": card.country,
            "display_brand": card.display_brand,
            "exp_month": 12,
            "exp_year": 2034,
            "fingerprint": hashlib.sha256(f"{card.brand}{card.last4}".encode()).hexdigest()[:16],
            "funding": card.funding,
            "generated_from": None,
            "last4": card.last4,
            "networks": {"available": [card.brand], "preferred": None},
            "regulated_status": "unregulated",
            "three_d_secure_usage": {"supported": True},
            "wallet": None,
        },
        "created": unix(created),
        "customer": customer,
        "customer_account": None,
        "livemode": False,
        "metadata": dict(metadata),
        "type": "card",
        "sandbox_token": token,
    }


def public(document: Mapping[str, object]) -> dict[str, object]:
    """A stored document as the API serves it: without the sandbox's own bookkeeping fields."""
    return {name: value for name, value in document.items() if not name.startswith("sandbox_")}


def balance(available: Mapping[str, int]) -> dict[str, object]:
    """The Balance: ``available`` per currency (transactions are available at once: nothing pending; payouts
    take it out, ``stripe_payouts``)."""
    currencies = sorted(available) or ["usd"]
    return {
        "object": "balance",
        "available": [{"amount": available.get(c, 0), "currency": c, "source_types": {"card": available.get(c, 0)}}
                      for c in currencies],
        "connect_reserved": [{"amount": 0, "currency": c} for c in currencies],
        "livemode": False,
        "pending": [{"amount": 0, "currency": c, "source_types": {"card": 0}} for c in currencies],
    }


def event(
    event_id: str, type_: str, obj: Mapping[str, object], *, created: datetime, idempotency_key: str | None,
    previous: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """An Event: ``data.object`` as the API served the object at that moment (docs.stripe.com/api/events/object)."""
    data: dict[str, object] = {"object": dict(obj)}
    if previous:
        data["previous_attributes"] = dict(previous)
    return {
        "id": event_id,
        "object": "event",
        "api_version": STRIPE_API_VERSION,
        "created": unix(created),
        "data": data,
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": idempotency_key},
        "type": type_,
    }
