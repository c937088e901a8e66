"""Adyen webhooks (standard notifications, JSON): each item's HMAC signature and the events recon acts on;
``AdyenWebhook`` is recon's receiver (``psp_adapters.protocol.WebhookReceiver``), built by ``receiver`` from
``RECON_ADYEN_HMAC_KEY`` (hex; several, comma-separated, while rotating) and, when Adyen is set up to send basic
auth, ``RECON_ADYEN_WEBHOOK_USERNAME`` with ``RECON_ADYEN_WEBHOOK_PASSWORD`` (checked before the signatures).

Verification, as Adyen documents it (docs.adyen.com/development-resources/webhooks/verify-hmac-signatures):
each ``NotificationRequestItem`` carries ``additionalData.hmacSignature``, the base64 of an HMAC-SHA256 over

    pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success

(a missing field is an empty string; ``value`` and ``currency`` from ``amount``), keyed with the binary of the
HMAC key Adyen shows in hex. Several keys may be configured (a rotation); any match is enough, compared in
constant time. One item that fails refuses the whole request: nothing of it is stored, and Adyen retries.
Adyen expects the body ``[accepted]`` once the notification is stored (``ACCEPTED``).

Adyen sends an event more than once and in any order; an item is identified by its event code, its PSP
reference, the original reference of a modification, and ``success`` (``event_id``).

| eventCode                  | news                                                               |
| -------------------------- | ------------------------------------------------------------------ |
| AUTHORISATION, success     | Succeeded                                                          |
| AUTHORISATION, not success | Failed (reason)                                                    |
| CAPTURE                    | ModificationNews capture succeeded (failed when not success): the  |
|                            | capture ``pspReference`` of the payment ``originalReference``      |
| CAPTURE_FAILED             | ModificationNews capture failed (reason): failed after it was sent |
| CANCELLATION               | ModificationNews cancel succeeded (failed when not success); recon |
|                            | reads one it did not ask for as the payment's Failed ("cancelled") |
| REFUND, success            | RefundNews succeeded: the refund ``pspReference`` of the payment   |
|                            | ``originalReference``, our ``merchantReference``                   |
| REFUND, not success        | RefundNews failed (reason)                                         |
| REFUND_FAILED              | RefundNews failed (reason): the scheme failed it after it was sent |
| REFUNDED_REVERSED          | RefundNews reversed: the money came back to the merchant           |
| NOTIFICATION_OF_CHARGEBACK | DisputeNews opened (evidence by additionalData.defensePeriodEndsAt)|
| CHARGEBACK                 | DisputeNews opened: the money withdrawn                            |
| CHARGEBACK_REVERSED        | DisputeNews reversed: the money came back                          |
| SECOND_CHARGEBACK          | DisputeNews lost                                                   |
|                            | (one dispute per payment: its id is the payment's pspReference)    |
| REPORT_AVAILABLE           | no news; ``report`` is the file name (``reason`` its download URL) |
| REPORT_AVAILABLE of a      | PayoutNews: the file name (``settlement_detail_report_batch_N``);  |
| Settlement details report  | recon fetches that batch (``recon.close.payouts``)                 |

Anything else (other event codes) is acknowledged and ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import ClassVar

import orjson

from psp_adapters._wire import JsonFields
from psp_adapters.adyen import settlement
from psp_adapters.adyen.wire import PSP_NAME, from_adyen_amount
from psp_adapters.errors import PspProtocolError, WebhookRejected
from psp_adapters.protocol import (
    DisputeNews,
    Failed,
    ModificationNews,
    PaymentOutcome,
    PayoutNews,
    RefundNews,
    Reversed,
    Secret,
    Succeeded,
    WebhookAnswer,
    WebhookEvent,
)

KEY_VARIABLE = "RECON_ADYEN_HMAC_KEY"
#: the refund event codes and the RefundNews state each says (REFUND's when ``success`` is true)
REFUND_STATES = {"REFUND": "succeeded", "REFUND_FAILED": "failed", "REFUNDED_REVERSED": "reversed"}
#: the chargeback event codes and the DisputeNews state each says
DISPUTE_STATES = {"NOTIFICATION_OF_CHARGEBACK": "opened", "CHARGEBACK": "opened", "CHARGEBACK_REVERSED": "reversed",
                  "SECOND_CHARGEBACK": "lost"}
#: the modification event codes and the kind of ModificationNews each is about
MODIFICATION_CODES = {"CAPTURE": "capture", "CAPTURE_FAILED": "capture", "CANCELLATION": "cancel"}
USERNAME_VARIABLE = "RECON_ADYEN_WEBHOOK_USERNAME"
PASSWORD_VARIABLE = "RECON_ADYEN_WEBHOOK_PASSWORD"  # nosec B105  # a variable's name, not a secret

#: the body Adyen expects once the notification is stored; anything else makes it retry
ACCEPTED = "[accepted]"
SIGNED_FIELDS = ("pspReference", "originalReference", "merchantAccountCode", "merchantReference", "value",
                 "currency", "eventCode", "success")

_json = JsonFields(PSP_NAME)


class AdyenWebhook:
    """recon's receiver of Adyen's notifications: ``verify`` checks the basic auth (when configured), then every
    item's HMAC signature, and parses the items. Its repr names no secret."""

    name: ClassVar[str] = PSP_NAME
    accepted: ClassVar[WebhookAnswer] = WebhookAnswer(ACCEPTED.encode(), "text/plain")

    def __init__(self, keys: Sequence[bytes], *, username: str | None = None, password: Secret | None = None) -> None:
        self._keys = list(keys)
        self._basic = (username.encode(), password.reveal().encode()) if username and password else None

    def __repr__(self) -> str:
        return f"AdyenWebhook({len(self._keys)} keys, basic auth {'on' if self._basic else 'off'})"

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float) -> list[WebhookEvent]:
        if self._basic is not None and not self._basic_auth_ok(headers.get("authorization")):
            raise WebhookRejected("unauthorized", "basic auth missing or wrong")
        return parse_verified(body, self._keys)

    def _basic_auth_ok(self, header: str | None) -> bool:
        assert self._basic is not None  # nosec B101  # type narrowing: called only with basic auth on
        scheme, _, value = (header or "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        # both compared, whatever the first says: the time taken tells nothing about which one was wrong
        return hmac.compare_digest(user.encode(), self._basic[0]) & hmac.compare_digest(password.encode(),
                                                                                         self._basic[1])


def receiver(environ: Mapping[str, str], *, tolerance: float) -> AdyenWebhook | None:
    """The receiver for the keys in ``RECON_ADYEN_HMAC_KEY`` (None when it is unset or empty) with the basic auth
    of ``RECON_ADYEN_WEBHOOK_USERNAME``/``_PASSWORD``; ValueError naming the variable for a key that is not hex
    or one of the two without the other. Adyen's signatures carry no timestamp: ``tolerance`` is not used."""
    values = [part.strip() for part in (environ.get(KEY_VARIABLE) or "").split(",") if part.strip()]
    try:
        keys = hmac_keys(values)
    except ValueError as exc:
        raise ValueError(f"{KEY_VARIABLE}: {exc}") from None
    username = (environ.get(USERNAME_VARIABLE) or "").strip() or None
    password = environ.get(PASSWORD_VARIABLE) or None
    if bool(username) != bool(password):
        raise ValueError(f"{USERNAME_VARIABLE} and {PASSWORD_VARIABLE}: set both or neither")
    if not keys:
        return None
    return AdyenWebhook(keys, username=username, password=Secret(password) if password else None)


def hmac_keys(values: Sequence[str]) -> list[bytes]:
    """The configured hex keys as bytes; ValueError naming the position of one that is not hex."""
    keys = []
    for i, value in enumerate(values):
        try:
            keys.append(binascii.unhexlify(value.strip()))
        except (binascii.Error, ValueError):
            raise ValueError(f"HMAC key #{i + 1} is not a hexadecimal string") from None
    return keys


def signing_string(item: Mapping[str, object]) -> str:
    amount = item.get("amount")
    amount = amount if isinstance(amount, Mapping) else {}
    values = {**{k: item.get(k) for k in SIGNED_FIELDS}, "value": amount.get("value"),
              "currency": amount.get("currency")}
    return ":".join("" if values[k] is None else str(values[k]) for k in SIGNED_FIELDS)


def parse_verified(payload: bytes, keys: Sequence[bytes]) -> list[WebhookEvent]:
    """Every item of a notification body, each checked against ``keys``; WebhookRejected for a body that is not
    an Adyen notification (``malformed``) or an item whose signature matches no key (``bad_signature``,
    ``no_signature``)."""
    try:
        doc = _json.as_object(orjson.loads(payload), "notification")
        wrappers = doc.get("notificationItems")
        if not isinstance(wrappers, list) or not wrappers:
            raise _json.error("notificationItems missing or empty")
        items = [_json.as_object(_json.as_object(w, "notification item").get("NotificationRequestItem"),
                                 "NotificationRequestItem") for w in wrappers]
    except (ValueError, PspProtocolError) as exc:
        raise WebhookRejected("malformed", f"not an Adyen notification: {str(exc)[:200]}") from None
    for n, item in enumerate(items, 1):
        _verify(item, keys, n)
    try:
        return [_event(item) for item in items]
    except (ValueError, PspProtocolError) as exc:
        raise WebhookRejected("malformed", f"Adyen notification item: {str(exc)[:200]}") from None


def _verify(item: Mapping[str, object], keys: Sequence[bytes], n: int) -> None:
    extra = item.get("additionalData")
    signature = extra.get("hmacSignature") if isinstance(extra, Mapping) else None
    if not isinstance(signature, str) or not signature:
        raise WebhookRejected("no_signature", f"notification item {n}: no additionalData.hmacSignature")
    message = signing_string(item).encode()
    for key in keys:
        expected = base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()
        if hmac.compare_digest(expected, signature):
            return
    raise WebhookRejected("bad_signature", f"notification item {n}: hmacSignature matches no configured HMAC key")


def _event(item: Mapping[str, object]) -> WebhookEvent:
    code = _json.require(item, "eventCode", str)
    psp_reference = _json.require(item, "pspReference", str)
    original = _json.optional(item, "originalReference", str)
    success = _json.require(item, "success", str).lower() == "true"
    occurred = _json.optional(item, "eventDate", str)
    payout = code == "REPORT_AVAILABLE" and settlement.batch_of(psp_reference) is not None
    return WebhookEvent(
        psp=PSP_NAME, event_id=f"{code}:{psp_reference}:{original or ''}:{'true' if success else 'false'}",
        event_type=code, occurred_at=_json.instant(occurred, "eventDate") if occurred else None,
        news=PayoutNews(psp_reference=psp_reference, raw_status=code) if payout
        else _news(code, success, item, payment=original or psp_reference),
        merchant_account=_json.optional(item, "merchantAccountCode", str),
        report=psp_reference if code == "REPORT_AVAILABLE" and not payout else None, body=dict(item))


def _news(code: str, success: bool, item: Mapping[str, object], *,
          payment: str) -> PaymentOutcome | Reversed | RefundNews | DisputeNews | ModificationNews | None:
    amount_doc = _json.as_object(item.get("amount"), "amount")
    currency = _json.require(amount_doc, "currency", str).upper()
    amount = from_adyen_amount(_json.amount(amount_doc, "value"), currency)
    common = {"psp_reference": payment, "amount": amount, "currency": currency,
              "merchant_reference": _json.optional(item, "merchantReference", str)}
    reason = _json.optional(item, "reason", str)
    if code == "AUTHORISATION":
        if success:
            return Succeeded(**common, raw_status="AUTHORISATION")  # type: ignore[arg-type]
        return Failed(**common, raw_status="AUTHORISATION", reason=reason or "refused")  # type: ignore[arg-type]
    if code in MODIFICATION_CODES:
        kind, state = MODIFICATION_CODES[code], "succeeded" if success and code != "CAPTURE_FAILED" else "failed"
        return ModificationNews(**common, raw_status=code, kind=kind, state=state,  # type: ignore[arg-type]
                                modification_id=_json.require(item, "pspReference", str),
                                reason=reason if state == "failed" else None)
    if code in REFUND_STATES:
        state = REFUND_STATES[code] if success or code != "REFUND" else "failed"
        refund_id = _json.require(item, "pspReference", str)
        return RefundNews(**common, raw_status=code, state=state, refund_id=refund_id,  # type: ignore[arg-type]
                          reason=reason if state == "failed" else None)
    if code in DISPUTE_STATES:
        extra = item.get("additionalData")
        ends = extra.get("defensePeriodEndsAt") if isinstance(extra, Mapping) else None
        due_by = _json.instant(ends, "additionalData.defensePeriodEndsAt") if isinstance(ends, str) else None
        return DisputeNews(**common, raw_status=code, state=DISPUTE_STATES[code], dispute_id=payment,  # type: ignore[arg-type]
                           reason=reason, due_by=due_by)
    return None
