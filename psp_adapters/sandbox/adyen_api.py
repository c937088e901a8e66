"""The Adyen flavour: Checkout API v71 and v72 ``/payments`` and the Payment accounting report, as Adyen documents
them.

Auth: ``X-API-Key`` (docs.adyen.com/development-resources/api-credentials) when the server has an api key; the
report download authenticates the report user instead (HTTP basic ``report@Company.X``:password, or its own
``X-API-Key``; docs.adyen.com/reporting/download-reports-automatically). Errors: Adyen's ServiceError
``{"status", "errorCode", "message", "errorType"[, "pspReference"]}`` (docs.adyen.com/development-resources/
error-codes; the v71 OpenAPI document's examples).

    POST /v71/payments, /v72/payments      PaymentRequest (each version's schema; required: amount{value,
                                           currency}, merchantAccount, paymentMethod, reference, returnUrl) -> 200
                                           PaymentResponse | 422 validation error | 400 unreadable JSON
    GET  /reports/download/MerchantAccount/{merchantAccount}/payments_accounting_report_YYYY_MM_DD.csv
                                           200 text/csv (``adyen_report``) | 404 unknown account or future day

Result codes (docs.adyen.com/online-payments/payment-result-codes): ``Authorised``; a decline is HTTP 200
``Refused`` with ``refusalReason`` and ``refusalReasonCode`` (docs.adyen.com/development-resources/
refusal-reasons); slow settlement is ``Received`` (the final result reaches the books, and so the report,
later); ``rate_requires_action`` is ``RedirectShopper`` with a ``redirect`` action, as for 3-D Secure
(the v71 example "card-3d-secure-redirect"). Missing required fields: 422 ``validation`` with 100 (amount),
702 "Required field '…' is null" (merchantAccount, paymentMethod), 130 (reference), 14_030 (returnUrl).
Injected 500/503 are ``errorType: internal`` with ``Transient-Error: true`` (the idempotency page: such an
error may be retried later with the same key; without the header the answer is the key's final one); a 429 has
the same shape, and ``Retry-After`` from the fault (a sandbox choice: the codes of Adyen's 429/500/503 bodies
are not documented where I could read them, so they are "000").

Idempotency (docs.adyen.com/development-resources/api-idempotency): ``Idempotency-Key`` optional, at most 64
characters; the response echoes it. Keys are scoped per company account (one per sandbox server, whatever the
api key) and kept 31 days by the server's clock (the page's current minimum; older versions said 7 days). A
key already processed returns the first response again; Adyen documents no comparison of the bodies, so none is
made. The same key while the first request is in progress is HTTP 422, errorCode 704 "request already processed
or in progress", with ``Transient-Error: true`` (retry later with the same key). Nothing is saved for a
validation failure or an injected error (Adyen marks those transient), so the key can be retried.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from urllib.parse import unquote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from psp_adapters.protocol import ChargeRequest, Secret
from psp_adapters.sandbox import adyen_report
from psp_adapters.sandbox.core import CreateCall, IdempotencyPolicy, Request, Response, json_response
from psp_adapters.sandbox.faults import AUTHENTICATION_REQUIRED
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.records import Adjustment, PaymentRecord, random_id
from psp_adapters.sandbox.wire import PENDING_FAILURE_REASON, PaymentStatus, request_digest

_PSP_ALPHABET = string.ascii_uppercase + string.digits
#: the Checkout API versions served side by side (the same endpoints; v72 bounds ``returnUrl`` to 1,024 characters)
CHECKOUT_VERSIONS = ("v71", "v72")
_RETURN_URL_MAX = {"v71": 8000, "v72": 1024}
_REPORT_PATH = re.compile(
    r"^/reports/download/MerchantAccount/(?P<account>[^/]+)/payments_accounting_report_"
    r"(?P<y>\d{4})_(?P<m>\d{2})_(?P<d>\d{2})\.csv$"
)
#: a declined payment's reason -> (refusalReasonCode, refusalReason)
_REFUSALS = {
    "card_declined": ("2", "Refused"),
    "insufficient_funds": ("12", "Not enough balance"),
    "expired_card": ("6", "Expired Card"),
    PENDING_FAILURE_REASON: ("2", "Refused"),
}
_TRANSIENT = (("Transient-Error", "true"),)
#: generic error kinds (``core``) -> (HTTP status, errorCode, errorType, message, headers)
_KINDS: dict[str, tuple[int, str, str, str, tuple[tuple[str, str], ...]]] = {
    "unauthorized": (401, "000", "security", "HTTP Status Response - Unauthorized", ()),
    "not_found": (404, "000", "validation", "HTTP Status Response - Not Found", ()),
    "method_not_allowed": (405, "000", "validation", "HTTP Status Response - Method Not Allowed", ()),
    "rate_limited": (429, "000", "internal", "Too Many Requests", ()),
    "internal_error": (500, "000", "internal", "Internal error", _TRANSIENT),
    "service_unavailable": (503, "000", "internal", "Service Unavailable", _TRANSIENT),
    "bad_request": (400, "702", "validation", "Unexpected input", ()),
    "idempotency_key_invalid": (422, "702", "validation", "Idempotency-Key is longer than 64 characters", ()),
    "idempotency_in_flight": (422, "704", "validation", "request already processed or in progress", _TRANSIENT),
}


def adyen_error(
    status: int, code: str, kind: str, message: str, *headers: tuple[str, str], psp_reference: str | None = None
) -> Response:
    """Adyen's ServiceError body."""
    body: dict[str, object] = {"status": status, "errorCode": code, "message": message, "errorType": kind}
    if psp_reference is not None:
        body["pspReference"] = psp_reference
    return json_response(status, body, *headers)


def psp_reference() -> str:
    """A 16-character Adyen pspReference."""
    return random_id("", 16, alphabet=_PSP_ALPHABET)


@dataclass(frozen=True, slots=True)
class ReportCredentials:
    """The report user the report download accepts; nothing configured: any request."""

    username: str | None = None
    password: bytes | None = None
    api_key: bytes | None = None

    @classmethod
    def of(cls, username: str | None, password: Secret | str | None, api_key: Secret | str | None) -> ReportCredentials:
        def raw(value: Secret | str | None) -> bytes | None:
            text = value.reveal() if isinstance(value, Secret) else value
            return text.encode() if text else None

        return cls(username or None, raw(password), raw(api_key))

    def accepts(self, req: Request) -> bool:
        if self.username is None and self.api_key is None:
            return True
        key = req.headers.get("X-API-Key")
        if key and self.api_key is not None and hmac.compare_digest(key.encode(), self.api_key):
            return True
        scheme, _, token = (req.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "basic" or self.username is None or self.password is None:
            return False
        try:
            user, _, password = base64.b64decode(token.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return hmac.compare_digest(user.encode(), self.username.encode()) & hmac.compare_digest(
            password.encode(), self.password
        )


class AdyenFlavor:
    """Adyen's wire (see the module docstring)."""

    name = "adyen"
    idempotency = IdempotencyPolicy(
        required=False,
        max_length=64,
        retention=timedelta(days=31),
        compares_body=False,
        saves_server_errors=False,
        scope="adyen:",
    )
    create_paths = frozenset(f"/{version}/payments" for version in CHECKOUT_VERSIONS)

    def __init__(
        self,
        ledger: Ledger,
        *,
        api_key: bytes | None,
        now_func: Callable[[], datetime],
        report: ReportCredentials,
        timezone: str,
        company_account: str,
    ) -> None:
        self._ledger = ledger
        self._api_key = api_key
        self._now = now_func
        self._report = report
        self._zone = ZoneInfo(timezone)
        self._company = company_account

    @staticmethod
    def check_timezone(name: str) -> str:
        """``name`` if it is an IANA time zone; raises ValueError otherwise."""
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {name!r}") from exc
        return name

    def serves(self, path: str) -> bool:
        return path.startswith((*(f"/{version}/" for version in CHECKOUT_VERSIONS), "/reports/download/"))

    def authorized(self, req: Request) -> bool:
        if req.path.startswith("/reports/"):
            return self._report.accepts(req)
        if self._api_key is None:
            return True
        return hmac.compare_digest((req.headers.get("X-API-Key") or "").encode(), self._api_key)

    def error(
        self, kind: str, message: str | None = None, *, retry_after: int | None = None, saved: bool = False
    ) -> Response:
        status, code, type_, default, headers = _KINDS.get(kind, _KINDS["internal_error"])
        extra = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
        return adyen_error(status, code, type_, message or default, *headers, *extra)

    def replay_headers(self, status: int) -> tuple[tuple[str, str], ...]:
        return ()

    def decorate(self, req: Request, response: Response) -> Response:
        key = req.headers.get("Idempotency-Key")
        if req.method == "POST" and key:
            return response._replace(headers=(*response.headers, ("Idempotency-Key", key)))
        return response

    # -- /payments -----------------------------------------------------------------------------------------

    def parse_create(self, req: Request, key: str | None) -> CreateCall | Response:
        try:
            payload = json.loads(req.body or b"null")
        except ValueError:
            return self.error("bad_request", "Unexpected input: the body is not JSON")
        if not isinstance(payload, Mapping):
            return self.error("bad_request", "Unexpected input: the body must be a JSON object")
        problem = _validate(payload, version=req.path.split("/")[1])
        if problem is not None:
            code, message = problem
            return adyen_error(422, code, "validation", message, psp_reference=psp_reference())
        amount, method = payload["amount"], payload["paymentMethod"]
        method_type = str(method.get("type", "scheme"))
        token = method.get("storedPaymentMethodId") or method.get("recurringDetailReference") or method_type
        metadata = payload.get("metadata")
        charge = ChargeRequest(
            merchant_reference=payload["reference"],
            amount=amount["value"],
            currency=amount["currency"],
            merchant_account=payload["merchantAccount"],
            payment_method=token if isinstance(token, str) else None,
            customer_reference=_text(payload.get("shopperReference")),
            description=_text(payload.get("shopperStatement")),
        )
        return CreateCall(
            key=key,
            fingerprint=request_digest(payload),
            charge=charge,
            psp_reference=psp_reference(),
            metadata={str(k): str(v) for k, v in metadata.items()} if isinstance(metadata, Mapping) else {},
            context={"host": req.headers.get("Host") or "127.0.0.1", "method_type": method_type},
        )

    def render_create(self, call: CreateCall, record: PaymentRecord) -> Response:
        return json_response(200, self._payment_response(record, call.context))

    def _payment_response(self, record: PaymentRecord, context: Mapping[str, str]) -> dict[str, object]:
        """A PaymentResponse (the same schema in v71 and v72) for the payment as it is now."""
        action = needs_action(record)
        doc: dict[str, object] = {
            "pspReference": record.psp_reference,
            "resultCode": "RedirectShopper" if action else _RESULT_CODES[record.status],
            "merchantReference": record.merchant_reference,
            "amount": {"currency": record.currency, "value": record.amount},
        }
        if record.status is PaymentStatus.SUCCEEDED:
            doc["paymentMethod"] = {"type": context.get("method_type", "scheme"), "brand": "visa"}
        elif action:
            doc["action"] = {
                "paymentMethodType": context.get("method_type", "scheme"),
                "method": "GET",
                "type": "redirect",
                "url": f"http://{context.get('host', '127.0.0.1')}/checkoutshopper/threeDS/redirect"
                f"?MD={record.psp_reference}",
            }
        elif record.status is PaymentStatus.FAILED:
            code, reason = refusal(record)
            doc["refusalReason"], doc["refusalReasonCode"] = reason, code
        return doc

    # -- reports -------------------------------------------------------------------------------------------

    def route(self, req: Request) -> Response:
        match = _REPORT_PATH.match(req.path)
        if match is None:
            return self.error("not_found")
        account = unquote(match["account"])
        try:
            day = date(int(match["y"]), int(match["m"]), int(match["d"]))
        except ValueError:
            return self.error("not_found")
        if day > self._now().astimezone(self._zone).date() or not self._ledger.has_account(account, flavor=self.name):
            return self.error("not_found", f"No report {adyen_report.file_name(day)} for {account}")
        start, end = adyen_report.day_window(day, self._zone)
        payments = self._ledger.account_payments(account, flavor=self.name, before=end)
        adjustments = self._ledger.adjustments_of([p.psp_reference for p in payments])
        text = adyen_report.render(
            payments, adjustments, start=start, end=end, zone=self._zone, company_account=self._company
        )
        disposition = ("Content-Disposition", f'attachment; filename="{adyen_report.file_name(day)}"')
        return Response(200, text.encode(), (disposition,), content_type="text/csv; charset=utf-8")

    # -- admin renderings ----------------------------------------------------------------------------------

    def render_payment(self, record: PaymentRecord) -> object:
        return {**self._payment_response(record, {}), "merchantAccount": record.merchant_account}

    def adjustment_id(self, kind: str) -> str:
        return psp_reference()

    def render_adjustment(self, adjustment: Adjustment, record: PaymentRecord) -> object:
        """A refund like Checkout's ``/payments/{ref}/refunds`` answer; a dispute like a CHARGEBACK webhook."""
        doc: dict[str, object] = {
            "merchantAccount": record.merchant_account,
            "paymentPspReference": record.psp_reference,
            "pspReference": adjustment.id,
            "amount": {"currency": adjustment.currency, "value": adjustment.amount},
        }
        if adjustment.kind == "refund":
            doc["status"] = "received"
        else:
            doc["eventCode"] = "CHARGEBACK"
            doc["reason"] = adjustment.reason
        return doc


_RESULT_CODES = {
    PaymentStatus.SUCCEEDED: "Authorised",
    PaymentStatus.PENDING: "Received",
    PaymentStatus.FAILED: "Refused",
    PaymentStatus.CANCELED: "Cancelled",
}


def refusal(record: PaymentRecord) -> tuple[str, str]:
    """(refusalReasonCode, refusalReason) of a refused payment (also a refused AUTHORISATION webhook's reason)."""
    return _REFUSALS.get(record.failure_reason or "", ("2", "Refused"))


def needs_action(record: PaymentRecord) -> bool:
    """A payment waiting for the shopper to authenticate (booked as a failed attempt with that reason)."""
    return record.status is PaymentStatus.FAILED and record.failure_reason == AUTHENTICATION_REQUIRED


def _validate(payload: Mapping[str, object], *, version: str) -> tuple[str, str] | None:
    """(errorCode, message) of the first problem with a PaymentRequest's required fields, else None."""
    amount = payload.get("amount")
    if not isinstance(amount, Mapping) or "value" not in amount:
        return "100", "No amount specified"
    value, currency = amount.get("value"), amount.get("currency")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return "137", "Invalid amount specified"
    if not isinstance(currency, str) or len(currency) != 3 or not currency.isalpha() or not currency.isupper():
        return "137", "Invalid currency specified"
    account = payload.get("merchantAccount")
    if not isinstance(account, str) or not account:
        return "702", "Required field 'merchantAccount' is null"
    method = payload.get("paymentMethod")
    if not isinstance(method, Mapping) or not isinstance(method.get("type", "scheme"), str):
        return "702", "Required field 'paymentMethod' is null"
    reference = payload.get("reference")
    if not isinstance(reference, str) or not reference:
        return "130", "Required field 'reference' is not provided."
    if len(reference) > 80:
        return "702", "Field 'reference' is longer than 80 characters"
    if not isinstance(payload.get("returnUrl"), str) or not payload["returnUrl"]:
        return "14_030", "Return URL is missing."
    if len(payload["returnUrl"]) > _RETURN_URL_MAX[version]:
        return "702", f"Field 'returnUrl' is longer than {_RETURN_URL_MAX[version]} characters"
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
