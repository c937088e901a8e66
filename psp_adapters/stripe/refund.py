"""Stripe's Refund object (docs.stripe.com/api/refunds) and its mapping to recon's outcomes.

- ``POST /v1/refunds`` with ``payment_intent``, ``amount`` (Stripe's units), ``reason`` (only one of Stripe's
  three codes: ``duplicate``, ``fraudulent``, ``requested_by_customer``), ``metadata[refund_reference]`` (ours,
  so a refund is found by it) and the ``Idempotency-Key`` header.
- ``GET /v1/refunds/{id}``: one refund; ``GET /v1/refunds?payment_intent=…&limit=100``: a PaymentIntent's
  refunds, newest first. A list reads the API's own store (no search lag), so a refund created with our key is
  listed at once: after a lost answer, the refund carrying our ``refund_reference`` is the one we asked for.

A Refund's ``status`` is ``pending``, ``requires_action``, ``succeeded``, ``failed`` or ``canceled``
("Refunds can fail after they succeed": a succeeded refund may later fail, the ``refund.failed`` event;
``failure_reason`` says why). Its ``amount`` is Stripe's units of ``currency``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import assert_never

from psp_adapters._wire import JsonFields
from psp_adapters.protocol import Failed, PaymentOutcome, Pending, RefundRequest, Succeeded, Unknown
from psp_adapters.stripe.wire import PSP_NAME, from_stripe_amount, to_stripe_amount

_json = JsonFields(PSP_NAME)

#: the reason codes Stripe takes on a refund (``reason``); anything else is refused before sending
REASONS = ("duplicate", "fraudulent", "requested_by_customer")
#: the metadata key that carries our refund reference
REFERENCE_KEY = "refund_reference"


class RefundStatus(enum.Enum):
    PENDING = "pending"  #: Stripe has not finished it
    REQUIRES_ACTION = "requires_action"  #: the customer must give details (some payment methods)
    SUCCEEDED = "succeeded"  #: the money went back (it may still fail later: refund.failed)
    FAILED = "failed"  #: it failed; ``failure_reason`` says why
    CANCELED = "canceled"  #: canceled before it went through


def create_form(request: RefundRequest) -> dict[str, str]:
    """The form of ``POST /v1/refunds`` for ``request``."""
    form = {"payment_intent": request.payment_reference,
            "amount": str(to_stripe_amount(request.amount, request.currency)),
            f"metadata[{REFERENCE_KEY}]": request.refund_reference}
    if request.reason:
        form["reason"] = request.reason
    return form


def to_outcome(payload: object) -> PaymentOutcome:
    """A Refund object as recon's outcome: ``psp_reference`` the refund's id, ``merchant_reference`` ours."""
    doc = _json.as_object(payload, "refund")
    refund_id = _json.require(doc, "id", str)
    raw = _json.require(doc, "status", str)
    currency = _json.require(doc, "currency", str).upper()
    amount = from_stripe_amount(_json.amount(doc, "amount"), currency)
    common = {"psp_reference": refund_id, "amount": amount, "currency": currency, "raw_status": raw,
              "merchant_reference": reference(doc)}
    try:
        status = RefundStatus(raw)
    except ValueError:
        return Unknown(**common)  # type: ignore[arg-type]
    match status:
        case RefundStatus.SUCCEEDED:
            return Succeeded(**common)  # type: ignore[arg-type]
        case RefundStatus.FAILED | RefundStatus.CANCELED:
            reason = doc.get("failure_reason")
            return Failed(**common, reason=reason if isinstance(reason, str) else raw)  # type: ignore[arg-type]
        case RefundStatus.PENDING | RefundStatus.REQUIRES_ACTION:
            return Pending(**common)  # type: ignore[arg-type]
        case _:
            assert_never(status)


def reference(doc: Mapping[str, object]) -> str | None:
    """Our refund reference from a Refund's metadata, when it carries one."""
    metadata = doc.get("metadata")
    value = metadata.get(REFERENCE_KEY) if isinstance(metadata, Mapping) else None
    return value if isinstance(value, str) and value else None
