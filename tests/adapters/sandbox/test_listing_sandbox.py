"""The sandbox's listings of payments by creation time, for bulk reconciliation.

Stripe flavour: ``GET /v1/payment_intents`` driven by Stripe's own SDK (``PaymentIntent.list``, its
``auto_paging_iter`` following ``starting_after`` as https://docs.stripe.com/api/pagination documents), newest
first as Stripe lists, shaped like Stripe's canonical list and ``payment_intent`` (fixtures3.json); and
recon's Stripe adapter against it. Native flavour: ``GET /v1/payments?created_since=&created_until=`` through
the sandbox adapter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import stripe

from psp_adapters.protocol import Secret, Succeeded
from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.adapter import SandboxAdapter
from psp_adapters.sandbox.faults import Faults
from psp_adapters.stripe import StripeAdapter
from tests.adapters.sandbox.stripe_checks import checked_sdk
from tests.adapters.sandbox.test_flavor_stripe import SPECS, START, Clock, assert_shaped_like, create

KEY = "sk_test_sandbox_listing"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(tmp_path: Path, clock: Clock) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "stripe.db", flavor="stripe", api_key=KEY, now_func=clock) as srv:
        yield srv


@pytest.fixture
def sdk(server: SandboxServer) -> Iterator[stripe.StripeClient]:
    """Stripe's SDK on the sandbox, every answer checked against Stripe's canonical objects (stripe_checks)."""
    with checked_sdk(server.url, KEY) as client:
        yield client


@pytest.fixture
def canonical() -> dict[str, Any]:
    path = SPECS / "stripe" / "fixtures3.json"
    if not path.exists():
        pytest.skip(f"Stripe's canonical objects are absent ({path}); see shared/specs/README.md")
    resources: dict[str, Any] = json.loads(path.read_text())["resources"]
    return resources


def test_stripe_list__newest_first_by_created_window_paged_by_starting_after(
        sdk: stripe.StripeClient, clock: Clock, canonical: dict[str, Any]) -> None:
    intents = []
    for i in range(5):
        intents.append(create(sdk, f"k{i}", metadata={"merchant_reference": f"order-{i}"}))
        clock.advance(seconds=100)
    newest_first = [p.id for p in reversed(intents)]
    page = sdk.v1.payment_intents.list(params={"limit": 2})
    assert (page.object, page.url, page.has_more, [p.id for p in page.data]) == (
        "list", "/v1/payment_intents", True, newest_first[:2])
    assert [p.id for p in sdk.v1.payment_intents.list(params={"limit": 2}).auto_paging_iter()] == newest_first
    window = sdk.v1.payment_intents.list(
        params={"created": {"gte": int(START.timestamp()) + 100, "lt": int(START.timestamp()) + 300}})
    assert [p.id for p in window.data] == newest_first[2:4]
    assert_shaped_like(page.data[0].to_dict(), canonical["payment_intent"], "id", "created", "status", "metadata")
    with pytest.raises(stripe.InvalidRequestError):
        sdk.v1.payment_intents.list(params={"starting_after": "pi_missing"})
    with pytest.raises(stripe.InvalidRequestError):  # a filter the sandbox does not simulate is refused, not ignored
        sdk.v1.payment_intents.list(params={"shipping": "x"})  # type: ignore[typeddict-unknown-key]
    other = create(sdk, "k9", customer="cus_other")
    assert [p.id for p in sdk.v1.payment_intents.list(params={"customer": "cus_other"}).data] == [other.id]


def test_stripe_list__recons_adapter_lists_every_intent_of_a_window(server: SandboxServer, sdk: stripe.StripeClient,
                                                                    clock: Clock) -> None:
    for i in range(7):
        create(sdk, f"k{i}", metadata={"merchant_reference": f"order-{i}"})
        clock.advance(seconds=1)
    with StripeAdapter(server.url, api_key=Secret(KEY), page_size=3) as adapter:
        pages = list(adapter.iter_payments(START, START + timedelta(seconds=7)))
    assert [len(p) for p in pages] == [3, 3, 1]
    refs = [item.merchant_reference for page in pages for item in page]
    assert refs == [f"order-{i}" for i in reversed(range(7))]
    assert all(isinstance(item.outcome, Succeeded) for page in pages for item in page)
    assert pages[-1][-1].created_at == START


def test_native_list__oldest_first_by_created_with_a_cursor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from psp_adapters.protocol import ChargeRequest
    from psp_adapters.sandbox import adapter as module

    monkeypatch.setattr(module, "LISTING_PAGE_SIZE", 2)
    clock = Clock()
    with SandboxServer(tmp_path / "native.db", now_func=clock, faults=Faults(decline_amount_suffix=None)) as srv, \
            SandboxAdapter(srv.url) as adapter:
        for i in range(5):
            adapter.create_payment(ChargeRequest(f"order-{i}", 1000, "EUR", merchant_account="shop"),
                                   idempotency_key=f"k{i}")
            clock.advance(seconds=10)
        pages = list(adapter.iter_payments(START + timedelta(seconds=10), START + timedelta(seconds=50)))
    assert [[item.merchant_reference for item in page] for page in pages] == [
        ["order-1", "order-2"], ["order-3", "order-4"]]
    assert pages[0][0].merchant_account == "shop" and pages[0][0].created_at == START + timedelta(seconds=10)
