"""What the sandbox's PSPs send as webhooks, and how each signs them; ``webhooks`` queues and delivers them.

The dispatcher (``api``) tells the sender each ``Change`` of a payment; the flavour's renderer turns it into
zero or more ``Notification`` s (an event id, a type, the body's bytes), and the flavour's ``Endpoint`` adds
the headers of each delivery attempt and decides whether the receiver accepted it.

**Stripe** (docs.stripe.com/webhooks, docs.stripe.com/api/events/object): one Event per message,
``{"id": "evt_…", "object": "event", "api_version", "created", "livemode": false, "pending_webhooks": 1,
"request": {"id": null, "idempotency_key"}, "type", "data": {"object"}}``, ``data.object`` rendered exactly as
the flavour's API serves it at that moment (``stripe_wire``). Types: ``payment_intent.succeeded``,
``.payment_failed``, ``.processing``, ``.canceled``, ``.requires_action``, ``charge.refunded`` (the Charge) and
``charge.dispute.created`` (the Dispute). A payment that needed authentication sends ``requires_action`` (the
intent as it stood while it waited, ``status`` "requires_action" with a ``next_action``) and then, as an
off-session charge cannot authenticate, ``payment_failed`` (the intent the API serves: requires_payment_method,
``authentication_required``). Header ``Stripe-Signature: t=<unix>,v1=<hex>``: HMAC-SHA256 with the endpoint
secret of ``"{t}.{body}"``, signed afresh at every attempt with the wall clock (the receiver's tolerance is
measured against it; the event's ``created`` is the server's clock). Any 2xx is an acknowledgement.

**Adyen** (docs.adyen.com/development-resources/webhooks, its Webhooks-v1 OpenAPI document): one standard
notification per message, ``{"live": "false", "notificationItems": [{"NotificationRequestItem": {…}}]}`` with
``amount {currency, value}``, ``eventCode``, ``eventDate`` (ISO 8601 with the offset of the report time zone),
``merchantAccountCode``, ``merchantReference``, ``pspReference``, ``success`` ("true"/"false"), and where they
apply ``originalReference``, ``paymentMethod``, ``reason``. Events: ``AUTHORISATION`` (a payment authorised, or
refused with its refusal reason; nothing while it is ``Received`` or waits for a redirect that never comes back),
``CANCELLATION``, ``REFUND``, ``CHARGEBACK`` (their own pspReference, ``originalReference`` the payment's; a
dispute's pspReference is the dispute's, docs.adyen.com/risk-management/disputes-api/dispute-notifications),
and ``REPORT_AVAILABLE`` (``pspReference`` the report's file name, ``reason`` its download URL on this sandbox),
sent after the first other notification of each merchant account and day (in the report time zone): the day's
Payment accounting report then has a row to read. ``additionalData.hmacSignature``: base64 of HMAC-SHA256,
keyed with the bytes of the hex HMAC key, of ``pspReference:originalReference:merchantAccountCode:
merchantReference:value:currency:eventCode:success`` (absent fields as empty strings;
docs.adyen.com/development-resources/webhooks/secure-webhooks/verify-hmac-signatures). HTTP basic auth when a
user name is configured. Only a 2xx whose body is ``[accepted]`` is an acknowledgement.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Callable, Mapping
from datetime import date, datetime, tzinfo
from typing import NamedTuple, Protocol
from urllib.parse import quote

from psp_adapters.protocol import Secret
from psp_adapters.sandbox import adyen_report
from psp_adapters.sandbox import stripe_wire as sw
from psp_adapters.sandbox.adyen_api import needs_action, psp_reference, refusal
from psp_adapters.sandbox.faults import AUTHENTICATION_REQUIRED
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.records import Adjustment, PaymentRecord, random_id
from psp_adapters.sandbox.wire import PaymentStatus

#: the ``api_version`` of the events: the version stripe-python 16 pins (recon's default ``Stripe-Version``)
STRIPE_API_VERSION = "2026-10-28.endive"
_STRIPE_AGENT = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
_ADYEN_AGENT = "Adyen HttpClient 1.0"
_JSON = ("Content-Type", "application/json; charset=utf-8")


class Change(NamedTuple):
    """Something that happened to a payment at the PSP, as the dispatcher tells the webhook sender."""

    kind: str  #: "created" (a create executed), "settled" (a pending payment reached its final status),
    #: "status" (an admin settle, fail or cancel), "refund", "dispute"
    record: PaymentRecord  #: the payment as it is now
    adjustment: Adjustment | None = None  #: the refund or dispute
    idempotency_key: str | None = None  #: the create's key, if any


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


def _compact(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


# -- Stripe ----------------------------------------------------------------------------------------------------


class StripeSignature:
    """``Stripe-Signature`` with the endpoint's signing secret (``whsec_…``)."""

    def __init__(self, secret: Secret) -> None:
        self._secret = secret.reveal().encode()

    def headers(self, body: bytes, *, now: float) -> list[tuple[str, str]]:
        stamp = int(now)
        digest = hmac.new(self._secret, str(stamp).encode() + b"." + body, hashlib.sha256).hexdigest()
        return [_JSON, ("User-Agent", _STRIPE_AGENT), ("Stripe-Signature", f"t={stamp},v1={digest}")]

    def accepted(self, status: int, text: str) -> bool:
        return 200 <= status < 300


class StripeEvents:
    """Stripe's Events for each change of a Stripe-flavour payment."""

    def __init__(self, ledger: Ledger, *, now_func: Callable[[], datetime]) -> None:
        self._ledger = ledger
        self._now = now_func

    def reset(self) -> None:
        """Nothing to forget: every event stands alone."""

    def render(self, change: Change) -> list[Notification]:
        record = change.record
        adjustments = self._ledger.adjustments_of([record.psp_reference])[record.psp_reference]
        if change.kind == "refund":
            return [self._event("charge.refunded", sw.charge_object(record, adjustments), change)]
        if change.kind == "dispute" and change.adjustment is not None:
            return [self._event("charge.dispute.created", sw.dispute_object(change.adjustment, record), change)]
        intent = sw.payment_intent(record, adjustments)
        if record.status is PaymentStatus.SUCCEEDED:
            return [self._event("payment_intent.succeeded", intent, change)]
        if record.status is PaymentStatus.CANCELED:
            return [self._event("payment_intent.canceled", intent, change)]
        if record.status is PaymentStatus.PENDING:
            return [self._event("payment_intent.processing", intent, change)] if change.kind == "created" else []
        failed = self._event("payment_intent.payment_failed", intent, change)
        if change.kind == "created" and record.failure_reason == AUTHENTICATION_REQUIRED:
            waiting = {
                **intent,
                "status": "requires_action",
                "last_payment_error": None,
                "latest_charge": None,
                "next_action": {"type": "use_stripe_sdk", "use_stripe_sdk": {"type": "three_d_secure_redirect"}},
            }
            return [self._event("payment_intent.requires_action", waiting, change), failed]
        return [failed]

    def _event(self, type_: str, obj: Mapping[str, object], change: Change) -> Notification:
        event_id = random_id("evt_")
        event = {
            "id": event_id,
            "object": "event",
            "api_version": STRIPE_API_VERSION,
            "created": sw.unix(self._now()),
            "data": {"object": obj},
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": change.idempotency_key or None},
            "type": type_,
        }
        return Notification(event_id, type_, change.record.psp_reference, _compact(event))


# -- Adyen -----------------------------------------------------------------------------------------------------


def adyen_hmac_signature(item: Mapping[str, object], key: bytes) -> str:
    """The ``hmacSignature`` of a NotificationRequestItem: see the module docstring."""
    amount = item.get("amount")
    value, currency = (amount.get("value", ""), amount.get("currency", "")) if isinstance(amount, Mapping) else ("", "")
    names = ("pspReference", "originalReference", "merchantAccountCode", "merchantReference")
    parts = [*(str(item.get(name, "")) for name in names), str(value), str(currency)]
    parts += [str(item.get("eventCode", "")), str(item.get("success", ""))]
    digest = hmac.new(key, ":".join(parts).encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class AdyenBasicAuth:
    """Adyen's delivery: optional HTTP basic auth; acknowledged by ``[accepted]``."""

    def __init__(self, username: str | None, password: Secret | None) -> None:
        token = f"{username}:{password.reveal() if password else ''}".encode()
        self._authorization = "Basic " + base64.b64encode(token).decode() if username else None

    def headers(self, body: bytes, *, now: float) -> list[tuple[str, str]]:
        found = [_JSON, ("User-Agent", _ADYEN_AGENT)]
        return [*found, ("Authorization", self._authorization)] if self._authorization else found

    def accepted(self, status: int, text: str) -> bool:
        return 200 <= status < 300 and text.strip() == "[accepted]"


class AdyenNotifications:
    """Adyen's standard notifications for each change of an Adyen-flavour payment, signed with the HMAC key."""

    def __init__(
        self, *, hmac_key: bytes, zone: tzinfo, base_url_func: Callable[[], str], now_func: Callable[[], datetime]
    ) -> None:
        self._key = hmac_key
        self._zone = zone
        self._base_url = base_url_func
        self._now = now_func
        self._announced: set[tuple[str, date]] = set()  # (merchant account, day) with REPORT_AVAILABLE sent
        self._lock = threading.Lock()  # renders run on request threads and on the webhook thread

    def reset(self) -> None:
        with self._lock:
            self._announced.clear()

    def render(self, change: Change) -> list[Notification]:
        record, adjustment = change.record, change.adjustment
        if change.kind in ("refund", "dispute") and adjustment is not None:
            code = "REFUND" if change.kind == "refund" else "CHARGEBACK"
            reason = adjustment.reason if change.kind == "dispute" else None
            fields = {"originalReference": record.psp_reference, "reason": reason}
            item = self._item(record, code, adjustment.created_at, adjustment.id, adjustment.amount, True, fields)
        elif record.status is PaymentStatus.CANCELED:
            fields = {"originalReference": record.psp_reference}
            item = self._item(record, "CANCELLATION", record.updated_at, psp_reference(), record.amount, True, fields)
        elif record.status is PaymentStatus.SUCCEEDED or (
            record.status is PaymentStatus.FAILED and not needs_action(record)
        ):
            succeeded = record.status is PaymentStatus.SUCCEEDED
            fields = {} if succeeded else {"reason": refusal(record)[1]}
            at, ref = _booked(record), record.psp_reference
            item = self._item(record, "AUTHORISATION", at, ref, record.amount, succeeded, fields)
        else:
            return []  # Received (pending) or RedirectShopper: Adyen notifies once the outcome is known
        found = [self._message(item)]
        announcement = self._report_available(record, change)
        return [*found, self._message(announcement)] if announcement else found

    def _item(
        self,
        record: PaymentRecord,
        code: str,
        at: datetime,
        reference: str,
        amount: int,
        success: bool,
        fields: Mapping[str, str | None],
    ) -> dict[str, object]:
        item: dict[str, object] = {
            "amount": {"currency": record.currency, "value": amount},
            "eventCode": code,
            "eventDate": at.astimezone(self._zone).isoformat(timespec="seconds"),
            "merchantAccountCode": record.merchant_account or "",
            "merchantReference": record.merchant_reference,
            "paymentMethod": "visa",
            "pspReference": reference,
            "success": "true" if success else "false",
        }
        item.update({name: value for name, value in fields.items() if value is not None})
        return item

    def _report_available(self, record: PaymentRecord, change: Change) -> dict[str, object] | None:
        at = change.adjustment.created_at if change.adjustment else _booked(record)
        day = at.astimezone(self._zone).date()
        account = record.merchant_account or ""
        with self._lock:
            if (account, day) in self._announced:
                return None
            self._announced.add((account, day))
        name = adyen_report.file_name(day)
        url = f"{self._base_url()}/reports/download/MerchantAccount/{quote(account, safe='')}/{name}"
        return {
            "amount": {"currency": "EUR", "value": 0},
            "eventCode": "REPORT_AVAILABLE",
            "eventDate": self._now().astimezone(self._zone).isoformat(timespec="seconds"),
            "merchantAccountCode": account,
            "merchantReference": "",
            "pspReference": name,
            "reason": url,
            "success": "true",
        }

    def _message(self, item: dict[str, object]) -> Notification:
        signed = {**item, "additionalData": {"hmacSignature": adyen_hmac_signature(item, self._key)}}
        body = {"live": "false", "notificationItems": [{"NotificationRequestItem": signed}]}
        event_id = f"{item['pspReference']}:{item['eventCode']}:{item['success']}"
        about = str(item.get("originalReference", item["pspReference"]))
        return Notification(event_id, str(item["eventCode"]), about, _compact(body))


def _booked(record: PaymentRecord) -> datetime:
    return record.settled_at or record.updated_at
