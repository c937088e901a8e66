"""Oracles for the Stripe adapter that the adapter did not write.

- Requests: ``sdk_request`` runs a call of Stripe's official SDK (stripe-python) and returns the HTTP request
  it sent, captured through an ``httpx.MockTransport``. stripe-python documents ``stripe.HTTPClient`` as the
  base that custom clients inherit from, and ``StripeClient(api_key, http_client=…)`` takes one; the client
  here hands the SDK's (method, url, headers, body) to an ``httpx.Client`` on a mock transport, so both sides
  of a comparison are ``httpx.Request`` objects. ``max_network_retries=0``: exactly one request.
- Responses: ``canonical`` returns Stripe's canonical example object of a resource (payment_intent, charge,
  balance_transaction, refund, dispute, payout, …) from Stripe's fixtures3.json, read at test time from
  ``../shared/specs`` (never copied into this repository); the tests skip, saying so, when it is absent.
"""

from __future__ import annotations

import copy
import functools
import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
import stripe

SPECS = Path(__file__).resolve().parents[2] / ".." / "shared" / "specs"
FIXTURES3 = SPECS / "stripe" / "fixtures3.json"


@functools.cache
def _resources() -> Mapping[str, Any]:
    return json.loads(FIXTURES3.read_text(encoding="utf-8"))["resources"]  # type: ignore[no-any-return]


def canonical(resource: str, **changes: Any) -> dict[str, Any]:
    """A fresh copy of Stripe's canonical ``resource`` object with ``changes`` applied (top-level keys).

    Skips the test when ``../shared/specs/stripe/fixtures3.json`` is not there.
    """
    if not FIXTURES3.is_file():
        pytest.skip(f"../shared/specs/stripe/fixtures3.json not found: {FIXTURES3.resolve()} (Stripe's canonical "
                    "objects; see ../shared/specs/README.md)")
    doc: dict[str, Any] = copy.deepcopy(_resources()[resource])
    doc.update(changes)
    return doc


def listing(url: str, data: list[dict[str, Any]], *, has_more: bool = False) -> dict[str, Any]:
    """A list page (``{"object": "list", …}``; https://docs.stripe.com/api/pagination)."""
    return {"object": "list", "url": url, "has_more": has_more, "data": data}


def search_result(url: str, data: list[dict[str, Any]]) -> dict[str, Any]:
    """A search page (https://docs.stripe.com/api/pagination/search)."""
    return {"object": "search_result", "url": url, "has_more": False, "next_page": None, "data": data}


@dataclass(frozen=True)
class Sent:
    """What one request put on the wire, decoded: the parts an adapter and the SDK must agree on."""

    method: str
    path: str
    query: Counter[tuple[str, str]]  #: decoded query pairs, as a multiset
    form: Counter[tuple[str, str]]  #: decoded form-body pairs, as a multiset
    idempotency_key: str | None
    stripe_version: str | None
    authorization: str | None
    content_type: str | None

    @classmethod
    def of(cls, request: httpx.Request) -> Sent:
        url = urlsplit(str(request.url))
        body = request.content.decode() if request.method == "POST" else ""
        return cls(
            method=request.method,
            path=url.path,
            query=Counter(parse_qsl(url.query, keep_blank_values=True)),
            form=Counter(parse_qsl(body, keep_blank_values=True)),
            idempotency_key=request.headers.get("Idempotency-Key"),
            stripe_version=request.headers.get("Stripe-Version"),
            authorization=request.headers.get("Authorization"),
            content_type=request.headers.get("Content-Type"),
        )


class _CapturingClient(stripe.HTTPClient):
    """A stripe-python HTTP client that sends through an httpx mock transport and keeps each request."""

    name = "httpx-capture"

    def __init__(self, answer: httpx.Response) -> None:
        super().__init__()
        self.requests: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

        self._http = httpx.Client(transport=httpx.MockTransport(handler))

    def request(self, method: str, url: str, headers: Mapping[str, str] | None, post_data: Any = None,
                **_: Any) -> tuple[str, int, Mapping[str, str]]:
        response = self._http.request(method.upper(), url, headers=dict(headers or {}), content=post_data)
        return response.text, response.status_code, response.headers

    def close(self) -> None:
        self._http.close()


def sdk_request(call: Callable[[stripe.StripeClient], object], *, api_key: str, base_url: str,
                answer: Mapping[str, Any]) -> Sent:
    """The one request stripe-python sends for ``call`` (answered with ``answer``, a 200 JSON body)."""
    http = _CapturingClient(httpx.Response(200, json=dict(answer)))
    client = stripe.StripeClient(api_key, http_client=http, base_addresses={"api": base_url},
                                 max_network_retries=0)
    try:
        call(client)
    finally:
        http.close()
    [request] = http.requests
    return Sent.of(request)
