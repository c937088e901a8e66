"""The adapters as ``PayoutSource``: Stripe's payouts and balance transactions (requests held to what
stripe-python sends for the same call; answers built from Stripe's canonical objects, fixtures3.json) and
Adyen's Settlement details report (the documented columns and record types)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import httpx
import pytest
import respx

from psp_adapters.adyen import AdyenAdapter
from psp_adapters.adyen import settlement as sdr
from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import PayoutSource, PspPayout, PspPayoutLine, Secret
from psp_adapters.stripe import StripeAdapter
from tests.adapters.stripe_oracle import Sent, canonical, listing, sdk_request

KEY = "sk_test_51NotARealKeyButLooksLikeOne0000"
URL = "https://stripe.test"
REPORTS = "https://reports.adyen.test"
DOWNLOAD = f"{REPORTS}/reports/download/MerchantAccount/AcmeShopEU"


@pytest.fixture
def stripe() -> Any:
    with StripeAdapter(URL, api_key=Secret(KEY)) as adapter:
        yield adapter


@pytest.fixture
def adyen() -> Any:
    adapter = AdyenAdapter("https://checkout.adyen.test", api_key=Secret("AQE-checkout-key-not-real"),
                           merchant_account="AcmeShopEU", report_base_url=REPORTS,
                           report_api_key=Secret("AQE-report-key-not-real"), report_timezone="Europe/Amsterdam")
    yield adapter
    adapter.close()


def test_payout_source__both_adapters_are_one() -> None:
    assert issubclass(StripeAdapter, PayoutSource) and issubclass(AdyenAdapter, PayoutSource)


# --- Stripe ----------------------------------------------------------------------------------------------


def test_stripe__payouts_of_a_window_are_the_sdks_request_and_map_the_canonical_payout(
        stripe: StripeAdapter, router: respx.MockRouter) -> None:
    po = canonical("payout", amount=123456, currency="eur", status="paid", arrival_date=1763337600,  # 2025-11-17
                   trace_id={"status": "supported", "value": "TRACE-77"}, statement_descriptor="ACME")
    route = router.get(f"{URL}/v1/payouts").mock(return_value=httpx.Response(200, json=listing("/v1/payouts", [po])))
    [payout] = stripe.iter_payouts(date(2025, 11, 17), date(2025, 11, 18))
    assert payout == PspPayout(payout_id=po["id"], amount=123456, currency="EUR", status="paid",
                               arrival_date=date(2025, 11, 17), trace_ref="TRACE-77", statement_descriptor="ACME")
    expected = sdk_request(lambda c: c.v1.payouts.list({"arrival_date": {"gte": 1763337600, "lt": 1763424000},
                                                        "limit": 100}),
                           api_key=KEY, base_url=URL, answer=listing("/v1/payouts", []))
    assert Sent.of(route.calls.last.request) == expected


def test_stripe__a_payout_without_a_trace_id_value_has_no_trace_ref(stripe: StripeAdapter,
                                                                    router: respx.MockRouter) -> None:
    router.get(f"{URL}/v1/payouts").mock(return_value=httpx.Response(200, json=listing(
        "/v1/payouts", [canonical("payout")])))  # trace_id {"status": …, "value": null}; status in_transit
    [payout] = stripe.iter_payouts(date(2009, 2, 13), date(2009, 2, 14))
    assert (payout.trace_ref, payout.status, payout.amount, payout.currency) == (None, "in_transit", 1100, "USD")
    assert payout.arrival_date == date(2009, 2, 13)  # 1234567890 is 2009-02-13T23:31:30Z


def test_stripe__an_unknown_payout_status_is_a_protocol_error(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.get(f"{URL}/v1/payouts").mock(return_value=httpx.Response(200, json=listing(
        "/v1/payouts", [canonical("payout", status="vanished")])))
    with pytest.raises(PspProtocolError, match="vanished"):
        list(stripe.iter_payouts(date(2009, 2, 13), date(2009, 2, 14)))


def test_stripe__payout_lines_are_its_balance_transactions_paged_as_the_sdk_asks(
        stripe: StripeAdapter, router: respx.MockRouter) -> None:
    po = PspPayout(payout_id="po_1", amount=2840, currency="EUR", status="paid", arrival_date=date(2025, 11, 17))
    charge = canonical("charge", id="ch_A", payment_intent="pi_A", metadata={"merchant_reference": "order-1"},
                       currency="eur")
    refund = canonical("refund", id="re_B", payment_intent="pi_B", charge="ch_B", currency="eur")
    own = canonical("payout", id="po_1", amount=2840, currency="eur")
    page_one = listing("/v1/balance_transactions", [
        canonical("balance_transaction", id="txn_1", reporting_category="charge", type="charge", amount=3000,
                  fee=117, net=2883, currency="eur", source=charge),
        canonical("balance_transaction", id="txn_2", reporting_category="refund", type="refund", amount=-500,
                  fee=0, net=-500, currency="eur", source=refund)], has_more=True)
    page_two = listing("/v1/balance_transactions", [
        canonical("balance_transaction", id="txn_3", reporting_category="other_adjustment", type="adjustment",
                  amount=457, fee=0, net=457, currency="eur", source=None),
        canonical("balance_transaction", id="txn_4", reporting_category="payout", type="payout", amount=-2840,
                  fee=0, net=-2840, currency="eur", source=own)])
    second = router.get(f"{URL}/v1/balance_transactions", params={"starting_after": "txn_2"}).mock(
        return_value=httpx.Response(200, json=page_two))
    first = router.get(f"{URL}/v1/balance_transactions").mock(return_value=httpx.Response(200, json=page_one))
    lines = list(stripe.payout_lines(po))
    assert (first.call_count, second.call_count) == (1, 1)
    assert lines == [
        PspPayoutLine("txn_1", "charge", 3000, 117, 2883, "EUR", psp_reference="pi_A", merchant_reference="order-1"),
        PspPayoutLine("txn_2", "refund", -500, 0, -500, "EUR", psp_reference="pi_B", movement_reference="re_B"),
        PspPayoutLine("txn_3", "adjustment", 457, 0, 457, "EUR"),
        PspPayoutLine("txn_4", "payout", -2840, 0, -2840, "EUR"),
    ]
    assert sum(ln.net for ln in lines if ln.kind != "payout") == po.amount
    expected = sdk_request(lambda c: c.v1.balance_transactions.list({"payout": "po_1", "limit": 100,
                                                                     "expand": ["data.source"]}),
                           api_key=KEY, base_url=URL, answer=listing("/v1/balance_transactions", []))
    assert Sent.of(first.calls.last.request) == expected


# --- Adyen -----------------------------------------------------------------------------------------------

#: the Settlement details report's standard columns, in the documented order (docs.adyen.com, "Settlement
#: detail report structure")
COLUMNS = ("Company Account", "Merchant Account", "Psp Reference", "Merchant Reference", "Payment Method",
           "Creation Date", "TimeZone", "Type", "Modification Reference", "Gross Currency", "Gross Debit (GC)",
           "Gross Credit (GC)", "Exchange Rate", "Net Currency", "Net Debit (NC)", "Net Credit (NC)",
           "Commission (NC)", "Markup (NC)", "Scheme Fees (NC)", "Interchange (NC)", "Payment Method Variant",
           "Modification Merchant Reference", "Batch Number")


def sdr_file(batch: int, *rows: dict[str, str]) -> httpx.Response:
    lines = [",".join(COLUMNS)]
    for row in rows:
        cells = {"Company Account": "AcmeCompany", "Merchant Account": "AcmeShopEU", "Payment Method": "visa",
                 "Creation Date": "2026-11-16 09:30:00", "TimeZone": "CET", "Gross Currency": "EUR",
                 "Net Currency": "EUR", "Batch Number": str(batch), "Exchange Rate": "1", **row}
        lines.append(",".join(cells.get(c, "") for c in COLUMNS))
    return httpx.Response(200, text="\n".join(lines) + "\n")


BATCH_7 = (
    {"Psp Reference": "8515208516304268", "Merchant Reference": "order-1", "Type": "Settled",
     "Modification Reference": "8815208516304270", "Gross Credit (GC)": "100.00", "Net Credit (NC)": "97.90",
     "Markup (NC)": "0.60", "Scheme Fees (NC)": "0.30", "Interchange (NC)": "1.20"},
    {"Psp Reference": "8515208516304269", "Merchant Reference": "order-2", "Type": "Refunded",
     "Modification Reference": "8815208516304271", "Gross Debit (GC)": "20.00", "Net Debit (NC)": "20.00"},
    {"Psp Reference": "8515208516304270", "Merchant Reference": "order-3", "Type": "Chargeback",
     "Modification Reference": "8815208516304272", "Gross Debit (GC)": "10.00", "Net Debit (NC)": "12.00",
     "Commission (NC)": "2.00"},
    {"Type": "Fee", "Modification Reference": "Transaction Fees November", "Net Debit (NC)": "0.40"},
    {"Type": "MerchantPayout", "Modification Reference": "TX3661234567XT", "Net Debit (NC)": "65.50",
     "Creation Date": "2026-11-17 00:30:00"},
)


def test_adyen__settlement_details_report_is_a_payout_with_its_lines(adyen: AdyenAdapter,
                                                                     router: respx.MockRouter) -> None:
    router.get(f"{DOWNLOAD}/settlement_detail_report_batch_7.csv").mock(return_value=sdr_file(7, *BATCH_7))
    router.get(f"{DOWNLOAD}/settlement_detail_report_batch_8.csv").mock(return_value=httpx.Response(404))
    [payout] = adyen.iter_payouts(date(2026, 11, 1), date(2026, 12, 1), known=["AcmeShopEU/6"])
    # 00:30 CET on the 17th: the account's own day (Europe/Amsterdam), not UTC's 16th
    assert payout == PspPayout(payout_id="AcmeShopEU/7", amount=6550, currency="EUR", status="in_transit",
                               arrival_date=date(2026, 11, 17), trace_ref="7", merchant_account="AcmeShopEU")
    lines = [(ln.kind, ln.psp_reference, ln.merchant_reference, ln.gross, ln.fee, ln.net)
             for ln in adyen.payout_lines(payout)]
    assert lines == [("charge", "8515208516304268", "order-1", 10000, 210, 9790),
                     ("refund", "8515208516304269", "order-2", -2000, 0, -2000),
                     ("dispute", "8515208516304270", "order-3", -1000, 200, -1200),
                     ("fee", None, None, -40, 0, -40),  # no gross cells: gross is net plus fee
                     ("payout", None, None, -6550, 0, -6550)]
    assert sum(ln[5] for ln in lines if ln[0] != "payout") == 6550  # the lines add up to the payout
    # a refund's and a dispute's line name the movement (its Modification Reference); a charge's does not
    assert [ln.movement_reference for ln in adyen.payout_lines(payout)] == [
        None, "8815208516304271", "8815208516304272", None, None]


def test_stripe__a_dispute_line_names_its_dispute(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    po = PspPayout(payout_id="po_2", amount=-2500, currency="EUR", status="paid", arrival_date=date(2025, 11, 17))
    dispute = canonical("dispute", id="dp_C", payment_intent="pi_C", currency="eur")
    page = listing("/v1/balance_transactions", [
        canonical("balance_transaction", id="txn_5", reporting_category="dispute", type="adjustment", amount=-1000,
                  fee=1500, net=-2500, currency="eur", source=dispute)])
    router.get(f"{URL}/v1/balance_transactions").mock(return_value=httpx.Response(200, json=page))
    [line] = stripe.payout_lines(po)
    assert (line.kind, line.psp_reference, line.movement_reference) == ("dispute", "pi_C", "dp_C")


def test_adyen__files_a_webhook_named_are_read_and_the_walk_stops_at_the_first_missing_batch(
        adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    named = router.get(f"{DOWNLOAD}/settlement_detail_report_batch_3.csv").mock(return_value=sdr_file(3, *BATCH_7))
    walk = router.get(f"{DOWNLOAD}/settlement_detail_report_batch_1.csv").mock(return_value=httpx.Response(404))
    found = list(adyen.iter_payouts(date(2026, 11, 1), date(2026, 12, 1),
                                    files=["settlement_detail_report_batch_3.csv", "payments_accounting_report.csv"]))
    assert [p.payout_id for p in found] == ["AcmeShopEU/3"]
    assert (named.call_count, walk.call_count) == (1, 1)


@pytest.mark.parametrize(("row", "message"), [
    ({"Net Credit (NC)": "1e3"}, "Net Credit"),
    ({"Creation Date": "yesterday"}, "Creation Date"),
    ({"Batch Number": "x7"}, "Batch Number"),
])
def test_adyen__a_malformed_row_is_a_protocol_error_naming_line_and_field(row: dict[str, str], message: str) -> None:
    text = sdr_file(7, {**BATCH_7[0], **row}).text
    with pytest.raises(PspProtocolError, match=message):
        sdr.parse(text, account="AcmeShopEU", tz=UTC)


def test_adyen__a_report_without_a_required_column_is_refused() -> None:
    with pytest.raises(PspProtocolError, match="Batch Number"):
        sdr.parse("Merchant Account,Type\nAcmeShopEU,Settled\n", account="AcmeShopEU", tz=UTC)


def test_adyen__batch_of_reads_only_settlement_details_file_names() -> None:
    assert sdr.batch_of("settlement_detail_report_batch_12.csv") == 12
    assert sdr.batch_of("https://x/reports/download/MerchantAccount/A/settlement_detail_report_batch_9.csv") == 9
    assert sdr.batch_of("payments_accounting_report_2026_11_16.csv") is None
    assert datetime(2026, 11, 17, tzinfo=UTC).date() == date(2026, 11, 17)
