"""AdyenAdapter.iter_payments: the Payment accounting report files of the window's days and after, one download
per account-day, each payment's latest record type read by ``report_outcome``.

Reports are built in the documented layout (``report.REPORT_COLUMNS``, docs.adyen.com/reporting/invoice-
reconciliation/payment-accounting-report); what a record type means is ``wire.RecordType``'s documented table.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
import respx

from psp_adapters import pager
from psp_adapters.errors import PspProtocolError, PspRejectedError
from psp_adapters.protocol import Failed, Pending, Succeeded
from tests.adapters.test_adyen import DOWNLOAD, DOWNLOAD_US, NOW, build, csv_report

FILE = "payments_accounting_report_{}.csv"
MISSING = httpx.Response(404)


def test_listing__reads_the_window_days_then_each_later_day_once_per_account(router: respx.MockRouter) -> None:
    adapter = build(lookback_days=3)  # today is 2024-05-02 (UTC)
    day1 = csv_report(
        {"Psp Reference": "A", "Merchant Reference": "o-A", "Booking Date": "2024-05-01 09:00:00", "TimeZone": "UTC",
         "Record Type": "Received"},
        {"Psp Reference": "A", "Merchant Reference": "o-A", "Booking Date": "2024-05-01 09:00:05", "TimeZone": "UTC",
         "Record Type": "Authorised"},
        {"Psp Reference": "B", "Merchant Reference": "o-B", "Booking Date": "2024-05-01 10:00:00", "TimeZone": "UTC",
         "Record Type": "Received"},
        {"Psp Reference": "C", "Merchant Reference": "o-C", "Booking Date": "2024-05-01 11:00:00", "TimeZone": "UTC",
         "Record Type": "Received"})
    day2 = csv_report(  # the next day: B was refused, A cancelled (Authorised, then Cancelled: a later event)
        {"Psp Reference": "B", "Merchant Reference": "o-B", "Booking Date": "2024-05-02 01:00:00", "TimeZone": "UTC",
         "Record Type": "Refused"},
        {"Psp Reference": "A", "Merchant Reference": "o-A", "Booking Date": "2024-05-02 02:00:00", "TimeZone": "UTC",
         "Record Type": "Cancelled"},
        {"Psp Reference": "Z", "Merchant Reference": "o-Z", "Booking Date": "2024-05-02 03:00:00", "TimeZone": "UTC",
         "Record Type": "Authorised"})  # created after the window: not listed
    eu = {day: router.get(f"{DOWNLOAD}/{FILE.format(day)}").mock(return_value=answer)
          for day, answer in (("2024_05_01", day1), ("2024_05_02", day2))}
    us = router.get(f"{DOWNLOAD_US}/{FILE.format('2024_05_01')}").mock(return_value=MISSING)
    us2 = router.get(f"{DOWNLOAD_US}/{FILE.format('2024_05_02')}").mock(return_value=MISSING)
    pages = list(adapter.iter_payments(datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 2, tzinfo=UTC),
                                       merchant_accounts=["AcmeShopUS"]))
    # one page per download (two days x two accounts); the payments come on the last
    assert [len(p) for p in pages] == [0, 0, 0, 3]
    assert [r.call_count for r in (*eu.values(), us, us2)] == [1, 1, 1, 1]
    by_ref = {item.merchant_reference: item for item in pages[-1]}
    assert isinstance(by_ref["o-A"].outcome, Failed) and by_ref["o-A"].outcome.raw_status == "Cancelled"
    assert isinstance(by_ref["o-B"].outcome, Failed) and by_ref["o-B"].outcome.raw_status == "Refused"
    assert isinstance(by_ref["o-C"].outcome, Pending)  # Received, nothing since
    assert by_ref["o-A"].created_at == datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
    assert {item.merchant_account for item in pages[-1]} == {"AcmeShopEU"}
    adapter.close()


def test_listing__an_old_window_reads_at_most_lookback_days_past_it(router: respx.MockRouter) -> None:
    adapter = build(lookback_days=1, now_func=lambda: NOW + timedelta(days=10))
    ok = csv_report({"Psp Reference": "A", "Merchant Reference": "o-A", "Booking Date": "2024-05-01 09:00:00",
                     "TimeZone": "UTC", "Record Type": "Settled"})
    first = router.get(f"{DOWNLOAD}/{FILE.format('2024_05_01')}").mock(return_value=ok)
    second = router.get(f"{DOWNLOAD}/{FILE.format('2024_05_02')}").mock(return_value=MISSING)
    pages = list(adapter.iter_payments(datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 1, 12, tzinfo=UTC)))
    assert (first.call_count, second.call_count, len(pages)) == (1, 1, 2)
    [item] = pages[-1]
    assert isinstance(item.outcome, Succeeded) and item.psp_reference == "A"
    adapter.close()


def test_listing__needs_aware_times_and_an_account() -> None:
    adapter = build(merchant_account=None)
    with pytest.raises(PspRejectedError):
        adapter.iter_payments(datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 2, tzinfo=UTC))
    with pytest.raises(ValueError):
        adapter.iter_payments(datetime(2024, 5, 1), datetime(2024, 5, 2, tzinfo=UTC))
    adapter.close()


def test_listing__downloads_count_against_the_pagers_bound(router: respx.MockRouter,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Adyen's listings (payments, settlements) are a known sequence of files, each download a page of the shared
    pager: a window asking for more downloads than the bound is a protocol error, not an endless read."""
    monkeypatch.setattr(pager, "MAX_PAGES_DEFAULT", 3)
    route = router.get(url__startswith=DOWNLOAD + "/").mock(return_value=MISSING)
    adapter = build(lookback_days=0)
    since, until = datetime(2024, 4, 28, tzinfo=UTC), datetime(2024, 5, 2, tzinfo=UTC)  # four days, one account
    with pytest.raises(PspProtocolError, match="more than 3 pages"):
        list(adapter.iter_payments(since, until))
    with pytest.raises(PspProtocolError, match="more than 3 pages"):
        list(adapter.iter_settlements(since, until))
    assert route.call_count == 6
    adapter.close()


def test_listing__a_row_names_its_own_merchant_account(router: respx.MockRouter) -> None:
    """A listed payment's and a settlement line's account is the one its rows name in Merchant Account (recon
    matches ours on it), else the account whose report it is."""
    adapter = build(lookback_days=0)
    day = csv_report(
        {"Psp Reference": "A", "Merchant Account": "AcmeShopUS", "Booking Date": "2024-05-02 09:00:00",
         "TimeZone": "UTC", "Record Type": "Settled"},
        {"Psp Reference": "B", "Merchant Account": "", "Booking Date": "2024-05-02 09:00:00", "TimeZone": "UTC",
         "Record Type": "Settled"})
    router.get(f"{DOWNLOAD}/{FILE.format('2024_05_02')}").mock(return_value=day)
    [page] = list(adapter.iter_payments(datetime(2024, 5, 2, tzinfo=UTC), datetime(2024, 5, 2, 12, tzinfo=UTC)))
    assert {item.psp_reference: item.merchant_account for item in page} == {"A": "AcmeShopUS", "B": "AcmeShopEU"}
    lines = list(adapter.iter_settlements(datetime(2024, 5, 2, tzinfo=UTC), datetime(2024, 5, 3, tzinfo=UTC)))
    assert {line.psp_reference: line.merchant_account for line in lines} == {"A": "AcmeShopUS", "B": "AcmeShopEU"}
    adapter.close()
