"""The Stripe flavour's endpoints, each driven by Stripe's official SDK (stripe-python) over real HTTP, every answer
checked against Stripe's canonical objects (``stripe_checks``): customers, payment methods, the PaymentIntent
lifecycle (update, confirm, capture, cancel, expiry), charges, refunds and their statuses, events, the balance
and balance transactions (docs.stripe.com/api).

Where the SDK and the sandbox disagree, the sandbox is wrong: an answer the SDK cannot read as its typed object,
or an error it does not raise as the documented exception class, fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import stripe

from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.records import DISPUTE_FEE, sandbox_fee
from tests.adapters.sandbox.stripe_checks import CheckedClient, check_document, sdk
from tests.adapters.sandbox.test_flavor_stripe import START, Clock

KEY = "sk_test_sdk_0000"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(clock: Clock) -> Iterator[SandboxServer]:
    with SandboxServer(flavor="stripe", api_key=KEY, now_func=clock) as srv:
        yield srv


@pytest.fixture
def checked() -> Iterator[CheckedClient]:
    client = CheckedClient()
    try:
        yield client
    finally:
        client.close()
    assert client.answers > 0 and client.checked > 0  # the oracle saw what the test did


@pytest.fixture
def client(server: SandboxServer, checked: CheckedClient) -> stripe.StripeClient:
    return sdk(server.url, KEY, client=checked)


def faults(server: SandboxServer, **changes: object) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    assert httpx.post(f"{server.url}/_admin/faults", json=changes, headers=headers, timeout=5).status_code == 200


def pay(client: stripe.StripeClient, method: str = "pm_card_visa", **params: Any) -> stripe.PaymentIntent:
    return client.v1.payment_intents.create(params={  # type: ignore[arg-type]
        "amount": 1000, "currency": "usd", "payment_method": method, "confirm": True, "off_session": True,
        "metadata": {"merchant_reference": "order-1"}, **params})


def event_types(client: stripe.StripeClient, **params: Any) -> list[str]:
    return [e.type for e in reversed(client.v1.events.list(params={"limit": 100, **params}).data)]


# -- customers and payment methods (docs.stripe.com/api/customers, /api/payment_methods) --------------------


def test_customers__create_retrieve_update_list_and_unknown_ids_are_404(client: stripe.StripeClient) -> None:
    created = client.v1.customers.create(params={"email": "jenny@example.com", "name": "Jenny",
                                                 "metadata": {"shop": "1"}})
    other = client.v1.customers.create(params={"email": "other@example.com"})

    assert isinstance(created, stripe.Customer) and created.id.startswith("cus_")
    assert client.v1.customers.retrieve(created.id).to_dict() == created.to_dict()
    updated = client.v1.customers.update(created.id, params={"name": "Jenny R", "metadata": {"shop": "", "v": "2"}})
    assert (updated.name, updated.email, updated.metadata.to_dict()) == ("Jenny R", "jenny@example.com", {"v": "2"})
    assert [c.id for c in client.v1.customers.list().data] == [other.id, created.id]  # newest first
    assert [c.id for c in client.v1.customers.list(params={"email": "jenny@example.com"}).data] == [created.id]
    with pytest.raises(stripe.InvalidRequestError) as missing:
        client.v1.customers.retrieve("cus_missing")
    assert (missing.value.http_status, missing.value.code) == (404, "resource_missing")
    assert event_types(client) == ["customer.created", "customer.created", "customer.updated"]


def test_payment_methods__a_test_card_attached_becomes_the_customers_own(client: stripe.StripeClient) -> None:
    customer = client.v1.customers.create()
    token = client.v1.payment_methods.retrieve("pm_card_mastercard")
    attached = client.v1.payment_methods.attach("pm_card_mastercard", params={"customer": customer.id})

    assert (token.id, token.customer, token.card.brand, token.card.last4) == (  # type: ignore[union-attr]
        "pm_card_mastercard", None, "mastercard", "4444")
    assert attached.id.startswith("pm_") and attached.id != "pm_card_mastercard"
    assert (attached.customer, attached.card.last4) == (customer.id, "4444")  # type: ignore[union-attr]
    assert [m.id for m in client.v1.customers.payment_methods.list(customer.id).data] == [attached.id]
    listed = client.v1.payment_methods.list(params={"customer": customer.id, "type": "card"})
    assert [m.id for m in listed.data] == [attached.id]
    intent = pay(client, attached.id, customer=customer.id)  # charges like the card it came from
    assert intent.status == "succeeded"
    assert client.v1.charges.retrieve(str(intent.latest_charge)).payment_method_details.card.last4 == "4444"  # type: ignore[union-attr]
    assert client.v1.payment_methods.detach(attached.id).customer is None
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_methods.detach(attached.id)  # not attached any more
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        client.v1.payment_methods.attach("pm_card_visa", params={"customer": "cus_missing"})
    assert unknown.value.http_status == 404
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_methods.retrieve("pm_nothing_of_ours")
    types = event_types(client)
    assert types[:2] == ["customer.created", "payment_method.attached"] and "payment_method.detached" in types


def test_customers__created_with_a_payment_method_attach_it(client: stripe.StripeClient) -> None:
    customer = client.v1.customers.create(params={
        "payment_method": "pm_card_visa", "invoice_settings": {"default_payment_method": "pm_card_visa"}})
    [method] = client.v1.customers.payment_methods.list(customer.id).data
    assert method.card.last4 == "4242" and method.customer == customer.id  # type: ignore[union-attr]


# -- the PaymentIntent lifecycle (docs.stripe.com/payments/paymentintents/lifecycle) --------------------------


def test_intent__created_then_updated_then_confirmed(client: stripe.StripeClient) -> None:
    intent = client.v1.payment_intents.create(params={"amount": 500, "currency": "eur"})
    assert (intent.status, intent.latest_charge, intent.payment_method) == ("requires_payment_method", None, None)
    intent = client.v1.payment_intents.update(intent.id, params={"payment_method": "pm_card_visa", "amount": 700,
                                                                 "metadata": {"merchant_reference": "order-9"}})
    assert (intent.status, intent.amount) == ("requires_confirmation", 700)
    with pytest.raises(stripe.InvalidRequestError) as early:
        client.v1.payment_intents.capture(intent.id)
    assert early.value.code == "payment_intent_unexpected_state"

    confirmed = client.v1.payment_intents.confirm(intent.id)

    assert (confirmed.status, confirmed.amount_received) == ("succeeded", 700)
    assert str(confirmed.latest_charge).startswith("ch_")
    with pytest.raises(stripe.InvalidRequestError) as late:
        client.v1.payment_intents.update(intent.id, params={"amount": 900})
    assert late.value.code == "payment_intent_unexpected_state" and "amount" in str(late.value.user_message)
    relabelled = client.v1.payment_intents.update(intent.id, params={"metadata": {"note": "x"}, "description": "d"})
    assert relabelled.metadata.to_dict() == {"merchant_reference": "order-9", "note": "x"}
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_intents.cancel(intent.id)  # a succeeded intent cannot be canceled
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_intents.confirm(intent.id)  # nor confirmed again
    assert event_types(client, types=["payment_intent.created", "payment_intent.succeeded", "charge.succeeded"]) == [
        "payment_intent.created", "charge.succeeded", "payment_intent.succeeded"]


def test_intent__a_declined_intent_can_be_confirmed_again_with_another_card(client: stripe.StripeClient) -> None:
    with pytest.raises(stripe.CardError) as declined:
        pay(client, "pm_card_visa_chargeDeclined")
    intent_id = declined.value.error.payment_intent.id  # type: ignore[union-attr]

    retried = client.v1.payment_intents.confirm(intent_id, params={"payment_method": "pm_card_visa"})

    assert (retried.status, retried.last_payment_error) == ("succeeded", None)


def test_intent__manual_capture_authorises_then_captures_part(client: stripe.StripeClient) -> None:
    intent = pay(client, capture_method="manual")
    assert (intent.status, intent.amount_capturable, intent.amount_received) == ("requires_capture", 1000, 0)
    charge = client.v1.charges.retrieve(str(intent.latest_charge))
    assert (charge.captured, charge.status, charge.amount_captured) == (False, "succeeded", 0)
    capture_before = charge.payment_method_details.card.capture_before  # type: ignore[union-attr]
    assert capture_before == int((START + timedelta(days=7)).timestamp())  # docs: 7 days for most cards
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_intents.capture(intent.id, params={"amount_to_capture": 1001})

    captured = client.v1.payment_intents.capture(intent.id, params={"amount_to_capture": 600})

    assert (captured.status, captured.amount_received, captured.amount_capturable) == ("succeeded", 600, 0)
    charge = client.v1.charges.retrieve(str(intent.latest_charge), params={"expand": ["balance_transaction"]})
    assert (charge.captured, charge.amount_captured, charge.amount) == (True, 600, 1000)
    txn = charge.balance_transaction
    assert isinstance(txn, stripe.BalanceTransaction)
    assert (txn.amount, txn.fee, txn.net) == (600, sandbox_fee(600), 600 - sandbox_fee(600))
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_intents.capture(intent.id)  # captured already
    assert event_types(client, type="payment_intent.*")[-2:] == [
        "payment_intent.amount_capturable_updated", "payment_intent.succeeded"]
    assert "charge.captured" in event_types(client, type="charge.*")


def test_intent__an_authorisation_canceled_or_left_to_expire_is_released(
    client: stripe.StripeClient, clock: Clock
) -> None:
    canceled = pay(client, capture_method="manual")
    expiring = pay(client, capture_method="manual")

    released = client.v1.payment_intents.cancel(canceled.id, params={"cancellation_reason": "requested_by_customer"})
    clock.advance(days=7, seconds=1)
    expired = client.v1.payment_intents.retrieve(expiring.id)

    assert (released.status, released.cancellation_reason) == ("canceled", "requested_by_customer")
    assert (expired.status, expired.cancellation_reason) == ("canceled", "automatic")
    charge = client.v1.charges.retrieve(str(released.latest_charge))
    assert (charge.captured, charge.refunded, charge.amount_refunded) == (False, True, 1000)
    assert event_types(client, type="charge.expired") == ["charge.expired"]
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_intents.capture(expiring.id)


# -- charges (docs.stripe.com/api/charges) --------------------------------------------------------------------


def test_charges__retrieve_and_list_by_intent_and_customer(client: stripe.StripeClient, clock: Clock) -> None:
    first = pay(client, customer="cus_a")
    clock.advance(seconds=1)
    second = pay(client, customer="cus_b")
    client.v1.payment_intents.create(params={"amount": 100, "currency": "usd"})  # never confirmed: no charge

    listed = client.v1.charges.list()

    assert [c.id for c in listed.data] == [second.latest_charge, first.latest_charge]
    assert [c.payment_intent for c in client.v1.charges.list(params={"customer": "cus_a"}).data] == [first.id]
    by_intent = client.v1.charges.list(params={"payment_intent": second.id}).data
    assert [c.id for c in by_intent] == [second.latest_charge]
    charge = client.v1.charges.retrieve(str(first.latest_charge), params={"expand": ["payment_intent"]})
    assert isinstance(charge.payment_intent, stripe.PaymentIntent) and charge.payment_intent.id == first.id
    with pytest.raises(stripe.InvalidRequestError) as missing:
        client.v1.charges.retrieve("ch_missing")
    assert missing.value.http_status == 404


# -- refunds (docs.stripe.com/api/refunds) ----------------------------------------------------------------------


def test_refunds__by_intent_or_charge_never_more_than_was_captured(client: stripe.StripeClient) -> None:
    intent = pay(client)
    partial = client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 300, "reason": "duplicate",
                                               "metadata": {"refund_reference": "r-1"}})
    rest = client.v1.refunds.create(params={"charge": str(intent.latest_charge)})

    assert (partial.status, partial.amount, partial.reason, partial.payment_intent) == (
        "succeeded", 300, "duplicate", intent.id)
    assert (rest.amount, rest.charge) == (700, intent.latest_charge)  # without amount: all that is left
    with pytest.raises(stripe.InvalidRequestError) as again:
        client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 1})
    assert again.value.code == "charge_already_refunded"
    charge = client.v1.charges.retrieve(str(intent.latest_charge))
    assert (charge.amount_refunded, charge.refunded) == (1000, True)
    assert [r.id for r in client.v1.refunds.list(params={"payment_intent": intent.id}).data] == [rest.id, partial.id]
    assert client.v1.refunds.retrieve(partial.id).metadata.to_dict() == {"refund_reference": "r-1"}
    assert client.v1.refunds.update(partial.id, params={"metadata": {"k": "v"}}).metadata["k"] == "v"
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.refunds.cancel(partial.id)  # only requires_action refunds can be canceled
    assert event_types(client, type="refund.created") == ["refund.created", "refund.created"]


def test_refunds__more_than_is_left_or_of_an_unpaid_intent_is_refused(client: stripe.StripeClient) -> None:
    intent = pay(client)
    with pytest.raises(stripe.InvalidRequestError) as too_much:
        client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 1001})
    assert too_much.value.code == "amount_too_large"
    unpaid = client.v1.payment_intents.create(params={"amount": 100, "currency": "usd"})
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.refunds.create(params={"payment_intent": unpaid.id})
    with pytest.raises(stripe.InvalidRequestError) as neither:
        client.v1.refunds.create(params={"amount": 1})
    assert neither.value.code == "parameter_missing"
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        client.v1.refunds.create(params={"payment_intent": "pi_missing"})
    assert unknown.value.http_status == 404


def test_refunds__the_same_key_refunds_once(server: SandboxServer, client: stripe.StripeClient) -> None:
    intent = pay(client)
    first = client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 100},
                                     options={"idempotency_key": "refund-1"})
    replay = client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 100},
                                      options={"idempotency_key": "refund-1"})
    with pytest.raises(stripe.IdempotencyError):
        client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 200},
                                 options={"idempotency_key": "refund-1"})

    assert replay.id == first.id and replay.last_response.headers["Idempotent-Replayed"] == "true"  # type: ignore[union-attr]
    assert [r.id for r in client.v1.refunds.list().data] == [first.id]


def test_refunds__an_answer_lost_after_refunding_is_the_same_refund_on_retry(
    server: SandboxServer, client: stripe.StripeClient
) -> None:
    """The unknown-outcome fault (rate_hang) on a refund: it is booked, its answer held back; a retry with the same
    key gets the saved answer, and no second refund."""
    intent = pay(client)
    faults(server, rate_hang=1.0, hang_seconds=3.0)
    headers = {"Authorization": f"Bearer {KEY}", "Idempotency-Key": "refund-lost"}
    form = {"payment_intent": intent.id, "amount": "300"}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v1/refunds", data=form, headers=headers, timeout=0.5)
    faults(server, rate_hang=0.0)

    retried = httpx.post(f"{server.url}/v1/refunds", data=form, headers=headers, timeout=5)

    assert retried.status_code == 200 and retried.headers["Idempotent-Replayed"] == "true"
    assert [(r.id, r.amount) for r in client.v1.refunds.list().data] == [(retried.json()["id"], 300)]


def test_refunds__pending_then_succeeded_when_the_fault_says_so(
    server: SandboxServer, client: stripe.StripeClient, clock: Clock
) -> None:
    faults(server, refund_pending_fraction=1.0, settle_after_seconds=60)
    intent = pay(client)
    refund = client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 400})
    assert refund.status == "pending"
    assert client.v1.charges.retrieve(str(intent.latest_charge)).amount_refunded == 400  # held for it already

    clock.advance(seconds=61)

    assert client.v1.refunds.retrieve(refund.id).status == "succeeded"
    assert event_types(client, types=["refund.created", "refund.updated", "charge.refund.updated",
                                      "charge.refunded"]) == [
        "refund.created", "refund.updated", "charge.refund.updated", "charge.refunded"]


def test_refunds__of_the_refund_fail_card_succeed_then_fail_and_the_money_comes_back(
    client: stripe.StripeClient, clock: Clock
) -> None:
    """docs.stripe.com/testing#refunds: 4000000000005126 (pm_card_refundFail), "the refund's status begins as
    succeeded; some time later it transitions to failed" (and sends charge.refund.updated)."""
    intent = pay(client, "pm_card_refundFail")
    refund = client.v1.refunds.create(params={"payment_intent": intent.id})
    assert refund.status == "succeeded"

    clock.advance(seconds=10)
    failed = client.v1.refunds.retrieve(refund.id, params={"expand": ["failure_balance_transaction"]})

    assert (failed.status, failed.failure_reason) == ("failed", "declined")
    txn = failed.failure_balance_transaction
    assert isinstance(txn, stripe.BalanceTransaction) and (txn.type, txn.amount) == ("refund_failure", 1000)
    charge = client.v1.charges.retrieve(str(intent.latest_charge))
    assert (charge.amount_refunded, charge.refunded) == (0, False)
    assert client.v1.refunds.create(params={"payment_intent": intent.id}).amount == 1000  # refundable again
    assert event_types(client, types=["refund.failed", "charge.refund.updated"]) == [
        "charge.refund.updated", "refund.failed"]
    assert [t.type for t in client.v1.balance_transactions.list().data][:3] == ["refund", "refund_failure", "refund"]


# -- disputes, the balance and its transactions ------------------------------------------------------------


def test_disputes__the_dispute_card_is_disputed_and_cannot_be_refunded(client: stripe.StripeClient) -> None:
    """docs.stripe.com/testing#disputes: 4000000000000259 (pm_card_createDispute) is disputed as fraudulent."""
    intent = pay(client, "pm_card_createDispute")
    charge = client.v1.charges.retrieve(str(intent.latest_charge))
    assert charge.disputed is True
    with pytest.raises(stripe.InvalidRequestError) as refused:
        client.v1.refunds.create(params={"payment_intent": intent.id})
    assert refused.value.code == "charge_disputed"
    [dispute, paid] = client.v1.balance_transactions.list(params={"expand": ["data.source"]}).data
    assert (dispute.type, dispute.amount, dispute.fee) == ("adjustment", -1000, DISPUTE_FEE)
    assert isinstance(dispute.source, stripe.Dispute) and dispute.source.reason == "fraudulent"
    assert paid.type == "charge"
    assert event_types(client, type="charge.dispute.created") == ["charge.dispute.created"]


def test_balance__the_net_of_every_transaction_per_currency_and_each_retrievable(client: stripe.StripeClient) -> None:
    usd, eur = pay(client), pay(client, currency="eur", amount=2000)
    client.v1.refunds.create(params={"payment_intent": usd.id, "amount": 250})

    balance = client.v1.balance.retrieve()

    available = {entry.currency: entry.amount for entry in balance.available}
    assert available == {"usd": 1000 - sandbox_fee(1000) - 250, "eur": 2000 - sandbox_fee(2000)}
    assert all(entry.amount == 0 for entry in balance.pending)
    for txn in client.v1.balance_transactions.list().data:
        fetched = client.v1.balance_transactions.retrieve(txn.id, params={"expand": ["source"]})
        assert fetched.id == txn.id and not isinstance(fetched.source, str)
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.balance_transactions.retrieve("txn_missing")
    assert eur.currency == "eur"


# -- events (docs.stripe.com/api/events) ------------------------------------------------------------------------


def test_events__kept_without_webhooks_filtered_paged_and_retrievable(client: stripe.StripeClient) -> None:
    for _ in range(3):
        pay(client)

    every = client.v1.events.list(params={"limit": 100}).data
    succeeded = client.v1.events.list(params={"type": "payment_intent.succeeded"}).data
    first_page = client.v1.events.list(params={"limit": 2, "type": "payment_intent.*"})
    after = client.v1.events.list(params={"limit": 2, "type": "payment_intent.*",
                                          "starting_after": first_page.data[-1].id})

    assert len(every) == 9 and len(succeeded) == 3
    assert all(isinstance(e.data.object, stripe.PaymentIntent) for e in succeeded)
    assert first_page.has_more and len(after.data) == 2
    assert [e.id for e in [*first_page.data, *after.data]] == [
        e.id for e in every if e.type.startswith("payment_intent.")][:4]
    event = client.v1.events.retrieve(every[0].id)
    assert (event.id, event.type, event.api_version) == (every[0].id, every[0].type, "2026-10-28.endive")
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.events.retrieve("evt_missing")


# -- the oracle bites ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda pi: pi.update(surprise=1), "does not have"),  # a field Stripe's object lacks
        (lambda pi: pi.pop("capture_method"), "missing"),  # a field Stripe's object has
        (lambda pi: pi.update(amount="1000"), "str where Stripe has int"),
        (lambda pi: pi.update(amount_details={"tip": {}, "extra": 1}), "amount_details"),  # nested, too
    ],
)
def test_checks__a_payment_intent_unlike_stripes_is_refused(
    server: SandboxServer, client: stripe.StripeClient, change: Any, why: str
) -> None:
    intent = pay(client)
    raw = httpx.get(f"{server.url}/v1/payment_intents/{intent.id}", headers={"Authorization": f"Bearer {KEY}"},
                    timeout=5).json()
    assert check_document(raw) == 1  # as the sandbox serves it

    change(raw)

    with pytest.raises(AssertionError, match=why):
        check_document(raw)


def test_checks__an_error_unlike_stripes_is_refused(client: stripe.StripeClient) -> None:
    pay(client)
    check_document({"error": {"type": "card_error", "message": "Your card was declined.", "code": "card_declined"}})
    for bad in ({"error": {"type": "nonsense", "message": "x"}}, {"error": {"type": "api_error", "message": "x",
                                                                           "extra": 1}}):
        with pytest.raises(AssertionError):
            check_document(bad)
