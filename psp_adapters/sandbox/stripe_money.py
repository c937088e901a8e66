"""Where the money went: Refunds (docs.stripe.com/api/refunds), Charges (/api/charges), the Balance
(/api/balance) and BalanceTransactions (/api/balance_transactions).

Refunds take a ``payment_intent`` or a ``charge`` of a succeeded payment and at most what is left of its capture
(the ledger checks it in the refund's own transaction); without ``amount``, all that is left. A refund is
``succeeded`` at once, or by the faults (``refund_pending_fraction``, ``refund_fail_fraction``) and the test card
``pm_card_refundFail``: ``pending`` then ``succeeded``, or ``succeeded`` then ``failed`` (its money back in a
``refund_failure`` balance transaction), ``settle_after_seconds`` later. Only a ``requires_action`` refund can be
canceled, and card refunds never are. Balance transactions are available at once: the balance has nothing pending.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from psp_adapters.sandbox import stripe_objects as so
from psp_adapters.sandbox import stripe_payouts as payouts
from psp_adapters.sandbox.core import Response, Scope, json_response
from psp_adapters.sandbox.movements import REFUND_PENDING, REFUND_SUCCEEDED, Adjustment
from psp_adapters.sandbox.records import PaymentRecord, random_id
from psp_adapters.sandbox.stripe_books import FLAVOR, StripeBooks
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
from psp_adapters.sandbox.stripe_payouts import transactions
from psp_adapters.sandbox.stripe_search import parse
from psp_adapters.sandbox.webhook_events import Change

REFUND_CREATE = {"amount", "charge", "payment_intent", "reason", "metadata", "expand", "instructions_email",
                 "origin", "refund_application_fee", "reverse_transfer", "currency", "customer"}
_ALL_TIME = (datetime.fromtimestamp(0, UTC), datetime(9999, 12, 31, tzinfo=UTC))
_REFUSALS = {
    "charge_already_refunded": "Charge {charge} has already been refunded.",
    "amount_too_large": "Refund amount ({amount}) is greater than unrefunded amount on charge ({left}).",
    "charge_disputed": "Charge {charge} has been charged back; cannot issue a refund.",
    "payment_not_succeeded": "This PaymentIntent does not have a successful charge to refund.",
}


def create_refund(books: StripeBooks, params: Params) -> Run:
    params.check_known(REFUND_CREATE)
    intent_id, charge_id = params.text("payment_intent") or None, params.text("charge") or None
    if intent_id is None and charge_id is None:
        raise invalid("One of the following params should be provided for this request: payment_intent or charge.",
                      code="parameter_missing")
    amount, metadata = params.integer("amount"), params.metadata()
    if amount is not None and amount <= 0:
        raise invalid("Invalid amount: must be a positive integer", code="parameter_invalid_integer", param="amount")
    reason = params.choice("reason", ("duplicate", "fraudulent", "requested_by_customer"))
    expand = params.strings("expand")
    check_expansions(expand)

    def run(scope: Scope) -> Response:
        record = _refunded_payment(books, intent_id, charge_id)
        left = scope.ledger.refundable(record)
        fate = scope.refund_fate(card=books.card(record.payment_method))
        later = scope.now + timedelta(seconds=scope.faults.settle_after_seconds)
        refund = Adjustment(
            id=random_id("re_"), kind="refund", psp_reference=record.psp_reference,
            amount=left if amount is None else amount, currency=record.currency, fee=0, reason=reason,
            created_at=scope.now, status=REFUND_PENDING if fate == "pending" else REFUND_SUCCEEDED,
            settle_to={"pending": REFUND_SUCCEEDED, "fail": "failed"}.get(fate or ""),
            settle_at=later if fate else None,
            updated_at=scope.now, metadata=metadata,
        )  # fmt: skip
        result = scope.ledger.add_adjustment(refund)
        if isinstance(result, str):
            message = _REFUSALS.get(result, result).format(charge="ch_" + record.psp_reference[3:],
                                                           amount=refund.amount, left=left)
            raise invalid(message, code=None if result == "payment_not_succeeded" else result,
                          param="amount" if result == "amount_too_large" else None)
        scope.tell(Change("refund", record, refund, idempotency_key=scope.key))
        return json_response(200, expanded(books.refund(refund), _expansions(expand), books.lookup))

    return run


def update_refund(books: StripeBooks, params: Params, refund_id: str) -> Run:
    params.check_known({"metadata", "expand"})
    metadata, expand = params.metadata(), params.strings("expand")
    check_expansions(expand)

    def run(scope: Scope) -> Response:
        refund = _refund(books, refund_id)
        merged = {key: value for key, value in {**refund.metadata, **metadata}.items() if value != ""}
        refund = dataclasses.replace(refund, metadata=merged)
        scope.ledger.save_adjustment(refund)
        return json_response(200, expanded(books.refund(refund), _expansions(expand), books.lookup))

    return run


def cancel_refund(books: StripeBooks, params: Params, refund_id: str) -> Run:
    params.check_known({"expand"})

    def run(_scope: Scope) -> Response:
        refund = _refund(books, refund_id)
        raise invalid(f"This refund cannot be canceled because it has a status of {refund.status}. Only refunds with "
                      "a status of requires_action can be canceled.", code="refund_cannot_be_canceled")

    return run


def retrieve_refund(books: StripeBooks, params: Params, refund_id: str) -> dict[str, object]:
    params.check_known({"expand"})
    return expanded(books.refund(_refund(books, refund_id)), params, books.lookup)


def list_refunds(books: StripeBooks, params: Params) -> dict[str, object]:
    params.check_known({"charge", "payment_intent", "created", "limit", "starting_after", "ending_before", "expand"})
    charge_id, intent_id = params.text("charge"), params.text("payment_intent")
    of = None
    if charge_id or intent_id:
        record = books.payment_of_charge(charge_id) if charge_id else books.payment(intent_id or "")
        if record is None:
            raise missing("charge" if charge_id else "payment_intent", charge_id or intent_id or "")
        of = record.psp_reference
    lo, hi = created_window(params)
    refunds = books.ledger.adjustments_page("refund", flavor=FLAVOR, lo=lo, hi=hi, psp_reference=of)
    page, more = paginate(refunds, params, id_of=lambda r: r.id, kind="refund")
    return expanded(listing("/v1/refunds", [books.refund(r) for r in page], more), params, books.lookup)


def _refunded_payment(books: StripeBooks, intent_id: str | None, charge_id: str | None) -> PaymentRecord:
    record = books.payment(intent_id) if intent_id else books.payment_of_charge(charge_id or "")
    if record is None:
        raise missing("payment_intent" if intent_id else "charge", intent_id or charge_id or "",
                      param="payment_intent" if intent_id else "charge")
    if intent_id and charge_id and "ch_" + record.psp_reference[3:] != charge_id:
        raise invalid(f"The charge {charge_id} does not belong to the PaymentIntent {intent_id}.", param="charge")
    return record


def _refund(books: StripeBooks, refund_id: str) -> Adjustment:
    refund = books.refund_by_id(refund_id)
    if refund is None:
        raise missing("refund", refund_id, param="refund")
    return refund


def _expansions(paths: list[str]) -> Params:
    return Params(("expand[]", path) for path in paths)


# -- charges -----------------------------------------------------------------------------------------------


def retrieve_charge(books: StripeBooks, params: Params, charge_id: str) -> dict[str, object]:
    params.check_known({"expand"})
    record = books.payment_of_charge(charge_id)
    if record is None:
        raise missing("charge", charge_id, param="charge")
    return expanded(books.charge(record), params, books.lookup)


def list_charges(books: StripeBooks, params: Params) -> dict[str, object]:
    params.check_known({"created", "customer", "payment_intent", "limit", "starting_after", "ending_before",
                        "transfer_group", "expand"})
    lo, hi = created_window(params)
    after, before, size = params.text("starting_after"), params.text("ending_before"), limit(params)
    cursor_id = after or before
    cursor = books.ledger.position("pi_" + cursor_id.removeprefix("ch_"), flavor=FLAVOR) if cursor_id else None
    if cursor_id and cursor is None:
        raise missing("charge", cursor_id, param="starting_after" if after else "ending_before")
    page, more = books.ledger.created_page(lo, hi, flavor=FLAVOR, after=cursor, limit=size, newest_first=not before,
                                           customer=params.text("customer"),
                                           psp_reference=params.text("payment_intent"), charged_only=True)
    records = page[::-1] if before else page
    return expanded(listing("/v1/charges", [books.charge(r) for r in records], more is not None), params,
                    books.lookup)


def search_charges(books: StripeBooks, params: Params) -> dict[str, object]:
    params.check_known({"query", "limit", "page", "expand"})
    predicate, start, size = parse(params.text("query") or "", "charge"), page_start(params), limit(params)
    records = books.ledger.created_page(*_ALL_TIME, flavor=FLAVOR, after=None, limit=10**9, newest_first=True,
                                        charged_only=True)[0]
    found = [charge for charge in map(books.charge, records) if predicate(charge)]
    doc = search_page("/v1/charges/search", found[start:start + size], start=start, size=size, total=len(found))
    return expanded(doc, params, books.lookup)


# -- the balance and its transactions ----------------------------------------------------------------------


def balance(books: StripeBooks, params: Params) -> dict[str, object]:
    params.check_known({"expand"})
    available: dict[str, int] = {}
    for txn in transactions(books, *_ALL_TIME):
        available[txn.currency] = available.get(txn.currency, 0) + txn.net
    return so.balance(available)


def retrieve_transaction(books: StripeBooks, params: Params, txn_id: str) -> dict[str, object]:
    params.check_known({"expand"})
    found = books.transaction(txn_id)
    if found is None:
        raise missing("balance_transaction", txn_id, param="id")
    return expanded(found, params, books.lookup)


def list_transactions(books: StripeBooks, params: Params) -> dict[str, object]:
    """Newest first; ``payout=po_…``: the transactions that payout paid out, then its own (type ``payout``)."""
    params.check_known({"created", "limit", "starting_after", "ending_before", "type", "expand", "currency",
                        "payout", "source"})
    lo, hi = created_window(params)
    payout_id, currency, type_filter = params.text("payout"), params.text("currency"), params.text("type")
    if payout_id:
        stored = payouts.payout(books, payout_id)
        if stored is None:
            raise missing("payout", payout_id, param="payout")
        found = [t for t in payouts.paid_out(books, stored)
                 if lo <= t.at < hi and type_filter in (None, t.doc["type"])]
    else:
        found = transactions(books, lo, hi, type_filter)
    if currency:
        found = [t for t in found if t.currency == currency.lower()]
    page, more = paginate(found, params, id_of=lambda t: t.id, kind="balance_transaction")
    return expanded(listing("/v1/balance_transactions", [t.doc for t in page], more), params, books.lookup)
