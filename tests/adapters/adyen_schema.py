"""Adyen's own OpenAPI documents for Checkout v71 and v72 and for its webhooks as test oracles: we did not write them.

``CheckoutService-v71.json``, ``CheckoutService-v72.json`` and ``Webhooks-v1.json`` are read at test time from
``<repo>/../shared/specs/adyen/``
(published by Adyen, github.com/Adyen/adyen-openapi; never copied into this repository). Their
``components/schemas`` are JSON Schema (OpenAPI 3.1 = Draft 2020-12), so a body is validated against a wrapper
document ``{"$ref": "#/components/schemas/<Name>", "components": …}`` in which every ``#/components/…``
reference resolves.

- ``SPECS_AVAILABLE`` is False when a Checkout document is absent; ``requires_specs`` skips a test then, saying why.
- ``validate_payment_request`` / ``validate_payment_response`` / ``validate_service_error`` (and ``validate`` for
  any schema) raise AssertionError with the validator's messages (every error, best match first); each takes the
  Checkout ``version`` ("v72", the adapter's default, or "v71").
- ``validate_webhook`` checks a standard notification against the request schema Webhooks-v1.json gives the
  webhook of its items' ``eventCode`` (``requires_webhook_specs`` skips when that document is absent).
- ``SchemaCheckingTransport`` wraps any ``httpx.BaseTransport``: every ``POST …/v71|v72/payments`` request body
  and every 2xx answer to it are validated on the way through against that version's document, so a real
  adapter can be driven against a local server (or an ``httpx.MockTransport``) with Adyen's schema checking both
  directions.
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
VERSIONS = ("v71", "v72")
CHECKOUT_SPECS = {version: SPECS_DIR / f"CheckoutService-{version}.json" for version in VERSIONS}
CHECKOUT_SPEC = CHECKOUT_SPECS["v72"]
SPECS_AVAILABLE = all(path.is_file() for path in CHECKOUT_SPECS.values())
SKIP_REASON = f"Adyen's Checkout OpenAPI documents are not all in {SPECS_DIR}: schema checks skipped"
requires_specs = pytest.mark.skipif(not SPECS_AVAILABLE, reason=SKIP_REASON)
WEBHOOKS_SPEC = SPECS_DIR / "Webhooks-v1.json"
WEBHOOK_SKIP_REASON = f"Adyen's webhooks OpenAPI document is not at {WEBHOOKS_SPEC}: schema checks skipped"
requires_webhook_specs = pytest.mark.skipif(not WEBHOOKS_SPEC.is_file(), reason=WEBHOOK_SKIP_REASON)



@cache
def _document(path: Path) -> dict[str, Any]:
    if not path.is_file():
        pytest.skip(f"Adyen's OpenAPI document is not at {path}: schema checks skipped")
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def checkout_document(version: str = "v72") -> dict[str, Any]:
    """The parsed CheckoutService-<version>.json (read once per test session)."""
    return _document(CHECKOUT_SPECS[version])


def webhooks_document() -> dict[str, Any]:
    """The parsed Webhooks-v1.json (read once per test session)."""
    return _document(WEBHOOKS_SPEC)


def schema(name: str, version: str = "v72") -> dict[str, Any]:
    """``components/schemas/<name>`` as published in ``version`` (for tests that read bounds and enums from it)."""
    found: dict[str, Any] = checkout_document(version)["components"]["schemas"][name]
    return found


@cache
def _validator(name: str, spec: Path = CHECKOUT_SPEC) -> Draft202012Validator:
    wrapper = {"$ref": f"#/components/schemas/{name}", "components": _document(spec)["components"]}
    return Draft202012Validator(wrapper)


def validate(name: str, body: object, *, spec: Path | None = None, version: str = "v72") -> None:
    """Raise AssertionError unless ``body`` is valid against ``components/schemas/<name>`` of ``spec`` (default:
    the Checkout document of ``version``)."""
    spec = spec or CHECKOUT_SPECS[version]
    errors = list(_validator(name, spec).iter_errors(body))
    if not errors:
        return
    first = best_match(errors)
    details = "; ".join(sorted({error.message[:300] for error in errors}))
    where = "/".join(str(part) for part in first.absolute_path) or "(root)"
    raise AssertionError(f"not a valid Adyen {name} at {where}: {first.message[:300]} [all: {details}]")


def validate_payment_request(body: object, version: str = "v72") -> None:
    """``body`` must be a valid ``PaymentRequest`` (the JSON of ``POST /{version}/payments``)."""
    validate("PaymentRequest", body, version=version)


def validate_payment_response(body: object, version: str = "v72") -> None:
    """``body`` must be a valid ``PaymentResponse`` (a 200 answer of ``POST /{version}/payments``)."""
    validate("PaymentResponse", body, version=version)


def validate_service_error(body: object, version: str = "v72") -> None:
    """``body`` must be a valid ``ServiceError`` (the documented 4xx/5xx answer of Checkout)."""
    validate("ServiceError", body, version=version)


def validate_webhook(body: Any) -> str:
    """``body`` (a standard notification) must be valid against the request schema that Webhooks-v1.json gives
    the webhook of its items' ``eventCode`` (``webhooks./EVENTCODE.post.requestBody``); returns that schema's name."""
    codes = {wrapper["NotificationRequestItem"]["eventCode"] for wrapper in body["notificationItems"]}
    assert len(codes) == 1, f"one event code per notification expected, got {sorted(codes)}"
    operation = webhooks_document()["webhooks"][f"/{codes.pop()}"]["post"]
    ref: str = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    name = ref.rsplit("/", 1)[1]
    validate(name, body, spec=WEBHOOKS_SPEC)
    return name


def payments_version(request: httpx.Request) -> str | None:
    """The Checkout version of a ``POST …/v71|v72/payments``, else None."""
    parts = request.url.path.rsplit("/", 2)
    if request.method == "POST" and len(parts) == 3 and parts[2] == "payments" and parts[1] in VERSIONS:
        return parts[1]
    return None


def is_payments_call(request: httpx.Request) -> bool:
    """Whether ``request`` is a ``POST …/v71/payments`` or ``…/v72/payments``."""
    return payments_version(request) is not None


class SchemaCheckingTransport(httpx.BaseTransport):
    """A transport that validates /v71|v72/payments traffic against that version's schemas, then passes it on.

    A request body that is not a valid PaymentRequest raises AssertionError before ``inner`` sees it; a 2xx
    answer that is not a valid PaymentResponse raises AssertionError before the adapter sees it. Every
    other request passes through untouched. ``checked`` counts the validated bodies (requests + answers).
    """

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.checked = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        version = payments_version(request)
        if version is None:
            return self.inner.handle_request(request)
        validate_payment_request(json.loads(request.read()), version)
        self.checked += 1
        response = self.inner.handle_request(request)
        if 200 <= response.status_code < 300:
            content = response.read()
            validate_payment_response(json.loads(content), version)
            self.checked += 1
        return response

    def close(self) -> None:
        self.inner.close()
