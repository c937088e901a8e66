"""Stripe's payouts and the balance transactions each carries (``PayoutSource``).

- ``GET /v1/payouts?arrival_date[gte]=…&arrival_date[lt]=…&limit=100`` with ``starting_after``: the payouts
  expected at the bank in a window (https://docs.stripe.com/api/payouts/list). A payout
  (https://docs.stripe.com/api/payouts/object): ``id`` ``po_…``, ``amount`` (minor units, what reaches the bank),
  ``currency``, ``status`` (``paid``, ``pending``, ``in_transit``, ``canceled``, ``failed``), ``arrival_date``
  (Unix time of the expected day, "the date the payout is expected to arrive in the bank"), ``trace_id``
  (``{"status": …, "value": …}``: the bank's trace number, when the network gives one) and
  ``statement_descriptor``. ``arrival_date`` is read as the UTC day of that instant.
- ``GET /v1/balance_transactions?payout=po_…&limit=100&expand[0]=data.source``: the transactions the payout
  settles, its own (type ``payout``, amount minus the payout's) included (https://docs.stripe.com/payouts/
  reconciliation, "See the transactions included in a payout"; https://docs.stripe.com/expand/use-cases).
  Each becomes a line: ``amount``/``fee``/``net`` as Stripe signs them, kind from ``reporting_category``
  (https://docs.stripe.com/reports/reporting-categories): ``charge``, ``refund``, ``dispute``,
  ``dispute_reversal``, ``fee``, ``payout``, ``other_adjustment``/``partial_capture_reversal`` as
  ``adjustment``, anything else ``other``; the PSP reference is the source's PaymentIntent (else its Charge).

Shapes are checked against Stripe's canonical objects (fixtures3.json, tests/adapters/test_stripe_payouts.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime

from psp_adapters._wire import JsonFields
from psp_adapters.protocol import PAYOUT_STATUSES, PspPayout, PspPayoutLine
from psp_adapters.stripe.wire import PSP_NAME, from_stripe_amount, reference

_json = JsonFields(PSP_NAME)

_KINDS = {"charge": "charge", "refund": "refund", "dispute": "dispute", "dispute_reversal": "dispute_reversal",
          "fee": "fee", "payout": "payout", "other_adjustment": "adjustment", "partial_capture_reversal": "adjustment",
          "charge_failure": "charge", "refund_failure": "refund"}


def to_payout(payload: object) -> PspPayout:
    """A payout object as ``PspPayout``; PspProtocolError on a missing field or an unknown status."""
    doc = _json.as_object(payload, "payout")
    currency = _currency(doc)
    status = _json.require(doc, "status", str)
    if status not in PAYOUT_STATUSES:
        raise _json.error(f"payout status {status!r} is not one Stripe documents")
    trace = doc.get("trace_id")
    trace_ref = trace.get("value") if isinstance(trace, Mapping) else None
    return PspPayout(payout_id=_json.require(doc, "id", str),
                     amount=from_stripe_amount(_json.amount(doc, "amount", signed=True), currency),
                     currency=currency, status=status, arrival_date=_day(_json.unix_time(doc, "arrival_date")),
                     trace_ref=trace_ref if isinstance(trace_ref, str) and trace_ref else None,
                     statement_descriptor=_json.optional(doc, "statement_descriptor", str), raw=dict(doc))


def to_line(payload: object) -> PspPayoutLine:
    """A balance transaction of a payout as a line (see the module docstring)."""
    txn = _json.as_object(payload, "balance transaction")
    currency = _currency(txn)
    category = _json.optional(txn, "reporting_category", str) or _json.require(txn, "type", str)
    source = txn.get("source")
    source = source if isinstance(source, Mapping) else {}
    kind = _KINDS.get(category, "other")
    return PspPayoutLine(line_id=_json.require(txn, "id", str), kind=kind,
                         gross=from_stripe_amount(_json.amount(txn, "amount", signed=True), currency),
                         fee=from_stripe_amount(_json.amount(txn, "fee", signed=True), currency),
                         net=from_stripe_amount(_json.amount(txn, "net", signed=True), currency), currency=currency,
                         psp_reference=_payment_of(source) if kind not in ("fee", "payout", "adjustment") else None,
                         merchant_reference=reference(source) if source else None,
                         movement_reference=_movement_of(source) if kind in _MOVEMENTS else None)


#: the line kinds whose source is a movement of its own (a Refund ``re_…``, a Dispute ``dp_…``)
_MOVEMENTS = ("refund", "dispute", "dispute_reversal")


def _movement_of(source: Mapping[str, object]) -> str | None:
    """The source's own id when it is a Refund or a Dispute (``object``), else None."""
    value = source.get("id")
    return value if isinstance(value, str) and value and source.get("object") in ("refund", "dispute") else None


def _currency(doc: Mapping[str, object]) -> str:
    """Its ``currency``, an ISO-4217 code (Stripe writes it in lower case); PspProtocolError otherwise."""
    currency = _json.require(doc, "currency", str).upper()
    if not re.fullmatch(r"[A-Z]{3}", currency):
        raise _json.error(f"currency {currency[:12]!r} is not an ISO-4217 code")
    return currency


def _payment_of(source: Mapping[str, object]) -> str | None:
    """The source's PaymentIntent id, else the Charge it names (a refund's or dispute's), else its own id."""
    for name in ("payment_intent", "charge", "id"):
        value = source.get(name)
        if isinstance(value, Mapping):
            value = value.get("id")
        if isinstance(value, str) and value and (name != "id" or source.get("object") == "charge"):
            return value
    return None


def _day(instant: datetime) -> date:
    return instant.astimezone(UTC).date()
