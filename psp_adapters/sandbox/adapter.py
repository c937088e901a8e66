"""The sandbox PSP adapter: ``PspAdapter`` over httpx, talking to ``psp_adapters.sandbox.server``.

Transport failures and non-2xx answers are translated by ``psp_adapters.http`` (``transport_errors``,
``error_from_response``); this module adds the sandbox's own readings:

- a 402 ``card_error`` is a decline, returned as ``Failed(reason=decline code)``: a business answer;
- a 404 ``resource_missing`` on fetch is ``NotFound`` (any other 404, e.g. a wrong base URL, raises);
- a 422 ``idempotency_key_reused`` raises PspIdempotencyError; a 409 for a key still in flight is transient;
- a body we cannot parse raises PspProtocolError; an unknown payment status is ``Unknown(raw_status=…)``.

The api key is a ``Secret``, revealed only into the client's ``Authorization`` header; it never appears in a
repr, a log line or an error message.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import ClassVar
from urllib.parse import quote

import httpx

from psp_adapters.errors import PspError, PspProtocolError
from psp_adapters.http import error_from_response, json_body, make_client, system_now, transport_errors
from psp_adapters.pager import Pager
from psp_adapters.protocol import (
    ChargeRequest,
    ListedPayment,
    ModificationRequest,
    NotFound,
    PaymentOutcome,
    PaymentPage,
    PspRef,
    Secret,
    SettlementLine,
    Succeeded,
)
from psp_adapters.sandbox import wire
from psp_adapters.sandbox.wire import PSP_NAME

SETTLEMENT_PAGE_SIZE = 100
LISTING_PAGE_SIZE = 100


class SandboxAdapter:
    """recon's client of the sandbox PSP. Raises only PspError subclasses; httpx exceptions never escape.

    ``timeout`` is an ``httpx.Timeout`` or seconds for every phase; ``transport`` replaces the network;
    ``now_func`` is the clock for HTTP-date Retry-After values. Thread-safe as far as ``httpx.Client`` is.
    """

    name: ClassVar[str] = PSP_NAME
    #: the sandbox keeps its keys for as long as its state file lives
    idempotency_retention: ClassVar[timedelta | None] = None
    lists_payments: ClassVar[bool] = True
    search_lag: ClassVar[timedelta] = timedelta(0)
    listing_window: ClassVar[timedelta | None] = None
    #: a manual-capture authorisation is canceled after this (``native_api.AUTHORIZATION_VALIDITY``)
    authorisation_validity: ClassVar[timedelta] = timedelta(days=7)

    def __init__(
        self,
        base_url: str,
        *,
        api_key: Secret | None = None,
        timeout: httpx.Timeout | float = 5.0,
        transport: httpx.BaseTransport | None = None,
        now_func: Callable[[], datetime] = system_now,
    ) -> None:
        headers = {"Accept": "application/json", "User-Agent": "recon-sandbox-adapter/1"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key.reveal()}"
        self._base_url = base_url
        self._secrets = (api_key.reveal(),) if api_key else ()
        self._now_func = now_func
        timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self._client = make_client(base_url, headers=headers, timeout=timeout, transport=transport)

    def __repr__(self) -> str:
        return f"SandboxAdapter(base_url={self._base_url!r})"

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        """Charge once per ``idempotency_key``: a retry with the same key returns the first charge.

        Raises PspUnknownOutcome when the request may have reached the sandbox but no answer came back.
        """
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=True):
            response = self._client.post(
                "/v1/payments", json=wire.charge_body(request), headers={"Idempotency-Key": idempotency_key}
            )
        if response.is_success:
            return wire.to_outcome(json_body(response, psp=PSP_NAME))
        if response.status_code == 402:
            return wire.decline_to_outcome(json_body(response, psp=PSP_NAME))
        raise self._error(response)

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        """The PSP's view of one payment, by PSP reference, else by merchant reference.

        Several payments with one merchant reference (a duplicate charge) yield the latest succeeded one,
        or the latest of all when none succeeded; the settlement listing is where duplicates are counted.
        """
        if ref.psp_reference:
            response = self._get(f"/v1/payments/{quote(ref.psp_reference, safe='')}")
            if response.status_code == 404 and _error_code(response) == "resource_missing":
                return NotFound(psp_reference=ref.psp_reference, merchant_reference=ref.merchant_reference)
            return wire.to_outcome(self._body(response))
        response = self._get("/v1/payments", params={"merchant_reference": ref.merchant_reference or ""})
        outcomes = [wire.to_outcome(item) for item in _list_data(self._body(response))]
        if not outcomes:
            return NotFound(merchant_reference=ref.merchant_reference)
        succeeded = [o for o in outcomes if isinstance(o, Succeeded)]
        return (succeeded or outcomes)[-1]

    def modify_payment(self, request: ModificationRequest, *, idempotency_key: str) -> PaymentOutcome:
        """``POST /v1/payments/{psp_reference}/capture`` (the amount) or ``/cancel`` with ``Idempotency-Key``: the
        payment as the answer about the capture or cancel (``wire.modification_outcome``). A payment that is not
        authorized is a 400 (PspRejectedError); a lost answer PspUnknownOutcome."""
        path = f"/v1/payments/{quote(request.payment_reference, safe='')}/{request.kind}"
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=True):
            response = self._client.post(path, json=wire.modification_body(request),
                                         headers={"Idempotency-Key": idempotency_key})
        if response.is_success:
            return wire.modification_outcome(request.kind, json_body(response, psp=PSP_NAME))
        raise self._error(response)

    def fetch_modification(self, request: ModificationRequest) -> PaymentOutcome:
        """The payment (``GET /v1/payments/{psp_reference}``) as the answer about the capture or cancel."""
        response = self._get(f"/v1/payments/{quote(request.payment_reference, safe='')}")
        if response.status_code == 404 and _error_code(response) == "resource_missing":
            return NotFound(psp_reference=request.payment_reference,
                            merchant_reference=request.modification_reference)
        return wire.modification_outcome(request.kind, self._body(response))

    def iter_settlements(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[SettlementLine]:
        """Final payments with ``since <= settled_at < until``, a page fetched as the caller iterates.

        ``since`` and ``until`` must be aware (ValueError at once, not on iteration).
        """
        if since.tzinfo is None or until.tzinfo is None:
            raise ValueError("since and until must be aware datetimes")
        return self._settlement_pages(wire.format_timestamp(since), wire.format_timestamp(until))

    def iter_payments(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[PaymentPage]:
        """Payments created in ``[since, until)`` (``GET /v1/payments?created_since=&created_until=``), oldest
        first, a page of LISTING_PAGE_SIZE per ``next()``; ``merchant_accounts`` is ignored (one sandbox, one
        book). ``since`` and ``until`` must be aware (ValueError at once, not on iteration)."""
        if since.tzinfo is None or until.tzinfo is None:
            raise ValueError("since and until must be aware datetimes")
        params = {"created_since": wire.format_timestamp(since), "created_until": wire.format_timestamp(until),
                  "limit": str(LISTING_PAGE_SIZE)}
        return self._created_pages(params)

    def close(self) -> None:
        """Close the HTTP client; the adapter is unusable afterwards."""
        self._client.close()

    def __enter__(self) -> SandboxAdapter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _created_pages(self, params: dict[str, str]) -> Iterator[PaymentPage]:
        pager = Pager(PSP_NAME, "/v1/payments")  # a repeated cursor, no progress or no end: PspProtocolError
        while True:
            pager.request()
            doc = self._body(self._get("/v1/payments", params=params))
            data = _list_data(doc)
            yield tuple(_listed(item) for item in data)
            if not (isinstance(doc, dict) and doc.get("has_more") is True):
                return
            params = {**params, "cursor": pager.follow(doc.get("next_cursor"), items=len(data))}

    def _settlement_pages(self, since: str, until: str) -> Iterator[SettlementLine]:
        params = {"since": since, "until": until, "limit": str(SETTLEMENT_PAGE_SIZE)}
        pager = Pager(PSP_NAME, "/v1/settlements")
        while True:
            pager.request()
            doc = self._body(self._get("/v1/settlements", params=params))
            data = _list_data(doc)
            for item in data:
                yield wire.to_settlement_line(item)
            if not (isinstance(doc, dict) and doc.get("has_more") is True):
                return
            params = {**params, "cursor": pager.follow(doc.get("next_cursor"), items=len(data))}

    def _get(self, path: str, *, params: Mapping[str, str] | None = None) -> httpx.Response:
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=False):
            return self._client.get(path, params=params)

    def _body(self, response: httpx.Response) -> object:
        if not response.is_success:
            raise self._error(response)
        return json_body(response, psp=PSP_NAME)

    def _error(self, response: httpx.Response) -> PspError:
        code, message = _error_fields(response)
        return error_from_response(
            response,
            psp=PSP_NAME,
            now=self._now_func(),
            code=code,
            message=message,
            key_reused=code == wire.IDEMPOTENCY_KEY_REUSED,
            in_flight=code == wire.IDEMPOTENCY_KEY_IN_FLIGHT,
            secrets=self._secrets,
        )


def _error_fields(response: httpx.Response) -> tuple[str | None, str | None]:
    """The sandbox's error code and message, when the body is its error JSON (not, say, a proxy's page)."""
    try:
        error = wire.error_fields(json_body(response, psp=PSP_NAME))
    except PspProtocolError:
        return None, None
    code, message = error.get("code"), error.get("message")
    return (code if isinstance(code, str) else None), (message if isinstance(message, str) else None)


def _error_code(response: httpx.Response) -> str | None:
    return _error_fields(response)[0]


def _listed(item: object) -> ListedPayment:
    """A payment of the creation listing: its outcome (``wire.to_outcome``) and its ``created_at``."""
    created = item.get("created_at") if isinstance(item, dict) else None
    if not isinstance(created, str):
        raise PspProtocolError(f"{PSP_NAME}: listed payment without created_at", psp=PSP_NAME)
    account = item.get("merchant_account") if isinstance(item, dict) else None
    return ListedPayment(wire.to_outcome(item), created_at=wire.parse_timestamp(created),
                         merchant_account=account if isinstance(account, str) else None)


def _list_data(doc: object) -> list[object]:
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise PspProtocolError(f"{PSP_NAME}: list answer without a 'data' array", psp=PSP_NAME)
    return data
