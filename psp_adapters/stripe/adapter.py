"""The Stripe adapter: PaymentIntents over httpx, speaking Stripe's real API shape.

Endpoints (form-encoded requests, ``Authorization: Bearer sk_…``, JSON answers):

- ``POST /v1/payment_intents`` with ``confirm=true`` and ``Idempotency-Key``: create and confirm a charge.
- ``GET /v1/payment_intents/{id}``: one payment by its PSP reference.
- ``GET /v1/payment_intents/search?query=metadata['merchant_reference']:'REF'``: by our reference. Stripe's
  search is eventually consistent (searchable within about a minute, up to an hour during incidents), so
  its NotFound is only final after recon's grace period; prefer the PaymentIntent id whenever we have it.
- ``GET /v1/charges?created[gte]=…&created[lt]=…&limit=…&starting_after=…``: the settlement listing, newest
  first, one page per request while iterated. Charges rather than ``/v1/balance_transactions``: a balance
  transaction's ``source`` is a charge id with no metadata, while a charge names its PaymentIntent (the
  reference recon stores) and carries the metadata copied from it at confirmation.

A ``card_error`` (HTTP 402) is a decline, returned as ``Failed``; every other failure raises a PspError.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime, timedelta
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
from psp_adapters.protocol import ChargeRequest, NotFound, PaymentOutcome, PspRef, Secret, SettlementLine
from psp_adapters.stripe import wire
from psp_adapters.stripe.wire import PSP_NAME

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
    #: Stripe keeps a key and its saved answer for at least 24 hours (docs.stripe.com/api/idempotent_requests)
    idempotency_retention: ClassVar[timedelta | None] = timedelta(hours=24)

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
        headers = {"Authorization": f"Bearer {api_key.reveal()}"}
        if api_version:
            headers["Stripe-Version"] = api_version  # pins the response shape; Stripe's default otherwise
        self._base_url = base_url
        self._secrets = (api_key.reveal(),)
        self._page_size = page_size
        self._now_func = now_func
        self._client = make_client(base_url, headers=headers, timeout=timeout, transport=transport)

    def __repr__(self) -> str:
        return f"StripeAdapter(base_url={self._base_url!r})"

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        """Create and confirm a PaymentIntent; ``idempotency_key`` goes in the ``Idempotency-Key`` header.

        Returns Succeeded/Pending/Failed/Unknown; a decline is ``Failed(reason=decline_code or code)``.
        Raises PspUnknownOutcome when the request may have reached Stripe but no answer came back.
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
            return wire.decline_to_outcome(error)
        raise self._error(response, error)

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
        assert ref.merchant_reference is not None  # PspRef guarantees one of the two
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

    def iter_settlements(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[SettlementLine]:
        """Charges created in ``[since, until)``, newest first, fetched one page at a time as iterated.

        ``since`` and ``until`` must be aware (ValueError otherwise, raised at once, not on iteration).
        Stripe timestamps are whole seconds, so the window is widened to whole seconds.
        """
        if since.tzinfo is None or until.tzinfo is None:
            raise ValueError("since and until must be aware datetimes")
        params = {
            "created[gte]": str(math.floor(since.timestamp())),
            "created[lt]": str(math.ceil(until.timestamp())),
            "limit": str(self._page_size),
        }
        return self._settlement_pages(params)

    def close(self) -> None:
        """Close the HTTP client; the adapter is unusable afterwards."""
        self._client.close()

    def __enter__(self) -> StripeAdapter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _settlement_pages(self, params: dict[str, str]) -> Iterator[SettlementLine]:
        while True:
            items, has_more = wire.list_page(self._body(self._get("/v1/charges", params=params)))
            for item in items:
                yield wire.to_settlement_line(item)
            if not has_more or not items:
                return
            last_id = items[-1].get("id")
            if not isinstance(last_id, str):
                raise PspProtocolError(f"{PSP_NAME}: list item without id", psp=PSP_NAME)
            params = {**params, "starting_after": last_id}

    def _get(self, path: str, *, params: Mapping[str, str] | None = None) -> httpx.Response:
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=False):
            return self._client.get(path, params=params)

    def _body(self, response: httpx.Response) -> object:
        if not response.is_success:
            raise self._error(response, _maybe_error(response))
        return json_body(response, psp=PSP_NAME)

    def _error(self, response: httpx.Response, error: wire.StripeError | None) -> PspError:
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
            secrets=self._secrets,
        )


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
