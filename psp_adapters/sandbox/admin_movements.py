"""The admin API's scenarios for what happens to money after a charge, told like the PSP's own (webhooks and
Stripe's events)::

    POST /_admin/disputes/{id}/close     {"outcome": "won"|"lost"}; 200 dispute | 400 | 404
    POST /_admin/refunds/{id}/reverse    200 refund | 400 | 404
    POST /_admin/modifications/{id}/fail Adyen: a processed capture rejected by the scheme after it was sent;
                                         optional {"reason": "…"}; 200 {"pspReference", "outcome"} | 400 | 404

A dispute ``needs_response`` is won (the funds reinstated: Stripe's ``charge.dispute.closed`` and
``charge.dispute.funds_reinstated``; Adyen's ``CHARGEBACK_REVERSED``) or lost (Stripe's ``charge.dispute.closed``;
Adyen tells nothing: the chargeback stands); on Adyen a won dispute may then be lost (``SECOND_CHARGEBACK``, the
issuer's second chargeback; docs.adyen.com/risk-management/understanding-disputes/dispute-process-and-flow).
A succeeded refund is reversed: the money came back to the merchant, after it was sent (Adyen's
``REFUNDED_REVERSED``; Stripe's "refunds can fail after they succeed": ``refund.updated``,
``charge.refund.updated`` and ``refund.failed``, the refund ``failed``). An Adyen capture fails after it was sent
(docs.adyen.com/online-payments/capture/failure-reasons: ``CAPTURE_FAILED``, the report's ``CaptureFailed``): the
payment is authorised again, uncaptured.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Protocol

from psp_adapters.sandbox.core import Flavor, Response, json_response
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.movements import (
    CAPTURE_FAILED,
    DISPUTE_LOST,
    DISPUTE_NEEDS_RESPONSE,
    DISPUTE_WON,
    REFUND_FAILED,
    REFUND_SUCCEEDED,
    Adjustment,
)
from psp_adapters.sandbox.native_api import native_error
from psp_adapters.sandbox.webhook_events import Change
from psp_adapters.sandbox.wire import PaymentStatus

DISPUTE_PATH = re.compile(r"^/_admin/disputes/(?P<id>[^/]+)/close$")
REFUND_PATH = re.compile(r"^/_admin/refunds/(?P<id>[^/]+)/reverse$")
MODIFICATION_PATH = re.compile(r"^/_admin/modifications/(?P<id>[^/]+)/fail$")
#: the scheme's word on a capture failed after it was sent, unless the admin gives one
CAPTURE_FAILED_REASON = "Capture rejected by card scheme because of a technical issue"
#: why a reversed refund failed (Stripe's ``failure_reason``)
REVERSED_REASON = "refund_reversed"


class Host(Protocol):
    ledger: Ledger
    flavor: Flavor
    now: Callable[[], datetime]

    def tick(self) -> None: ...

    def tell(self, changes: list[Change]) -> None: ...


def close_dispute(host: Host, dispute_id: str, payload: Mapping[str, object]) -> Response:
    outcome = payload.get("outcome")
    if outcome not in (DISPUTE_WON, DISPUTE_LOST):
        return native_error("parameter_invalid", 'outcome must be "won" or "lost"')
    host.tick()
    found = _adjustment(host, dispute_id, "dispute")
    if found is None:
        return native_error("resource_missing")
    allowed = {DISPUTE_NEEDS_RESPONSE} | (
        {DISPUTE_WON} if outcome == DISPUTE_LOST and host.flavor.name == "adyen" else set()
    )
    if found.status not in allowed:
        return native_error("parameter_invalid", f"cannot make dispute {dispute_id} {outcome}: it is {found.status}")
    now = host.now()
    metadata = {**found.metadata, "won_at": now.isoformat()} if outcome == DISPUTE_WON else dict(found.metadata)
    return _save(
        host, dataclasses.replace(found, status=str(outcome), updated_at=now, metadata=metadata), "dispute_updated"
    )


def reverse_refund(host: Host, refund_id: str) -> Response:
    host.tick()
    found = _adjustment(host, refund_id, "refund")
    if found is None:
        return native_error("resource_missing")
    if found.status != REFUND_SUCCEEDED or found.settle_to is not None:
        return native_error("parameter_invalid", f"cannot reverse refund {refund_id}: it is {found.status}")
    moved = dataclasses.replace(
        found,
        status=REFUND_FAILED,
        failure_reason=REVERSED_REASON,
        updated_at=host.now(),
        metadata={**found.metadata, "reversed": "true"},
    )
    return _save(host, moved, "refund_updated")


def fail_capture(host: Host, modification_id: str, payload: Mapping[str, object]) -> Response:
    """A processed capture rejected by the scheme: the capture CAPTURE_FAILED, its payment authorised again."""
    host.tick()
    found = host.ledger.get_modification(modification_id)
    payment = host.ledger.get_payment(found.psp_reference) if found is not None else None
    if found is None or payment is None or payment.flavor != "adyen" or host.flavor.name != "adyen":
        return native_error("resource_missing")
    if found.outcome != "capture" or payment.status is not PaymentStatus.SUCCEEDED:
        return native_error("parameter_invalid", f"cannot fail modification {modification_id}: it is "
                                                 f"{found.outcome or found.status}")
    reason = payload.get("reason")
    failed = dataclasses.replace(found, outcome=CAPTURE_FAILED,
                                 reason=reason if isinstance(reason, str) and reason else CAPTURE_FAILED_REASON)
    again = dataclasses.replace(payment, status=PaymentStatus.AUTHORIZED, amount_captured=None, settled_at=None,
                                fee=None, updated_at=host.now())
    with host.ledger.atomic():
        host.ledger.fail_capture(failed.id, reason=failed.reason or CAPTURE_FAILED_REASON)
        host.ledger.save_payment(again)
    host.tell([Change("capture_failed", again, modification=failed)])
    return json_response(200, {"pspReference": failed.id, "paymentPspReference": again.psp_reference,
                               "outcome": failed.outcome, "reason": failed.reason})


def _adjustment(host: Host, adjustment_id: str, kind: str) -> Adjustment | None:
    found = host.ledger.get_adjustment(adjustment_id)
    if found is None or found.kind != kind:
        return None
    payment = host.ledger.get_payment(found.psp_reference)
    return found if payment is not None and payment.flavor == host.flavor.name else None


def _save(host: Host, moved: Adjustment, kind: str) -> Response:
    host.ledger.save_adjustment(moved)
    payment = host.ledger.get_payment(moved.psp_reference)
    assert payment is not None  # nosec B101  # _adjustment found it: type narrowing
    host.tell([Change(kind, payment, moved)])
    return json_response(200, host.flavor.render_adjustment(moved, payment))
