"""``AdyenAdapter.fetch_modification``: a capture or a cancel read back from the daily Payment accounting report
(respx).

docs.adyen.com/reporting/reports-and-the-payments-lifecycle: the report journals ``SentForSettle`` ("request capture
of funds from shopper"), ``Settled``, ``Cancelled`` ("do not allow funds transfer") and ``Error`` as rows of the
payment (``Psp Reference`` the payment's); docs.adyen.com/online-payments/capture/failure-reasons: a capture the
card scheme rejected after it was sent (CAPTURE_FAILED) is ``CaptureFailed``. The modification is named by
``Modification Merchant Reference`` (our ``reference``: PaymentCaptureRequest/PaymentCancelRequest "Your reference
for the capture/cancel request") and the additional column ``Modification Psp Reference`` (its own pspReference).
Reports are built here in that layout (``report.REPORT_COLUMNS`` plus that column), so the expected answers come
from the rows written below.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
import respx

from psp_adapters.adyen import AdyenAdapter, report
from psp_adapters.protocol import Failed, ModificationRequest, Pending, Secret, Succeeded

URL = "https://checkout.adyen.test"
REPORTS = "https://reports.adyen.test"
DOWNLOAD = f"{REPORTS}/reports/download/MerchantAccount/AcmeShopEU"
NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)
COLUMNS = (*report.REPORT_COLUMNS, "Modification Psp Reference")
PAYMENT = "QFQTPCQ8HXSKGK82"
CAPTURE_ID = "993617894906488A"  # our capture's pspReference, as [received] gave it
CANCEL_ID = "993617894906489B"
CAPTURE = ModificationRequest(kind="capture", payment_reference=PAYMENT, modification_reference="order-7-capture1",
                              amount=3000, currency="EUR", modification_id=CAPTURE_ID)
CANCEL = ModificationRequest(kind="cancel", payment_reference=PAYMENT, modification_reference="order-7-cancel1",
                             amount=5000, currency="EUR", modification_id=CANCEL_ID)


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as mock:
        yield mock


@pytest.fixture
def adyen() -> Iterator[AdyenAdapter]:
    with AdyenAdapter(
        URL,
        api_key=Secret("AQEcheckoutNotReal"),
        merchant_account="AcmeShopEU",
        report_base_url=REPORTS,
        report_api_key=Secret("AQEreportNotReal"),
        lookback_days=3,
        now_func=lambda: NOW,
    ) as adapter:
        yield adapter


def csv_report(*rows: dict[str, str], columns: tuple[str, ...] = COLUMNS) -> httpx.Response:
    lines = [",".join(columns)]
    for row in rows:
        cells = {
            "Company Account": "AcmeCompany",
            "Merchant Account": "AcmeShopEU",
            "Psp Reference": PAYMENT,
            "Merchant Reference": "order-7",
            "Payment Method": "visa",
            "Main Currency": "EUR",
            "Main Amount": "30.00",
            "TimeZone": "UTC",
            **row,
        }
        lines.append(",".join(cells.get(column, "") for column in columns))
    return httpx.Response(200, text="\n".join(lines) + "\n")


def capture_row(kind: str, at: str = "2024-05-01 09:00:00", **cells: str) -> dict[str, str]:
    return {"Record Type": kind, "Booking Date": at, "Modification Psp Reference": CAPTURE_ID,
            "Modification Merchant Reference": "order-7-capture1", **cells}


def cancel_row(kind: str, at: str = "2024-05-01 09:00:00", **cells: str) -> dict[str, str]:
    return {"Record Type": kind, "Booking Date": at, "Main Amount": "50.00", "Modification Psp Reference": CANCEL_ID,
            "Modification Merchant Reference": "order-7-cancel1", **cells}


def serve(router: respx.MockRouter, day: str, response: httpx.Response) -> None:
    router.get(f"{DOWNLOAD}/payments_accounting_report_{day}.csv").mock(return_value=response)
    router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(404))  # every other day: not generated


def test_fetch_modification__settled_is_a_succeeded_capture_with_the_amount_captured(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    serve(router, "2024_05_01", csv_report(
        {"Record Type": "Authorised", "Booking Date": "2024-04-30 10:00:00", "Main Amount": "50.00"},
        capture_row("SentForSettle"),
        capture_row("Settled", "2024-05-01 09:00:00"),
    ))
    assert adyen.fetch_modification(CAPTURE) == Succeeded(
        psp_reference=CAPTURE_ID, amount=3000, currency="EUR", raw_status="Settled",
        merchant_reference="order-7-capture1")


def test_fetch_modification__sent_for_settle_alone_is_pending(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    serve(router, "2024_05_01", csv_report(capture_row("SentForSettle")))
    answer = adyen.fetch_modification(CAPTURE)
    assert isinstance(answer, Pending) and answer.raw_status == "SentForSettle" and answer.psp_reference == CAPTURE_ID


@pytest.mark.parametrize("kind", ["CaptureFailed", "Error"])
def test_fetch_modification__capture_failed_or_error_is_failed(
    adyen: AdyenAdapter, router: respx.MockRouter, kind: str
) -> None:
    serve(router, "2024_05_01", csv_report(capture_row("SentForSettle"), capture_row(kind, "2024-05-01 11:00:00")))
    assert adyen.fetch_modification(CAPTURE) == Failed(
        psp_reference=CAPTURE_ID, amount=3000, currency="EUR", raw_status=kind, merchant_reference="order-7-capture1",
        reason=kind)


def test_fetch_modification__recaptured_after_a_failure_is_pending_again(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    """failure-reasons: after a technical failure Adyen re-captures, and the payment is SentForSettle again."""
    serve(router, "2024_05_01", csv_report(
        capture_row("SentForSettle"),
        capture_row("CaptureFailed", "2024-05-01 10:00:00"),
        capture_row("SentForSettle", "2024-05-01 12:00:00"),
    ))
    assert isinstance(adyen.fetch_modification(CAPTURE), Pending)


def test_fetch_modification__cancelled_is_a_succeeded_cancel(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    serve(router, "2024_05_01", csv_report(
        {"Record Type": "Authorised", "Booking Date": "2024-04-30 10:00:00", "Main Amount": "50.00"},
        cancel_row("Cancelled"),
    ))
    assert adyen.fetch_modification(CANCEL) == Succeeded(
        psp_reference=CANCEL_ID, currency="EUR", raw_status="Cancelled", merchant_reference="order-7-cancel1")


def test_fetch_modification__a_cancel_in_error_is_failed(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    serve(router, "2024_05_01", csv_report(cancel_row("Error")))
    answer = adyen.fetch_modification(CANCEL)
    assert isinstance(answer, Failed) and answer.reason == "Error" and answer.psp_reference == CANCEL_ID


def test_fetch_modification__a_capture_never_reads_the_cancel_records_nor_the_other_way(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    serve(router, "2024_05_01", csv_report(
        capture_row("Cancelled"),  # a record type no capture has, under the capture's names
        cancel_row("Settled"),
    ))
    assert adyen.fetch_modification(CAPTURE) == Pending(psp_reference=CAPTURE_ID,
                                                        merchant_reference="order-7-capture1")
    assert adyen.fetch_modification(CANCEL) == Pending(psp_reference=CANCEL_ID, merchant_reference="order-7-cancel1")


def test_fetch_modification__by_our_reference_when_the_report_lacks_the_modification_psp_reference(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    serve(router, "2024_05_01", csv_report(capture_row("Settled"), columns=report.REPORT_COLUMNS))
    unnamed = ModificationRequest(kind="capture", payment_reference=PAYMENT, modification_reference="order-7-capture1",
                                  amount=3000, currency="EUR")  # its id was never learned
    assert adyen.fetch_modification(unnamed) == Succeeded(
        psp_reference=None, amount=3000, currency="EUR", raw_status="Settled", merchant_reference="order-7-capture1")


def test_fetch_modification__the_payments_own_rows_and_other_captures_are_not_ours(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    serve(router, "2024_05_01", csv_report(
        capture_row("Settled", **{"Modification Psp Reference": "883617894906499B",
                                  "Modification Merchant Reference": "order-7-capture2"}),
        capture_row("Settled", **{"Modification Psp Reference": "", "Modification Merchant Reference": ""}),
        capture_row("Settled", **{"Psp Reference": "ZZZZZZZZZZZZZZZZ"}),  # another payment's
        capture_row("Settled", **{"Merchant Account": "AcmeShopUS"}),  # another account's
    ))
    assert adyen.fetch_modification(CAPTURE) == Pending(psp_reference=CAPTURE_ID,
                                                        merchant_reference="order-7-capture1")


def test_fetch_modification__our_reference_under_another_id_answers_with_that_id(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    """Evidence never overwrites: the answer names the other id, and recon reviews the conflict."""
    serve(router, "2024_05_01", csv_report(
        capture_row("Settled", "2024-05-01 09:00:00", **{"Modification Psp Reference": "883617894906499B"}),
        capture_row("SentForSettle", "2024-05-01 10:00:00"),
    ))
    answer = adyen.fetch_modification(CAPTURE)
    assert isinstance(answer, Succeeded) and answer.psp_reference == "883617894906499B"


def test_fetch_modification__the_newest_file_that_mentions_it_answers(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    router.get(f"{DOWNLOAD}/payments_accounting_report_2024_04_30.csv").mock(
        return_value=csv_report(capture_row("SentForSettle", "2024-04-30 09:00:00")))
    serve(router, "2024_05_01", csv_report(capture_row("Settled")))
    assert isinstance(adyen.fetch_modification(CAPTURE), Succeeded)


def test_fetch_modification__no_file_mentions_it_is_pending(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    route = router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(404))
    assert adyen.fetch_modification(CANCEL) == Pending(psp_reference=CANCEL_ID, merchant_reference="order-7-cancel1")
    assert route.call_count == 4  # today and lookback_days=3 days back: bounded
