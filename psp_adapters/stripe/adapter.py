"""The Stripe adapter: PaymentIntents over httpx, speaking Stripe's real API shape.

Every request is form-encoded with ``Authorization: Bearer sk_…`` and ``Stripe-Version: API_VERSION`` (the
version stripe-python pins, overridable per adapter); answers are JSON. Endpoints:

- ``POST /v1/payment_intents`` with ``confirm=true``, ``off_session=true`` and ``Idempotency-Key``: create
  and confirm a merchant-initiated charge of a stored payment method (``wire.create_form``).
- ``GET /v1/payment_intents/{id}``: one payment by its PSP reference.
- ``GET /v1/payment_intents/search?query=metadata['merchant_reference']:'REF'``: by our reference. Stripe's
  search is not read-after-write: "Under normal operating conditions, data is searchable in less than a
  minute. Occasionally, propagation of new or updated data can be up to an hour behind during outages"
  (https://docs.stripe.com/api/payment_intents/search, https://docs.stripe.com/search#data-freshness). So
  its NotFound is only final after recon's grace period; the PaymentIntent id is used whenever we have it.
- ``GET /v1/payment_intents?created[gte]=…&created[lt]=…&limit=100`` with ``starting_after=…``: every
  PaymentIntent created in a window, newest first, for bulk reconciliation (``iter_payments``). List
  endpoints page by cursor: "pass starting_after with the ID of the last object in the current page" while
  ``has_more`` (https://docs.stripe.com/api/pagination). Unlike search, a list reads the API's own store,
  so a PaymentIntent is listed as soon as it exists. Both listings go through ``psp_adapters.pager``: a
  repeated cursor, ``has_more`` after an empty page, or a listing past its page bound is a PspProtocolError.
- ``GET /v1/balance_transactions?created[gte]=…&created[lt]=…&limit=…&expand[0]=data.source`` with
  ``starting_after=…``: the settlement listing (``balance.py``), newest first, one page per request while
  iterated. ``expand[0]``: stripe-python always indexes list parameters (Stripe's docs write ``expand[]``),
  and the tests hold every request to the parameters the SDK sends for the same call.
- ``GET /v1/disputes?created[gte]=…&created[lt]=…&limit=100`` with ``starting_after=…``: the disputes opened in a
  window, newest first (``DisputeSource``; ``dispute.py``), through the same pager: what no webhook told.
- ``GET /v1/payouts?arrival_date[gte]=…&arrival_date[lt]=…`` and ``GET /v1/balance_transactions?payout=po_…
  &expand[0]=data.source``: the payouts of a window and what each carries (``PayoutSource``; ``payouts.py``).

Answers: a ``card_error`` (HTTP 402) is a business answer, ``Failed`` (a decline) or ``ActionRequired``
(``authentication_required``); every other failure raises a PspError. Stripe saves the answer of a request
under its idempotency key once the endpoint started executing, 500s included, and replays it for any retry
with that key; it saves nothing for a request that failed validation or conflicted with a concurrent one
(https://docs.stripe.com/api/idempotent_requests). So a 500 carrying Stripe's own error body, answering
the create, is raised ``saved=True``: the same key would only replay it. 502/503/504 are not marked saved:
the 500 is the server error Stripe documents as saved, and a gateway's 5xx (often without Stripe's body)
may come before the endpoint ran; if Stripe did save one, the retry's ``Idempotent-Replayed: true`` says so
(then ``replayed`` and ``saved``). A 409
``idempotency_key_in_use`` is the concurrent case: transient, not saved. ``Stripe-Should-Retry`` is
carried on every error as ``should_retry`` (``psp_adapters.http.error_from_response``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import UTC, date, datetime, time, timedelta
from types import TracebackType
from typing import ClassVar
from urllib.parse import quote

import httpx

from psp_adapters.errors import PspError, PspProtocolError
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
    NotFound,
    PaymentOutcome,
    PaymentPage,
    PspPayout,
    PspPayoutLine,
    PspRef,
    RefundRef,
    RefundRequest,
    Secret,
    SettlementLine,
)
from psp_adapters.stripe import balance, payouts, wire
from psp_adapters.stripe import capture as capture_wire
from psp_adapters.stripe import dispute as dispute_wire
from psp_adapters.stripe import refund as refund_wire
from psp_adapters.stripe.wire import API_VERSION, PSP_NAME

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.stripe.com"
PAGE_SIZE_DEFAULT = 100  #: Stripe's maximum ``limit``
#: when a search finds several intents for one reference, the one that tells the most wins
_STATUS_RANK = {"succeeded": 3, "processing": 2, "requires_capture": 2, "requires_action": 1}


class StripeAdapter:
    """recon's view of Stripe. Thread-safe as far as ``httpx.Client`` is; one instance per process is enough.

    Raises only PspError subclasses from its methods (ValueError from the constructor on bad settings).
    The API key is held only in the client's headers and never appears in a message or a repr.
    """

    name: ClassVar[str] = PSP_NAME
    #: Stripe may prune a key and its saved answer once it is at least 24 hours old; a key reused after that
    #: makes a new request (https://docs.stripe.com/api/idempotent_requests)
    idempotency_retention: ClassVar[timedelta | None] = timedelta(hours=24)
    lists_payments: ClassVar[bool] = True
    #: Stripe's search, which finds a PaymentIntent by our reference after a lost answer, is eventually consistent:
    #: "data is typically searchable in under a minute; during outages, up to an hour" (docs.stripe.com/search)
    search_lag: ClassVar[timedelta] = timedelta(hours=1)
    listing_window: ClassVar[timedelta | None] = None
    #: an authorisation never captured is canceled by Stripe after this (status ``canceled``, reason ``automatic``):
    #: 7 days for online card payments of most brands (docs.stripe.com/payments/place-a-hold-on-a-payment-method,
    #: "Authorization validity windows"; Visa merchant-initiated: less)
    authorisation_validity: ClassVar[timedelta] = timedelta(days=7)
    refund_reasons: ClassVar[tuple[str, ...] | None] = refund_wire.REASONS

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: Secret,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        api_version: str | None = None,
        page_size: int = PAGE_SIZE_DEFAULT,
        now_func: Callable[[], datetime] = system_now,
    ) -> None:
        if not api_key:
            raise ValueError("stripe: api_key is required")
        if not 1 <= page_size <= 100:
            raise ValueError("stripe: page_size must be within 1..100")
        # the version pins request parameters and response shapes; never the account's Dashboard default
        headers = {"Authorization": f"Bearer {api_key.reveal()}", "Stripe-Version": api_version or API_VERSION}
        self._base_url = base_url
        self._secrets = (api_key.reveal(),)
        self._page_size = page_size
        self._now_func = now_func
        self._client = make_client(base_url, headers=headers, timeout=timeout, transport=transport)

    def __repr__(self) -> str:
        return f"StripeAdapter(base_url={self._base_url!r})"

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        """Create and confirm a PaymentIntent; ``idempotency_key`` goes in the ``Idempotency-Key`` header.

        Returns Succeeded/Pending/ActionRequired/Failed/Unknown; a decline is ``Failed(reason=decline_code or
        code)``, ``authentication_required`` is ActionRequired. Raises PspRejectedError before sending when
        ``wire.check_charge`` finds a problem; PspUnknownOutcome when the request may have reached Stripe but
        no answer came back; a PspTransientError with ``saved=True`` for Stripe's 500 (see the module).
        """
        form = wire.create_form(request)
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=True):
            response = self._client.post(
                "/v1/payment_intents", data=form, headers={"Idempotency-Key": idempotency_key}
            )
        if response.is_success:
            return wire.to_outcome(json_body(response, psp=PSP_NAME))
        error = _maybe_error(response)
        if error is not None and error.type == "card_error":
            return wire.card_error_outcome(error)
        raise self._error(response, error, saved=error is not None and response.status_code == 500)

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        """The PaymentIntent's outcome: by id when known, else by searching our merchant reference.

        Returns NotFound when Stripe has no such intent (HTTP 404 ``resource_missing``, or an empty search).
        """
        if ref.psp_reference:
            response = self._get(f"/v1/payment_intents/{quote(ref.psp_reference, safe='')}")
            if response.status_code == 404:
                error = _maybe_error(response)
                if error is not None and error.code == "resource_missing":
                    return NotFound(
                        psp_reference=ref.psp_reference, merchant_reference=ref.merchant_reference
                    )
                raise self._error(response, error)
            return wire.to_outcome(self._body(response))
        assert ref.merchant_reference is not None  # PspRef guarantees one of the two  # nosec B101
        response = self._get(
            "/v1/payment_intents/search",
            params={"query": wire.search_query(ref.merchant_reference), "limit": "10"},
        )
        intents, _ = wire.list_page(self._body(response))
        if not intents:
            return NotFound(merchant_reference=ref.merchant_reference)
        if len(intents) > 1:
            logger.warning(
                "stripe: %d payment intents carry merchant reference %r", len(intents), ref.merchant_reference
            )
        return wire.to_outcome(_most_telling(intents))

    def create_refund(self, request: RefundRequest, *, idempotency_key: str) -> PaymentOutcome:
        """``POST /v1/refunds`` (``refund.create_form``) with ``Idempotency-Key``: the Refund as an outcome.

        A refusal (``charge_already_refunded``, ``amount_too_large``: HTTP 400) raises PspRejectedError; a lost
        answer PspUnknownOutcome; Stripe's 500 is saved under the key, as for a charge."""
        form = refund_wire.create_form(request)
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=True):
            response = self._client.post("/v1/refunds", data=form, headers={"Idempotency-Key": idempotency_key})
        if response.is_success:
            return refund_wire.to_outcome(json_body(response, psp=PSP_NAME))
        error = _maybe_error(response)
        raise self._error(response, error, saved=error is not None and response.status_code == 500)

    def modify_payment(self, request: ModificationRequest, *, idempotency_key: str) -> PaymentOutcome:
        """``POST /v1/payment_intents/{id}/capture`` (``capture.capture_form``) or ``/cancel`` with
        ``Idempotency-Key``: the PaymentIntent as the answer about the capture or cancel
        (``capture.modification_outcome``). A refusal (``payment_intent_unexpected_state``, ``amount_too_large``:
        HTTP 400) raises PspRejectedError; a lost answer PspUnknownOutcome; Stripe's 500 is saved under the key."""
        path = f"/v1/payment_intents/{quote(request.payment_reference, safe='')}/{request.kind}"
        form = capture_wire.capture_form(request) if request.kind == "capture" else {}
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=True):
            response = self._client.post(path, data=form, headers={"Idempotency-Key": idempotency_key})
        if response.is_success:
            intent = wire.to_outcome(json_body(response, psp=PSP_NAME))
            return capture_wire.modification_outcome(request.kind, intent)
        error = _maybe_error(response)
        raise self._error(response, error, saved=error is not None and response.status_code == 500)

    def fetch_modification(self, request: ModificationRequest) -> PaymentOutcome:
        """``GET /v1/payment_intents/{id}``: what became of the capture or cancel (``capture.modification_outcome``);
        404 ``resource_missing``: NotFound."""
        intent = self.fetch_payment(PspRef(psp_reference=request.payment_reference))
        return capture_wire.modification_outcome(request.kind, intent)

    def fetch_refund(self, ref: RefundRef) -> PaymentOutcome:
        """The Refund by its id when known (404 ``resource_missing``: NotFound), else the one carrying our
        ``refund_reference`` among the PaymentIntent's refunds (none: NotFound)."""
        if ref.psp_refund_id:
            response = self._get(f"/v1/refunds/{quote(ref.psp_refund_id, safe='')}")
            if response.status_code == 404:
                error = _maybe_error(response)
                if error is not None and error.code == "resource_missing":
                    return NotFound(psp_reference=ref.psp_refund_id, merchant_reference=ref.refund_reference)
                raise self._error(response, error)
            return refund_wire.to_outcome(self._body(response))
        pager = Pager(PSP_NAME, "/v1/refunds")
        params = {"payment_intent": ref.payment_reference, "limit": str(self._page_size)}
        while True:
            pager.request()
            items, has_more = wire.list_page(self._body(self._get("/v1/refunds", params=params)))
            for item in items:
                if refund_wire.reference(item) == ref.refund_reference:
                    return refund_wire.to_outcome(item)
            if not has_more:
                return NotFound(merchant_reference=ref.refund_reference)
            params = {**params, "starting_after": pager.follow(_last_id(items), items=len(items))}

    def iter_settlements(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[SettlementLine]:
        """Lines of the balance transactions created in ``[since, until)`` that concern a payment (see
        ``balance``), newest first, fetched one page at a time as iterated.

        ``since`` and ``until`` must be aware (ValueError otherwise, raised at once, not on iteration).
        Stripe timestamps are whole seconds, so the window is widened to whole seconds.
        """
        params = {**self._created_window(since, until), "expand[0]": balance.EXPAND_SOURCE}
        return self._settlement_pages(params)

    def iter_payments(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[PaymentPage]:
        """PaymentIntents created in ``[since, until)`` (widened to whole seconds), newest first, one page of
        up to ``page_size`` per ``next()``, each mapped by ``wire.to_outcome``. ``merchant_accounts`` is
        ignored: one API key is one Stripe account.

        ``since`` and ``until`` must be aware (ValueError otherwise, raised at once, not on iteration).
        """
        params = self._created_window(since, until)
        return self._intent_pages(params)

    def iter_disputes(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[DisputePage]:
        """Disputes created in ``[since, until)`` (widened to whole seconds), newest first, one page of up to
        ``page_size`` per ``next()``, each mapped by ``dispute.to_listed`` (the webhooks' mapping). A dispute
        changes after it was created (won, lost): recon reads a window that reaches back over the disputes it
        still has open. ValueError at once for naive datetimes."""
        return self._dispute_pages(self._created_window(since, until))

    def _dispute_pages(self, params: dict[str, str]) -> Iterator[DisputePage]:
        pager = Pager(PSP_NAME, "/v1/disputes")
        while True:
            pager.request()
            items, has_more = wire.list_page(self._body(self._get("/v1/disputes", params=params)))
            yield tuple(dispute_wire.to_listed(item) for item in items)
            if not has_more:
                return
            params = {**params, "starting_after": pager.follow(_last_id(items), items=len(items))}

    def iter_payouts(self, since: date, until: date, *, merchant_accounts: Collection[str] = (),
                     known: Collection[str] = (), files: Collection[str] = ()) -> Iterator[PspPayout]:
        """Payouts whose ``arrival_date`` falls on a UTC day of ``[since, until)`` (``payouts``), a page per
        request as iterated; ``merchant_accounts``, ``known`` and ``files`` are not Stripe's business."""
        def at(day: date) -> str:
            return str(int(datetime.combine(day, time(), tzinfo=UTC).timestamp()))
        params = {"arrival_date[gte]": at(since), "arrival_date[lt]": at(until), "limit": str(self._page_size)}
        for item in self._list("/v1/payouts", params):
            yield payouts.to_payout(item)

    def payout_lines(self, payout: PspPayout) -> Iterator[PspPayoutLine]:
        """The balance transactions ``payout`` settles, its own included, sources expanded (``payouts``)."""
        params = {"payout": payout.payout_id, "limit": str(self._page_size), "expand[0]": balance.EXPAND_SOURCE}
        for item in self._list("/v1/balance_transactions", params):
            yield payouts.to_line(item)

    def _list(self, path: str, params: dict[str, str]) -> Iterator[Mapping[str, object]]:
        pager = Pager(PSP_NAME, path)
        while True:
            pager.request()
            items, has_more = wire.list_page(self._body(self._get(path, params=params)))
            yield from items
            if not has_more:
                return
            params = {**params, "starting_after": pager.follow(_last_id(items), items=len(items))}

    def close(self) -> None:
        """Close the HTTP client; the adapter is unusable afterwards."""
        self._client.close()

    def __enter__(self) -> StripeAdapter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _intent_pages(self, params: dict[str, str]) -> Iterator[PaymentPage]:
        pager = Pager(PSP_NAME, "/v1/payment_intents")  # a repeated cursor, no progress or no end: PspProtocolError
        while True:
            pager.request()
            items, has_more = wire.list_page(self._body(self._get("/v1/payment_intents", params=params)))
            yield tuple(wire.to_listed(item) for item in items)
            if not has_more:
                return
            params = {**params, "starting_after": pager.follow(_last_id(items), items=len(items))}

    def _created_window(self, since: datetime, until: datetime) -> dict[str, str]:
        """A list request's ``created`` range for ``[since, until)``, widened to Stripe's whole seconds, and the
        page size. ValueError (raised at once, not on iteration) unless both are aware."""
        if since.tzinfo is None or until.tzinfo is None:
            raise ValueError("since and until must be aware datetimes")
        return {"created[gte]": str(math.floor(since.timestamp())), "created[lt]": str(math.ceil(until.timestamp())),
                "limit": str(self._page_size)}

    def _settlement_pages(self, params: dict[str, str]) -> Iterator[SettlementLine]:
        pager = Pager(PSP_NAME, "/v1/balance_transactions")
        while True:
            pager.request()
            items, has_more = wire.list_page(self._body(self._get("/v1/balance_transactions", params=params)))
            for item in items:
                line = balance.to_settlement_line(item)
                if line is not None:
                    yield line
            if not has_more:
                return
            params = {**params, "starting_after": pager.follow(_last_id(items), items=len(items))}

    def _get(self, path: str, *, params: Mapping[str, str] | None = None) -> httpx.Response:
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=False):
            return self._client.get(path, params=params)

    def _body(self, response: httpx.Response) -> object:
        if not response.is_success:
            raise self._error(response, _maybe_error(response))
        return json_body(response, psp=PSP_NAME)

    def _error(self, response: httpx.Response, error: wire.StripeError | None, *, saved: bool = False) -> PspError:
        if error is None:
            return error_from_response(response, psp=PSP_NAME, now=self._now_func(), secrets=self._secrets)
        # Stripe answers a concurrent request on the same key with 409 idempotency_key_in_use: that one is
        # in flight, not reused with other parameters
        reused = error.type == "idempotency_error" and error.code != "idempotency_key_in_use"
        return error_from_response(
            response,
            psp=PSP_NAME,
            now=self._now_func(),
            code=error.code or error.type,
            message=error.message,
            key_reused=reused,
            saved=saved,
            secrets=self._secrets,
        )


def _last_id(items: list[Mapping[str, object]]) -> str | None:
    """The cursor of the next page: the id of this page's last object (None for an empty page: the pager
    refuses it)."""
    if not items:
        return None
    last_id = items[-1].get("id")
    if not isinstance(last_id, str):
        raise PspProtocolError(f"{PSP_NAME}: list item without id", psp=PSP_NAME)
    return last_id


def _maybe_error(response: httpx.Response) -> wire.StripeError | None:
    """The error object of an error answer, or None when the body is not Stripe's (a proxy's 502)."""
    try:
        return wire.parse_error(json_body(response, psp=PSP_NAME))
    except PspProtocolError:
        return None


def _most_telling(intents: list[Mapping[str, object]]) -> Mapping[str, object]:
    """One reference should have one intent; if Stripe holds several, the most advanced one answers."""

    def rank(doc: Mapping[str, object]) -> tuple[int, int]:
        created = doc.get("created")
        return _STATUS_RANK.get(str(doc.get("status")), 0), created if isinstance(created, int) else 0

    return max(intents, key=rank)
