"""<PSP>'s wire format, mirrored exactly, and its mapping to protocol outcomes.

Copy this module to ``psp_adapters/<psp>/wire.py`` and replace the shapes with the PSP's real ones (cite the
API reference in this docstring). Rules: one Enum per status field with the wire strings as
values; one ``to_outcome()`` with an exhaustive ``match`` ending in ``assert_never``; an unrecognised status
is ``Unknown(raw_status=…)``, never a guess; amounts stay integers and cross between the PSP's units and ISO
minor units only here; a missing field or a wrong type raises PspProtocolError.

Example shape assumed by this template: ``{"id": "pay_…", "reference": "…", "amount": 1250,
"currency": "EUR", "status": "authorised"}``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar, assert_never

from psp_adapters.errors import PspProtocolError
from psp_adapters.protocol import ChargeRequest, Failed, PaymentOutcome, Pending, Succeeded, Unknown

PSP_NAME = "template"

_T = TypeVar("_T")


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
    doc = _object(payload)
    raw_status = _require(doc, "status", str)
    common = {
        "psp_reference": _require(doc, "id", str),
        "merchant_reference": doc.get("reference") if isinstance(doc.get("reference"), str) else None,
        "amount": _require(doc, "amount", int),
        "currency": _require(doc, "currency", str),
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


def _object(value: object) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise PspProtocolError(f"{PSP_NAME}: payment is not a JSON object", psp=PSP_NAME)
    return value


def _require(doc: Mapping[str, object], name: str, kind: type[_T]) -> _T:
    value = doc.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise PspProtocolError(f"{PSP_NAME}: field {name!r} missing or not {kind.__name__}", psp=PSP_NAME)
    return value
