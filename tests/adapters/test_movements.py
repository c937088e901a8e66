"""Every Adyen modification of a payment, parametrised by kind: a refund (``create_refund``), a capture and a
cancel (``modify_payment``). Each request body is valid against its schema of Adyen's Checkout OpenAPI documents
(v71, v72) and equals Adyen's own example field for field, carries our idempotency key, and Adyen's documented
answer example (``status: received``, itself valid against its response schema) reads as Pending: the end comes
by webhooks and reports. What differs by kind is tested beside it (test_refunds.py, test_captures.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import respx

from psp_adapters.adyen.adapter import AdyenAdapter
from psp_adapters.protocol import ModificationRequest, PaymentOutcome, Pending, RefundRequest
from tests.adapters import adyen_schema
from tests.adapters.movement_oracle import ADYEN, adyen, adyen_example

PAYMENT = "993617894903480A"  #: the payment's pspReference in Adyen's examples


def refund(adapter: AdyenAdapter, key: str) -> PaymentOutcome:
    return adapter.create_refund(RefundRequest(payment_reference=PAYMENT, refund_reference="YOUR_UNIQUE_REFERENCE",
                                               amount=2500, currency="EUR"), idempotency_key=key)


def modify(kind: str) -> Callable[[AdyenAdapter, str], PaymentOutcome]:
    return lambda adapter, key: adapter.modify_payment(ModificationRequest(
        kind=kind, payment_reference=PAYMENT, modification_reference="YOUR_UNIQUE_REFERENCE", amount=2000,
        currency="EUR"), idempotency_key=key)


#: kind, Adyen's path segment, its request and answer examples, its schemas, our call, the Pending it reads as
KINDS: list[tuple[str, str, str, str, Callable[[AdyenAdapter, str], PaymentOutcome], Pending]] = [
    ("refund", "refunds", "post-payments-paymentPspReference-refunds-refund", "PaymentRefund", refund,
     Pending(psp_reference="993617894906488A", amount=2500, currency="EUR", raw_status="received",
             merchant_reference="YOUR_UNIQUE_REFERENCE")),
    ("capture", "captures", "post-payments-paymentPspReference-captures-capture", "PaymentCapture",
     modify("capture"), Pending(psp_reference="993617894906488A", amount=2000, currency="EUR",
                                raw_status="received", merchant_reference="YOUR_UNIQUE_REFERENCE")),
    ("cancel", "cancels", "post-payments-paymentPspReference-cancels-cancel-with-psp-reference", "PaymentCancel",
     modify("cancel"), Pending(psp_reference="993617894906488A", raw_status="received",
                               merchant_reference="YOUR_UNIQUE_REFERENCE")),
]


@pytest.mark.parametrize("version", ["v71", "v72"])
@pytest.mark.parametrize(("kind", "segment", "example", "schema", "call", "expected"), KINDS,
                         ids=[k[0] for k in KINDS])
def test_adyen_modification__a_valid_request_and_received_is_pending(
        router: respx.MockRouter, version: str, kind: str, segment: str, example: str, schema: str,
        call: Callable[[AdyenAdapter, str], PaymentOutcome], expected: Pending) -> None:
    request_example: Any = adyen_example(example)
    answer_example = adyen_example(f"{example}-201")
    adyen_schema.validate(f"{schema}Response", answer_example, version=version)
    route = router.post(f"{ADYEN}/{version}/payments/{PAYMENT}/{segment}").mock(
        return_value=httpx.Response(201, json=answer_example))
    adapter = adyen(version)
    answer = call(adapter, f"recon-{kind}-abc")
    body = json.loads(route.calls.last.request.content)
    adyen_schema.validate(f"{schema}Request", body, version=version)
    assert body == request_example  # Adyen's own example, field for field
    assert route.calls.last.request.headers["Idempotency-Key"] == f"recon-{kind}-abc"
    assert answer == expected
    adapter.close()
