"""``AdyenAdapter.fetch_refund``: a refund read back from the daily Payment accounting report (respx).

docs.adyen.com/reporting/invoice-reconciliation/payment-accounting-report: a refund is journalled as rows of the
refunded payment (``Psp Reference`` the payment's), record types SentForRefund, Refunded, RefundFailed and
RefundedReversed; ``Modification Merchant Reference`` (a standard column) is the refund's own reference and the
additional column ``Modification Psp Reference`` the refund's pspReference. Reports are built here in the documented
layout (``report.REPORT_COLUMNS`` plus that column), so the expected answers come from the rows written below.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
import respx

from psp_adapters.adyen import AdyenAdapter, report
from psp_adapters.protocol import Failed, Pending, RefundRef, Reversed, Secret, Succeeded

URL = "https://checkout.adyen.test"
REPORTS = "https://reports.adyen.test"
DOWNLOAD = f"{REPORTS}/reports/download/MerchantAccount/AcmeShopEU"
NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)
COLUMNS = (*report.REPORT_COLUMNS, "Modification Psp Reference")
PAYMENT = "QFQTPCQ8HXSKGK82"
OURS = "993617894906488A"  # our refund's pspReference, as [received] gave it
REF = RefundRef(payment_reference=PAYMENT, refund_reference="rf-1042", psp_refund_id=OURS)


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
            "Merchant Reference": "order-2001",
            "Payment Method": "visa",
            "Main Currency": "EUR",
            "Main Amount": "10.00",
            "TimeZone": "UTC",
            **row,
        }
        lines.append(",".join(cells.get(column, "") for column in columns))
    return httpx.Response(200, text="\n".join(lines) + "\n")


def refund_row(kind: str, at: str = "2024-05-01 09:00:00", **cells: str) -> dict[str, str]:
    return {
        "Record Type": kind,
        "Booking Date": at,
        "Modification Psp Reference": OURS,
        "Modification Merchant Reference": "rf-1042",
        **cells,
    }


def serve(router: respx.MockRouter, day: str, response: httpx.Response) -> None:
    router.get(f"{DOWNLOAD}/payments_accounting_report_{day}.csv").mock(return_value=response)
    router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(404))  # every other day: not generated


def test_fetch_refund__refunded_is_succeeded_with_the_refund_id_and_amount(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    serve(
        router,
        "2024_05_01",
        csv_report(
            {"Record Type": "Settled", "Booking Date": "2024-04-30 10:00:00", "Main Amount": "50.00"},
            refund_row("SentForRefund"),
            refund_row("Refunded"),
        ),
    )
    assert adyen.fetch_refund(REF) == Succeeded(
        psp_reference=OURS, amount=1000, currency="EUR", raw_status="Refunded", merchant_reference="rf-1042"
    )


def test_fetch_refund__sent_for_refund_alone_is_pending(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    serve(router, "2024_05_01", csv_report(refund_row("SentForRefund")))
    answer = adyen.fetch_refund(REF)
    assert isinstance(answer, Pending) and answer.raw_status == "SentForRefund" and answer.psp_reference == OURS


@pytest.mark.parametrize("kind", ["RefundFailed", "Error"])
def test_fetch_refund__refund_failed_or_error_is_failed(
    adyen: AdyenAdapter, router: respx.MockRouter, kind: str
) -> None:
    serve(router, "2024_05_01", csv_report(refund_row("SentForRefund"), refund_row(kind, "2024-05-01 11:00:00")))
    assert adyen.fetch_refund(REF) == Failed(
        psp_reference=OURS, amount=1000, currency="EUR", raw_status=kind, merchant_reference="rf-1042", reason=kind
    )


def test_fetch_refund__refunded_reversed_is_reversed(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    serve(
        router,
        "2024_05_01",
        csv_report(
            refund_row("SentForRefund"), refund_row("Refunded"), refund_row("RefundedReversed", "2024-05-01 18:30:00")
        ),
    )
    assert adyen.fetch_refund(REF) == Reversed(
        psp_reference=OURS,
        amount=1000,
        currency="EUR",
        raw_status="RefundedReversed",
        merchant_reference="rf-1042",
        kind="refund",
    )


def test_fetch_refund__by_our_reference_when_the_report_lacks_the_modification_psp_reference(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    row = refund_row("Refunded")
    serve(router, "2024_05_01", csv_report(row, columns=report.REPORT_COLUMNS))
    ref = RefundRef(payment_reference=PAYMENT, refund_reference="rf-1042")  # its id was never learned
    assert adyen.fetch_refund(ref) == Succeeded(
        psp_reference=None, amount=1000, currency="EUR", raw_status="Refunded", merchant_reference="rf-1042"
    )


def test_fetch_refund__another_refund_of_the_payment_is_not_ours(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    serve(
        router,
        "2024_05_01",
        csv_report(
            refund_row(
                "Refunded",
                **{"Modification Psp Reference": "883617894906499B", "Modification Merchant Reference": "rf-other"},
            ),
            refund_row("Refunded", **{"Modification Psp Reference": "", "Modification Merchant Reference": ""}),
            refund_row("Refunded", **{"Psp Reference": "ZZZZZZZZZZZZZZZZ"}),  # another payment's
            refund_row("Refunded", **{"Merchant Account": "AcmeShopUS"}),
        ),
    )  # another account's
    assert adyen.fetch_refund(REF) == Pending(psp_reference=OURS, merchant_reference="rf-1042")


def test_fetch_refund__our_reference_under_another_refund_id_answers_with_that_id(
    adyen: AdyenAdapter, router: respx.MockRouter
) -> None:
    """Evidence never overwrites: the answer names the other id, and recon reviews the conflict."""
    serve(
        router,
        "2024_05_01",
        csv_report(
            refund_row("Refunded", "2024-05-01 09:00:00", **{"Modification Psp Reference": "883617894906499B"}),
            refund_row("SentForRefund", "2024-05-01 10:00:00"),
        ),
    )
    answer = adyen.fetch_refund(REF)
    assert isinstance(answer, Succeeded) and answer.psp_reference == "883617894906499B"


def test_fetch_refund__the_newest_file_that_mentions_it_answers(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    router.get(f"{DOWNLOAD}/payments_accounting_report_2024_04_30.csv").mock(
        return_value=csv_report(refund_row("SentForRefund", "2024-04-30 09:00:00"))
    )
    serve(router, "2024_05_01", csv_report(refund_row("Refunded")))
    assert isinstance(adyen.fetch_refund(REF), Succeeded)


def test_fetch_refund__no_file_mentions_it_is_pending(adyen: AdyenAdapter, router: respx.MockRouter) -> None:
    route = router.get(url__startswith=DOWNLOAD).mock(return_value=httpx.Response(404))
    assert adyen.fetch_refund(REF) == Pending(psp_reference=OURS, merchant_reference="rf-1042")
    assert route.call_count == 4  # today and lookback_days=3 days back: bounded
