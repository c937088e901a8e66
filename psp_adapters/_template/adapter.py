"""The <PSP> adapter: endpoints, auth and calls over httpx. Copy to ``psp_adapters/<psp>/adapter.py``.

Say here which endpoints answer which protocol question, how the PSP tells status (and what to do when it
has no read endpoint), and how its lists page. Imports: ``protocol``, ``errors``, ``http`` and this PSP's
own ``wire``; never ``recon`` and never another PSP.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from datetime import datetime, timedelta
from types import TracebackType
from typing import ClassVar
from urllib.parse import quote

import httpx

from psp_adapters._template import wire
from psp_adapters._template.wire import PSP_NAME
from psp_adapters.errors import PspError, PspProtocolError, PspRejectedError
from psp_adapters.http import (
    DEFAULT_TIMEOUT,
    error_from_response,
    json_body,
    make_client,
    system_now,
    transport_errors,
)
from psp_adapters.protocol import (
    ChargeRequest,
    NotFound,
    PaymentOutcome,
    PaymentPage,
    PspRef,
    Secret,
    SettlementLine,
)


class TemplateAdapter:
    """recon's view of <PSP>. Methods raise only PspError subclasses; the key never reaches a message."""

    name: ClassVar[str] = PSP_NAME
    #: how long the PSP keeps an idempotency key (look it up in the PSP's documentation); None: forever
    idempotency_retention: ClassVar[timedelta | None] = None
    #: True once ``iter_payments`` lists the PSP's payments by creation time (bulk reconciliation)
    lists_payments: ClassVar[bool] = False
    #: how long the PSP's lookup by our reference may lag behind a charge (its documentation); zero: none
    search_lag: ClassVar[timedelta] = timedelta(0)
    #: the bulk sweep's window that fits how the PSP lists (e.g. a day for daily reports); None: recon's
    listing_window: ClassVar[timedelta | None] = None

    def __init__(
        self,
        base_url: str,
        *,
        api_key: Secret,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        now_func: Callable[[], datetime] = system_now,
    ) -> None:
        if not api_key:
            raise ValueError(f"{PSP_NAME}: api_key is required")
        self._base_url = base_url
        self._secrets = (api_key.reveal(),)
        self._now_func = now_func
        self._client = make_client(
            base_url,
            headers={"Authorization": f"Bearer {api_key.reveal()}"},
            timeout=timeout,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"TemplateAdapter(base_url={self._base_url!r})"

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        """Create a charge; a timeout after sending raises PspUnknownOutcome (retry with the same key)."""
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=True):
            response = self._client.post(
                "/v1/payments", json=wire.charge_body(request), headers={"Idempotency-Key": idempotency_key}
            )
        if not response.is_success:
            raise self._error(response)
        return wire.to_outcome(json_body(response, psp=PSP_NAME))

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        """One payment by its PSP reference (extend: by merchant reference); 404 -> NotFound."""
        if not ref.psp_reference:
            raise PspProtocolError(
                f"{PSP_NAME}: lookup by merchant reference is not written yet", psp=PSP_NAME
            )
        with transport_errors(psp=PSP_NAME, may_have_taken_effect=False):
            response = self._client.get(f"/v1/payments/{quote(ref.psp_reference, safe='')}")
        if response.status_code == 404:
            return NotFound(psp_reference=ref.psp_reference, merchant_reference=ref.merchant_reference)
        if not response.is_success:
            raise self._error(response)
        return wire.to_outcome(json_body(response, psp=PSP_NAME))

    def iter_settlements(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[SettlementLine]:
        """Settlement lines in ``[since, until)``, one page per request as iterated (write the paging through a
        ``psp_adapters.pager.Pager``: ``request()`` before each page, ``follow(cursor, items=…)`` for the next,
        so that a listing that never ends is a PspProtocolError)."""
        if since.tzinfo is None or until.tzinfo is None:
            raise ValueError("since and until must be aware datetimes")
        return iter(())

    def iter_payments(
        self, since: datetime, until: datetime, *, merchant_accounts: Collection[str] = ()
    ) -> Iterator[PaymentPage]:
        """Payments created in ``[since, until)``, one page per request (write it through a
        ``psp_adapters.pager.Pager``, as ``iter_settlements`` says, then set lists_payments)."""
        if since.tzinfo is None or until.tzinfo is None:
            raise ValueError("since and until must be aware datetimes")
        raise PspRejectedError(f"{PSP_NAME}: the adapter does not list payments", psp=PSP_NAME)

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    def __enter__(self) -> TemplateAdapter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _error(self, response: httpx.Response) -> PspError:
        # parse the PSP's error body here (code, message, idempotency flags) and pass them on
        return error_from_response(response, psp=PSP_NAME, now=self._now_func(), secrets=self._secrets)
