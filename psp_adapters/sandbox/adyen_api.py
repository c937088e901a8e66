"""The Adyen flavour: Checkout API v71 and v72 side by side, and the Payment accounting report, as Adyen documents
them.

Auth: ``X-API-Key`` (docs.adyen.com/development-resources/api-credentials) when the server has an api key; the
report download authenticates the report user instead (HTTP basic ``report@Company.X``:password, or its own
``X-API-Key``; docs.adyen.com/reporting/download-reports-automatically). Errors: Adyen's ServiceError
``{"status", "errorCode", "message", "errorType"[, "pspReference"]}`` (docs.adyen.com/development-resources/
error-codes; the OpenAPI documents' examples)::

    POST /{v71|v72}/payments, /payments/details, /paymentMethods            (adyen_checkout)
    POST /{v71|v72}/payments/{pspReference}/captures|cancels|refunds|reversals   (adyen_modifications)
    GET  /reports/download/MerchantAccount/{merchantAccount}/payments_accounting_report_YYYY_MM_DD.csv
                                           200 text/csv (``adyen_report``) | 404 unknown account or future day
    GET  /reports/download/MerchantAccount/{merchantAccount}/settlement_detail_report_batch_N.csv
                                           200 text/csv (``adyen_settlement``) | 404 no such closed batch

Every POST is a write: idempotent by key. Injected 500/503 are ``errorType: internal`` with ``Transient-Error:
true`` (the idempotency page: such an error may be retried later with the same key; without the header the
answer is the key's final one); a 429 has the same shape, and ``Retry-After`` from the fault (a sandbox choice:
the codes of Adyen's 429/500/503 bodies are not documented where I could read them, so they are "000").

Idempotency (docs.adyen.com/development-resources/api-idempotency): ``Idempotency-Key`` optional, at most 64
characters; the response echoes it. Keys are scoped per company account (one per sandbox server, whatever the
api key) and kept 31 days by the server's clock (the page's current minimum; older versions said 7 days). A
key already processed returns the first response again; Adyen documents no comparison of the bodies, so none is
made. The same key while the first request is in progress is HTTP 422, errorCode 704 "request already processed
or in progress", with ``Transient-Error: true`` (retry later with the same key). Nothing is saved for a
validation failure or an injected error (Adyen marks those transient), so the key can be retried.

An authorisation never captured expires after ``authorization_validity`` (28 days): the report's ``Expired``
and an ``EXPIRE`` webhook.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from urllib.parse import unquote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from psp_adapters.protocol import Secret
from psp_adapters.sandbox import adyen_checkout, adyen_modifications, adyen_report, adyen_settlement
from psp_adapters.sandbox.adyen_wire import adyen_error, amount_of, payment_response, psp_reference
from psp_adapters.sandbox.bank_credits import BankCredit
from psp_adapters.sandbox.core import IdempotencyPolicy, Request, Response, Scope, WriteCall
from psp_adapters.sandbox.ledger import Ledger
from psp_adapters.sandbox.movements import Adjustment
from psp_adapters.sandbox.records import PaymentRecord

#: the Checkout API versions served side by side (the same endpoints; v72 bounds ``returnUrl`` to 1,024 characters)
CHECKOUT_VERSIONS = ("v71", "v72")
_CHECKOUT = re.compile(
    r"^/(?P<version>v71|v72)/(?:(?P<call>payments|payments/details|paymentMethods)|"
    r"payments/(?P<payment>[A-Za-z0-9]+)/(?P<modification>captures|cancels|refunds|reversals))$"
)
_REPORT_PATH = re.compile(
    r"^/reports/download/MerchantAccount/(?P<account>[^/]+)/payments_accounting_report_"
    r"(?P<y>\d{4})_(?P<m>\d{2})_(?P<d>\d{2})\.csv$"
)
_SETTLEMENT_PATH = re.compile(
    r"^/reports/download/MerchantAccount/(?P<account>[^/]+)/settlement_detail_report_batch_(?P<batch>[1-9][0-9]{0,8})"
    r"\.csv$"
)
_TRANSIENT = (("Transient-Error", "true"),)
#: generic error kinds (``core``) -> (HTTP status, errorCode, errorType, message, headers)
_KINDS: dict[str, tuple[int, str, str, str, tuple[tuple[str, str], ...]]] = {
    "unauthorized": (401, "000", "security", "HTTP Status Response - Unauthorized", ()),
    "not_found": (404, "000", "validation", "HTTP Status Response - Not Found", ()),
    "forbidden": (403, "010", "security", "Not allowed", ()),
    "method_not_allowed": (405, "000", "validation", "HTTP Status Response - Method Not Allowed", ()),
    "rate_limited": (429, "000", "internal", "Too Many Requests", ()),
    "internal_error": (500, "000", "internal", "Internal error", _TRANSIENT),
    "service_unavailable": (503, "000", "internal", "Service Unavailable", _TRANSIENT),
    "bad_request": (400, "702", "validation", "Unexpected input", ()),
    "idempotency_key_invalid": (422, "702", "validation", "Idempotency-Key is longer than 64 characters", ()),
    "idempotency_in_flight": (422, "704", "validation", "request already processed or in progress", _TRANSIENT),
}


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
    #: an uncaptured authorisation expires this long after it was made (the schemes' common validity)
    authorization_validity = timedelta(days=28)

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

    def writes(self, req: Request) -> bool:
        return req.method == "POST" and not req.path.startswith("/reports/")

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

    def parse_write(self, req: Request) -> WriteCall | Response:
        match = _CHECKOUT.match(req.path)
        if match is None:
            return self.error("not_found")
        try:
            payload = json.loads(req.body or b"null")
        except ValueError:
            return self.error("bad_request", "Unexpected input: the body is not JSON")
        if not isinstance(payload, Mapping):
            return self.error("bad_request", "Unexpected input: the body must be a JSON object")
        if match["modification"]:
            kind = adyen_modifications.KINDS[match["modification"]]
            return adyen_modifications.receive(payload, kind=kind, payment=match["payment"])
        if match["call"] == "payments/details":
            return adyen_checkout.details(payload)
        if match["call"] == "paymentMethods":
            return adyen_checkout.payment_methods(payload)
        host = req.headers.get("Host") or "127.0.0.1"
        return adyen_checkout.payments(payload, version=match["version"], host=host)

    def tick(self, scope: Scope) -> None:
        """Process the modifications that fell due."""
        adyen_modifications.process_due(scope)

        adyen_settlement.tick(self._ledger, scope, self._zone)

    def fail_payout(self, scope: Scope, payout_id: str, code: str) -> object | str:
        return "resource_missing"  # a settlement batch does not fail in the sandbox

    def run_payouts(self, scope: Scope) -> list[object]:
        return list(adyen_settlement.close_now(self._ledger, scope, self._zone))

    def bank_credits(self, since: date, until: date) -> list[BankCredit]:
        return adyen_settlement.bank_credits(self._ledger, since, until, now=self._now(), zone=self._zone)

    # -- reports -------------------------------------------------------------------------------------------

    def route(self, req: Request) -> Response:
        settlement = _SETTLEMENT_PATH.match(req.path)
        if settlement is not None:
            return self._settlement_report(unquote(settlement["account"]), int(settlement["batch"]))
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
        modifications = {p.psp_reference: self._ledger.modifications_of(p.psp_reference)
                         for p in payments if p.capture_method == "manual"}
        text = adyen_report.render(
            payments, adjustments, start=start, end=end, zone=self._zone, company_account=self._company,
            modifications=modifications,
        )
        disposition = ("Content-Disposition", f'attachment; filename="{adyen_report.file_name(day)}"')
        return Response(200, text.encode(), (disposition,), content_type="text/csv; charset=utf-8")

    def _settlement_report(self, account: str, number: int) -> Response:
        name = adyen_settlement.file_name(number)
        stored = adyen_settlement.batch(self._ledger, account, number)
        if stored is None:
            return self.error("not_found", f"No report {name} for {account}")
        text = adyen_settlement.render(self._ledger, stored, zone=self._zone, company_account=self._company)
        disposition = ("Content-Disposition", f'attachment; filename="{name}"')
        return Response(200, text.encode(), (disposition,), content_type="text/csv; charset=utf-8")

    # -- admin renderings ----------------------------------------------------------------------------------

    def render_payment(self, record: PaymentRecord) -> object:
        return {**payment_response(record), "merchantAccount": record.merchant_account}

    def adjustment_id(self, kind: str) -> str:
        return psp_reference()

    def render_adjustment(self, adjustment: Adjustment, record: PaymentRecord) -> object:
        """A refund like Checkout's ``/payments/{ref}/refunds`` answer; a dispute like a CHARGEBACK webhook."""
        doc: dict[str, object] = {
            "merchantAccount": record.merchant_account,
            "paymentPspReference": record.psp_reference,
            "pspReference": adjustment.id,
            "amount": amount_of(adjustment.amount, adjustment.currency),
        }
        if adjustment.kind == "refund":
            doc["status"] = "received"
        else:
            doc["eventCode"] = "CHARGEBACK"
            doc["reason"] = adjustment.reason
        return doc
