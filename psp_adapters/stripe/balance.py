"""Stripe's balance transactions as settlement lines: the listing behind payout reconciliation.

``GET /v1/balance_transactions?created[gte]=…&created[lt]=…&limit=100&expand[0]=data.source`` lists every
movement of the account's balance, newest first (https://docs.stripe.com/api/balance_transactions/list);
expanding ``source`` returns the object behind each one (Charge, Refund, Dispute, Payout, …) in the same
answer (https://docs.stripe.com/expand/use-cases, "See the charges included in a payout";
https://docs.stripe.com/payouts/reconciliation). A balance transaction
(https://docs.stripe.com/api/balance_transactions/object): ``{"id": "txn_…", "object":
"balance_transaction", "amount": 100, "fee": 30, "net": 70, "currency": "usd", "created": 1234567890,
"reporting_category": "charge", "type": "charge", "source": {…}, "status": "available"}``; ``amount``, ``fee``
and ``net`` are in the account's settlement currency, negative for money leaving the balance.

Which transactions become lines, by ``reporting_category`` (https://docs.stripe.com/reports/reporting-
categories), the field Stripe recommends over ``type`` for accounting:

- ``charge`` (card and other payment charges): a line for the source Charge's PaymentIntent, with the
  Charge's own amount and currency (the presentment amount, which recon compares) and its current state as
  status ("succeeded", "refunded", "partially_refunded", "chargeback"; "pending"/"failed" as the Charge says).
- ``charge_failure`` (a delayed debit that failed after it was credited): status "failed", for the
  PaymentIntent of its source (a Charge, or the Refund Stripe books to take the funds back).
- ``refund``: a line for the refunded PaymentIntent, status "refunded", the Refund's amount and currency.
- ``dispute``: a line for the disputed PaymentIntent, status "chargeback", the Dispute's amount and currency.
- ``refund_failure`` and ``dispute_reversal`` are skipped: they undo a refund or a dispute, and the line
  for the refund or dispute itself already sent the payment to a person (a reversed payment is always a
  ``status_mismatch`` in recon's report), who sees Stripe's whole history there; the Charge's own line
  reads its current state (``refunded``/``amount_refunded`` are restored by a failed refund). The Adyen
  adapter skips RefundedReversed and ChargebackReversed the same way, so both PSPs mean the same thing.
- everything else (payouts, Stripe fees, transfers, top-ups, adjustments, Connect, Issuing, …) is not about
  a payment of ours and is skipped; a category missing from Stripe's documented list is logged.

``fee`` and ``net`` come from the balance transaction, in its currency; ``settlement_currency`` is that
currency when it differs from the line's. A balance transaction does not name the payout that carries it
(``GET /v1/balance_transactions?payout=po_…`` lists one automatic payout's transactions, a different
question), so ``payout`` stays None. ``settled_at`` is the balance transaction's ``created``: the listing's
window is on that field.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import assert_never

from psp_adapters._wire import JsonFields
from psp_adapters.protocol import SettlementLine
from psp_adapters.stripe.wire import PSP_NAME, from_stripe_amount, reference

logger = logging.getLogger(__name__)
#: the JSON validators (psp_adapters._wire), naming Stripe in their errors
_json = JsonFields(PSP_NAME)

#: the ``expand`` of the listing: each transaction's source object in the same answer
EXPAND_SOURCE = "data.source"


class ReportingCategory(enum.Enum):
    """The ``reporting_category`` values that concern a payment."""

    CHARGE = "charge"  #: a successful charge
    CHARGE_FAILURE = "charge_failure"  #: a charge that failed after its funds were credited
    REFUND = "refund"  #: a refund of a charge
    REFUND_FAILURE = "refund_failure"  #: a refund that failed; its funds come back
    DISPUTE = "dispute"  #: a chargeback's withdrawal
    DISPUTE_REVERSAL = "dispute_reversal"  #: a won dispute's funds coming back


class ChargeStatus(enum.Enum):
    """``charge.status``."""

    SUCCEEDED = "succeeded"  #: captured (check ``refunded`` / ``amount_refunded`` / ``disputed``)
    PENDING = "pending"  #: asynchronous method in flight
    FAILED = "failed"  #: declined or failed


#: documented categories that are not about a payment (https://docs.stripe.com/reports/reporting-categories)
_NOT_A_PAYMENT = frozenset({
    "advance", "advance_funding", "anticipation_repayment", "climate_order_purchase", "climate_order_refund",
    "connect_collection_transfer", "connect_reserved_funds", "contribution", "fee", "financing_paydown",
    "financing_paydown_reversal", "financing_payout", "financing_payout_reversal", "issuing_authorization_hold",
    "issuing_authorization_release", "issuing_dispute", "issuing_transaction", "network_cost",
    "other_adjustment", "partial_capture_reversal", "payout", "payout_reversal", "platform_earning",
    "platform_earning_refund", "risk_reserved_funds", "tax", "topup", "topup_reversal", "transfer",
    "transfer_reversal", "unreconciled_customer_funds",
})


def to_settlement_line(payload: object) -> SettlementLine | None:
    """The SettlementLine of one balance transaction, or None when it is not about a payment (see above).

    ``psp_reference`` is the PaymentIntent id (what recon stores), else the Charge id for a charge made
    without one. Raises PspProtocolError when a field is missing or ``source`` is not expanded.
    """
    txn = _json.as_object(payload, "balance transaction")
    raw = _json.require(txn, "reporting_category", str)
    try:
        category = ReportingCategory(raw)
    except ValueError:
        if raw not in _NOT_A_PAYMENT:
            logger.info("%s: balance transaction category %r is not one we know; skipped", PSP_NAME, raw)
        return None
    match category:
        case ReportingCategory.CHARGE:
            charge = _source(txn, "charge")
            return _line(txn, charge, psp_reference=_intent_or(charge, "id"), status=_charge_status(charge))
        case ReportingCategory.CHARGE_FAILURE:
            failed = _source(txn, "charge", "refund")
            fallback = "id" if failed.get("object") == "charge" else "charge"
            return _line(txn, failed, psp_reference=_intent_or(failed, fallback), status="failed")
        case ReportingCategory.REFUND:
            refund = _source(txn, "refund")
            return _line(txn, refund, psp_reference=_intent_or(refund, "charge"), status="refunded")
        case ReportingCategory.DISPUTE:
            dispute = _source(txn, "dispute")
            return _line(txn, dispute, psp_reference=_intent_or(dispute, "charge"), status="chargeback")
        case ReportingCategory.REFUND_FAILURE | ReportingCategory.DISPUTE_REVERSAL:
            return None
        case _:
            assert_never(category)


def _source(txn: Mapping[str, object], *kinds: str) -> Mapping[str, object]:
    """The expanded source object, of one of ``kinds``; PspProtocolError otherwise."""
    source = txn.get("source")
    if not isinstance(source, Mapping):
        raise _json.error("balance transaction source is not an expanded object")
    if source.get("object") not in kinds:
        raise _json.error(f"balance transaction source is not a {' or '.join(kinds)}")
    return source


def _line(txn: Mapping[str, object], source: Mapping[str, object], *, psp_reference: str,
          status: str) -> SettlementLine:
    currency = _json.require(source, "currency", str).upper()
    settlement = _json.require(txn, "currency", str).upper()
    return SettlementLine(
        psp_reference=psp_reference,
        merchant_reference=reference(source),
        amount=from_stripe_amount(_json.amount(source, "amount"), currency),
        currency=currency,
        status=status,
        settled_at=_json.unix_time(txn, "created"),
        raw=dict(txn),
        fee=from_stripe_amount(_json.amount(txn, "fee", signed=True), settlement),
        net=from_stripe_amount(_json.amount(txn, "net", signed=True), settlement),
        settlement_currency=settlement if settlement != currency else None,
    )


def _intent_or(source: Mapping[str, object], fallback: str) -> str:
    """The source's PaymentIntent id, else its ``fallback`` field (an id, or an expanded object's id)."""
    for name in ("payment_intent", fallback):
        value = source.get(name)
        if isinstance(value, Mapping):
            value = value.get("id")
        if isinstance(value, str) and value:
            return value
    raise _json.error(f"{source.get('object')} names no payment_intent or {fallback}")


def _charge_status(charge: Mapping[str, object]) -> str:
    """A disputed charge is "chargeback"; a refunded one "refunded" or "partially_refunded"."""
    raw = _json.require(charge, "status", str)
    try:
        status = ChargeStatus(raw)
    except ValueError:
        return f"unknown:{raw}"
    match status:
        case ChargeStatus.SUCCEEDED:
            if charge.get("disputed") is True:
                return "chargeback"
            if charge.get("refunded") is True:
                return "refunded"
            refunded = charge.get("amount_refunded")  # a bool is not an amount (``isinstance(True, int)``)
            partly = isinstance(refunded, int) and not isinstance(refunded, bool) and refunded > 0
            return "partially_refunded" if partly else "succeeded"
        case ChargeStatus.PENDING:
            return "pending"
        case ChargeStatus.FAILED:
            return "failed"
        case _:
            assert_never(status)
