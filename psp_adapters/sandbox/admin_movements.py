"""The admin API's scenarios for what happens to money after a charge, told like the PSP's own (webhooks and
Stripe's events)::

    POST /_admin/disputes/{id}/close     {"outcome": "won"|"lost"}; 200 dispute | 400 | 404
    POST /_admin/refunds/{id}/reverse    200 refund | 400 | 404

A dispute ``needs_response`` is won (the funds reinstated: Stripe's ``charge.dispute.closed`` and
``charge.dispute.funds_reinstated``; Adyen's ``CHARGEBACK_REVERSED``) or lost (Stripe's ``charge.dispute.closed``;
Adyen tells nothing: the chargeback stands); on Adyen a won dispute may then be lost (``SECOND_CHARGEBACK``, the
issuer's second chargeback; docs.adyen.com/risk-management/understanding-disputes/dispute-process-and-flow).
A succeeded refund is reversed: the money came back to the merchant, after it was sent (Adyen's
``REFUNDED_REVERSED``; Stripe's "refunds can fail after they succeed": ``refund.updated``,
``charge.refund.updated`` and ``refund.failed``, the refund ``failed``).
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
    DISPUTE_LOST,
    DISPUTE_NEEDS_RESPONSE,
    DISPUTE_WON,
    REFUND_FAILED,
    REFUND_SUCCEEDED,
    Adjustment,
)
from psp_adapters.sandbox.native_api import native_error
from psp_adapters.sandbox.webhook_events import Change

DISPUTE_PATH = re.compile(r"^/_admin/disputes/(?P<id>[^/]+)/close$")
REFUND_PATH = re.compile(r"^/_admin/refunds/(?P<id>[^/]+)/reverse$")
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
