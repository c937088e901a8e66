"""<PSP>'s wire format, mirrored exactly, and its mapping to protocol outcomes.

Copy this module to ``psp_adapters/<psp>/wire.py`` and replace the shapes with the PSP's real ones (cite the
API reference in this docstring). Rules: one Enum per status field with the wire strings as
values; one ``to_outcome()`` with an exhaustive ``match`` ending in ``assert_never``; an unrecognised status
is ``Unknown(raw_status=…)``, never a guess; amounts stay integers and cross between the PSP's units and ISO
minor units only here; a missing field or a wrong type raises PspProtocolError (read every field through
``psp_adapters._wire.JsonFields``, which names the PSP and the field and never takes a JSON ``true`` for a
number).

Example shape assumed by this template: ``{"id": "pay_…", "reference": "…", "amount": 1250,
"currency": "EUR", "status": "authorised"}``.
"""

from __future__ import annotations

import enum
from typing import assert_never

from psp_adapters._wire import JsonFields
from psp_adapters.protocol import ChargeRequest, Failed, PaymentOutcome, Pending, Succeeded, Unknown

PSP_NAME = "template"

#: the JSON validators every wire module shares (psp_adapters._wire): bool-safe, errors naming the PSP
_json = JsonFields(PSP_NAME)


class PaymentStatus(enum.Enum):
    """``payment.status`` (replace with the PSP's own values)."""

    AUTHORISED = "authorised"  #: final: the money was taken
    PENDING = "pending"  #: no final answer yet
    DECLINED = "declined"  #: final: refused


def charge_body(request: ChargeRequest) -> dict[str, object]:
    """The body that creates ``request`` at the PSP (convert the amount here if the PSP's units differ)."""
    return {"reference": request.merchant_reference, "amount": request.amount, "currency": request.currency}


def to_outcome(payload: object) -> PaymentOutcome:
    """Map a payment document; an unrecognised status is Unknown. Raises PspProtocolError on bad input."""
    doc = _json.as_object(payload, "payment")
    raw_status = _json.require(doc, "status", str)
    common = {
        "psp_reference": _json.require(doc, "id", str),
        "merchant_reference": doc.get("reference") if isinstance(doc.get("reference"), str) else None,
        "amount": _json.amount(doc, "amount"),
        "currency": _json.require(doc, "currency", str),
        "raw_status": raw_status,
    }
    try:
        status = PaymentStatus(raw_status)
    except ValueError:
        return Unknown(**common)  # type: ignore[arg-type]
    match status:
        case PaymentStatus.AUTHORISED:
            return Succeeded(**common)  # type: ignore[arg-type]
        case PaymentStatus.PENDING:
            return Pending(**common)  # type: ignore[arg-type]
        case PaymentStatus.DECLINED:
            return Failed(**common, reason=raw_status)  # type: ignore[arg-type]
        case _:
            assert_never(status)
