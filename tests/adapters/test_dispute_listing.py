"""The dispute listings (``DisputeSource``): Stripe's ``GET /v1/disputes`` and Adyen's dispute rows of its daily
Payment accounting report.

Stripe: each request is held to what stripe-python sends for ``Dispute.list`` with the same parameters
(``stripe_oracle.sdk_request``); every page fed back is a Stripe list of Stripe's canonical ``dispute``
(fixtures3.json), paged as https://docs.stripe.com/api/pagination documents. Adyen: reports in the documented
layout (``report.REPORT_COLUMNS``), record types as docs.adyen.com/reporting/invoice-reconciliation/payment-
accounting-report names them (Chargeback, ChargebackReversed, SecondChargeback).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import respx

from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import DisputeNews, DisputeSource, Secret
from psp_adapters.stripe import StripeAdapter
from tests.adapters.stripe_oracle import Sent, canonical, listing
from tests.adapters.test_adyen import DOWNLOAD, build, csv_report
from tests.adapters.test_stripe import KEY, URL, sdk

SINCE = datetime(2024, 8, 1, 0, 0, 0, 500000, tzinfo=UTC)
UNTIL = datetime(2024, 8, 8, tzinfo=UTC)
CREATED = int(datetime(2024, 8, 2, 10, 0, tzinfo=UTC).timestamp())
DUE = 1723679999  # fixtures3.json's Dispute: evidence_details.due_by


def dispute(dp: str, status: str, **changes: Any) -> dict[str, Any]:
    return canonical(
        "dispute",
        **{
            "id": dp,
            "status": status,
            "amount": 1000,
            "currency": "eur",
            "payment_intent": f"pi_{dp}",
            "created": CREATED,
            **changes,
        },
    )


@pytest.fixture
def stripe() -> Any:
    adapter = StripeAdapter(URL, api_key=Secret(KEY), page_size=2)
    yield adapter
    adapter.close()


def test_stripe_and_adyen__list_disputes() -> None:
    assert isinstance(StripeAdapter(URL, api_key=Secret(KEY)), DisputeSource)
    assert isinstance(build(), DisputeSource)


def test_stripe_disputes__pages_are_the_sdks_dispute_list(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    first = listing("/v1/disputes", [dispute("dp_3", "needs_response"), dispute("dp_2", "won")], has_more=True)
    last = listing("/v1/disputes", [dispute("dp_1", "lost")])
    route = router.get(f"{URL}/v1/disputes").mock(
        side_effect=[httpx.Response(200, json=first), httpx.Response(200, json=last)]
    )
    pages = stripe.iter_disputes(SINCE, UNTIL)
    assert not route.called  # nothing fetched before iteration
    got = [[(d.news.dispute_id, d.news.state) for d in page] for page in pages]
    assert got == [[("dp_3", "opened"), ("dp_2", "won")], [("dp_1", "lost")]]
    params = {"created": {"gte": int(SINCE.timestamp()), "lt": int(UNTIL.timestamp())}, "limit": 2}
    expected = [
        sdk(lambda client: client.v1.disputes.list(params), last),
        sdk(lambda client: client.v1.disputes.list({**params, "starting_after": "dp_2"}), last),
    ]
    assert [Sent.of(call.request) for call in route.calls] == expected


def test_stripe_disputes__each_maps_as_its_webhook_does(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    fees = [{"id": "txn_1", "object": "balance_transaction", "fee": 1500, "amount": -1000, "currency": "eur"}]
    page = listing(
        "/v1/disputes",
        [
            dispute("dp_A", "needs_response", balance_transactions=fees),
            dispute("dp_B", "warning_closed"),
            dispute("dp_C", "a_status_stripe_adds"),
        ],
    )
    router.get(f"{URL}/v1/disputes").mock(return_value=httpx.Response(200, json=page))
    [items] = list(stripe.iter_disputes(SINCE, UNTIL))
    assert items[0].news == DisputeNews(
        psp_reference="pi_dp_A",
        amount=1000,
        currency="EUR",
        raw_status="needs_response",
        state="opened",
        dispute_id="dp_A",
        reason="general",
        due_by=datetime.fromtimestamp(DUE, UTC),
        fee=1500,
    )
    assert items[0].created_at == datetime.fromtimestamp(CREATED, UTC)
    assert [i.news.state for i in items[1:]] == ["won", "opened"]  # an unknown status is never a guessed end


def test_stripe_disputes__a_repeated_cursor_is_a_protocol_error(
    stripe: StripeAdapter, router: respx.MockRouter
) -> None:
    same = listing("/v1/disputes", [dispute("dp_3", "needs_response")], has_more=True)
    router.get(f"{URL}/v1/disputes").mock(return_value=httpx.Response(200, json=same))
    with pytest.raises(PspProtocolError, match="never ends"):
        list(stripe.iter_disputes(SINCE, UNTIL))


def test_stripe_disputes__naive_datetimes_are_refused_at_once(stripe: StripeAdapter) -> None:
    with pytest.raises(ValueError, match="aware"):
        stripe.iter_disputes(datetime(2024, 8, 1), UNTIL)


FILE = "payments_accounting_report_{}.csv"


def test_adyen_disputes__the_chargeback_rows_of_the_window(router: respx.MockRouter) -> None:
    adapter = build()
    rows = csv_report(
        {
            "Psp Reference": "P1",
            "Merchant Reference": "o-1",
            "Booking Date": "2024-05-01 09:00:00",
            "TimeZone": "UTC",
            "Record Type": "Settled",
        },
        {
            "Psp Reference": "P1",
            "Merchant Reference": "o-1",
            "Booking Date": "2024-05-01 10:00:00",
            "TimeZone": "UTC",
            "Record Type": "Chargeback",
            "Main Amount": "12.50",
            "Settlement Currency": "EUR",
            "Payable (SC)": "-27.50",
            "Commission (SC)": "15.00",
        },
        {
            "Psp Reference": "P2",
            "Merchant Reference": "o-2",
            "Booking Date": "2024-05-01 11:00:00",
            "TimeZone": "UTC",
            "Record Type": "ChargebackReversed",
        },
        {
            "Psp Reference": "P3",
            "Merchant Reference": "o-3",
            "Booking Date": "2024-05-01 12:00:00",
            "TimeZone": "UTC",
            "Record Type": "SecondChargeback",
        },
        {
            "Psp Reference": "P4",
            "Merchant Reference": "o-4",
            "Booking Date": "2024-05-01 23:30:00",
            "TimeZone": "UTC",
            "Record Type": "Chargeback",
        },
    )  # after the window
    route = router.get(f"{DOWNLOAD}/{FILE.format('2024_05_01')}").mock(return_value=rows)
    pages = list(adapter.iter_disputes(datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 1, 23, tzinfo=UTC)))
    assert route.call_count == 1 and len(pages) == 1
    got = [
        (d.news.dispute_id, d.news.merchant_reference, d.news.state, d.news.amount, d.news.fee, d.merchant_account)
        for d in pages[0]
    ]
    assert got == [
        ("P1", "o-1", "opened", 1250, 1500, "AcmeShopEU"),
        ("P2", "o-2", "reversed", 1250, None, "AcmeShopEU"),
        ("P3", "o-3", "lost", 1250, None, "AcmeShopEU"),
    ]
    assert pages[0][0].created_at == datetime(2024, 5, 1, 10, tzinfo=UTC)
    adapter.close()


def test_adyen_disputes__a_missing_file_is_an_empty_page(router: respx.MockRouter) -> None:
    adapter = build()
    router.get(f"{DOWNLOAD}/{FILE.format('2024_05_01')}").mock(return_value=httpx.Response(404))
    assert list(adapter.iter_disputes(datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 2, tzinfo=UTC))) == [()]
    adapter.close()
