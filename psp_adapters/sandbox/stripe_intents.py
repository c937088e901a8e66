"""PaymentIntents (docs.stripe.com/api/payment_intents): create, update, confirm, capture, cancel, retrieve, list,
search, through the lifecycle of docs.stripe.com/payments/paymentintents/lifecycle.

An intent created without ``confirm=true`` waits (``requires_payment_method``, or ``requires_confirmation`` once it
has one); a confirm attempts the charge: the payment method's test card (``cards``) or the fault dice decide it.
A decline is 402 ``card_error`` with the intent back in ``requires_payment_method`` (it may be confirmed again);
an off-session charge that needs authentication is the ``authentication_required`` decline; slow settlement is
``processing``; ``capture_method=manual`` stops at ``requires_capture`` until a capture (of at most the amount;
less is a partial capture) or a cancel, and the authorisation expires after 7 days (canceled ``automatic``).
What may change when is Stripe's: amount, currency, payment method and capture method only before a charge
succeeds; a cancel only before one does; a capture only of ``requires_capture``.

Errors a write finds while it executes (a state it cannot be done in) are saved under its idempotency key, as
Stripe saves what an endpoint answered once it began executing; parameter errors are not.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from psp_adapters.protocol import ChargeRequest
from psp_adapters.sandbox.core import Response, Scope, json_response
from psp_adapters.sandbox.movements import DISPUTE_NEEDS_RESPONSE, Adjustment
from psp_adapters.sandbox.records import DISPUTE_FEE, PaymentRecord, random_id, sandbox_fee
from psp_adapters.sandbox.stripe_books import FLAVOR, StripeBooks
from psp_adapters.sandbox.stripe_expand import check as check_expansions
from psp_adapters.sandbox.stripe_form import REQUEST, Invalid, Params, error, invalid, missing
from psp_adapters.sandbox.stripe_lists import expanded, limit, listing, page_start, search_page
from psp_adapters.sandbox.stripe_search import parse
from psp_adapters.sandbox.stripe_wire import decline, intent_status
from psp_adapters.sandbox.webhook_events import Change
from psp_adapters.sandbox.wire import PaymentStatus

MAX_AMOUNT = 99_999_999
Run = Callable[[Scope], Response]
#: parameters accepted and not simulated (docs.stripe.com/api/payment_intents/create, /update, /confirm)
_IGNORED = frozenset({
    "amount_details", "application_fee_amount", "automatic_payment_methods", "confirmation_method",
    "confirmation_token", "error_on_requires_action", "excluded_payment_method_types", "hooks", "mandate",
    "mandate_data", "on_behalf_of", "payment_details", "payment_method_configuration", "payment_method_data",
    "payment_method_options", "payment_method_types", "radar_options", "receipt_email", "return_url",
    "setup_future_usage", "shipping", "statement_descriptor", "statement_descriptor_suffix", "transfer_data",
    "transfer_group", "use_stripe_sdk", "client_secret",
})  # fmt: skip
_MONEY = ("amount", "currency", "payment_method", "capture_method", "customer")
CREATE = _IGNORED | {*_MONEY, "confirm", "off_session", "metadata", "description", "expand"}
UPDATE = _IGNORED | {*_MONEY, "metadata", "description", "expand"}
CONFIRM = _IGNORED | {"payment_method", "off_session", "capture_method", "expand"}
CAPTURE = {"amount_to_capture", "application_fee_amount", "final_capture", "metadata", "statement_descriptor",
           "statement_descriptor_suffix", "transfer_data", "expand"}
CANCEL = {"cancellation_reason", "expand"}
_EDITABLE = (PaymentStatus.OPEN, PaymentStatus.FAILED)  # requires_payment_method, requires_confirmation
_STATE = "payment_intent_unexpected_state"
_METADATA_ONLY = re.compile(r"""\s*metadata\[(["'])((?:\\.|(?!\1).)*)\1\]:(["'])((?:\\.|(?!\3).)*)\3\s*""")


def create(books: StripeBooks, params: Params) -> Run:
    params.check_known(CREATE)
    amount, currency = _amount(params, required=True), _currency(params, required=True)
    method, confirm = params.text("payment_method") or None, params.flag("confirm") or False
    capture = params.choice("capture_method", ("automatic", "automatic_async", "manual")) or "automatic"
    params.choice("off_session", ("true", "false", "one_off", "recurring"))
    metadata, expand = params.metadata(), _expand(params)
    if confirm and method is None:
        raise _no_payment_method()
    charge = ChargeRequest(merchant_reference=metadata.get("merchant_reference", ""), amount=amount or 0,
                           currency=(currency or "").upper(), payment_method=method,
                           customer_reference=params.text("customer") or None,
                           description=params.text("description") or None)

    def run(scope: Scope) -> Response:
        record = PaymentRecord.new(charge, idempotency_key=scope.key or "", status=PaymentStatus.OPEN, reason=None,
                                   settle_to=None, settle_after=timedelta(0), now=scope.now,
                                   psp_reference=random_id("pi_"), flavor=FLAVOR, metadata=metadata,
                                   capture_method=capture)
        scope.ledger.insert_payment(record)
        scope.tell(Change("created", record, idempotency_key=scope.key))
        if confirm:
            record = attempt(books, scope, record)
        return answer(books, record, expand)

    return run


def update(books: StripeBooks, params: Params, intent_id: str) -> Run:
    params.check_known(UPDATE)
    amount, currency = _amount(params, required=False), _currency(params, required=False)
    capture = params.choice("capture_method", ("automatic", "automatic_async", "manual"))
    changes = {"amount": amount, "currency": currency.upper() if currency else None, "capture_method": capture,
               "payment_method": params.text("payment_method"), "customer_reference": params.text("customer")}
    changes = {name: value for name, value in changes.items() if value is not None}
    metadata, description, expand = params.metadata(), params.text("description"), _expand(params)

    def run(scope: Scope) -> Response:
        record = _intent(books, intent_id)
        money = sorted(name for name in changes if getattr(record, name) != changes[name])
        if money and record.status not in _EDITABLE:
            field = money[0].replace("_reference", "")
            raise invalid(f"This PaymentIntent's {field} could not be updated because it has a status of "
                          f"{intent_status(record)}. You may only update the {field} of a PaymentIntent with one of "
                          "the following statuses: requires_payment_method, requires_confirmation, requires_action.",
                          code=_STATE)
        merged = {key: value for key, value in {**record.metadata, **metadata}.items() if value != ""}
        record = dataclasses.replace(record, **changes, metadata=merged, updated_at=scope.now,  # type: ignore[arg-type]
                                     description=description if description is not None else record.description)
        if "payment_method" in changes and record.status is PaymentStatus.FAILED:
            record = dataclasses.replace(record, status=PaymentStatus.OPEN, failure_reason=None)
        scope.ledger.save_payment(record)
        return answer(books, record, expand)

    return run


def confirm(books: StripeBooks, params: Params, intent_id: str) -> Run:
    params.check_known(CONFIRM)
    method = params.text("payment_method") or None
    capture = params.choice("capture_method", ("automatic", "automatic_async", "manual"))
    params.choice("off_session", ("true", "false", "one_off", "recurring"))
    expand = _expand(params)

    def run(scope: Scope) -> Response:
        record = _intent(books, intent_id)
        if record.status not in _EDITABLE:
            raise invalid(f"You cannot confirm this PaymentIntent because it has a status of {intent_status(record)}.",
                          code=_STATE)
        record = dataclasses.replace(record, payment_method=method or record.payment_method,
                                     capture_method=capture or record.capture_method)
        if record.payment_method is None:
            raise _no_payment_method()
        return answer(books, attempt(books, scope, record), expand)

    return run


def capture(books: StripeBooks, params: Params, intent_id: str) -> Run:
    params.check_known(CAPTURE)
    wanted, expand, metadata = params.integer("amount_to_capture"), _expand(params), params.metadata()
    if wanted is not None and wanted <= 0:
        raise invalid("Invalid amount_to_capture: must be a positive integer", param="amount_to_capture")

    def run(scope: Scope) -> Response:
        record = _intent(books, intent_id)
        if record.status is not PaymentStatus.AUTHORIZED:
            raise invalid(f"This PaymentIntent could not be captured because it has a status of "
                          f"{intent_status(record)}. Only a PaymentIntent with one of the following statuses may be "
                          "captured: requires_capture.", code=_STATE)
        amount = record.amount if wanted is None else wanted
        if amount > record.amount:
            raise invalid(f"The amount to capture ({amount}) is greater than the amount capturable "
                          f"({record.amount}).", code="amount_too_large", param="amount_to_capture")
        record = dataclasses.replace(record, status=PaymentStatus.SUCCEEDED, amount_captured=amount,
                                     settled_at=scope.now, updated_at=scope.now, fee=sandbox_fee(amount),
                                     metadata={**record.metadata, **metadata})
        scope.ledger.save_payment(record)
        scope.tell(Change("captured", record, idempotency_key=scope.key))
        return answer(books, record, expand)

    return run


def cancel(books: StripeBooks, params: Params, intent_id: str) -> Run:
    params.check_known(CANCEL)
    reason = params.choice("cancellation_reason", ("duplicate", "fraudulent", "requested_by_customer", "abandoned"))
    expand = _expand(params)

    def run(scope: Scope) -> Response:
        record = _intent(books, intent_id)
        if record.status not in (*_EDITABLE, PaymentStatus.AUTHORIZED):
            raise invalid(f"You cannot cancel this PaymentIntent because it has a status of {intent_status(record)}. "
                          "Only a PaymentIntent with one of the following statuses may be canceled: "
                          "requires_payment_method, requires_capture, requires_confirmation, requires_action, "
                          "processing.", code=_STATE)
        record = dataclasses.replace(record, status=PaymentStatus.CANCELED, failure_reason=reason,
                                     settled_at=scope.now, updated_at=scope.now)
        scope.ledger.save_payment(record)
        scope.tell(Change("canceled", record, idempotency_key=scope.key))
        return answer(books, record, expand)

    return run


def attempt(books: StripeBooks, scope: Scope, record: PaymentRecord) -> PaymentRecord:
    """Charge ``record``'s payment method now (a confirm): its new state is written and told."""
    card = books.card(record.payment_method)
    decision = scope.decide(amount=record.amount, card=card)
    status, settle_to, now = decision.status, decision.settle_to, scope.now
    if record.capture_method == "manual":
        status = PaymentStatus.AUTHORIZED if status is PaymentStatus.SUCCEEDED else status
        settle_to = PaymentStatus.AUTHORIZED if settle_to is PaymentStatus.SUCCEEDED else settle_to
    pending = status is PaymentStatus.PENDING
    record = dataclasses.replace(
        record, status=status, failure_reason=decision.reason, settle_to=settle_to if pending else None,
        settle_at=now + timedelta(seconds=decision.settle_after_seconds) if pending else None, updated_at=now,
        settled_at=now if status.is_final else None, charged_at=now, fee=sandbox_fee(record.amount),
        authorized_at=now if status is PaymentStatus.AUTHORIZED else None,
    )
    scope.ledger.save_payment(record)
    scope.tell(Change("confirmed", record, idempotency_key=scope.key))
    if status is PaymentStatus.SUCCEEDED and card.dispute:
        dispute = Adjustment(id=random_id("dp_"), kind="dispute", psp_reference=record.psp_reference,
                             amount=record.amount, currency=record.currency, fee=DISPUTE_FEE, reason=card.dispute,
                             created_at=now, status=DISPUTE_NEEDS_RESPONSE)
        if not isinstance(scope.ledger.add_adjustment(dispute), str):
            scope.tell(Change("dispute", record, dispute))
    return record


def answer(books: StripeBooks, record: PaymentRecord, expand: list[str]) -> Response:
    """The intent as a write answers it: 200, or Stripe's 402 ``card_error`` with the intent inside for a decline."""
    intent = expanded(books.intent(record), Params(("expand[]", path) for path in expand), books.lookup)
    declined = decline(record)
    if declined is None:
        return json_response(200, intent)
    code, decline_code, message = declined
    found = intent.get("last_payment_error")
    param = found.get("param") if isinstance(found, dict) else None
    return error(402, "card_error", message, code=code, decline_code=decline_code, charge="ch_" +
                 record.psp_reference.removeprefix("pi_"), param=param, payment_intent=intent)


# -- reads -------------------------------------------------------------------------------------------------


def retrieve(books: StripeBooks, params: Params, intent_id: str) -> dict[str, object]:
    params.check_known({"expand", "client_secret"})
    return expanded(books.intent(_intent(books, intent_id)), params, books.lookup)


def list_intents(books: StripeBooks, params: Params, window: tuple[datetime, datetime]) -> dict[str, object]:
    """``GET /v1/payment_intents``: newest first, by ``created``, ``customer``, cursors either way."""
    params.check_known({"created", "customer", "limit", "starting_after", "ending_before", "expand"})
    after, before, size = params.text("starting_after"), params.text("ending_before"), limit(params)
    cursor_id = after or before
    cursor = books.ledger.position(cursor_id, flavor=FLAVOR) if cursor_id else None
    if cursor_id and cursor is None:
        raise missing("payment_intent", cursor_id, param="starting_after" if after else "ending_before")
    lo, hi = window
    page, more = books.ledger.created_page(lo, hi, flavor=FLAVOR, after=cursor, limit=size, newest_first=not before,
                                           customer=params.text("customer"))
    records = page[::-1] if before else page
    doc = listing("/v1/payment_intents", [books.intent(r) for r in records], more is not None)
    return expanded(doc, params, books.lookup)


def search(books: StripeBooks, params: Params) -> dict[str, object]:
    """``GET /v1/payment_intents/search``: newest first; a query of one metadata key reads its index."""
    params.check_known({"query", "limit", "page", "expand"})
    query = params.text("query") or ""
    predicate, start, size = parse(query, "payment_intent"), page_start(params), limit(params)
    simple = _METADATA_ONLY.fullmatch(query)
    if simple:
        unquote = re.compile(r"\\(.)")
        key, value = unquote.sub(r"\1", simple[2]), unquote.sub(r"\1", simple[4])
        candidates = books.ledger.search_metadata(key, value, flavor=FLAVOR)
    else:
        candidates = books.ledger.created_page(datetime.fromtimestamp(0, UTC), datetime.max.replace(tzinfo=UTC),
                                               flavor=FLAVOR, after=None, limit=10**9, newest_first=True)[0]
    found = [intent for intent in map(books.intent, candidates) if predicate(intent)]
    doc = search_page("/v1/payment_intents/search", found[start:start + size], start=start, size=size,
                      total=len(found))
    return expanded(doc, params, books.lookup)


def _intent(books: StripeBooks, intent_id: str) -> PaymentRecord:
    record = books.payment(intent_id)
    if record is None:
        raise missing("payment_intent", intent_id, param="intent")
    return record


def _amount(params: Params, *, required: bool) -> int | None:
    amount = params.integer("amount")
    if amount is None and required:
        raise invalid("Missing required param: amount.", code="parameter_missing", param="amount")
    if amount is not None and not 0 < amount <= MAX_AMOUNT:
        code = "amount_too_small" if amount <= 0 else "amount_too_large"
        raise invalid(f"Amount must be 1 to {MAX_AMOUNT} minor units.", code=code, param="amount")
    return amount


def _currency(params: Params, *, required: bool) -> str | None:
    currency = params.text("currency") or None
    if currency is None and required:
        raise invalid("Missing required param: currency.", code="parameter_missing", param="currency")
    if currency is not None and (len(currency) != 3 or not currency.isalpha()):
        raise invalid(f"Invalid currency: {currency}.", code="parameter_invalid_string", param="currency")
    return currency


def _expand(params: Params) -> list[str]:
    paths = params.strings("expand")
    check_expansions(paths)
    return paths


def _no_payment_method() -> Invalid:
    return Invalid(error(400, REQUEST, "You cannot confirm this PaymentIntent because it's missing a payment method. "
                         "You can either update the PaymentIntent with a payment method and then confirm it again, or "
                         "confirm it again directly with a payment method.", code=_STATE))
