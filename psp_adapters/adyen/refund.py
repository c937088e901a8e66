"""Adyen's refunds (Checkout v71/v72 ``POST /payments/{paymentPspReference}/refunds``) and their mapping.

The request (``PaymentRefundRequest``): ``amount`` {value in Adyen's units, currency}, ``merchantAccount``,
``reference`` (ours, "Maximum length: 80 characters"), ``merchantRefundReason`` (one of Adyen's five codes).
The answer (``PaymentRefundResponse``) is asynchronous: ``status`` "will always have the value **received**",
with the refund's own ``pspReference``; the outcome comes later, by the ``REFUND`` webhook (``success`` true or
false), ``REFUND_FAILED`` or ``REFUNDED_REVERSED``, and by the reports. So an accepted refund is Pending here,
carrying its ``pspReference``, which recon stores at once.

The reports (``report_rows``, ``report_outcome``): the daily Payment accounting report journals a refund as rows of
the refunded payment (``Psp Reference`` the payment's), record types ``SentForRefund`` (sent: still pending),
``Refunded`` (completed), ``RefundFailed`` (failed; the payment stays captured), ``RefundedReversed`` (reversed
by the scheme: the money came back) and ``Error`` (failed talking to the financial institution)
(docs.adyen.com/reporting/invoice-reconciliation/payment-accounting-report, "Record types"; ``wire.RecordType``).
Which refund a row is comes from ``Modification Psp Reference`` (the refund's own pspReference, an additional
column the merchant adds to the report) or ``Modification Merchant Reference`` (our refund reference, a standard
column). A row naming neither cannot be told from the payment's other refunds and is never read as ours.
"""

from __future__ import annotations

from collections.abc import Iterable

from psp_adapters._wire import JsonFields
from psp_adapters.adyen.report import ReportRow
from psp_adapters.adyen.wire import PSP_NAME, from_adyen_amount, to_adyen_amount
from psp_adapters.protocol import (
    Failed,
    PaymentOutcome,
    Pending,
    RefundRef,
    RefundRequest,
    Reversed,
    Succeeded,
    Unknown,
)

_json = JsonFields(PSP_NAME)

#: ``merchantRefundReason``'s values (CheckoutService-v72.json, PaymentRefundRequest)
REASONS = ("FRAUD", "CUSTOMER REQUEST", "RETURN", "DUPLICATE", "OTHER")
#: the only ``status`` of PaymentRefundResponse
RECEIVED = "received"


def refund_body(request: RefundRequest, *, merchant_account: str) -> dict[str, object]:
    """The JSON body of ``POST /payments/{paymentPspReference}/refunds``."""
    body: dict[str, object] = {
        "amount": {"value": to_adyen_amount(request.amount, request.currency), "currency": request.currency},
        "merchantAccount": merchant_account,
        "reference": request.refund_reference,
    }
    if request.reason:
        body["merchantRefundReason"] = request.reason
    return body


def refund_to_outcome(payload: object) -> PaymentOutcome:
    """``[received]`` with the refund's pspReference is Pending (the webhook tells the end); any other status
    is Unknown, never a guess."""
    doc = _json.as_object(payload, "refund response")
    ref = _json.require(doc, "pspReference", str)
    status = _json.require(doc, "status", str)
    money = _json.as_object(doc.get("amount"), "amount")
    currency = _json.require(money, "currency", str).upper()
    common = {"psp_reference": ref, "amount": from_adyen_amount(_json.amount(money, "value"), currency),
              "currency": currency, "raw_status": status,
              "merchant_reference": doc.get("reference") if isinstance(doc.get("reference"), str) else None}
    if status == RECEIVED:
        return Pending(**common)  # type: ignore[arg-type]
    return Unknown(**common)  # type: ignore[arg-type]


#: the report's columns naming the modification a row is (the refund's pspReference; our refund reference)
MODIFICATION_PSP_REFERENCE = "Modification Psp Reference"
MODIFICATION_MERCHANT_REFERENCE = "Modification Merchant Reference"
#: a refund's record types in the Payment accounting report (``wire.RecordType``)
SENT_FOR_REFUND, REFUNDED, REFUND_FAILED, REFUNDED_REVERSED, ERROR = (
    "SentForRefund", "Refunded", "RefundFailed", "RefundedReversed", "Error")
REFUND_RECORDS = (SENT_FOR_REFUND, REFUNDED, REFUND_FAILED, REFUNDED_REVERSED, ERROR)


def modification_id(row: ReportRow) -> str | None:
    """The pspReference of the modification (here: the refund) a report row is, when the report has the column."""
    return (row.raw.get(MODIFICATION_PSP_REFERENCE) or "").strip() or None


def report_rows(rows: Iterable[ReportRow], ref: RefundRef, *, account: str) -> list[ReportRow]:
    """The rows of one report that are the refund ``ref`` names: a refund record of its payment (``Psp
    Reference``) in ``account`` whose ``Modification Psp Reference`` is our PSP refund id or whose ``Modification
    Merchant Reference`` is our refund reference (a row naming our reference under another refund id is kept:
    ``report_outcome`` answers with it, and recon reviews the conflict)."""
    found = []
    for row in rows:
        if row.record_type not in REFUND_RECORDS or row.psp_reference != ref.payment_reference:
            continue
        if row.merchant_account and row.merchant_account != account:
            continue
        theirs = modification_id(row)
        ours = (row.raw.get(MODIFICATION_MERCHANT_REFERENCE) or "").strip()
        if (theirs and theirs == ref.psp_refund_id) or (ours and ours == ref.refund_reference):
            found.append(row)
    return found


def report_outcome(rows: list[ReportRow], ref: RefundRef) -> PaymentOutcome | Reversed:
    """What the refund's report rows (``report_rows``, not empty) say: the latest row's record type, or, when a row
    names another refund id than ours, that row (evidence naming another refund: recon's conflict to review).
    SentForRefund is Pending, Refunded Succeeded, RefundFailed and Error Failed, RefundedReversed Reversed
    (kind refund); ``amount`` is the size of ``Main Amount``."""
    others = [row for row in rows if ref.psp_refund_id and modification_id(row) not in (None, ref.psp_refund_id)]
    row = sorted(others or rows, key=lambda r: r.booked_at)[-1]  # stable: the file's order among equal times
    common = {"psp_reference": modification_id(row) or ref.psp_refund_id, "amount": abs(row.amount),
              "currency": row.currency, "raw_status": row.record_type, "merchant_reference": ref.refund_reference}
    match row.record_type:
        case "Refunded":
            return Succeeded(**common)  # type: ignore[arg-type]
        case "RefundFailed" | "Error":
            return Failed(**common, reason=row.record_type)  # type: ignore[arg-type]
        case "RefundedReversed":
            return Reversed(**common, kind="refund")  # type: ignore[arg-type]
    return Pending(**common)  # type: ignore[arg-type]
