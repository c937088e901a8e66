"""Adyen's own OpenAPI document for Checkout v71 as a test oracle: the adapter did not write it.

``CheckoutService-v71.json`` is read at test time from ``<repo>/../shared/specs/adyen/`` (published by Adyen,
github.com/Adyen/adyen-openapi; never copied into this repository). Its ``components/schemas`` are JSON
Schema (OpenAPI 3.1 = Draft 2020-12), so a body is validated against a wrapper document
``{"$ref": "#/components/schemas/<Name>", "components": …}`` in which every ``#/components/…`` reference
resolves.

- ``SPECS_AVAILABLE`` is False when the document is absent; ``requires_specs`` skips a test then, saying why.
- ``validate_payment_request`` / ``validate_payment_response`` / ``validate_service_error`` raise
  AssertionError with the validator's messages (every error, best match first).
- ``SchemaCheckingTransport`` wraps any ``httpx.BaseTransport``: every ``POST …/v71/payments`` request body
  and every 2xx answer to it are validated on the way through, so a real adapter can be driven against a
  local server (or an ``httpx.MockTransport``) with Adyen's schema checking both directions.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

REPO = Path(__file__).resolve().parents[2]
SPECS_DIR = REPO.parent / "shared" / "specs" / "adyen"
CHECKOUT_SPEC = SPECS_DIR / "CheckoutService-v71.json"
SPECS_AVAILABLE = CHECKOUT_SPEC.is_file()
SKIP_REASON = f"Adyen's OpenAPI document is not at {CHECKOUT_SPEC}: schema checks skipped"
requires_specs = pytest.mark.skipif(not SPECS_AVAILABLE, reason=SKIP_REASON)

PAYMENTS_PATH_SUFFIX = "/v71/payments"


@cache
def checkout_document() -> dict[str, Any]:
    """The parsed CheckoutService-v71.json (read once per test session)."""
    if not SPECS_AVAILABLE:
        pytest.skip(SKIP_REASON)
    document: dict[str, Any] = json.loads(CHECKOUT_SPEC.read_text(encoding="utf-8"))
    return document


def schema(name: str) -> dict[str, Any]:
    """``components/schemas/<name>`` as published (for tests that read bounds and enums from it)."""
    found: dict[str, Any] = checkout_document()["components"]["schemas"][name]
    return found


@cache
def _validator(name: str) -> Draft202012Validator:
    wrapper = {"$ref": f"#/components/schemas/{name}", "components": checkout_document()["components"]}
    return Draft202012Validator(wrapper)


def validate(name: str, body: object) -> None:
    """Raise AssertionError unless ``body`` is valid against ``components/schemas/<name>``."""
    errors = list(_validator(name).iter_errors(body))
    if not errors:
        return
    first = best_match(errors)
    details = "; ".join(sorted({error.message[:300] for error in errors}))
    where = "/".join(str(part) for part in first.absolute_path) or "(root)"
    raise AssertionError(f"not a valid Adyen {name} at {where}: {first.message[:300]} [all: {details}]")


def validate_payment_request(body: object) -> None:
    """``body`` must be a valid ``PaymentRequest`` (the JSON of ``POST /v71/payments``)."""
    validate("PaymentRequest", body)


def validate_payment_response(body: object) -> None:
    """``body`` must be a valid ``PaymentResponse`` (a 200 answer of ``POST /v71/payments``)."""
    validate("PaymentResponse", body)


def validate_service_error(body: object) -> None:
    """``body`` must be a valid ``ServiceError`` (the documented 4xx/5xx answer of Checkout)."""
    validate("ServiceError", body)


def is_payments_call(request: httpx.Request) -> bool:
    """Whether ``request`` is a ``POST …/v71/payments``."""
    return request.method == "POST" and request.url.path.endswith(PAYMENTS_PATH_SUFFIX)


class SchemaCheckingTransport(httpx.BaseTransport):
    """A transport that validates /v71/payments traffic against Adyen's schemas, then passes it on.

    A request body that is not a valid PaymentRequest raises AssertionError before ``inner`` sees it; a 2xx
    answer that is not a valid PaymentResponse raises AssertionError before the adapter sees it. Every
    other request passes through untouched. ``checked`` counts the validated bodies (requests + answers).
    """

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.checked = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not is_payments_call(request):
            return self.inner.handle_request(request)
        validate_payment_request(json.loads(request.read()))
        self.checked += 1
        response = self.inner.handle_request(request)
        if 200 <= response.status_code < 300:
            content = response.read()
            validate_payment_response(json.loads(content))
            self.checked += 1
        return response

    def close(self) -> None:
        self.inner.close()
