"""Stripe's Events: made for every change of the Stripe flavour's objects, kept as the account's events
(``GET /v1/events``, ``GET /v1/events/{id}``) and, when webhooks are on, sent to the endpoint signed with
``Stripe-Signature`` (docs.stripe.com/webhooks, docs.stripe.com/api/events).

Each Event is ``{"id": "evt_…", "object": "event", "api_version", "created", "livemode": false,
"pending_webhooks": 1, "request": {"id": null, "idempotency_key"}, "type", "data": {"object"}}``, ``data.object``
rendered as the API serves it at that moment. The types, per change (``webhook_events.Change``):

- an intent created: ``payment_intent.created``;
- a charge attempted or settled: ``charge.succeeded`` + ``payment_intent.succeeded``; for a manual capture
  ``charge.succeeded`` + ``payment_intent.amount_capturable_updated``; slow settlement ``charge.pending`` +
  ``payment_intent.processing``; a decline ``charge.failed`` + ``payment_intent.payment_failed``, preceded, when the
  card needed authentication, by ``payment_intent.requires_action`` (the intent as it stood while it waited);
- a capture: ``charge.captured`` + ``payment_intent.succeeded``; a cancel: ``payment_intent.canceled`` (and
  ``charge.expired`` first when an authorisation expired uncaptured);
- a refund booked: ``refund.created`` (+ ``charge.refunded`` when it succeeded); its status changing:
  ``refund.updated`` + ``charge.refund.updated`` (+ ``charge.refunded`` when it succeeded, ``refund.failed`` when
  it failed); a dispute: ``charge.dispute.created`` + ``charge.dispute.funds_withdrawn``; decided
  (``admin_movements``): ``charge.dispute.closed`` (+ ``charge.dispute.funds_reinstated`` when won);
- customers and payment methods: ``customer.created``, ``customer.updated``, ``payment_method.attached``,
  ``payment_method.detached``.

``Stripe-Signature: t=<unix>,v1=<hex>``: HMAC-SHA256 with the endpoint secret of ``"{t}.{body}"``, signed afresh
at every attempt with the wall clock (the receiver's tolerance is measured against it; the event's ``created`` is
the server's clock). Any 2xx is an acknowledgement.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from psp_adapters.protocol import Secret
from psp_adapters.sandbox import stripe_objects as so
from psp_adapters.sandbox.cards import AUTHENTICATION_REQUIRED
from psp_adapters.sandbox.ledger_documents import Document
from psp_adapters.sandbox.movements import DISPUTE_WON, REFUND_FAILED, REFUND_SUCCEEDED
from psp_adapters.sandbox.records import PaymentRecord, random_id
from psp_adapters.sandbox.stripe_books import StripeBooks
from psp_adapters.sandbox.webhook_events import JSON_HEADER, Change, Notification, compact
from psp_adapters.sandbox.wire import PaymentStatus

_STRIPE_AGENT = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
#: the event types a webhook endpoint gets unless told otherwise: those recon's docs register (payment intents,
#: refunds, disputes); the rest (``charge.succeeded``, ``customer.created``, …) are only in ``GET /v1/events``
DEFAULT_WEBHOOK_EVENTS = frozenset({
    "payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.processing",
    "payment_intent.canceled", "payment_intent.requires_action", "payment_intent.amount_capturable_updated",
    "charge.refunded", "charge.refund.updated", "charge.dispute.created", "charge.dispute.funds_withdrawn",
    "charge.dispute.closed", "charge.dispute.funds_reinstated", "refund.created", "refund.updated",
    "refund.failed", "payout.created", "payout.paid", "payout.failed", "payout.reconciliation_completed",
})  # fmt: skip


class StripeSignature:
    """``Stripe-Signature`` with the endpoint's signing secret (``whsec_…``)."""

    def __init__(self, secret: Secret) -> None:
        self._secret = secret.reveal().encode()

    def headers(self, body: bytes, *, now: float) -> list[tuple[str, str]]:
        stamp = int(now)
        digest = hmac.new(self._secret, str(stamp).encode() + b"." + body, hashlib.sha256).hexdigest()
        return [JSON_HEADER, ("User-Agent", _STRIPE_AGENT), ("Stripe-Signature", f"t={stamp},v1={digest}")]

    def accepted(self, status: int, text: str) -> bool:
        return 200 <= status < 300


class StripeEvents:
    """Stripe's Events for each change of the Stripe flavour's objects, kept in the books as they are made."""

    def __init__(self, books: StripeBooks) -> None:
        self._books = books

    def reset(self) -> None:
        """Nothing to forget: the events are in the books, which a reset empties."""

    def render(self, change: Change) -> list[Notification]:
        record = change.record
        if record is None:
            document = dict(change.document or {})
            return [self._event(change.kind, document, change, str(document.get("id", "")))]
        if record.flavor != "stripe":
            return []
        return [self._event(type_, obj, change, record.psp_reference) for type_, obj in self._types(change, record)]

    def _types(self, change: Change, record: PaymentRecord) -> list[tuple[str, Mapping[str, object]]]:
        books, kind, adjustment = self._books, change.kind, change.adjustment
        if kind in ("refund", "refund_updated") and adjustment is not None:
            refund = books.refund(adjustment)
            found: list[tuple[str, Mapping[str, object]]] = []
            if kind == "refund":
                found.append(("refund.created", refund))
            else:
                found += [("refund.updated", refund), ("charge.refund.updated", refund)]
            if adjustment.status == REFUND_SUCCEEDED:
                found.append(("charge.refunded", books.charge(record)))
            if adjustment.status == REFUND_FAILED:
                found.append(("refund.failed", refund))
            return found
        if kind == "dispute" and adjustment is not None:
            dispute = books.dispute(adjustment)
            return [("charge.dispute.created", dispute), ("charge.dispute.funds_withdrawn", dispute)]
        if kind == "dispute_updated" and adjustment is not None:
            dispute = books.dispute(adjustment)
            reinstated = [("charge.dispute.funds_reinstated", dispute)] if adjustment.status == DISPUTE_WON else []
            return [("charge.dispute.closed", dispute), *reinstated]
        if kind == "created":
            return [("payment_intent.created", books.intent(record))]
        return self._outcome(kind, record)

    def _outcome(self, kind: str, record: PaymentRecord) -> list[tuple[str, Mapping[str, object]]]:
        books = self._books
        intent = books.intent(record)
        charge = books.charge(record) if record.charged else None
        status = record.status
        if status is PaymentStatus.SUCCEEDED:
            return [*_with(charge, "charge.captured" if kind == "captured" else "charge.succeeded"),
                    ("payment_intent.succeeded", intent)]
        if status is PaymentStatus.AUTHORIZED:
            return [*_with(charge, "charge.succeeded"), ("payment_intent.amount_capturable_updated", intent)]
        if status is PaymentStatus.CANCELED:
            expired = _with(charge if kind == "expired" else None, "charge.expired")
            return [*expired, ("payment_intent.canceled", intent)]
        if status is PaymentStatus.PENDING:
            if kind != "confirmed":
                return []
            return [*_with(charge, "charge.pending"), ("payment_intent.processing", intent)]
        if status is PaymentStatus.FAILED:
            failed = [*_with(charge, "charge.failed"), ("payment_intent.payment_failed", intent)]
            if kind == "confirmed" and record.failure_reason == AUTHENTICATION_REQUIRED:
                waiting = {**intent, "status": "requires_action", "last_payment_error": None, "latest_charge": None,
                           "next_action": {"type": "use_stripe_sdk",
                                           "use_stripe_sdk": {"type": "three_d_secure_redirect"}}}
                return [("payment_intent.requires_action", waiting), *failed]
            return failed
        return []  # OPEN: nothing happened to money

    def _event(self, type_: str, obj: Mapping[str, object], change: Change, about: str) -> Notification:
        event_id = random_id("evt_")
        now = self._books.now()
        event = so.event(event_id, type_, obj, created=now, idempotency_key=change.idempotency_key or None)
        self._books.ledger.put_document(Document(event_id, "event", None, now, event))
        return Notification(event_id, type_, about, compact(event))


def _with(charge: Mapping[str, object] | None, type_: str) -> list[tuple[str, Mapping[str, object]]]:
    return [(type_, charge)] if charge is not None else []
