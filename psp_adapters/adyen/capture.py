"""Adyen's captures and cancels (Checkout v71/v72 ``POST /payments/{paymentPspReference}/captures`` and
``/cancels``; docs.adyen.com/online-payments/capture, /online-payments/cancel) and their mapping.

A payment authorised with ``additionalData.manualCapture: "true"`` waits for a capture. The capture request
(``PaymentCaptureRequest``): ``amount`` {value in Adyen's units, currency} (less than authorised: a partial
capture), ``merchantAccount``, ``reference`` (ours). The cancel request (``PaymentCancelRequest``):
``merchantAccount``, ``reference``. Both answers are asynchronous: ``status`` "will always have the value
**received**", with the modification's own ``pspReference`` (and the payment's as ``paymentPspReference``); the
outcome comes by the ``CAPTURE`` / ``CAPTURE_FAILED`` and ``CANCELLATION`` webhooks and the reports. So an
accepted modification is Pending here, carrying its pspReference, which recon stores at once.

The reports (``report_rows``, ``report_outcome``): the daily Payment accounting report journals a capture or a
cancel as rows of the payment (``Psp Reference`` the payment's), as it does a refund (``refund.py``). A capture:
``SentForSettle`` (the capture requested from the shopper's bank: accepted, not settled yet), ``Settled`` (the
funds captured; ``Main Amount`` what was captured), ``CaptureFailed`` (rejected by the card scheme after it was
sent: the CAPTURE_FAILED webhook's word) or ``Error`` (failed talking to the financial institution). A cancel:
``Cancelled`` (done) or ``Error``. (docs.adyen.com/reporting/reports-and-the-payments-lifecycle: "SentForSettle:
Modification/system: request capture of funds from shopper", "Cancelled: Modification: do not allow funds
transfer"; docs.adyen.com/online-payments/capture/failure-reasons: CAPTURE_FAILED, and a capture Adyen re-captures
after a technical failure goes back to SentForSettle.) Which modification a row is comes, as for a refund, from
``Modification Psp Reference`` (the capture's or cancel's own pspReference, which ``[received]`` gave us) or
``Modification Merchant Reference`` (our ``reference``: "visible in Customer Area and in reports"); a row naming
neither is never read as ours.
"""

from __future__ import annotations

from collections.abc import Iterable

from psp_adapters._wire import JsonFields
from psp_adapters.adyen.refund import MODIFICATION_MERCHANT_REFERENCE, modification_id
from psp_adapters.adyen.report import ReportRow
from psp_adapters.adyen.wire import PSP_NAME, from_adyen_amount, to_adyen_amount
from psp_adapters.protocol import Failed, ModificationRequest, PaymentOutcome, Pending, Succeeded, Unknown

_json = JsonFields(PSP_NAME)

#: the only ``status`` of PaymentCaptureResponse and PaymentCancelResponse
RECEIVED = "received"
#: the path segment of each kind
PATHS = {"capture": "captures", "cancel": "cancels"}


def modification_body(request: ModificationRequest, *, merchant_account: str) -> dict[str, object]:
    """The JSON body of ``POST /payments/{paymentPspReference}/captures`` or ``/cancels``."""
    body: dict[str, object] = {"merchantAccount": merchant_account, "reference": request.modification_reference}
    if request.kind == "capture":
        body["amount"] = {"value": to_adyen_amount(request.amount, request.currency), "currency": request.currency}
    return body


def modification_to_outcome(payload: object) -> PaymentOutcome:
    """``[received]`` with the modification's pspReference is Pending (the webhook tells the end); any other
    status is Unknown, never a guess. A capture's answer carries its amount; a cancel's has none."""
    doc = _json.as_object(payload, "modification response")
    ref = _json.require(doc, "pspReference", str)
    status = _json.require(doc, "status", str)
    amount, currency = None, None
    if doc.get("amount") is not None:
        money = _json.as_object(doc.get("amount"), "amount")
        currency = _json.require(money, "currency", str).upper()
        amount = from_adyen_amount(_json.amount(money, "value"), currency)
    reference = doc.get("reference")
    common = {"psp_reference": ref, "amount": amount, "currency": currency, "raw_status": status,
              "merchant_reference": reference if isinstance(reference, str) else None}
    if status == RECEIVED:
        return Pending(**common)  # type: ignore[arg-type]
    return Unknown(**common)  # type: ignore[arg-type]


#: the Payment accounting report's record types of each kind of modification (``wire.RecordType``)
SENT_FOR_SETTLE, SETTLED, CAPTURE_FAILED, CANCELLED, ERROR = (
    "SentForSettle", "Settled", "CaptureFailed", "Cancelled", "Error")
REPORT_RECORDS = {"capture": (SENT_FOR_SETTLE, SETTLED, CAPTURE_FAILED, ERROR), "cancel": (CANCELLED, ERROR)}


def report_rows(rows: Iterable[ReportRow], request: ModificationRequest, *, account: str) -> list[ReportRow]:
    """The rows of one report that are the capture or cancel ``request`` names: a record of its kind
    (``REPORT_RECORDS``) of its payment in ``account`` whose ``Modification Psp Reference`` is the PSP's id of it we
    hold (``request.modification_id``) or whose ``Modification Merchant Reference`` is our reference (a row naming
    our reference under another id is kept: ``report_outcome`` answers with it, and recon reviews the conflict)."""
    kinds = REPORT_RECORDS.get(request.kind, ())
    found = []
    for row in rows:
        if row.record_type not in kinds or row.psp_reference != request.payment_reference:
            continue
        if row.merchant_account and row.merchant_account != account:
            continue
        theirs = modification_id(row)
        ours = (row.raw.get(MODIFICATION_MERCHANT_REFERENCE) or "").strip()
        if (theirs and theirs == request.modification_id) or (ours and ours == request.modification_reference):
            found.append(row)
    return found


def report_outcome(rows: list[ReportRow], request: ModificationRequest) -> PaymentOutcome:
    """What the modification's report rows (``report_rows``, not empty) say: the latest row's record type, or, when
    a row names another id than ours, that row (evidence of another capture or cancel: recon's conflict to review).
    Settled and Cancelled are Succeeded (a capture's ``amount``: the size of ``Main Amount``, what was captured),
    CaptureFailed and Error Failed (``reason`` the record type), SentForSettle Pending."""
    mine = request.modification_id
    others = [row for row in rows if mine and modification_id(row) not in (None, mine)]
    row = sorted(others or rows, key=lambda r: r.booked_at)[-1]  # stable: the file's order among equal times
    common = {"psp_reference": modification_id(row) or mine, "currency": row.currency,
              "raw_status": row.record_type, "merchant_reference": request.modification_reference,
              "amount": abs(row.amount) if request.kind == "capture" else None}
    match row.record_type:
        case "Settled" | "Cancelled":
            return Succeeded(**common)  # type: ignore[arg-type]
        case "CaptureFailed" | "Error":
            return Failed(**common, reason=row.record_type)  # type: ignore[arg-type]
    return Pending(**common)  # type: ignore[arg-type]
