"""What a flavour tells about its payments, and the shapes every PSP's webhooks share.

The dispatcher (``api``) hands each ``Change`` of a payment (or of a Stripe customer or payment method) to the
flavour's ``Renderer`` once the write that made it commits; the renderer turns it into zero or more
``Notification`` s (an event id, a type, the body's bytes) and, for Stripe, keeps them as the account's Events
(``GET /v1/events``). The webhook sender (``webhooks``) delivers those the endpoint takes, through the flavour's
``Endpoint``, which adds the headers of each delivery attempt and decides whether the receiver accepted it.

The renderers: Stripe's Events (``stripe_events``), Adyen's standard notifications (``adyen_events``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple, Protocol

from psp_adapters.sandbox.movements import Adjustment, Modification
from psp_adapters.sandbox.records import PaymentRecord

JSON_HEADER = ("Content-Type", "application/json; charset=utf-8")


class Change(NamedTuple):
    """Something that happened at the PSP, as the dispatcher tells the flavour's renderer.

    Kinds: "created" (a payment created; Stripe: an intent, confirmed or not), "confirmed" (a charge attempted:
    Stripe's confirm, at create or later; Adyen's /payments and /payments/details), "settled" (a pending payment
    reached its status), "status" (an admin settle, fail or cancel), "captured", "canceled", "expired" (an
    authorisation released, uncaptured), "refund" (a refund booked), "refund_updated" (its status changed),
    "dispute", "modification_refused" (Adyen: a modification it could not do), "capture_failed" (Adyen: a
    capture rejected after it was sent), and Stripe's document events,
    named as Stripe names them ("customer.created", "payment_method.attached", …) with ``document`` set.
    """

    kind: str
    record: PaymentRecord | None  #: the payment as it is now (None: a document event)
    adjustment: Adjustment | None = None  #: the refund or dispute
    idempotency_key: str | None = None  #: the key of the request that made the change, if any
    modification: Modification | None = None  #: Adyen: the modification processed
    document: Mapping[str, object] | None = None  #: Stripe: the customer or payment method, as the API serves it


class Notification(NamedTuple):
    """One webhook message, ready to send (only Stripe's header is computed per attempt)."""

    event_id: str  #: Stripe's ``evt_…``; Adyen (which has no event id): ``pspReference:eventCode:success``
    type: str  #: Stripe's event type; Adyen's ``eventCode``
    psp_reference: str  #: the payment it is about (REPORT_AVAILABLE: the report's file name)
    body: bytes


class Renderer(Protocol):
    """A flavour's webhooks: ``StripeEvents``, ``AdyenNotifications``."""

    def render(self, change: Change) -> list[Notification]:
        """The messages ``change`` sends, in the order the PSP sends them."""
        ...

    def reset(self) -> None:
        """Forget what was announced (``POST /_admin/reset``)."""
        ...


class Endpoint(Protocol):
    """How one PSP talks to the receiving endpoint."""

    def headers(self, body: bytes, *, now: float) -> list[tuple[str, str]]:
        """The headers of one delivery attempt at wall-clock time ``now`` (unix seconds)."""
        ...

    def accepted(self, status: int, text: str) -> bool:
        """Whether the receiver's answer acknowledges the message (anything else is retried)."""
        ...


def compact(doc: object) -> bytes:
    """A JSON document as the bytes a PSP sends (no spaces)."""
    return json.dumps(doc, separators=(",", ":")).encode()
