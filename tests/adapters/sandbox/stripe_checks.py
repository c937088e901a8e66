"""Stripe's official SDK driving the sandbox, every answer checked against Stripe's canonical objects.

``sdk(url)`` is a ``stripe.StripeClient`` whose HTTP client (``CheckedClient``, a ``stripe.HTTPClient``: the base
stripe-python documents for custom clients) sends over real HTTP with httpx and checks every JSON answer before
the SDK reads it: each object in it (at any depth, ``data`` of lists, ``data.object`` of events, expanded fields)
whose ``object`` is one of Stripe's resources must have exactly the top-level fields of that resource's canonical
example object in ``fixtures3.json`` (read at test time from ``../shared/specs``; the tests skip without it), the
same JSON types where both are set, and no nested field the canonical object lacks; an error must be Stripe's
error object. The few fields Stripe sends only in some states are named in ``CONDITIONAL`` with the API reference
that says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import stripe

from tests.adapters.stripe_oracle import FIXTURES3, _resources

#: fields Stripe's objects carry only in some states, absent from the canonical examples (API reference)
CONDITIONAL: Mapping[str, frozenset[str]] = {
    # docs.stripe.com/api/refunds/object: failure_reason, failure_balance_transaction "if the refund has failed"
    "refund": frozenset({"failure_reason", "failure_balance_transaction"}),
    # docs.stripe.com/api/charges/object#charge_object-payment_method_details-card-capture_before: manual capture
    "charge.payment_method_details.card": frozenset({"capture_before"}),
    # docs.stripe.com/api/payment_intents/object#payment_intent_object-next_action: a hash named by next_action.type
    "payment_intent.next_action": frozenset({"redirect_to_url", "use_stripe_sdk"}),
}
#: the fields of Stripe's error object (docs.stripe.com/api/errors)
ERROR_FIELDS = frozenset({"type", "code", "decline_code", "doc_url", "message", "param", "payment_intent",
                          "payment_method", "payment_method_type", "setup_intent", "source", "charge",
                          "advice_code", "network_advice_code", "network_decline_code", "request_log_url"})
ERROR_TYPES = frozenset({"api_error", "card_error", "idempotency_error", "invalid_request_error"})
_LISTS = ("list", "search_result")
#: nested fields that hold one of Stripe's shapes the canonical objects show only by a stand-in: their fields
#: are checked against that shape's documented fields instead
NESTED_SHAPES: Mapping[str, frozenset[str]] = {"payment_intent.last_payment_error": ERROR_FIELDS}


def canonical_resources() -> Mapping[str, Any]:
    if not FIXTURES3.is_file():
        pytest.skip(f"Stripe's canonical objects are absent ({FIXTURES3}); see ../shared/specs/README.md")
    return _resources()


def check_document(doc: object) -> int:
    """Check every Stripe object in ``doc`` (see the module docstring); returns how many were checked."""
    resources = canonical_resources()
    if isinstance(doc, dict) and "error" in doc:
        error = doc["error"]
        assert set(doc) == {"error"} and isinstance(error, dict), doc
        assert error.get("type") in ERROR_TYPES and isinstance(error.get("message"), str), error
        assert set(error) <= ERROR_FIELDS, sorted(set(error) - ERROR_FIELDS)
        intent = error.get("payment_intent")
        return 1 + (check_document(intent) if intent is not None else 0)
    return _walk(doc, resources)


def _walk(node: object, resources: Mapping[str, Any]) -> int:
    checked = 0
    if isinstance(node, list):
        return sum(_walk(item, resources) for item in node)
    if not isinstance(node, dict):
        return 0
    kind = node.get("object")
    if isinstance(kind, str) and kind in _LISTS:
        assert {"object", "data", "has_more", "url"} <= set(node), node.keys()
    elif (isinstance(kind, str) and kind in resources and "id" in node) or kind == "balance":
        assert_like(node, resources[str(kind)], str(kind))
        checked += 1
    for name, value in node.items():
        if name not in ("metadata", "previous_attributes"):
            checked += _walk(value, resources)
    return checked


def assert_like(ours: Mapping[str, Any], theirs: Mapping[str, Any], where: str) -> None:
    """``ours`` has ``theirs``' fields (top level: exactly, less the conditional ones; nested: a subset), each of
    the same JSON type where both are set (an expanded object where Stripe shows an id)."""
    extra = set(ours) - set(theirs) - CONDITIONAL.get(where, frozenset())
    assert not extra, f"{where}: fields Stripe's {where} does not have: {sorted(extra)}"
    if "." not in where:
        missing = set(theirs) - set(ours)
        assert not missing, f"{where}: Stripe's fields missing: {sorted(missing)}"
    for name, value in ours.items():
        expected = theirs.get(name)
        if value is None or expected is None or name in ("metadata", "data"):
            continue
        expanded = isinstance(value, dict) and isinstance(expected, str) and "id" in value
        assert type(value) is type(expected) or expanded or _numbers(value, expected), (
            f"{where}.{name}: {type(value).__name__} where Stripe has {type(expected).__name__}")
        nested = f"{where}.{name}"
        if nested in NESTED_SHAPES and isinstance(value, dict):
            assert set(value) <= NESTED_SHAPES[nested], f"{nested}: {sorted(set(value) - NESTED_SHAPES[nested])}"
        elif isinstance(value, dict) and isinstance(expected, dict) and "object" not in value:
            assert_like(value, expected, nested)


def _numbers(a: object, b: object) -> bool:
    return isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool)


class CheckedClient(stripe.HTTPClient):
    """stripe-python's HTTP client over httpx, checking every answer (``check_document``)."""

    name = "httpx-checked"

    def __init__(self) -> None:
        super().__init__()
        self._http = httpx.Client(timeout=10.0)
        self.checked = 0  #: Stripe objects checked so far
        self.answers = 0  #: JSON answers checked so far

    def request(self, method: str, url: str, headers: Mapping[str, str] | None, post_data: Any = None,
                **_: Any) -> tuple[str, int, Mapping[str, str]]:
        response = self._http.request(method.upper(), url, headers=dict(headers or {}), content=post_data)
        if response.headers.get("Content-Type", "").startswith("application/json"):
            self.checked += check_document(json.loads(response.text))
            self.answers += 1
        return response.text, response.status_code, response.headers

    def close(self) -> None:
        self._http.close()


def sdk(url: str, key: str, *, client: CheckedClient) -> stripe.StripeClient:
    """A StripeClient on the sandbox at ``url``: no retries (one request per call), every answer checked."""
    return stripe.StripeClient(key, base_addresses={"api": url}, max_network_retries=0, http_client=client)


@contextmanager
def checked_sdk(url: str, key: str) -> Iterator[stripe.StripeClient]:
    """``sdk`` with a CheckedClient of its own, closed on exit."""
    client = CheckedClient()
    try:
        yield sdk(url, key, client=client)
    finally:
        client.close()
