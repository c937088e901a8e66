"""The Adyen adapter: Checkout API v71 for charges, the daily Payment accounting report for everything after.

How Adyen tells status, and what this adapter does about it:

- ``POST {base_url}/v71/payments`` (JSON, ``X-API-Key``, ``Idempotency-Key``; keys kept at least 31 days)
  answers with a ``resultCode``. A refusal is HTTP 200 with ``resultCode: Refused``, a decline like any other.
- Checkout has no endpoint to read a payment back. Adyen's own channels are the standard webhooks
  (AUTHORISATION, CAPTURE, …), pushed to us, and the reports. recon's protocol is pull-based, so
  ``fetch_payment`` reads the daily **Payment accounting report**
  (``payments_accounting_report_YYYY_MM_DD.csv``, one journal row per lifecycle event: Received, Authorised,
  SentForSettle, Settled, Refused, …),
  downloaded from ``{report_base_url}/reports/download/MerchantAccount/{account}/{file}`` with the API key
  of a report user (``X-API-Key``). It walks back from today over ``lookback_days`` files, newest first, and
  the first file that mentions the payment answers (newer files hold newer events).
- Reports are generated once a day (early morning CET, in the account's time zone), so today's events are
  not in any file yet. A payment absent from every available file is therefore **Pending**, never
  NotFound: absence here is not proof that Adyen never saw it. recon snoozes a Pending payment on its sync
  schedule and sends it to ``needs_review`` at the end, never to ``failed``. A file that does not exist yet
  (HTTP 404) is skipped.
- ``iter_settlements`` reads the same daily files, one download per day, as iterated, and yields the
  settlement events (Settled, Refunded, Chargeback, and failed payments) booked inside the window.

Cost: ``fetch_payment`` downloads up to ``lookback_days + 1`` report files. A deployment that receives
Adyen webhooks should answer ``fetch_payment`` from them instead; this adapter is the fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from datetime import date, datetime, timedelta
from types import TracebackType
from typing import ClassVar
from urllib.parse import quote
from zoneinfo import ZoneInfo

import httpx

from psp_adapters.adyen import report, wire
from psp_adapters.adyen.wire import API_VERSION, PSP_NAME
from psp_adapters.errors import PspError, PspProtocolError
from psp_adapters.http import (
    DEFAULT_TIMEOUT,
    error_from_response,
    json_body,
    make_client,
    system_now,
    transport_errors,
)
from psp_adapters.protocol import ChargeRequest, PaymentOutcome, Pending, PspRef, Secret, SettlementLine

#: Adyen's test endpoints. Live Checkout needs the merchant's own prefix URL
#: (``https://{PREFIX}-checkout-live.adyenpayments.com/checkout``) and live reports ``https://ca-live.adyen.com``;
#: both come from settings, never from code.
DEFAULT_BASE_URL = "https://checkout-test.adyen.com"
DEFAULT_REPORT_BASE_URL = "https://ca-test.adyen.com"
LOOKBACK_DAYS_DEFAULT = 7


class AdyenAdapter:
    """recon's view of Adyen (see the module docstring for how status is learned).

    Raises only PspError subclasses from its methods (ValueError from the constructor on bad settings).
    API keys are held only in the clients' headers and never appear in a message or a repr.
    """

    name: ClassVar[str] = PSP_NAME
    #: Adyen keeps a key for a minimum of 7 days (docs.adyen.com/development-resources/api-idempotency)
    idempotency_retention: ClassVar[timedelta | None] = timedelta(days=7)

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: Secret,
        merchant_account: str,
        report_base_url: str = DEFAULT_REPORT_BASE_URL,
        report_api_key: Secret | None = None,
        report_timezone: str = "UTC",
        lookback_days: int = LOOKBACK_DAYS_DEFAULT,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        now_func: Callable[[], datetime] = system_now,
    ) -> None:
        if not api_key:
            raise ValueError("adyen: api_key is required")
        if not merchant_account:
            raise ValueError("adyen: merchant_account is required")
        if lookback_days < 0:
            raise ValueError("adyen: lookback_days must be >= 0")
        report_key = report_api_key or api_key
        self._base_url = base_url
        self._merchant_account = merchant_account
        self._tz = ZoneInfo(report_timezone)  # the account's time zone setting: the reports' day boundaries
        self._lookback_days = lookback_days
        self._now_func = now_func
        self._secrets = (api_key.reveal(), report_key.reveal())
        self._client = make_client(
            base_url, headers={"X-API-Key": api_key.reveal()}, timeout=timeout, transport=transport
        )
        self._reports = make_client(
            report_base_url, headers={"X-API-Key": report_key.reveal()}, timeout=timeout, transport=transport
        )

    def __repr__(self) -> str:
        return f"AdyenAdapter(base_url={self._base_url!r}, merchant_account={self._merchant_account!r})"

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        """``POST /v71/payments``; ``idempotency_key`` (at most 64 characters) in ``Idempotency-Key``.

        Returns the outcome of the ``resultCode`` (Refused -> Failed with ``refusalReason``). Raises
        PspUnknownOutcome when the request may have reached Adyen but no answer came back, and a
        PspTransientError for error 704 (the same key still in flight), honouring ``Transient-Error``.
        """
        body = wire.payment_body(request, merchant_account=self._merchant_account)
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=True):
            response = self._client.post(
                f"/{API_VERSION}/payments", json=body, headers={"Idempotency-Key": idempotency_key}
            )
        if not response.is_success:
            raise self._error(response)
        return wire.payment_to_outcome(json_body(response, psp=PSP_NAME), request=request)

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        """The payment's latest status in the Payment accounting reports of the last ``lookback_days`` days.

        Returns Pending (``raw_status=None``) when no available report mentions it: see the module docstring.
        """
        today = self._now_func().astimezone(self._tz).date()
        for offset in range(self._lookback_days + 1):
            rows = self._report(today - timedelta(days=offset))
            matching = [row for row in rows or () if report.row_matches(row, ref)]
            if matching:
                return wire.report_outcome(matching)
        return Pending(psp_reference=ref.psp_reference, merchant_reference=ref.merchant_reference)

    def iter_settlements(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[SettlementLine]:
        """Settlement events booked in ``[since, until)``, one daily report downloaded per day as iterated.

        ``since`` and ``until`` must be aware (ValueError otherwise, raised at once). A payment may appear
        more than once, once per event (settled, then refunded on a later day).
        """
        if since.tzinfo is None or until.tzinfo is None:
            raise ValueError("since and until must be aware datetimes")
        return self._settlement_days(since, until)

    def close(self) -> None:
        """Close both HTTP clients; the adapter is unusable afterwards."""
        self._client.close()
        self._reports.close()

    def __enter__(self) -> AdyenAdapter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _settlement_days(self, since: datetime, until: datetime) -> Iterator[SettlementLine]:
        day = since.astimezone(self._tz).date()
        last = (until - timedelta(microseconds=1)).astimezone(self._tz).date()
        while day <= last:
            for row in self._report(day) or ():
                status = wire.settlement_status(row.record_type)
                if status is not None and since <= row.booked_at < until:
                    yield wire.to_settlement_line(row, status=status)
            day += timedelta(days=1)

    def _report(self, day: date) -> list[report.ReportRow] | None:
        """One day's report rows, or None when Adyen has not generated that file (yet)."""
        path = (
            f"/reports/download/MerchantAccount/{quote(self._merchant_account, safe='')}/"
            f"{report.report_file_name(day)}"
        )
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=False):
            response = self._reports.get(path)
        if response.status_code == 404:
            return None
        if not response.is_success:
            raise self._error(response)
        try:
            text = response.content.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise PspProtocolError(f"{PSP_NAME}: report is not UTF-8", psp=PSP_NAME) from exc
        return report.parse_report(text, tz=self._tz)

    def _error(self, response: httpx.Response) -> PspError:
        try:
            error: wire.AdyenError | None = wire.parse_error(json_body(response, psp=PSP_NAME))
        except PspProtocolError:
            error = None  # a proxy's HTML 502, an empty 404: the status code alone decides
        transient = response.headers.get("Transient-Error", "").strip().lower()
        return error_from_response(
            response,
            psp=PSP_NAME,
            now=self._now_func(),
            code=error.error_code if error else None,
            message=error.message if error else None,
            in_flight=error is not None and error.error_code == wire.IN_FLIGHT_ERROR_CODE,
            should_retry={"true": True, "false": False}.get(transient),
            secrets=self._secrets,
        )
