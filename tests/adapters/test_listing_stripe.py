"""StripeAdapter.iter_payments: PaymentIntents by ``created``, a page per request, as Stripe documents lists.

The request of every page is held to what stripe-python sends for ``PaymentIntent.list`` with the same
parameters (``stripe_oracle.sdk_request``); every page fed back is a Stripe list
(``{"object": "list", "url", "has_more", "data"}``) of Stripe's canonical ``payment_intent`` (fixtures3.json).
Pagination follows https://docs.stripe.com/api/pagination: "starting_after … the ID of the last object in the
current page" while ``has_more``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import respx

from psp_adapters.errors import PspProtocolError, PspRateLimited
from psp_adapters.protocol import Failed, ListedPayment, Pending, Secret, Succeeded
from psp_adapters.stripe import StripeAdapter
from tests.adapters.stripe_oracle import Sent, canonical, listing
from tests.adapters.test_stripe import KEY, URL, sdk

SINCE = datetime(2024, 5, 3, 10, 0, 0, 250000, tzinfo=UTC)
UNTIL = datetime(2024, 5, 3, 11, 0, 0, 500000, tzinfo=UTC)
CREATED = int(datetime(2024, 5, 3, 10, 30, tzinfo=UTC).timestamp())


def intent(pi: str, ref: str, status: str = "succeeded", **changes: Any) -> dict[str, Any]:
    received = 2000 if status == "succeeded" else 0
    return canonical("payment_intent", **{"id": pi, "status": status, "amount": 2000, "amount_received": received,
                                          "currency": "usd", "metadata": {"merchant_reference": ref},
                                          "last_payment_error": None, "created": CREATED, **changes})


@pytest.fixture
def stripe() -> Any:
    with StripeAdapter(URL, api_key=Secret(KEY), page_size=2) as adapter:
        yield adapter


def test_listing__pages_are_the_sdks_payment_intent_list(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    first = listing("/v1/payment_intents", [intent("pi_3", "o-3"), intent("pi_2", "o-2")], has_more=True)
    last = listing("/v1/payment_intents", [intent("pi_1", "o-1")])
    route = router.get(f"{URL}/v1/payment_intents").mock(
        side_effect=[httpx.Response(200, json=first), httpx.Response(200, json=last)])
    pages = stripe.iter_payments(SINCE, UNTIL)
    assert not route.called  # nothing is fetched before iteration
    assert [len(page) for page in pages] == [2, 1]
    # Stripe's created is whole seconds: the window widens to them (gte the floor, lt the ceiling)
    params = {"created": {"gte": int(SINCE.timestamp()), "lt": int(UNTIL.timestamp()) + 1}, "limit": 2}
    expected = [sdk(lambda client: client.v1.payment_intents.list(params), last),
                sdk(lambda client: client.v1.payment_intents.list({**params, "starting_after": "pi_2"}), last)]
    assert [Sent.of(call.request) for call in route.calls] == expected


def test_listing__each_intent_maps_as_fetch_does_with_its_created(stripe: StripeAdapter,
                                                                 router: respx.MockRouter) -> None:
    declined = {"type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds"}
    page = listing("/v1/payment_intents", [
        intent("pi_A", "o-A"),
        intent("pi_B", "o-B", status="requires_payment_method", last_payment_error=declined),
        intent("pi_C", "o-C", status="processing"),
    ])
    router.get(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(200, json=page))
    [items] = list(StripeAdapter(URL, api_key=Secret(KEY)).iter_payments(SINCE, UNTIL))
    at = datetime.fromtimestamp(CREATED, UTC)
    assert items == (
        ListedPayment(Succeeded("pi_A", 2000, "USD", "succeeded", "o-A"), created_at=at),
        ListedPayment(Failed("pi_B", 2000, "USD", "requires_payment_method", "o-B", reason="insufficient_funds"),
                      created_at=at),
        ListedPayment(Pending("pi_C", 2000, "USD", "processing", "o-C"), created_at=at),
    )
    assert items[0].merchant_reference == "o-A" and items[0].psp_reference == "pi_A"


def test_listing__an_empty_window_is_one_empty_page(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    route = router.get(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(200, json=listing("/v1/payment_intents", [])))
    assert list(stripe.iter_payments(SINCE, UNTIL)) == [()] and route.call_count == 1


def test_listing__errors_and_bad_pages_raise_from_next(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.get(f"{URL}/v1/payment_intents").mock(side_effect=[
        httpx.Response(429, headers={"Retry-After": "2"}, json={"error": {"type": "invalid_request_error",
                                                                          "code": "rate_limit"}}),
        httpx.Response(200, json={"object": "list", "data": [intent("pi_X", "o-X", created=None)],
                                  "has_more": False}),
    ])
    with pytest.raises(PspRateLimited):
        next(stripe.iter_payments(SINCE, UNTIL))
    with pytest.raises(PspProtocolError):
        next(stripe.iter_payments(SINCE, UNTIL))
    with pytest.raises(ValueError):
        stripe.iter_payments(SINCE.replace(tzinfo=None), UNTIL)


def test_listing__stripe_lists() -> None:
    assert StripeAdapter.lists_payments is True


def test_listing__the_same_page_again_is_a_protocol_error_not_a_loop(stripe: StripeAdapter,
                                                                     router: respx.MockRouter) -> None:
    """Issue 22, item 3: has_more: true with the same page (a repeated cursor) used to be listed forever."""
    same = listing("/v1/payment_intents", [intent("pi_3", "o-3"), intent("pi_2", "o-2")], has_more=True)
    route = router.get(f"{URL}/v1/payment_intents").mock(return_value=httpx.Response(200, json=same))
    pages = stripe.iter_payments(SINCE, UNTIL)
    assert len(next(pages)) == 2 and len(next(pages)) == 2  # the second request follows pi_2 ...
    with pytest.raises(PspProtocolError, match="repeated"):
        next(pages)  # ... and is answered with pi_2 as its last id again
    assert route.call_count == 2


def test_listing__more_promised_after_an_empty_page_is_a_protocol_error(stripe: StripeAdapter,
                                                                        router: respx.MockRouter) -> None:
    router.get(f"{URL}/v1/payment_intents").mock(
        return_value=httpx.Response(200, json=listing("/v1/payment_intents", [], has_more=True)))
    with pytest.raises(PspProtocolError, match="empty"):
        list(stripe.iter_payments(SINCE, UNTIL))


def test_settlements__the_same_balance_transaction_page_again_is_a_protocol_error(stripe: StripeAdapter,
                                                                                  router: respx.MockRouter) -> None:
    """`recon report` lists balance transactions by the same cursor protocol: the same guard ends it."""
    txn = canonical("balance_transaction", id="txn_1", reporting_category="payout", type="payout")
    route = router.get(f"{URL}/v1/balance_transactions").mock(  # the last page after 50: fails, never hangs
        side_effect=lambda request: httpx.Response(200, json=listing("/v1/balance_transactions", [txn],
                                                                     has_more=route.call_count < 50)))
    with pytest.raises(PspProtocolError, match="/v1/balance_transactions never ends"):
        list(stripe.iter_settlements(SINCE, UNTIL))
    assert route.call_count == 2
