"""Adyen's standard notifications for what happens to an Adyen-flavour payment, signed as Adyen signs them.

docs.adyen.com/development-resources/webhooks and its Webhooks-v1 OpenAPI document: one notification per
message, ``{"live": "false", "notificationItems": [{"NotificationRequestItem": {…}}]}`` with ``amount {currency,
value}``, ``eventCode``, ``eventDate`` (ISO 8601 with the offset of the report time zone),
``merchantAccountCode``, ``merchantReference``, ``pspReference``, ``success`` ("true"/"false"), and where they apply
``originalReference``, ``paymentMethod``, ``reason``, ``additionalData``. Events:

- ``AUTHORISATION``: a payment authorised (automatic or manual capture), or refused with its refusal reason;
  nothing while it is ``Received`` or waits for a redirect that never comes back;
- the modifications (docs.adyen.com/online-payments/modify-payments), each with its own ``pspReference`` (the
  one ``received`` answered), ``originalReference`` the payment's, ``success`` false and a ``reason`` when Adyen
  could not do it: ``CAPTURE``, ``CANCELLATION``, ``REFUND``, ``CANCEL_OR_REFUND`` (``additionalData
  modification.action`` says which it did); and later ``REFUND_FAILED`` (a refund the card network returned) and
  ``EXPIRE`` (an authorisation never captured);
- ``CHARGEBACK`` (a dispute: its pspReference is the dispute's, docs.adyen.com/risk-management/disputes-api/
  dispute-notifications), preceded by ``NOTIFICATION_OF_CHARGEBACK`` (with ``defensePeriodEndsAt``) when the admin
  API asked (``notify_first``); ``CHARGEBACK_REVERSED`` when it is won and ``SECOND_CHARGEBACK`` when a won one
  is lost (``admin_movements``); ``REFUNDED_REVERSED`` for a refund reversed; ``CANCELLATION`` for an admin cancel;
- ``REPORT_AVAILABLE`` (``pspReference`` the report's file name, ``reason`` its download URL on this sandbox),
  after the first other notification of each merchant account and day (in the report time zone): the day's
  Payment accounting report then has a row to read; and when a settlement batch closes
  (``adyen_settlement``): its ``settlement_detail_report_batch_N.csv``.

``additionalData.hmacSignature``: base64 of HMAC-SHA256, keyed with the bytes of the hex HMAC key, of
``pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success``
(absent fields as empty strings; docs.adyen.com/development-resources/webhooks/secure-webhooks/
verify-hmac-signatures). HTTP basic auth when a user name is configured. Only a 2xx whose body is
``[accepted]`` is an acknowledgement.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
from collections.abc import Callable, Mapping
from datetime import date, datetime, timedelta, tzinfo
from urllib.parse import quote

from psp_adapters.protocol import Secret
from psp_adapters.sandbox import adyen_report
from psp_adapters.sandbox.adyen_wire import brand, needs_action, psp_reference, refusal
from psp_adapters.sandbox.movements import DISPUTE_WON, REFUND_FAILED, Adjustment
from psp_adapters.sandbox.records import PaymentRecord
from psp_adapters.sandbox.webhook_events import JSON_HEADER, Change, Notification, compact
from psp_adapters.sandbox.wire import PaymentStatus

_ADYEN_AGENT = "Adyen HttpClient 1.0"
#: a modification's kind -> the event code that tells its outcome
MODIFICATION_EVENTS = {"capture": "CAPTURE", "cancel": "CANCELLATION", "refund": "REFUND",
                       "reversal": "CANCEL_OR_REFUND"}


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
        found = [JSON_HEADER, ("User-Agent", _ADYEN_AGENT)]
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
        record = change.record
        if record is None and change.kind == "report_available" and change.document is not None:
            account, name = str(change.document["merchantAccount"]), str(change.document["fileName"])
            return [self._message(self._announcement(account, name))]
        if record is None or record.flavor != "adyen":
            return []
        item = self._event(change, record)
        if item is None:
            return []  # Received (pending) or RedirectShopper: Adyen notifies once the outcome is known
        found = [self._message(item)]
        adjustment = change.adjustment
        if change.kind == "dispute" and adjustment is not None and adjustment.metadata.get("notify_first"):
            found.insert(0, self._message(self._notified(record, adjustment)))
        announcement = self._report_available(record, change)
        return [*found, self._message(announcement)] if announcement else found

    def _event(self, change: Change, record: PaymentRecord) -> dict[str, object] | None:
        adjustment, modification, kind = change.adjustment, change.modification, change.kind
        original: dict[str, object] = {"originalReference": record.psp_reference}
        if modification is not None and kind == "modification_refused":
            code = MODIFICATION_EVENTS[modification.kind]
            fields = {**original, "reason": modification.outcome}
            return self._item(record, code, modification.due_at, modification.id, modification.amount, False, fields)
        if modification is not None and modification.kind == "reversal":
            action = "refund" if kind == "refund" else "cancel"
            fields = {**original, "additionalData": {"modification.action": action}}
            return self._item(record, "CANCEL_OR_REFUND", modification.due_at, modification.id, None, True, fields)
        if modification is not None and kind == "capture_failed":  # informational: success is "true"
            fields = {**original, "reason": modification.reason}
            return self._item(record, "CAPTURE_FAILED", record.updated_at, modification.id, modification.amount,
                              True, fields)
        if modification is not None and kind in ("captured", "canceled"):
            code = "CAPTURE" if kind == "captured" else "CANCELLATION"
            return self._item(record, code, modification.due_at, modification.id, modification.amount, True, original)
        if adjustment is not None and kind == "dispute_updated":
            return self._dispute_decided(record, adjustment, original)
        if adjustment is not None and kind in ("refund", "refund_updated", "dispute"):
            failed = adjustment.status == REFUND_FAILED
            reversed_ = failed and adjustment.metadata.get("reversed") == "true"
            code = ("CHARGEBACK" if kind == "dispute" else "REFUNDED_REVERSED" if reversed_
                    else "REFUND_FAILED" if failed else "REFUND")
            fields = {**original, "reason": adjustment.reason if kind == "dispute" else adjustment.failure_reason}
            at = adjustment.updated_at if failed and adjustment.updated_at else adjustment.created_at
            return self._item(record, code, at, adjustment.id, adjustment.amount, True, fields)
        return self._status_event(kind, record, original)

    def _dispute_decided(self, record: PaymentRecord, adjustment: Adjustment,
                         original: dict[str, object]) -> dict[str, object] | None:
        """A dispute won: CHARGEBACK_REVERSED; lost after it was won: SECOND_CHARGEBACK; lost at once: nothing (the
        chargeback stands)."""
        if adjustment.status == DISPUTE_WON:
            code = "CHARGEBACK_REVERSED"
        elif adjustment.metadata.get("won_at"):
            code = "SECOND_CHARGEBACK"
        else:
            return None
        at = adjustment.updated_at or adjustment.created_at
        return self._item(record, code, at, adjustment.id, adjustment.amount, True,
                          {**original, "reason": adjustment.reason})

    def _notified(self, record: PaymentRecord, adjustment: Adjustment) -> dict[str, object]:
        """NOTIFICATION_OF_CHARGEBACK: the issuer's notice, with the defence period's end (``additionalData
        defensePeriodEndsAt``, the dispute's evidence deadline: 21 days, as the Stripe flavour's)."""
        due = (adjustment.created_at + timedelta(days=21)).astimezone(self._zone).isoformat(timespec="seconds")
        return self._item(record, "NOTIFICATION_OF_CHARGEBACK", adjustment.created_at, adjustment.id,
                          adjustment.amount, True, {"originalReference": record.psp_reference,
                                                    "reason": adjustment.reason,
                                                    "additionalData": {"defensePeriodEndsAt": due}})

    def _status_event(self, kind: str, record: PaymentRecord, original: dict[str, object]) -> dict[str, object] | None:
        if kind == "expired":
            return self._item(record, "EXPIRE", record.updated_at, psp_reference(), None, True, original)
        if record.status is PaymentStatus.CANCELED:
            return self._item(record, "CANCELLATION", record.updated_at, psp_reference(), None, True, original)
        authorised = record.status in (PaymentStatus.SUCCEEDED, PaymentStatus.AUTHORIZED)
        if kind not in ("created", "captured") and (
            authorised or (record.status is PaymentStatus.FAILED and not needs_action(record))
        ):
            fields: dict[str, object] = {} if authorised else {"reason": refusal(record)[1]}
            at = record.authorized_at or _booked(record)
            return self._item(record, "AUTHORISATION", at, record.psp_reference, None, authorised, fields)
        return None

    def _item(
        self,
        record: PaymentRecord,
        code: str,
        at: datetime,
        reference: str,
        amount: int | None,
        success: bool,
        fields: Mapping[str, object],
    ) -> dict[str, object]:
        item: dict[str, object] = {
            "amount": {"currency": record.currency, "value": record.amount if amount is None else amount},
            "eventCode": code,
            "eventDate": at.astimezone(self._zone).isoformat(timespec="seconds"),
            "merchantAccountCode": record.merchant_account or "",
            "merchantReference": record.merchant_reference,
            "paymentMethod": brand(record),
            "pspReference": reference,
            "success": "true" if success else "false",
        }
        item.update({name: value for name, value in fields.items() if value is not None})
        return item

    def _report_available(self, record: PaymentRecord, change: Change) -> dict[str, object] | None:
        at = _booked(record)
        if change.modification is not None:
            at = change.modification.due_at
        elif change.adjustment is not None:
            at = change.adjustment.updated_at or change.adjustment.created_at
        day = at.astimezone(self._zone).date()
        account = record.merchant_account or ""
        with self._lock:
            if (account, day) in self._announced:
                return None
            self._announced.add((account, day))
        return self._announcement(account, adyen_report.file_name(day))

    def _announcement(self, account: str, name: str) -> dict[str, object]:
        """``REPORT_AVAILABLE`` for the report ``name`` of ``account``."""
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
        extra = item.pop("additionalData", {})
        additional = {**(extra if isinstance(extra, Mapping) else {}),
                      "hmacSignature": adyen_hmac_signature(item, self._key)}
        signed = {**item, "additionalData": additional}
        body = {"live": "false", "notificationItems": [{"NotificationRequestItem": signed}]}
        event_id = f"{item['pspReference']}:{item['eventCode']}:{item['success']}"
        about = str(item.get("originalReference", item["pspReference"]))
        return Notification(event_id, str(item["eventCode"]), about, compact(body))


def _booked(record: PaymentRecord) -> datetime:
    return record.settled_at or record.updated_at
