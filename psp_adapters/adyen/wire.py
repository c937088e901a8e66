"""Adyen's answers, mirrored exactly, and their mapping to protocol outcomes.

The only place where an Adyen document becomes a ``PaymentOutcome`` or a ``SettlementLine``, and where amounts
cross between Adyen's units and ISO-4217 minor units (both ways: ``charge`` sends them). What a charge must be
and the body it is sent as are ``charge``'s business. Two status fields exist:

- ``resultCode`` of a Checkout ``POST /v72/payments`` answer (``ResultCode``; the same enum in v71);
- ``Record Type`` of a row of the daily Payment accounting report, the journal of a payment's lifecycle
  (``RecordType``). Checkout has no "get payment" endpoint: Adyen tells status through webhooks and reports.

Shapes: PaymentResponse ``{"pspReference": "…", "resultCode": "Authorised", "merchantReference": "…",
"amount": {"value": 1000, "currency": "EUR"}, "refusalReason": "…", "refusalReasonCode": "…"}``;
ServiceError ``{"status": 422, "errorCode": "101", "message": "Invalid card number", "errorType":
"validation", "pspReference": "…"}``. The report file's CSV layout is ``report.py``'s business; this module
says what its ``Record Type`` means.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import assert_never

from psp_adapters._wire import JsonFields
from psp_adapters.adyen.report import PSP_NAME as PSP_NAME  # defined below this module: see report.py
from psp_adapters.adyen.report import ReportRow
from psp_adapters.protocol import (
    ActionRequired,
    Authorised,
    ChargeRequest,
    Failed,
    ListedPayment,
    PaymentOutcome,
    Pending,
    SettlementLine,
    Succeeded,
    Unknown,
)
from psp_adapters.units import from_psp_units, to_psp_units

#: the Checkout API versions the adapter speaks (``api_version``): v72 by default, the version Adyen's current
#: libraries call; v71 for an account that has not moved yet. Their PaymentRequest and PaymentResponse differ only in
#: bounds (v72: ``returnUrl`` at most 1,024 characters, ``reference`` 80 in the schema; ``charge.RETURN_URL_MAX``)
API_VERSIONS = ("v71", "v72")
DEFAULT_API_VERSION = "v72"
#: "request already processed or in progress": the same idempotency key is still executing; sent with HTTP
#: 422 or 409, retry later with the same key (docs.adyen.com/development-resources/api-idempotency)
IN_FLIGHT_ERROR_CODE = "704"
#: "required resource temporarily unavailable" (HTTP 503): Adyen's idempotency store is down; Adyen marks it
#: a transient error (same page, "Designing for resilience")
IDEMPOTENCY_UNAVAILABLE_ERROR_CODE = "703"
#: ``errorType`` values that mean the request itself is wrong, even on HTTP 500: "Our servers may return a 500
#: status code also when the request is incorrect, for example because of a missing or not filled in mandatory
#: field" (docs.adyen.com/development-resources/response-handling); e.g. 905 "Payment details are not
#: supported" (configuration), 702 "Required field 'merchantAccount' is null" (validation)
PERMANENT_ERROR_TYPES = frozenset({"configuration", "validation"})
#: the ``Idempotency-Key`` header: "a unique identifier for the message with a maximum of 64 characters"
IDEMPOTENCY_KEY_MAX = 64

#: the JSON validators (psp_adapters._wire), naming Adyen in their errors
_json = JsonFields(PSP_NAME)

# Adyen's currency table differs from ISO 4217 for four currencies (docs.adyen.com/development-resources/
# currency-codes: "For CLP, CVE, IDR, and ISK the standard has a different number of decimals"): CLP and ISK
# take two decimals, CVE and IDR none. Value: Adyen exponent minus ISO exponent.
_EXPONENT_SHIFT: Mapping[str, int] = {"CLP": 2, "ISK": 2, "CVE": -2, "IDR": -2}


class ResultCode(enum.Enum):
    """``resultCode`` of a /payments answer (Checkout API v71 and v72,
    docs.adyen.com/online-payments/build-your-integration/payment-result-codes).

    The OpenAPI enum (v71 and v72) also lists ``Success``, which its own description and the result-codes page do not
    document; it is left out on purpose, so it arrives as Unknown rather than as a guess.
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
    PRESENT_TO_SHOPPER = "PresentToShopper"  #: information (voucher, QR code) to show the shopper, who pays
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
    """An Adyen ServiceError body (every field may be absent)."""

    error_code: str | None
    message: str | None
    error_type: str | None

    @property
    def permanent(self) -> bool:
        """The request itself is wrong (``errorType`` configuration or validation), whatever the HTTP status;
        an in-flight or idempotency-store error never is."""
        if self.error_code in (IN_FLIGHT_ERROR_CODE, IDEMPOTENCY_UNAVAILABLE_ERROR_CODE):
            return False
        return (self.error_type or "").lower() in PERMANENT_ERROR_TYPES


def to_adyen_amount(amount: int, currency: str) -> int:
    """ISO minor units -> Adyen units. Raises PspRejectedError when Adyen cannot represent it."""
    return to_psp_units(amount, currency, shifts=_EXPONENT_SHIFT, psp=PSP_NAME, label="Adyen")


def from_adyen_amount(amount: int, currency: str) -> int:
    """Adyen units -> ISO minor units. Raises PspProtocolError when the amount is not whole minor units."""
    return from_psp_units(amount, currency, shifts=_EXPONENT_SHIFT, psp=PSP_NAME)


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
    Pending: part of the amount is still open. A result that needs the shopper (RedirectShopper,
    IdentifyShopper, ChallengeShopper: 3-D Secure or a redirect; PresentToShopper: something to show them so
    that they pay) is ActionRequired: a ContAuth charge has no shopper at hand, so nobody will ever act on it.
    Authentication-only results are Pending: they say nothing about an authorisation.
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
            ResultCode.REDIRECT_SHOPPER
            | ResultCode.IDENTIFY_SHOPPER
            | ResultCode.CHALLENGE_SHOPPER
            | ResultCode.PRESENT_TO_SHOPPER
        ):
            return ActionRequired(**common)
        case (
            ResultCode.PARTIALLY_AUTHORISED
            | ResultCode.PENDING
            | ResultCode.RECEIVED
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
    doc = _json.as_object(payload, "payment response")
    raw = _json.require(doc, "resultCode", str)
    amount, currency = None, None
    if isinstance(doc.get("amount"), Mapping):
        money = _json.as_object(doc["amount"], "amount")
        currency = _json.require(money, "currency", str)
        amount = from_adyen_amount(_json.amount(money, "value"), currency)
    fields = {
        "psp_reference": _json.optional(doc, "pspReference", str),
        "merchant_reference": _json.optional(doc, "merchantReference", str) or request.merchant_reference,
        "amount": amount,
        "currency": currency,
    }
    try:
        status = ResultCode(raw)
    except ValueError:
        return Unknown(**fields, raw_status=raw)  # type: ignore[arg-type]
    if request.manual_capture and status is ResultCode.AUTHORISED:
        # manual capture (additionalData.manualCapture): Authorised holds the amount until a /captures
        return Authorised(**fields, raw_status=raw)  # type: ignore[arg-type]
    return to_outcome(status, **fields, reason=_json.optional(doc, "refusalReason", str))  # type: ignore[arg-type]


def parse_error(payload: object) -> AdyenError:
    """An Adyen error body; raises PspProtocolError when it is not one."""
    doc = _json.as_object(payload, "error body")
    code = doc.get("errorCode")
    return AdyenError(
        error_code=str(code) if isinstance(code, str | int) and not isinstance(code, bool) else None,
        message=_json.optional(doc, "message", str),
        error_type=_json.optional(doc, "errorType", str),
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


def listed_payment(rows: list[ReportRow], *, merchant_account: str) -> ListedPayment:
    """One payment of a listing from its report rows (every file read): its outcome as ``report_outcome``
    tells it, booked first at its earliest row, in the rows' ``Merchant Account`` (else ``merchant_account``,
    the account whose reports they are)."""
    named = {row.merchant_account for row in rows if row.merchant_account}
    account = named.pop() if len(named) == 1 else merchant_account
    return ListedPayment(report_outcome(rows), created_at=min(row.booked_at for row in rows),
                         merchant_account=account)


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


def to_settlement_line(
    row: ReportRow, *, status: str, merchant_account: str | None = None
) -> SettlementLine:
    """A SettlementLine for a report row that is a settlement event.

    A Settled row also carries what reaches the merchant: ``net`` is its ``Payable (SC)``, ``fee`` the fees
    withheld (``report.ReportRow.fee``), both in minor units of ``settlement_currency``; any of the three is
    None when the row leaves its column empty. Other events carry none of them. The line's merchant account is
    the row's ``Merchant Account`` cell, else ``merchant_account`` (the account whose report it is).
    """
    settled = status == "succeeded"
    return SettlementLine(
        psp_reference=row.psp_reference,
        merchant_reference=row.merchant_reference,
        amount=row.amount,
        currency=row.currency,
        status=status,
        settled_at=row.booked_at,
        raw=dict(row.raw),
        fee=row.fee if settled else None,
        net=row.payable if settled else None,
        settlement_currency=row.settlement_currency if settled else None,
        merchant_account=row.merchant_account or merchant_account,
    )
