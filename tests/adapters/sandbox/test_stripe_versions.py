"""``Stripe-Version`` and ``expand[]`` on the Stripe flavour, through Stripe's SDK.

docs.stripe.com/api/versioning: a request may name the API version in ``Stripe-Version`` (a date, optionally with
the release's name: ``2026-10-28.endive``); the answer's ``Stripe-Version`` header names the version it was
served with. docs.stripe.com/search ("Minimum API version"): search needs 2020-08-27 or later.
docs.stripe.com/expand: ``expand[]`` replaces ids with objects, nested with dots, through ``data`` for lists, at
most four levels deep, on any request, creates included.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import stripe
from stripe._api_version import _ApiVersion

from psp_adapters.sandbox import SandboxServer
from tests.adapters.sandbox.stripe_checks import checked_sdk

KEY = "sk_test_versions_0000"


@pytest.fixture(scope="module")
def server() -> Iterator[SandboxServer]:
    with SandboxServer(flavor="stripe", api_key=KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: SandboxServer) -> Iterator[stripe.StripeClient]:
    with checked_sdk(server.url, KEY) as checked:
        yield checked


def pay(client: stripe.StripeClient, **params: object) -> stripe.PaymentIntent:
    return client.v1.payment_intents.create(params={  # type: ignore[arg-type]
        "amount": 1000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": True, **params})


# -- Stripe-Version ---------------------------------------------------------------------------------------------


def test_version__the_sdks_version_is_echoed_and_without_one_the_accounts_default(
    server: SandboxServer, client: stripe.StripeClient
) -> None:
    intent = pay(client)
    assert intent.last_response.headers["Stripe-Version"] == _ApiVersion.CURRENT  # type: ignore[union-attr]
    bare = httpx.get(f"{server.url}/v1/payment_intents/{intent.id}", headers={"Authorization": f"Bearer {KEY}"})
    assert bare.headers["Stripe-Version"] == _ApiVersion.CURRENT  # the sandbox's default: stripe-python 16's
    older = client.v1.payment_intents.retrieve(intent.id, options={"stripe_version": "2024-06-20"})
    assert older.last_response.headers["Stripe-Version"] == "2024-06-20"  # type: ignore[union-attr]


@pytest.mark.parametrize("version", ["2020-13-45", "latest", "2026-10-28.Endive", "20261028", "2026-10-28.endive x"])
def test_version__a_malformed_version_is_400(client: stripe.StripeClient, version: str) -> None:
    with pytest.raises(stripe.InvalidRequestError) as caught:
        client.v1.payment_intents.list(options={"stripe_version": version})
    assert caught.value.http_status == 400 and "Invalid Stripe API version" in str(caught.value.user_message)


def test_version__search_needs_2020_08_27_or_later(client: stripe.StripeClient) -> None:
    query = {"query": "amount>0"}
    with pytest.raises(stripe.InvalidRequestError) as caught:
        client.v1.payment_intents.search(params=query, options={"stripe_version": "2020-03-02"})
    assert "2020-08-27" in str(caught.value.user_message)
    assert client.v1.payment_intents.search(params=query, options={"stripe_version": "2020-08-27"}).object == (
        "search_result")


# -- expand[] ---------------------------------------------------------------------------------------------------


def test_expand__on_create_and_nested_through_the_latest_charge(client: stripe.StripeClient) -> None:
    customer = client.v1.customers.create(params={"email": "x@example.com"})
    intent = pay(client, customer=customer.id, expand=["customer", "latest_charge.balance_transaction",
                                                       "payment_method"])

    assert isinstance(intent.customer, stripe.Customer) and intent.customer.email == "x@example.com"
    assert isinstance(intent.latest_charge, stripe.Charge)
    txn = intent.latest_charge.balance_transaction
    assert isinstance(txn, stripe.BalanceTransaction) and txn.source == intent.latest_charge.id
    assert isinstance(intent.payment_method, stripe.PaymentMethod)
    deep = client.v1.payment_intents.retrieve(intent.id, params={
        "expand": ["latest_charge.balance_transaction.source.payment_intent"]})
    assert deep.latest_charge.balance_transaction.source.payment_intent.id == intent.id  # type: ignore[union-attr]


def test_expand__through_data_on_lists_and_on_refunds(client: stripe.StripeClient) -> None:
    intent = pay(client)
    refund = client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 100,
                                              "expand": ["charge", "payment_intent"]})
    listed = client.v1.payment_intents.list(params={"limit": 1, "expand": ["data.latest_charge"]})
    transactions = client.v1.balance_transactions.list(params={"type": "refund", "expand": ["data.source.charge"]})

    assert isinstance(refund.charge, stripe.Charge) and isinstance(refund.payment_intent, stripe.PaymentIntent)
    assert isinstance(listed.data[0].latest_charge, stripe.Charge)
    refund_txn = transactions.data[0]
    assert isinstance(refund_txn.source, stripe.Refund) and isinstance(refund_txn.source.charge, stripe.Charge)


def test_expand__an_unknown_customer_stays_an_id(client: stripe.StripeClient) -> None:
    intent = pay(client, customer="cus_never_created", expand=["customer"])
    assert intent.customer == "cus_never_created"


@pytest.mark.parametrize(
    "paths",
    [
        ["amount"],  # not expandable
        ["latest_charge.nothing"],  # not a field of the charge
        ["data.latest_charge"],  # data is for lists
        ["latest_charge.balance_transaction.source.payment_intent.customer"],  # deeper than four levels
    ],
)
def test_expand__what_cannot_be_expanded_is_400(client: stripe.StripeClient, paths: list[str]) -> None:
    intent = pay(client)
    with pytest.raises(stripe.InvalidRequestError) as caught:
        client.v1.payment_intents.retrieve(intent.id, params={"expand": paths})
    assert caught.value.http_status == 400 and "cannot be expanded" in str(caught.value.user_message)
