"""Adyen's official Python library driving the sandbox, every request and answer checked against Adyen's OpenAPI
document of the Checkout version it calls (``tests/adapters/adyen_schema``, read from ``../shared/specs``).

Adyen's library has no base-URL option: each service carries its own ``baseUrl`` (``…/v72`` in library 16), which
``library(url, key, version)`` sets for the payments and modifications services (as docs/psps.md tells users to).
Its HTTP client is left as the library builds it; only its ``request`` is wrapped (the library's documented
override point: "can be overridden to supply your own post method") so that each call's body is validated against
the request schema of its endpoint, and each answer against the response schema, or ``ServiceError`` for an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import Adyen

from tests.adapters import adyen_schema

#: endpoint (after /v7x/) -> (request schema, response schema), from the OpenAPI documents' paths
SCHEMAS: dict[str, tuple[str, str]] = {
    "payments": ("PaymentRequest", "PaymentResponse"),
    "payments/details": ("PaymentDetailsRequest", "PaymentDetailsResponse"),
    "paymentMethods": ("PaymentMethodsRequest", "PaymentMethodsResponse"),
    "captures": ("PaymentCaptureRequest", "PaymentCaptureResponse"),
    "cancels": ("PaymentCancelRequest", "PaymentCancelResponse"),
    "refunds": ("PaymentRefundRequest", "PaymentRefundResponse"),
    "reversals": ("PaymentReversalRequest", "PaymentReversalResponse"),
}
_PATH = re.compile(r"/(?P<version>v7[12])/(?:payments/[A-Z0-9]+/(?P<modification>\w+)|(?P<call>[\w/]+))$")


class Checks:
    """Counts what was checked: ``requests`` and ``answers`` validated, by status."""

    def __init__(self) -> None:
        self.requests = 0
        self.answers: list[int] = []


def endpoint(url: str) -> tuple[str, str]:
    """(Checkout version, endpoint key of SCHEMAS) of a library call's URL."""
    match = _PATH.search(url)
    assert match, url
    return match["version"], match["modification"] or match["call"]


def checking(request: Callable[..., Any], checks: Checks, *, requests: bool) -> Callable[..., Any]:
    def checked(method: str, url: str, json: Any = None, **kwargs: Any) -> Any:
        version, key = endpoint(url)
        request_schema, response_schema = SCHEMAS[key]
        if json is not None and requests:
            adyen_schema.validate(request_schema, json, version=version)
            checks.requests += 1
        raw_response, raw_request, status, headers = request(method, url, json=json, **kwargs)
        body = _json(raw_response)
        adyen_schema.validate(response_schema if 200 <= status < 300 else "ServiceError", body, version=version)
        checks.answers.append(status)
        return raw_response, raw_request, status, headers

    return checked


def library(
    url: str, key: str, version: str = "v72", checks: Checks | None = None, *, check_requests: bool = True
) -> Adyen.Adyen:
    """Adyen's library pointed at the sandbox's ``version`` (each service's ``baseUrl``), its calls checked
    (``check_requests=False``: only the answers, for a test that sends what Adyen's schema refuses on purpose)."""
    adyen = Adyen.Adyen(xapikey=key, platform="test")
    for service in (adyen.checkout.payments_api, adyen.checkout.modifications_api):
        service.baseUrl = f"{url}/{version}"
    client = adyen.client
    client._init_http_client()  # the library builds it on first use; built now so that its request can be checked
    client.http_client.request = checking(client.http_client.request, checks or Checks(), requests=check_requests)
    return adyen


def _json(raw: str | bytes) -> Any:
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)
