"""Stripe's search query language against the Stripe flavour, through Stripe's SDK.

The syntax is docs.stripe.com/search#search-query-language: clauses ``field:value`` (exact), ``field~value``
(substring, strings only, at least 3 characters), ``>``, ``<``, ``>=``, ``<=`` (numbers), negation with ``-``,
``metadata["key"]``, ``null``, joined by ``AND`` or by ``OR`` but not both, string values quoted (single or double
quotes). The fields are those the docs list per resource ("Query fields for PaymentIntents", "… for Charges",
"… for Customers").
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import stripe

from psp_adapters.sandbox import SandboxServer
from tests.adapters.sandbox.stripe_checks import checked_sdk
from tests.adapters.sandbox.test_flavor_stripe import START, Clock

KEY = "sk_test_search_0000"


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[stripe.StripeClient, dict[str, str]]]:
    """Four intents: (name -> id) a: 500 eur cus_a, b: 1000 usd cus_a refunded, c: 1500 usd cus_b manual
    capture (requires_capture) with metadata tier=gold, d: 2000 usd declined; and two customers."""
    clock = Clock()
    with SandboxServer(flavor="stripe", api_key=KEY, now_func=clock) as server, checked_sdk(server.url, KEY) as client:
        ids: dict[str, str] = {}
        for name, amount, currency, customer, extra in (
            ("a", 500, "eur", "cus_a", {"metadata": {"merchant_reference": "o'a", "tier": "silver"}}),
            ("b", 1000, "usd", "cus_a", {"metadata": {"merchant_reference": "o-b"}}),
            ("c", 1500, "usd", "cus_b", {"metadata": {"merchant_reference": "o-c", "tier": "gold"},
                                         "capture_method": "manual"}),
            ("d", 2000, "usd", "cus_b", {"payment_method": "pm_card_visa_chargeDeclined"}),
        ):
            params = {"amount": amount, "currency": currency, "customer": customer, "payment_method": "pm_card_visa",
                      "confirm": True, **extra}
            try:
                ids[name] = client.v1.payment_intents.create(params=params).id  # type: ignore[arg-type]
            except stripe.CardError as declined:
                ids[name] = declined.error.payment_intent.id  # type: ignore[union-attr]
            clock.advance(seconds=100)
        client.v1.refunds.create(params={"payment_intent": ids["b"]})
        ids["jenny"] = client.v1.customers.create(params={"email": "jenny.rosen@example.com", "name": "Jenny Rosen",
                                                          "metadata": {"vip": "yes"}}).id
        ids["bob"] = client.v1.customers.create(params={"email": "bob@example.org", "phone": "+15555550100"}).id
        yield client, ids


def intents(world: tuple[stripe.StripeClient, dict[str, str]], query: str) -> list[str]:
    client, ids = world
    names = {value: key for key, value in ids.items()}
    return [names[p.id] for p in client.v1.payment_intents.search(params={"query": query}).data]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("metadata['merchant_reference']:'o-b'", ["b"]),
        ('metadata["merchant_reference"]:"o-b"', ["b"]),  # double quotes, as the docs' examples
        (r"metadata['merchant_reference']:'o\'a'", ["a"]),  # an escaped quote
        ('status:"succeeded"', ["b", "a"]),  # newest first
        ("status:'requires_capture'", ["c"]),
        ('status:"requires_payment_method"', ["d"]),
        ('customer:"cus_a"', ["b", "a"]),
        ('currency:"EUR"', ["a"]),  # exact matches ignore case
        ("amount>1000", ["d", "c"]),
        ("amount>=1000", ["d", "c", "b"]),
        ("amount<1000", ["a"]),
        ("amount:1500", ["c"]),
        (f"created>{int(START.timestamp()) + 150}", ["d", "c"]),
        ('status:"succeeded" AND currency:"usd"', ["b"]),
        ('customer:"cus_b" AND -status:"requires_capture"', ["d"]),
        ('metadata["tier"]:"gold" OR currency:"eur"', ["c", "a"]),
        ('metadata["tier"]:null', ["d", "b"]),
        ('-metadata["tier"]:null', ["c", "a"]),
    ],
)
def test_search__payment_intents_by_the_documented_query_fields(
    world: tuple[stripe.StripeClient, dict[str, str]], query: str, expected: list[str]
) -> None:
    assert intents(world, query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "",  # no query
        'status:"succeeded" AND currency:"usd" OR amount>1',  # AND and OR in one query
        'description:"x"',  # not a query field of PaymentIntents
        "status:succeeded",  # a string value must be quoted
        'amount>"big"',  # a number must be a number
        'status>"a"',  # only numeric fields compare
        'status~"succ"',  # substring search is for string fields
        'metadata:"x"',  # metadata needs a key
        " AND ".join(f"amount>{n}" for n in range(11)),  # at most 10 clauses
        'status:"succeeded" AND',  # a dangling connector
    ],
)
def test_search__malformed_queries_are_400(world: tuple[stripe.StripeClient, dict[str, str]], query: str) -> None:
    client, _ = world
    with pytest.raises(stripe.InvalidRequestError) as caught:
        client.v1.payment_intents.search(params={"query": query})
    assert caught.value.http_status == 400


def test_search__pages_by_next_page_and_the_sdk_auto_pages(world: tuple[stripe.StripeClient, dict[str, str]]) -> None:
    client, _ = world
    first = client.v1.payment_intents.search(params={"query": "amount>0", "limit": 3})
    second = client.v1.payment_intents.search(params={"query": "amount>0", "limit": 3, "page": first.next_page})
    every = [p.id for p in client.v1.payment_intents.search(params={"query": "amount>0", "limit": 1})
             .auto_paging_iter()]

    assert (first.object, first.has_more, len(first.data)) == ("search_result", True, 3)
    assert (second.has_more, second.next_page, len(second.data)) == (False, None, 1)
    assert every == [p.id for p in [*first.data, *second.data]]


def test_search__charges_by_status_refunded_and_card(world: tuple[stripe.StripeClient, dict[str, str]]) -> None:
    client, ids = world
    refunded = client.v1.charges.search(params={"query": 'refunded:"true"'}).data
    failed = client.v1.charges.search(params={"query": 'status:"failed"'}).data
    visa = client.v1.charges.search(params={"query": 'payment_method_details.card.last4:"4242" AND amount<=1000'})

    assert [c.payment_intent for c in refunded] == [ids["b"]]
    assert [c.payment_intent for c in failed] == [ids["d"]]
    assert [c.payment_intent for c in visa.data] == [ids["b"], ids["a"]]


def test_search__customers_by_email_substring_name_and_metadata(
    world: tuple[stripe.StripeClient, dict[str, str]]
) -> None:
    client, ids = world

    def found(query: str) -> list[str]:
        return [c.id for c in client.v1.customers.search(params={"query": query}).data]

    assert found('email~"rosen@"') == [ids["jenny"]]
    assert found('email~"example"') == [ids["bob"], ids["jenny"]]
    assert found('name:"jenny rosen"') == [ids["jenny"]]
    assert found('metadata["vip"]:"yes" OR phone:"+15555550100"') == [ids["bob"], ids["jenny"]]
    with pytest.raises(stripe.InvalidRequestError):
        found('email~"ro"')  # a substring of at least 3 characters
