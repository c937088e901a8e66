"""Adyen's wire format, mirrored exactly, and its mapping to protocol outcomes.

The only place where an Adyen document becomes a ``PaymentOutcome`` or a ``SettlementLine``, and where
amounts cross between Adyen's units and ISO-4217 minor units. Two status fields exist:

- ``resultCode`` of a Checkout ``POST /v71/payments`` answer (``ResultCode``);
- ``Record Type`` of a row of the daily Payment accounting report, the journal of a payment's lifecycle
  (``RecordType``). Checkout has no "get payment" endpoint: Adyen tells status through webhooks and reports.

Shapes: PaymentResponse ``{"pspReference": "…", "resultCode": "Authorised", "merchantReference": "…",
"amount": {"value": 1000, "currency": "EUR"}, "refusalReason": "…", "refusalReasonCode": "…"}``;
error ``{"status": 422, "errorCode": "101", "message": "Invalid card number", "errorType": "validation",
"pspReference": "…"}``. The report file's CSV layout is ``report.py``'s business; this module says what
its ``Record Type`` means.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, assert_never

from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import (
    ChargeRequest,
    Failed,
    PaymentOutcome,
    Pending,
    SettlementLine,
    Succeeded,
    Unknown,
)
from psp_adapters.units import from_psp_units, to_psp_units

if TYPE_CHECKING:
    from psp_adapters.adyen.report import ReportRow

PSP_NAME = "adyen"
API_VERSION = "v71"
#: error code of "request already processed or in progress" (same idempotency key still executing)
IN_FLIGHT_ERROR_CODE = "704"

_T = TypeVar("_T")

# Adyen's currency table differs from ISO 4217 for four currencies (docs.adyen.com "Currency codes": "For
# CLP, CVE, IDR, and ISK the standard has a different number of decimals"): CLP and ISK take two decimals,
# CVE and IDR none. Value: Adyen exponent minus ISO exponent.
_EXPONENT_SHIFT: Mapping[str, int] = {"CLP": 2, "ISK": 2, "CVE": -2, "IDR": -2}


class ResultCode(enum.Enum):
    """``resultCode`` of a /payments answer (Checkout API v71).

    The v71 OpenAPI enum also lists ``Success`` without documenting it; it is left out on purpose, so it
    arrives as Unknown rather than as a guess.
    """

    AUTHORISED = "Authorised"  #: final: authorised (captured automatically unless delayed capture is set)
    PARTIALLY_AUTHORISED = "PartiallyAuthorised"  #: only part of the amount; the rest is still open
    REFUSED = "Refused"  #: final: refused; ``refusalReason`` says why
    ERROR = "Error"  #: final: an error during processing; ``refusalReason`` says which
    CANCELLED = "Cancelled"  #: final: cancelled before completion
    PENDING = "Pending"  #: final status not available yet (asynchronous method)
    RECEIVED = "Received"  #: received, will be processed
    REDIRECT_SHOPPER = "RedirectShopper"  #: shopper must complete it elsewhere
    IDENTIFY_SHOPPER = "IdentifyShopper"  #: 3DS2 device fingerprint required
    CHALLENGE_SHOPPER = "ChallengeShopper"  #: 3DS2 challenge required
    PRESENT_TO_SHOPPER = "PresentToShopper"  #: voucher/QR shown to the shopper, who pays later
    AUTHENTICATION_FINISHED = "AuthenticationFinished"  #: 3DS2 authentication-only flow done, not authorised
    AUTHENTICATION_NOT_REQUIRED = "AuthenticationNotRequired"  #: authentication-only flow, not authorised


class RecordType(enum.Enum):
    """``Record Type`` of a Payment accounting report row: one journal entry of the payments lifecycle."""

    RECEIVED = "Received"  #: validated payment attempt
    AUTHORISED = "Authorised"  #: approved by the issuer
    AUTHORISED_PENDING = "AuthorisedPending"  #: in-person: approved, card and terminal still to confirm
    REFUSED = "Refused"  #: final: declined
    ERROR = "Error"  #: final: failed talking to the financial institution
    CANCELLED = "Cancelled"  #: final: cancelled before capture
    EXPIRED = "Expired"  #: final: authorised but never captured in time
    CAPTURE_FAILED = "CaptureFailed"  #: Adyen retries the capture
    SENT_FOR_SETTLE = "SentForSettle"  #: capture sent to the financial institution
    SETTLED = "Settled"  #: funds received by Adyen
    SENT_FOR_REFUND = "SentForRefund"  #: a later refund of a captured payment
    REFUNDED = "Refunded"  #: refund completed
    REFUND_FAILED = "RefundFailed"  #: refund failed; the payment stays captured
    REFUNDED_REVERSED = "RefundedReversed"  #: refund reversed by the scheme
    CHARGEBACK = "Chargeback"  #: disputed by the shopper after capture
    CHARGEBACK_REVERSED = "ChargebackReversed"  #: dispute reversed
    SECOND_CHARGEBACK = "SecondChargeback"  #: dispute reopened


@dataclass(frozen=True, slots=True)
class AdyenError:
    """An Adyen error body (every field may be absent)."""

    error_code: str | None
    message: str | None
    error_type: str | None


def to_adyen_amount(amount: int, currency: str) -> int:
    """ISO minor units -> Adyen units. Raises PspRejectedError when Adyen cannot represent it."""
    return to_psp_units(amount, currency, shifts=_EXPONENT_SHIFT, psp=PSP_NAME, label="Adyen")


def from_adyen_amount(amount: int, currency: str) -> int:
    """Adyen units -> ISO minor units. Raises PspProtocolError when the amount is not whole minor units."""
    return from_psp_units(amount, currency, shifts=_EXPONENT_SHIFT, psp=PSP_NAME)


def payment_body(request: ChargeRequest, *, merchant_account: str) -> dict[str, object]:
    """The JSON body of ``POST /v71/payments``: a merchant-initiated charge of a stored payment method.

    ``payment_method`` is an Adyen ``storedPaymentMethodId`` (recon never handles card numbers).
    """
    body: dict[str, object] = {
        "amount": {"value": to_adyen_amount(request.amount, request.currency), "currency": request.currency},
        "reference": request.merchant_reference,
        "merchantAccount": request.merchant_account or merchant_account,
        "shopperInteraction": "ContAuth",
        "recurringProcessingModel": "UnscheduledCardOnFile",
    }
    if request.payment_method is not None:
        body["paymentMethod"] = {"type": "scheme", "storedPaymentMethodId": request.payment_method}
    # /payments has no free-text description field; ``request.description`` stays with us
    return body


def to_outcome(
    status: ResultCode | RecordType,
    *,
    psp_reference: str | None,
    merchant_reference: str | None,
    amount: int | None,
    currency: str | None,
    reason: str | None = None,
) -> PaymentOutcome:
    """The outcome of one Adyen status, either field.

    Authorised is Succeeded (Adyen: "a final state; proceed with delivery", captured automatically by
    default). Refunds and chargebacks are later events of a payment that did succeed, so they stay
    Succeeded; their ``raw_status`` keeps the record type for the audit trail. PartiallyAuthorised is
    Pending: part of the amount is still open. Shopper actions and authentication-only results are Pending.
    """
    common = {
        "psp_reference": psp_reference,
        "merchant_reference": merchant_reference,
        "amount": amount,
        "currency": currency,
        "raw_status": status.value,
    }
    match status:
        case (
            ResultCode.AUTHORISED
            | RecordType.AUTHORISED
            | RecordType.SENT_FOR_SETTLE
            | RecordType.SETTLED
            | RecordType.SENT_FOR_REFUND
            | RecordType.REFUNDED
            | RecordType.REFUND_FAILED
            | RecordType.REFUNDED_REVERSED
            | RecordType.CHARGEBACK
            | RecordType.CHARGEBACK_REVERSED
            | RecordType.SECOND_CHARGEBACK
        ):
            return Succeeded(**common)
        case (
            ResultCode.REFUSED
            | ResultCode.ERROR
            | ResultCode.CANCELLED
            | RecordType.REFUSED
            | RecordType.ERROR
            | RecordType.CANCELLED
            | RecordType.EXPIRED
        ):
            return Failed(**common, reason=reason or status.value)
        case (
            ResultCode.PARTIALLY_AUTHORISED
            | ResultCode.PENDING
            | ResultCode.RECEIVED
            | ResultCode.REDIRECT_SHOPPER
            | ResultCode.IDENTIFY_SHOPPER
            | ResultCode.CHALLENGE_SHOPPER
            | ResultCode.PRESENT_TO_SHOPPER
            | ResultCode.AUTHENTICATION_FINISHED
            | ResultCode.AUTHENTICATION_NOT_REQUIRED
            | RecordType.RECEIVED
            | RecordType.AUTHORISED_PENDING
            | RecordType.CAPTURE_FAILED
        ):
            return Pending(**common)
        case _:
            assert_never(status)


def payment_to_outcome(payload: object, *, request: ChargeRequest) -> PaymentOutcome:
    """Map a /payments answer. An unrecognised ``resultCode`` is Unknown; a missing one PspProtocolError."""
    doc = _object(payload, "payment response")
    raw = _require(doc, "resultCode", str)
    amount, currency = None, None
    if isinstance(doc.get("amount"), Mapping):
        currency = _require(_object(doc["amount"], "amount"), "currency", str)
        amount = from_adyen_amount(_require(_object(doc["amount"], "amount"), "value", int), currency)
    fields = {
        "psp_reference": _optional(doc, "pspReference", str),
        "merchant_reference": _optional(doc, "merchantReference", str) or request.merchant_reference,
        "amount": amount,
        "currency": currency,
    }
    try:
        status = ResultCode(raw)
    except ValueError:
        return Unknown(**fields, raw_status=raw)  # type: ignore[arg-type]
    return to_outcome(status, **fields, reason=_optional(doc, "refusalReason", str))  # type: ignore[arg-type]


def parse_error(payload: object) -> AdyenError:
    """An Adyen error body; raises PspProtocolError when it is not one."""
    doc = _object(payload, "error body")
    code = doc.get("errorCode")
    return AdyenError(
        error_code=str(code) if isinstance(code, str | int) and not isinstance(code, bool) else None,
        message=_optional(doc, "message", str),
        error_type=_optional(doc, "errorType", str),
    )


def report_outcome(rows: list[ReportRow]) -> PaymentOutcome:
    """The outcome told by one payment's rows: the latest row whose record type we recognise.

    Rows of unrecognised types (fees, new journal types) do not hide a known status; if no row is
    recognised the answer is Unknown with the latest raw type.
    """
    ordered = sorted(rows, key=lambda row: row.booked_at)
    for row in reversed(ordered):
        try:
            status = RecordType(row.record_type)
        except ValueError:
            continue
        return to_outcome(
            status,
            psp_reference=row.psp_reference,
            merchant_reference=row.merchant_reference,
            amount=row.amount,
            currency=row.currency,
        )
    last = ordered[-1]
    return Unknown(
        psp_reference=last.psp_reference,
        merchant_reference=last.merchant_reference,
        amount=last.amount,
        currency=last.currency,
        raw_status=last.record_type,
    )


def settlement_status(record_type: str) -> str | None:
    """The settlement-listing status of a row, or None when the row is not a settlement event.

    A payment appears once per event: Settled ("succeeded"), then possibly Refunded or Chargeback on a
    later day; a refused, failed, cancelled or expired payment appears once as "failed".
    """
    try:
        status = RecordType(record_type)
    except ValueError:
        return None
    match status:
        case RecordType.SETTLED:
            return "succeeded"
        case RecordType.REFUSED | RecordType.ERROR | RecordType.CANCELLED | RecordType.EXPIRED:
            return "failed"
        case RecordType.REFUNDED:
            return "refunded"
        case RecordType.CHARGEBACK | RecordType.SECOND_CHARGEBACK:
            return "chargeback"
        case (
            RecordType.RECEIVED
            | RecordType.AUTHORISED
            | RecordType.AUTHORISED_PENDING
            | RecordType.CAPTURE_FAILED
            | RecordType.SENT_FOR_SETTLE
            | RecordType.SENT_FOR_REFUND
            | RecordType.REFUND_FAILED
            | RecordType.REFUNDED_REVERSED
            | RecordType.CHARGEBACK_REVERSED
        ):
            return None
        case _:
            assert_never(status)


def to_settlement_line(row: ReportRow, *, status: str) -> SettlementLine:
    """A SettlementLine for a report row that is a settlement event."""
    return SettlementLine(
        psp_reference=row.psp_reference,
        merchant_reference=row.merchant_reference,
        amount=row.amount,
        currency=row.currency,
        status=status,
        settled_at=row.booked_at,
        raw=dict(row.raw),
    )


def _object(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise PspProtocolError(f"{PSP_NAME}: {what} is not a JSON object", psp=PSP_NAME)
    return value


def _require(doc: Mapping[str, object], name: str, kind: type[_T]) -> _T:
    value = doc.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise PspProtocolError(f"{PSP_NAME}: field {name!r} missing or not {kind.__name__}", psp=PSP_NAME)
    return value


def _optional(doc: Mapping[str, object], name: str, kind: type[_T]) -> _T | None:
    value = doc.get(name)
    return None if value is None else _require(doc, name, kind)
