"""The Adyen adapter: Checkout API v72 (or v71) for charges, the daily Payment accounting report for everything
after.

How Adyen tells status, and what this adapter does about it:

- ``POST {base_url}/{api_version}/payments`` (JSON, ``X-API-Key``, ``Idempotency-Key``; ``api_version`` v72 by
  default, v71 selectable) charges a stored card, merchant-initiated (``charge.payment_body``), and answers with a
  ``resultCode``. A refusal is HTTP 200 with
  ``resultCode: Refused``, a decline like any other; a result that needs the shopper is ActionRequired.
- Idempotency (docs.adyen.com/development-resources/api-idempotency): a key is at most 64 characters; keys
  are stored per **company account** (two merchant accounts of one company share the key space) and
  regional endpoints do not check each other's keys; a key is valid "for a minimum period of 7 days after
  first submission" (``idempotency_retention``). A second request with a key whose first request is still
  running is answered HTTP 422 or 409 with error 704 ("request already processed or in progress"): a
  transient error, retried later with the same key.
- Errors: only what the docs call transient is retried. A ``Transient-Error: true`` header marks an error
  "that can be retried at a later time using the same idempotency key"; without it (or with ``false``), "do
  not retry the request": Adyen stores a non-transient answer as the key's final result, so a charge's 5xx
  without that header is a saved answer (``PspError.saved``: recon leaves the payment pending and lets the
  reports tell) rather than one to send again. Error 703 (HTTP 503, Adyen's idempotency store unavailable)
  is transient by the same page. A ServiceError whose ``errorType`` is ``configuration`` or ``validation`` is
  permanent whatever its HTTP status (docs.adyen.com/development-resources/response-handling: "Our servers may
  return a 500 status code also when the request is incorrect"): PspRejectedError.
- Checkout has no endpoint to read a payment back. Adyen's own channels are the standard webhooks
  (AUTHORISATION, CAPTURE, …), pushed to us, and the reports. recon's protocol is pull-based, so
  ``fetch_payment`` reads the daily **Payment accounting report**
  (``payments_accounting_report_YYYY_MM_DD.csv``, one journal row per lifecycle event: Received, Authorised,
  SentForSettle, Settled, Refused, …) of the payment's merchant account, downloaded from
  ``{report_base_url}/reports/download/MerchantAccount/{account}/{file}`` as the **report user**, a user of its
  own (docs.adyen.com/reporting/automatically-get-reports: basic auth ``report@Company.YourCompany`` with its
  password, or its API key in ``X-API-Key``), never the Checkout API key. It walks back from today over
  ``lookback_days`` files, newest first, and the first file that mentions the payment answers.
- Reports are generated once a day (early morning, in the account's time zone), so today's events are not
  in any file yet. A payment absent from every available file is therefore **Pending**, never NotFound:
  absence here is not proof that Adyen never saw it. recon snoozes a Pending payment on its sync schedule and
  sends it to ``needs_review`` at the end, never to ``failed``. A file that does not exist yet (HTTP 404) is
  skipped.
- ``iter_settlements`` reads the same daily files of every merchant account it is given plus the default,
  one download per account per day, as iterated, and yields the settlement events (Settled, Refunded,
  Chargeback, and failed payments) booked inside the window, compared in UTC.

- ``iter_payments`` (bulk reconciliation) reads, for each account, the files of the days covering the window
  and every later day up to today (at most ``lookback_days`` past the window): a payment's latest record may
  be booked days after its first (Authorised, then Cancelled), and ``fetch_payment`` answers from the newest
  file that mentions it. One download per account-day, each its own page; the payments whose rows fall in
  the window's days come, with their latest record type (``report_outcome``), on the last page.
- ``iter_disputes`` (``DisputeSource``) reads the same daily files, one download a page, and yields the dispute
  steps (Chargeback, ChargebackReversed, SecondChargeback rows: ``dispute.py``) booked inside the window.
- ``fetch_refund`` reads the same daily files for the refund's rows (``refund.py``: SentForRefund, Refunded,
  RefundFailed, RefundedReversed, matched by the Modification Psp Reference or Modification Merchant Reference):
  the REFUND webhook's word when that webhook was lost. ``fetch_modification`` reads them for a capture's or a
  cancel's rows (``capture.py``: SentForSettle, Settled, CaptureFailed, Cancelled, Error, matched the same way):
  the CAPTURE / CAPTURE_FAILED / CANCELLATION webhooks' word when those were lost.
- ``iter_payouts``/``payout_lines`` (``PayoutSource``) read the **Settlement details report** of each payout
  batch (``settlement_detail_report_batch_N.csv``, same download path and user; ``settlement.py``): the files a
  ``REPORT_AVAILABLE`` webhook named, and the batches after the highest one recon knows, until one is missing.

Cost: ``fetch_payment`` reads up to ``lookback_days + 1`` report files. The files of today and yesterday are
downloaded every time (today's does not exist yet; yesterday's appears in the morning). An older day's file is
final once generated (Adyen writes each day's file once, the next morning), so ``fetch_payment`` keeps the ones
it downloaded for ``REPORT_CACHE_SECONDS`` (15 minutes), at most ``REPORT_CACHE_ROWS`` rows in all, least
recently used out first; a file that is missing (404) or larger than that is not kept. The payments checked
one by one in a sweep or on their reconcile schedule then cost two downloads each, not ``lookback_days + 1``.
``iter_payments`` and ``iter_settlements`` read each file once anyway and always download. Webhooks
(``recon serve``) answer most payments before any of this.
"""

from __future__ import annotations

import base64
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from datetime import date, datetime, timedelta
from types import TracebackType
from typing import ClassVar
from urllib.parse import quote
from zoneinfo import ZoneInfo

import httpx

from psp_adapters.adyen import capture as capture_wire
from psp_adapters.adyen import charge, report, settlement, wire
from psp_adapters.adyen import dispute as dispute_wire
from psp_adapters.adyen import refund as refund_wire
from psp_adapters.adyen.wire import PSP_NAME
from psp_adapters.errors import PspError, PspProtocolError, PspRejectedError
from psp_adapters.http import (
    DEFAULT_TIMEOUT,
    error_from_response,
    json_body,
    make_client,
    system_now,
    transport_errors,
)
from psp_adapters.pager import Pager
from psp_adapters.protocol import (
    ChargeRequest,
    DisputePage,
    ModificationRequest,
    PaymentOutcome,
    PaymentPage,
    Pending,
    PspPayout,
    PspPayoutLine,
    PspRef,
    RefundRef,
    RefundRequest,
    Reversed,
    Secret,
    SettlementLine,
)

#: Adyen's test endpoints. Live Checkout needs the merchant's own prefix URL
#: (``https://{PREFIX}-checkout-live.adyenpayments.com/checkout``) and live reports ``https://ca-live.adyen.com``;
#: both come from settings, never from code.
DEFAULT_BASE_URL = "https://checkout-test.adyen.com"
DEFAULT_REPORT_BASE_URL = "https://ca-test.adyen.com"
LOOKBACK_DAYS_DEFAULT = 7
#: fetch_payment's cache of final days' report files (module docstring, "Cost"): how long a file is kept, how
#: many rows all kept files may hold, and how old a day must be (in the account's zone) for its file to be final
REPORT_CACHE_SECONDS = 900.0
REPORT_CACHE_ROWS = 50_000
#: the most Settlement details reports one ``iter_payouts`` walk downloads per account (and lines kept)
PAYOUT_WALK_MAX = 31
FINAL_AFTER_DAYS = 2
REPORT_CREDENTIALS_MISSING = (
    "adyen: the report user's credentials are required: report_api_key or report_username/report_password "
    "(RECON_ADYEN_REPORT_API_KEY, or RECON_ADYEN_REPORT_USERNAME and RECON_ADYEN_REPORT_PASSWORD); the "
    "Checkout API key is a different user and is never used for reports"
)


class AdyenAdapter:
    """recon's view of Adyen (see the module docstring for how status is learned).

    ``merchant_account`` is the default account: a charge or a payment that names its own account (other
    than the label "default") goes there. Raises only PspError subclasses from its methods (ValueError from
    the constructor on bad settings). Credentials are held only in the clients' headers and never appear in a
    message or a repr.
    """

    name: ClassVar[str] = PSP_NAME
    #: "Idempotency keys are valid for a minimum period of 7 days after first submission"
    #: (docs.adyen.com/development-resources/api-idempotency, "Key scope and validity time")
    idempotency_retention: ClassVar[timedelta | None] = timedelta(days=7)
    lists_payments: ClassVar[bool] = True
    search_lag: ClassVar[timedelta] = timedelta(0)
    #: the listing is the daily report file: an hour's window would download the same file 24 times
    listing_window: ClassVar[timedelta | None] = timedelta(days=1)
    #: an authorisation never captured expires (the report's ``Expired``) after a validity that depends on the card
    #: scheme and the kind of authorisation (docs.adyen.com/online-payments/capture; the schemes' rules); 28 days
    #: is the longest common card window: set ``[psp.adyen] authorisation_validity`` to your traffic's shortest
    authorisation_validity: ClassVar[timedelta] = timedelta(days=28)
    refund_reasons: ClassVar[tuple[str, ...] | None] = refund_wire.REASONS

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: Secret,
        merchant_account: str | None = None,
        api_version: str = wire.DEFAULT_API_VERSION,
        return_url: str = charge.DEFAULT_RETURN_URL,
        recurring_processing_model: str = charge.DEFAULT_RECURRING_PROCESSING_MODEL,
        report_base_url: str = DEFAULT_REPORT_BASE_URL,
        report_api_key: Secret | None = None,
        report_username: str | None = None,
        report_password: Secret | None = None,
        report_timezone: str = "UTC",
        lookback_days: int = LOOKBACK_DAYS_DEFAULT,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        now_func: Callable[[], datetime] = system_now,
        monotonic_func: Callable[[], float] = time.monotonic,
    ) -> None:
        if not api_key:
            raise ValueError("adyen: api_key is required")
        _check_settings(merchant_account, api_version, return_url, recurring_processing_model, lookback_days)
        report_headers, report_secrets = _report_credentials(report_api_key, report_username, report_password)
        self._base_url = base_url
        self._merchant_account = merchant_account or None
        self._api_version = api_version
        self._return_url = return_url
        self._recurring_processing_model = recurring_processing_model
        self._tz = ZoneInfo(report_timezone)  # the account's time zone setting: the reports' day boundaries
        self._lookback_days = lookback_days
        self._now_func = now_func
        self._secrets = (api_key.reveal(), *report_secrets)
        self._client = make_client(
            base_url, headers={"X-API-Key": api_key.reveal()}, timeout=timeout, transport=transport
        )
        self._reports = make_client(report_base_url, headers=report_headers, timeout=timeout, transport=transport)
        self._monotonic = monotonic_func
        #: (account, day) -> (when downloaded, its rows), least recently used first; guarded by _cache_lock
        self._cache: OrderedDict[tuple[str, date], tuple[float, list[report.ReportRow]]] = OrderedDict()
        #: the lines of the batches ``iter_payouts`` read last, for ``payout_lines``
        self._batch_lines: dict[str, tuple[PspPayoutLine, ...]] = {}
        self._cache_rows = 0
        self._cache_lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"AdyenAdapter(base_url={self._base_url!r}, api_version={self._api_version!r}, "
                f"merchant_account={self._merchant_account!r})")

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        """``POST /{api_version}/payments`` with ``idempotency_key`` (at most 64 characters) in ``Idempotency-Key``.

        The account is ``request.merchant_account`` unless empty or "default", else the configured one.
        Returns the outcome of the ``resultCode`` (Refused -> Failed with ``refusalReason``; a shopper action
        -> ActionRequired). Raises PspRejectedError before sending when the charge breaks a rule of
        ``charge.check_charge``, no account is known, or the key is too long; PspUnknownOutcome when the
        request may have reached Adyen but no answer came back; PspTransientError for error 704 (the same key
        still in flight) and for answers marked ``Transient-Error: true``.
        """
        account = charge.resolve_merchant_account(request.merchant_account, self._merchant_account)
        if not idempotency_key or len(idempotency_key) > wire.IDEMPOTENCY_KEY_MAX:
            raise PspRejectedError(
                f"{PSP_NAME}: an Idempotency-Key has 1 to {wire.IDEMPOTENCY_KEY_MAX} characters", psp=PSP_NAME
            )
        body = charge.payment_body(
            request,
            merchant_account=account,
            return_url=self._return_url,
            recurring_processing_model=self._recurring_processing_model,
        )
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=True):
            response = self._client.post(
                f"/{self._api_version}/payments", json=body, headers={"Idempotency-Key": idempotency_key}
            )
        if not response.is_success:
            raise self._error(response, keyed=True)
        return wire.payment_to_outcome(json_body(response, psp=PSP_NAME), request=request)

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        """The payment's latest status in the Payment accounting reports of its merchant account
        (``ref.merchant_account``, else the default) over the last ``lookback_days`` days.

        Returns Pending (``raw_status=None``) when no available report mentions it: see the module docstring.
        Files of days before yesterday may come from the cache of final files (the module docstring, "Cost").
        Raises PspRejectedError when no merchant account is known.
        """
        account = charge.resolve_merchant_account(ref.merchant_account, self._merchant_account)
        today = self._now_func().astimezone(self._tz).date()
        for offset in range(self._lookback_days + 1):
            day = today - timedelta(days=offset)
            rows = self._report(account, day) if offset < FINAL_AFTER_DAYS else self._final_report(account, day)
            matching = [row for row in rows or () if report.row_matches(row, ref, account=account)]
            if matching:
                return wire.report_outcome(matching)
        return Pending(psp_reference=ref.psp_reference, merchant_reference=ref.merchant_reference)

    def create_refund(self, request: RefundRequest, *, idempotency_key: str) -> PaymentOutcome:
        """``POST /{api_version}/payments/{paymentPspReference}/refunds`` (``refund.refund_body``) with
        ``Idempotency-Key``: Pending with the refund's pspReference (``[received]``); errors as for a charge."""
        account = charge.resolve_merchant_account(request.merchant_account, self._merchant_account)
        if not idempotency_key or len(idempotency_key) > wire.IDEMPOTENCY_KEY_MAX:
            raise PspRejectedError(
                f"{PSP_NAME}: an Idempotency-Key has 1 to {wire.IDEMPOTENCY_KEY_MAX} characters", psp=PSP_NAME
            )
        path = f"/{self._api_version}/payments/{quote(request.payment_reference, safe='')}/refunds"
        body = refund_wire.refund_body(request, merchant_account=account)
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=True):
            response = self._client.post(path, json=body, headers={"Idempotency-Key": idempotency_key})
        if not response.is_success:
            raise self._error(response, keyed=True)
        return refund_wire.refund_to_outcome(json_body(response, psp=PSP_NAME))

    def modify_payment(self, request: ModificationRequest, *, idempotency_key: str) -> PaymentOutcome:
        """``POST /{api_version}/payments/{paymentPspReference}/captures`` or ``/cancels``
        (``capture.modification_body``) with ``Idempotency-Key``: Pending with the modification's pspReference
        (``[received]``); errors as for a charge."""
        account = charge.resolve_merchant_account(request.merchant_account, self._merchant_account)
        if not idempotency_key or len(idempotency_key) > wire.IDEMPOTENCY_KEY_MAX:
            raise PspRejectedError(
                f"{PSP_NAME}: an Idempotency-Key has 1 to {wire.IDEMPOTENCY_KEY_MAX} characters", psp=PSP_NAME
            )
        segment = capture_wire.PATHS[request.kind]
        path = f"/{self._api_version}/payments/{quote(request.payment_reference, safe='')}/{segment}"
        body = capture_wire.modification_body(request, merchant_account=account)
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=True):
            response = self._client.post(path, json=body, headers={"Idempotency-Key": idempotency_key})
        if not response.is_success:
            raise self._error(response, keyed=True)
        return capture_wire.modification_to_outcome(json_body(response, psp=PSP_NAME))

    def fetch_modification(self, request: ModificationRequest) -> PaymentOutcome:
        """Checkout cannot read a capture or a cancel back: its webhooks (CAPTURE, CAPTURE_FAILED, CANCELLATION)
        and the reports tell. This reads the Payment accounting reports of the payment's merchant account over the
        last ``lookback_days`` days, newest first, as ``fetch_refund`` does, and the first file with rows of the
        modification answers (``capture.report_rows``, ``capture.report_outcome``): a capture Succeeded (Settled,
        with the amount captured), Failed (CaptureFailed, Error) or Pending (SentForSettle); a cancel Succeeded
        (Cancelled) or Failed (Error).

        Returns Pending when no available report has a row of it (today's modifications are in tomorrow's file):
        recon waits on its schedule, then a person looks. Raises PspRejectedError when no merchant account is
        known.
        """
        waiting = Pending(psp_reference=request.modification_id, merchant_reference=request.modification_reference)
        if not request.payment_reference:
            return waiting
        account = charge.resolve_merchant_account(request.merchant_account, self._merchant_account)
        today = self._now_func().astimezone(self._tz).date()
        for offset in range(self._lookback_days + 1):
            day = today - timedelta(days=offset)
            rows = self._report(account, day) if offset < FINAL_AFTER_DAYS else self._final_report(account, day)
            matching = capture_wire.report_rows(rows or (), request, account=account)
            if matching:
                return capture_wire.report_outcome(matching, request)
        return waiting

    def fetch_refund(self, ref: RefundRef) -> PaymentOutcome | Reversed:
        """Checkout cannot read a refund back: its webhooks (REFUND, REFUND_FAILED, REFUNDED_REVERSED) and the
        reports tell. This reads the Payment accounting reports of the payment's merchant account over the last
        ``lookback_days`` days, newest first, as ``fetch_payment`` does, and the first file with rows of the
        refund answers (``refund.report_rows``, ``refund.report_outcome``): Succeeded (Refunded), Failed
        (RefundFailed, Error), Reversed (RefundedReversed) or Pending (SentForRefund).

        Returns Pending when no available report has a row of it (today's refunds are in tomorrow's file): recon
        waits on its schedule, then a person looks. Raises PspRejectedError when no merchant account is known.
        """
        waiting = Pending(psp_reference=ref.psp_refund_id, merchant_reference=ref.refund_reference)
        if not ref.payment_reference:
            return waiting
        account = charge.resolve_merchant_account(ref.merchant_account, self._merchant_account)
        today = self._now_func().astimezone(self._tz).date()
        for offset in range(self._lookback_days + 1):
            day = today - timedelta(days=offset)
            rows = self._report(account, day) if offset < FINAL_AFTER_DAYS else self._final_report(account, day)
            matching = refund_wire.report_rows(rows or (), ref, account=account)
            if matching:
                return refund_wire.report_outcome(matching, ref)
        return waiting

    def iter_settlements(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[SettlementLine]:
        """Settlement events booked in ``[since, until)`` in the reports of every account of
        ``merchant_accounts`` plus the default (each once, in that order), one file per account per day,
        downloaded as iterated. Days are the account time zone's; bookings compare in UTC.

        ``since`` and ``until`` must be aware (ValueError otherwise) and some account must be known
        (PspRejectedError otherwise), both raised at once. A payment may appear more than once, once per event
        (settled, then refunded on a later day).
        """
        if since.tzinfo is None or until.tzinfo is None:
            raise ValueError("since and until must be aware datetimes")
        return self._settlement_days(since, until, self._accounts(merchant_accounts))

    def iter_payments(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[PaymentPage]:
        """The payments of the reports of ``[since, until)``'s days (the account time zone's) of every account
        of ``merchant_accounts`` plus the default, each with its latest status (see the module docstring).

        One page per account-day file downloaded (a missing file, 404, is an empty download); every page
        but the last is empty. ``since``/``until`` must be aware (ValueError) and some account known
        (PspRejectedError), both raised at once.
        """
        if since.tzinfo is None or until.tzinfo is None:
            raise ValueError("since and until must be aware datetimes")
        return self._payment_days(since, until, self._accounts(merchant_accounts))

    def iter_disputes(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[DisputePage]:
        """The dispute steps booked in ``[since, until)`` in the reports of every account of ``merchant_accounts``
        plus the default, one page per account-day file downloaded (``dispute.to_listed``). ``since``/``until``
        must be aware (ValueError) and some account known (PspRejectedError), both raised at once."""
        if since.tzinfo is None or until.tzinfo is None:
            raise ValueError("since and until must be aware datetimes")
        return self._dispute_days(since, until, self._accounts(merchant_accounts))

    def _dispute_days(self, since: datetime, until: datetime, accounts: list[str]) -> Iterator[DisputePage]:
        day = since.astimezone(self._tz).date()
        last = (until - timedelta(microseconds=1)).astimezone(self._tz).date()
        pager = Pager(PSP_NAME, "payment accounting reports")  # one download a page, bounded
        while day <= last:
            for account in accounts:
                pager.request()
                found = (dispute_wire.to_listed(row, merchant_account=account) for row in self._report(account, day)
                         or () if since <= row.booked_at < until)
                yield tuple(d for d in found if d is not None)
            day += timedelta(days=1)

    def iter_payouts(self, since: date, until: date, *, merchant_accounts: Collection[str] = (),
                     known: Collection[str] = (), files: Collection[str] = ()) -> Iterator[PspPayout]:
        """The payout batches of the Settlement details reports (``settlement``) that ``files`` name, and, for
        each account of ``merchant_accounts`` plus the default, the batches after the highest of ``known``
        (``ACCOUNT/N``; from batch 1 when none is known), downloaded one after the other until one does not
        exist yet (404), at most ``PAYOUT_WALK_MAX`` a call. Adyen lists no payouts by date: every batch found is
        yielded, whatever its day; ``since``/``until`` only bound nothing here (the close reads by arrival)."""
        accounts = self._accounts(merchant_accounts)
        pager = Pager(PSP_NAME, "settlement details reports", max_pages=PAYOUT_WALK_MAX * (len(accounts) + 1))
        batches = sorted({b for b in (settlement.batch_of(f) for f in files) if b is not None})
        named = [(a, b) for a in accounts for b in batches]
        for account, batch in named:
            pager.request()
            yield from self._batches(account, batch) or ()
        for account in accounts:
            highest = max((int(k.rsplit("/", 1)[1]) for k in known
                           if k.rsplit("/", 1)[0] == account and k.rsplit("/", 1)[-1].isdigit()), default=0)
            for batch in range(highest + 1, highest + 1 + PAYOUT_WALK_MAX):
                if (account, batch) in named:
                    continue
                pager.request()
                found = self._batches(account, batch)
                if found is None:
                    break
                yield from found

    def payout_lines(self, payout: PspPayout) -> Iterator[PspPayoutLine]:
        """The rows of the payout's batch (its report downloaded again unless ``iter_payouts`` just read it)."""
        kept = self._batch_lines.pop(payout.payout_id, None)
        if kept is None:
            account, _, number = payout.payout_id.rpartition("/")
            for _ in self._batches(account, int(number)) or ():
                pass
            kept = self._batch_lines.pop(payout.payout_id, ())
        return iter(kept)

    def _batches(self, account: str, batch: int) -> list[PspPayout] | None:
        """The payouts of one report file (None: Adyen has not generated it), their lines kept for
        ``payout_lines`` (at most ``PAYOUT_WALK_MAX`` batches' worth)."""
        path = f"/reports/download/MerchantAccount/{quote(account, safe='')}/{settlement.file_name(batch)}"
        text = self._download(path)
        if text is None:
            return None
        found = settlement.parse(text, account=account, tz=self._tz)
        for item in found:
            self._batch_lines[item.payout.payout_id] = item.lines
            while len(self._batch_lines) > PAYOUT_WALK_MAX:
                self._batch_lines.pop(next(iter(self._batch_lines)))
        return [item.payout for item in found]

    def _download(self, path: str) -> str | None:
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=False):
            response = self._reports.get(path)
        if response.status_code == 404:
            return None
        if not response.is_success:
            raise self._error(response, keyed=False)
        try:
            return response.content.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise PspProtocolError(f"{PSP_NAME}: report is not UTF-8", psp=PSP_NAME) from exc

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

    def _accounts(self, merchant_accounts: Collection[str]) -> list[str]:
        """The given accounts then the default, without duplicates, empties or the label "default"."""
        wanted = [*merchant_accounts, self._merchant_account or ""]
        accounts = list(dict.fromkeys(a for a in wanted if a and a != charge.DEFAULT_ACCOUNT_LABEL))
        if not accounts:
            charge.resolve_merchant_account(None, None)  # raises, naming the setting
        return accounts

    def _settlement_days(self, since: datetime, until: datetime, accounts: list[str]) -> Iterator[SettlementLine]:
        day = since.astimezone(self._tz).date()
        last = (until - timedelta(microseconds=1)).astimezone(self._tz).date()
        pager = Pager(PSP_NAME, "payment accounting reports")  # one download a page, bounded
        while day <= last:
            for account in accounts:
                pager.request()
                for row in self._report(account, day) or ():
                    status = wire.settlement_status(row.record_type)
                    if status is not None and since <= row.booked_at < until:
                        yield wire.to_settlement_line(row, status=status, merchant_account=account)
            day += timedelta(days=1)

    def _payment_days(self, since: datetime, until: datetime, accounts: list[str]) -> Iterator[PaymentPage]:
        first = since.astimezone(self._tz).date()
        last = (until - timedelta(microseconds=1)).astimezone(self._tz).date()
        today = self._now_func().astimezone(self._tz).date()
        final = max(first, min(today, last + timedelta(days=self._lookback_days)))
        days = [first + timedelta(days=n) for n in range((final - first).days + 1)]
        downloads = [(day, account) for day in days for account in accounts]
        rows: dict[tuple[str, str], list[report.ReportRow]] = {}
        in_window: set[tuple[str, str]] = set()
        pager = Pager(PSP_NAME, "payment accounting reports")  # one download a page, bounded
        for n, (day, account) in enumerate(downloads, start=1):
            pager.request()
            for row in self._report(account, day) or ():
                key = (account, row.psp_reference)
                rows.setdefault(key, []).append(row)
                if day <= last:
                    in_window.add(key)
            if n < len(downloads):
                yield ()
        yield tuple(wire.listed_payment(rows[key], merchant_account=key[0]) for key in rows if key in in_window)

    def _final_report(self, account: str, day: date) -> list[report.ReportRow] | None:
        """``_report`` of a day whose file is final, from the cache when it was downloaded less than
        ``REPORT_CACHE_SECONDS`` ago (thread-safe; the rows are shared, never changed)."""
        key = (account, day)
        with self._cache_lock:
            kept = self._cache.get(key)
            if kept is not None and self._monotonic() - kept[0] < REPORT_CACHE_SECONDS:
                self._cache.move_to_end(key)
                return kept[1]
        downloaded_at = self._monotonic()
        rows = self._report(account, day)
        if rows is not None and len(rows) <= REPORT_CACHE_ROWS:
            with self._cache_lock:
                old = self._cache.pop(key, None)
                if old is not None:
                    self._cache_rows -= max(1, len(old[1]))
                self._cache[key] = (downloaded_at, rows)
                self._cache_rows += max(1, len(rows))  # an empty file counts one: the entries stay bounded
                while self._cache_rows > REPORT_CACHE_ROWS:
                    _, (_, evicted) = self._cache.popitem(last=False)
                    self._cache_rows -= max(1, len(evicted))
        return rows

    def _report(self, account: str, day: date) -> list[report.ReportRow] | None:
        """One account's report rows of one day, or None when Adyen has not generated that file (yet)."""
        path = f"/reports/download/MerchantAccount/{quote(account, safe='')}/{report.report_file_name(day)}"
        text = self._download(path)
        return None if text is None else report.parse_report(text, tz=self._tz)

    def _error(self, response: httpx.Response, *, keyed: bool) -> PspError:
        """The PspError of a non-2xx answer; ``keyed``: the request carried an Idempotency-Key."""
        try:
            error: wire.AdyenError | None = wire.parse_error(json_body(response, psp=PSP_NAME))
        except PspProtocolError:
            error = None  # a proxy's HTML 502, an empty 404: the status code alone decides
        transient = {"true": True, "false": False}.get(response.headers.get("Transient-Error", "").strip().lower())
        code = error.error_code if error else None
        if code == wire.IDEMPOTENCY_UNAVAILABLE_ERROR_CODE:
            transient = True
        # an Adyen answer to a keyed request that it did not mark transient is the key's final answer
        saved = keyed and error is not None and response.status_code >= 500 and transient is not True
        built = error_from_response(
            response,
            psp=PSP_NAME,
            now=self._now_func(),
            code=code,
            message=error.message if error else None,
            in_flight=code == wire.IN_FLIGHT_ERROR_CODE,
            should_retry=False if saved else transient,
            saved=saved,
            secrets=self._secrets,
        )
        if error is not None and error.permanent and transient is not True and response.status_code >= 500:
            return PspRejectedError(str(built), psp=PSP_NAME, status_code=response.status_code, code=code)
        return built


def _check_settings(
    merchant_account: str | None, api_version: str, return_url: str, recurring_processing_model: str,
    lookback_days: int,
) -> None:
    if merchant_account == charge.DEFAULT_ACCOUNT_LABEL:
        raise ValueError(f"adyen: merchant_account {merchant_account!r} is a label, not an Adyen merchant account")
    if api_version not in wire.API_VERSIONS:
        raise ValueError(f"adyen: api_version {api_version!r} is not one of {', '.join(wire.API_VERSIONS)}")
    longest = charge.RETURN_URL_MAX[api_version]
    if not return_url or len(return_url) > longest:
        raise ValueError(f"adyen: return_url must have 1 to {longest} characters (Checkout {api_version})")
    if recurring_processing_model not in charge.RECURRING_PROCESSING_MODELS:
        raise ValueError(
            f"adyen: recurring_processing_model {recurring_processing_model!r} is not one of "
            f"{', '.join(charge.RECURRING_PROCESSING_MODELS)}"
        )
    if lookback_days < 0:
        raise ValueError("adyen: lookback_days must be >= 0")


def _report_credentials(
    api_key: Secret | None, username: str | None, password: Secret | None
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The report client's headers and the secrets to scrub: basic auth when a username and a password are
    given, else the report user's API key. Raises ValueError naming the settings when neither is given."""
    if username and password:
        token = base64.b64encode(f"{username}:{password.reveal()}".encode()).decode("ascii")
        return {"Authorization": f"Basic {token}"}, (password.reveal(), token)
    if api_key:
        return {"X-API-Key": api_key.reveal()}, (api_key.reveal(),)
    raise ValueError(REPORT_CREDENTIALS_MISSING)
