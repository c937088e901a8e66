"""The account's other objects: Customers (docs.stripe.com/api/customers), PaymentMethods
(/api/payment_methods: retrieve, attach, detach, list) and Events (/api/events: retrieve, list).

Customers the API created are kept and served; a ``cus_…`` id the sandbox never created is still taken where a
payment names its customer (so that recon's own payments need no set-up), but is 404 here. Attaching a test
PaymentMethod (``pm_card_visa``) to a customer makes a PaymentMethod of its own, a new ``pm_…`` that charges like
the test card it came from; a stored one is attached to at most one customer. Events are kept for every change
(``stripe_events``), newest first; ``type`` takes a ``*`` wildcard (``charge.*``), ``types[]`` up to 20 types.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

from psp_adapters.sandbox import stripe_objects as so
from psp_adapters.sandbox.cards import card_of
from psp_adapters.sandbox.core import Response, Scope, json_response
from psp_adapters.sandbox.ledger_documents import Document
from psp_adapters.sandbox.records import random_id
from psp_adapters.sandbox.stripe_books import StripeBooks
from psp_adapters.sandbox.stripe_expand import check as check_expansions
from psp_adapters.sandbox.stripe_form import Params, invalid, missing
from psp_adapters.sandbox.stripe_intents import Run
from psp_adapters.sandbox.stripe_lists import (
    created_window,
    expanded,
    limit,
    listing,
    page_start,
    paginate,
    search_page,
)
from psp_adapters.sandbox.stripe_search import parse
from psp_adapters.sandbox.webhook_events import Change

_CUSTOMER_FIELDS = ("email", "name", "phone", "description")
CUSTOMER = {*_CUSTOMER_FIELDS, "metadata", "payment_method", "invoice_settings", "expand", "address", "shipping",
            "preferred_locales", "tax_exempt", "balance", "source", "test_clock", "tax", "tax_id_data",
            "cash_balance", "invoice_prefix", "next_invoice_sequence", "promotion_code", "coupon"}


def create_customer(books: StripeBooks, params: Params) -> Run:
    params.check_known(CUSTOMER)
    fields, metadata, expand = _customer_fields(params), params.metadata(), _expand(params)
    method = params.text("payment_method") or None

    def run(scope: Scope) -> Response:
        if method is not None and not books.known_card(method):
            raise missing("PaymentMethod", method, param="payment_method")
        customer_id = random_id("cus_", 14)
        doc = so.customer(customer_id, created=scope.now, fields=fields, metadata=metadata)
        books.ledger.put_document(Document(customer_id, "customer", None, scope.now, doc))
        scope.tell(Change("customer.created", None, idempotency_key=scope.key, document=so.public(doc)))
        if method is not None:
            _attach(books, scope, method, customer_id)
        return json_response(200, _expanded(books, books.customer(customer_id) or doc, expand))

    return run


def update_customer(books: StripeBooks, params: Params, customer_id: str) -> Run:
    params.check_known(CUSTOMER)
    fields, metadata, expand = _customer_fields(params), params.metadata(), _expand(params)

    def run(scope: Scope) -> Response:
        stored = _customer(books, customer_id)
        doc = dict(stored.body)
        doc.update({name: value or None for name, value in fields.items() if name in _CUSTOMER_FIELDS})
        if "default_payment_method" in fields:
            doc["invoice_settings"] = {**_mapping(doc.get("invoice_settings")),
                                       "default_payment_method": fields["default_payment_method"] or None}
        old = _mapping(doc.get("metadata"))
        doc["metadata"] = {key: value for key, value in {**old, **metadata}.items() if value != ""}
        books.ledger.put_document(Document(customer_id, "customer", None, stored.created_at, doc))
        scope.tell(Change("customer.updated", None, idempotency_key=scope.key, document=so.public(doc)))
        return json_response(200, _expanded(books, so.public(doc), expand))

    return run


def retrieve_customer(books: StripeBooks, params: Params, customer_id: str) -> dict[str, object]:
    params.check_known({"expand"})
    return expanded(so.public(_customer(books, customer_id).body), params, books.lookup)


def list_customers(books: StripeBooks, params: Params) -> dict[str, object]:
    params.check_known({"created", "email", "limit", "starting_after", "ending_before", "expand", "test_clock"})
    lo, hi = created_window(params)
    email = params.text("email")
    found = [so.public(d.body) for d in books.ledger.documents("customer", lo=lo, hi=hi)]
    found = [c for c in found if email is None or c.get("email") == email]
    page, more = paginate(found, params, id_of=lambda c: str(c["id"]), kind="customer")
    return expanded(listing("/v1/customers", page, more), params, books.lookup)


def search_customers(books: StripeBooks, params: Params) -> dict[str, object]:
    params.check_known({"query", "limit", "page", "expand"})
    predicate, start, size = parse(params.text("query") or "", "customer"), page_start(params), limit(params)
    found = [c for c in (so.public(d.body) for d in books.ledger.documents("customer")) if predicate(c)]
    doc = search_page("/v1/customers/search", found[start:start + size], start=start, size=size, total=len(found))
    return expanded(doc, params, books.lookup)


# -- payment methods ---------------------------------------------------------------------------------------


def retrieve_method(books: StripeBooks, params: Params, method_id: str) -> dict[str, object]:
    params.check_known({"expand"})
    found = books.payment_method(method_id)
    if found is None:
        raise missing("PaymentMethod", method_id)
    return expanded(found, params, books.lookup)


def attach_method(books: StripeBooks, params: Params, method_id: str) -> Run:
    params.check_known({"customer", "expand", "customer_account"})
    customer_id, expand = params.text("customer"), _expand(params)
    if not customer_id:
        raise invalid("Missing required param: customer.", code="parameter_missing", param="customer")

    def run(scope: Scope) -> Response:
        _customer(books, customer_id)
        return json_response(200, _expanded(books, _attach(books, scope, method_id, customer_id), expand))

    return run


def detach_method(books: StripeBooks, params: Params, method_id: str) -> Run:
    params.check_known({"expand"})
    expand = _expand(params)

    def run(scope: Scope) -> Response:
        stored = books.ledger.get_document(method_id, type="payment_method")
        if stored is None or not stored.body.get("customer"):
            if stored is None and card_of(method_id) is None:
                raise missing("PaymentMethod", method_id)
            raise invalid(f"The payment method {method_id} is not attached to a customer.",
                          code="payment_method_unexpected_state")
        doc = {**stored.body, "customer": None}
        books.ledger.put_document(Document(method_id, "payment_method", None, stored.created_at, doc))
        scope.tell(Change("payment_method.detached", None, idempotency_key=scope.key, document=so.public(doc)))
        return json_response(200, _expanded(books, so.public(doc), expand))

    return run


def list_methods(books: StripeBooks, params: Params, customer_id: str | None = None) -> dict[str, object]:
    params.check_known({"customer", "type", "limit", "starting_after", "ending_before", "expand",
                        "allow_redisplay"} - ({"customer"} if customer_id else set()))
    customer = customer_id or params.text("customer")
    if customer is None:
        raise invalid("Missing required param: customer.", code="parameter_missing", param="customer")
    _customer(books, customer)
    if params.text("type") not in (None, "card"):
        methods: list[dict[str, object]] = []
    else:
        methods = [so.public(d.body) for d in books.ledger.documents("payment_method", parent=customer)]
    page, more = paginate(methods, params, id_of=lambda m: str(m["id"]), kind="payment_method")
    url = f"/v1/customers/{customer}/payment_methods" if customer_id else "/v1/payment_methods"
    return expanded(listing(url, page, more), params, books.lookup)


def _attach(books: StripeBooks, scope: Scope, method_id: str, customer_id: str) -> dict[str, object]:
    """Attach a payment method (a test one: a new PaymentMethod of its card) to a customer; told as
    ``payment_method.attached``; returns it as the API serves it."""
    stored = books.ledger.get_document(method_id, type="payment_method")
    if stored is None:
        card = card_of(method_id)
        if card is None:
            raise missing("PaymentMethod", method_id, param="payment_method")
        new_id = random_id("pm_")
        doc = so.payment_method(new_id, card, created=scope.now, customer=customer_id, metadata={}, token=method_id)
        stored = Document(new_id, "payment_method", customer_id, scope.now, doc)
    elif stored.body.get("customer") not in (None, customer_id):
        raise invalid("The payment method you provided has already been attached to a customer.",
                      code="payment_method_unexpected_state", param="payment_method")
    else:
        stored = Document(stored.id, "payment_method", customer_id, stored.created_at,
                          {**stored.body, "customer": customer_id})
    books.ledger.put_document(stored)
    public = so.public(stored.body)
    scope.tell(Change("payment_method.attached", None, idempotency_key=scope.key, document=public))
    return public


# -- events ------------------------------------------------------------------------------------------------


def retrieve_event(books: StripeBooks, params: Params, event_id: str) -> dict[str, object]:
    params.check_known({"expand"})
    found = books.ledger.get_document(event_id, type="event")
    if found is None:
        raise missing("event", event_id, param="id")
    return dict(found.body)


def list_events(books: StripeBooks, params: Params) -> dict[str, object]:
    params.check_known({"created", "type", "types", "limit", "starting_after", "ending_before", "delivery_success",
                        "expand"})
    lo, hi = created_window(params)
    one, many = params.text("type"), params.strings("types")
    if one and many:
        raise invalid("You may only specify one of these parameters: type, types.", param="types")
    if len(many) > 20:
        raise invalid("Invalid array: types has at most 20 event types.", param="types")
    patterns = [one] if one else many
    events = [dict(d.body) for d in books.ledger.documents("event", lo=lo, hi=hi)]
    if patterns:
        events = [e for e in events if any(fnmatch.fnmatchcase(str(e["type"]), p) for p in patterns)]
    page, more = paginate(events, params, id_of=lambda e: str(e["id"]), kind="event")
    return listing("/v1/events", page, more)


def _customer(books: StripeBooks, customer_id: str) -> Document:
    found = books.ledger.get_document(customer_id, type="customer")
    if found is None:
        raise missing("customer", customer_id, param="customer")
    return found


def _customer_fields(params: Params) -> dict[str, str | None]:
    fields: dict[str, str | None] = {name: params.text(name) for name in _CUSTOMER_FIELDS if name in params.names()}
    settings = params.hash("invoice_settings")
    if "default_payment_method" in settings:
        value = settings["default_payment_method"]
        fields["default_payment_method"] = value if isinstance(value, str) else None
    return fields


def _expand(params: Params) -> list[str]:
    paths = params.strings("expand")
    check_expansions(paths)
    return paths


def _expanded(books: StripeBooks, doc: dict[str, object], paths: list[str]) -> dict[str, object]:
    return expanded(doc, Params(("expand[]", path) for path in paths), books.lookup)


def _mapping(value: object) -> dict[str, object]:
    return dict(value) if isinstance(value, Mapping) else {}

