"""Stripe webhooks: the ``Stripe-Signature`` check and the events recon acts on; ``StripeWebhook`` is recon's
receiver (``psp_adapters.protocol.WebhookReceiver``), built by ``receiver`` from ``RECON_STRIPE_WEBHOOK_SECRET``
(the endpoint's ``whsec_…``; several, comma-separated, while rolling a secret).

Verification, as Stripe documents it (docs.stripe.com/webhooks, "Verify webhook signatures manually"): the
header is ``t=<unix seconds>,v1=<hex>[,v1=<hex>…][,v0=…]``; the signed payload is ``"{t}.{raw body}"``; the
expected signature is its HMAC-SHA256 with the endpoint's signing secret (``whsec_…``), compared in constant
time with every ``v1`` entry (during a secret rotation Stripe signs with each active secret, so several
``v1`` entries appear, and several of our secrets may be configured: any pair that matches is enough). Only
the ``v1`` scheme counts; ``v0`` (test signatures) never does. A timestamp more than ``tolerance`` seconds
from now, either side, is refused: a replayed old delivery cannot be applied again, and a clock far ahead is
not trusted either (stripe-python's ``WebhookSignature.verify_header`` refuses only the old ones).

Events (data.object is the object as of the event, so an out-of-order delivery still says what was true then):

| type                                   | news                                                        |
| -------------------------------------- | ----------------------------------------------------------- |
| payment_intent.succeeded               | Succeeded (amount_received)                                 |
| payment_intent.payment_failed          | Failed (last_payment_error), or ActionRequired (3-D Secure) |
| payment_intent.processing              | Pending                                                     |
| payment_intent.canceled                | Failed (cancellation_reason)                                |
| payment_intent.requires_action         | ActionRequired                                              |
| payment_intent.amount_capturable_updated | Authorised (requires_capture: held for a manual capture)  |
| charge.refunded                        | Reversed, kind refund, amount_refunded                      |
| refund.created, refund.updated,        | RefundNews of the Refund object: its id, payment_intent,    |
| refund.failed, charge.refund.updated   | metadata.refund_reference, status (failed, canceled: failed)|
| charge.dispute.created, .updated,      | DisputeNews of the Dispute object: its id, payment_intent,  |
| .closed, .funds_withdrawn,             | amount, reason, evidence_details.due_by, the fees of its    |
| .funds_reinstated                      | balance_transactions; status won / lost: won / lost, else   |
|                                        | opened (warning_closed: won, no money moved)                |
| payout.paid, payout.failed,            | PayoutNews: the payout's id and status (recon fetches it    |
| payout.reconciliation_completed        | again: ``recon.close.payouts``)                             |

Any other type is acknowledged and ignored (``news`` None).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from typing import ClassVar

import orjson

from psp_adapters._wire import JsonFields
from psp_adapters.errors import PspProtocolError, WebhookRejected
from psp_adapters.protocol import (
    DisputeNews,
    PaymentOutcome,
    PayoutNews,
    RefundNews,
    Reversed,
    WebhookAnswer,
    WebhookEvent,
)
from psp_adapters.stripe import dispute as dispute_wire
from psp_adapters.stripe import refund as refund_wire
from psp_adapters.stripe.wire import PSP_NAME, from_stripe_amount, reference, to_outcome

SECRET_VARIABLE = "RECON_STRIPE_WEBHOOK_SECRET"  # nosec B105  # a variable's name, not a secret
SIGNATURE_HEADER = "Stripe-Signature"
#: Stripe's default tolerance in its SDKs: five minutes
DEFAULT_TOLERANCE_SECONDS = 300
SCHEME = "v1"
PAYMENT_INTENT_EVENTS = frozenset({"payment_intent.succeeded", "payment_intent.payment_failed",
                                   "payment_intent.processing", "payment_intent.canceled",
                                   "payment_intent.requires_action", "payment_intent.amount_capturable_updated"})
REFUNDED = "charge.refunded"
#: events whose data.object is a Refund (docs.stripe.com/api/events/types); charge.refund.updated is the older name
REFUND_EVENTS = frozenset({"refund.created", "refund.updated", "refund.failed", "charge.refund.updated"})
#: a Refund's status -> RefundNews' state
REFUND_STATES = {"succeeded": "succeeded", "failed": "failed", "canceled": "failed", "pending": "pending",
                 "requires_action": "pending"}
DISPUTE_CREATED = "charge.dispute.created"
#: https://docs.stripe.com/api/events/types: payout.paid, payout.failed, payout.reconciliation_completed
PAYOUT_EVENTS = frozenset({"payout.paid", "payout.failed", "payout.reconciliation_completed"})
#: events whose data.object is a Dispute (docs.stripe.com/api/events/types)
DISPUTE_EVENTS = frozenset({DISPUTE_CREATED, "charge.dispute.updated", "charge.dispute.closed",
                            "charge.dispute.funds_withdrawn", "charge.dispute.funds_reinstated"})
#: a Dispute's final statuses -> DisputeNews' state (``dispute.ENDS``); every other status is opened
DISPUTE_ENDS = dispute_wire.ENDS

_json = JsonFields(PSP_NAME)


class StripeWebhook:
    """recon's receiver of Stripe's webhooks: ``verify`` checks Stripe-Signature against the endpoint secrets,
    then parses the event. Its repr names no secret."""

    name: ClassVar[str] = PSP_NAME
    #: what Stripe's own libraries answer: 200 with {"received": true}
    accepted: ClassVar[WebhookAnswer] = WebhookAnswer(b'{"received":true}', "application/json")

    def __init__(self, secrets: Sequence[str], *, tolerance: float = DEFAULT_TOLERANCE_SECONDS) -> None:
        self._secrets = [s for s in secrets if s]
        self._tolerance = tolerance

    def __repr__(self) -> str:
        return f"StripeWebhook({len(self._secrets)} secrets)"

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float) -> list[WebhookEvent]:
        verify(body, headers.get(SIGNATURE_HEADER.lower()), self._secrets, now=now, tolerance=self._tolerance)
        return [parse(body)]


def receiver(environ: Mapping[str, str], *, tolerance: float) -> StripeWebhook | None:
    """The receiver for the secrets in ``RECON_STRIPE_WEBHOOK_SECRET``; None when it is unset or empty."""
    secrets = [part.strip() for part in (environ.get(SECRET_VARIABLE) or "").split(",") if part.strip()]
    return StripeWebhook(secrets, tolerance=tolerance) if secrets else None


def verify(payload: bytes, header: str | None, secrets: Sequence[str], *, now: float,
           tolerance: float = DEFAULT_TOLERANCE_SECONDS) -> None:
    """Raise WebhookRejected unless ``header`` carries a ``v1`` signature of ``payload`` by one of ``secrets``
    with a timestamp within ``tolerance`` seconds of ``now``."""
    if not header:
        raise WebhookRejected("no_signature", f"no {SIGNATURE_HEADER} header")
    timestamp: int | None = None
    signatures: list[str] = []
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            try:
                timestamp = int(value)
            except ValueError:
                raise WebhookRejected("malformed", f"{SIGNATURE_HEADER}: t is not a number") from None
        elif key == SCHEME:
            signatures.append(value.strip())
    if timestamp is None or not signatures:
        raise WebhookRejected("no_signature", f"{SIGNATURE_HEADER}: no timestamp or no {SCHEME} signature")
    signed = f"{timestamp}.".encode() + payload
    # hmac.digest: the one-shot C path (an HMAC object per secret costs more Python than the digest itself)
    if not any(hmac.compare_digest(hmac.digest(secret.encode(), signed, "sha256").hex(), candidate)
               for secret in secrets if secret for candidate in signatures):
        raise WebhookRejected("bad_signature", f"{SIGNATURE_HEADER}: no {SCHEME} signature matches a configured "
                                               "endpoint secret")
    if abs(now - timestamp) > tolerance:
        raise WebhookRejected("stale_timestamp", f"{SIGNATURE_HEADER}: timestamp is {int(now - timestamp)} s from "
                                                 f"now, outside the tolerance of {int(tolerance)} s")


def parse(payload: bytes) -> WebhookEvent:
    """The event in a verified body; WebhookRejected("malformed") when it is not a Stripe event."""
    try:
        doc = _json.as_object(orjson.loads(payload), "event")
        event_id = _json.require(doc, "id", str)
        event_type = _json.require(doc, "type", str)
        occurred = _json.optional_unix_time(doc, "created")
        data = _json.as_object(doc.get("data"), "event data")
        obj = _json.as_object(data.get("object"), "event data.object")
        news = _news(event_type, obj)
    except (ValueError, PspProtocolError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise WebhookRejected("malformed", f"not a Stripe event: {str(exc)[:200]}") from None
    return WebhookEvent(psp=PSP_NAME, event_id=event_id, event_type=event_type, occurred_at=occurred, news=news,
                        body=dict(obj))


def _news(event_type: str, obj: Mapping[str, object]
          ) -> PaymentOutcome | Reversed | PayoutNews | RefundNews | DisputeNews | None:
    if event_type in PAYMENT_INTENT_EVENTS:
        return to_outcome(obj)
    if event_type in PAYOUT_EVENTS:
        currency = _json.require(obj, "currency", str).upper()
        return PayoutNews(psp_reference=_json.require(obj, "id", str), currency=currency,
                          amount=from_stripe_amount(_json.amount(obj, "amount", signed=True), currency),
                          raw_status=_json.optional(obj, "status", str))
    if event_type in REFUND_EVENTS:
        return _refund_news(obj)
    if event_type == REFUNDED:
        currency = _json.require(obj, "currency", str).upper()
        refunded = _json.optional_amount(obj, "amount_refunded") or 0
        full = _json.optional(obj, "refunded", bool)
        return Reversed(psp_reference=_json.optional(obj, "payment_intent", str), currency=currency,
                        amount=from_stripe_amount(refunded, currency),
                        raw_status="refunded" if full else "partially_refunded",
                        merchant_reference=reference(obj), kind="refund")
    if event_type in DISPUTE_EVENTS:
        return dispute_wire.to_news(obj)
    return None


def _refund_news(obj: Mapping[str, object]) -> RefundNews:
    """A Refund object's news: a status Stripe may add later reads as pending, never as a guess of an end."""
    currency = _json.require(obj, "currency", str).upper()
    status = _json.require(obj, "status", str)
    state = REFUND_STATES.get(status, "pending")
    return RefundNews(psp_reference=_json.optional(obj, "payment_intent", str), currency=currency,
                      amount=from_stripe_amount(_json.amount(obj, "amount"), currency), raw_status=status,
                      merchant_reference=refund_wire.reference(obj), state=state,
                      refund_id=_json.require(obj, "id", str),
                      reason=_json.optional(obj, "failure_reason", str) if state == "failed" else None)
