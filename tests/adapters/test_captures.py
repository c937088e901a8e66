"""The authorise-now, capture-later calls of the Stripe and Adyen adapters against oracles they did not write
(respx; no network).

Stripe: the charge's ``capture_method=manual``, the capture and the cancel requests equal what Stripe's official SDK
(stripe-python) sends for the same calls; answers are Stripe's canonical PaymentIntent (fixtures3.json,
../shared/specs) in the statuses a manual capture goes through (``requires_capture``, ``succeeded`` with its
``amount_received``, ``canceled``). Adyen: the charge carries ``additionalData.manualCapture`` and stays valid
against ``PaymentRequest``; the capture and cancel bodies are valid against ``PaymentCaptureRequest`` and
``PaymentCancelRequest`` of Adyen's Checkout OpenAPI documents (v71, v72) and equal Adyen's own examples; the
answers are Adyen's documented examples (``status: received``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from psp_adapters.adyen.adapter import AdyenAdapter
from psp_adapters.errors import PspRejectedError, PspUnknownOutcome
from psp_adapters.protocol import (
    Authorised,
    CapturingAdapter,
    ChargeRequest,
    Failed,
    ModificationRequest,
    NotFound,
    Pending,
    Secret,
    Succeeded,
)
from psp_adapters.stripe.adapter import StripeAdapter
from tests.adapters import adyen_schema
from tests.adapters.movement_oracle import ADYEN, ADYEN_KEY, PI, STRIPE, STRIPE_KEY, adyen
from tests.adapters.stripe_oracle import Sent, canonical, sdk_request

CAPTURE = ModificationRequest(kind="capture", payment_reference=PI, modification_reference="order-7-capture1",
                              amount=700, currency="USD")
CANCEL = ModificationRequest(kind="cancel", payment_reference=PI, modification_reference="order-7-cancel1",
                             amount=1099, currency="USD")


def intent(**changes: Any) -> dict[str, Any]:
    return canonical("payment_intent", **{"id": PI, "capture_method": "manual", **changes})


def test_adapters__stripe_and_adyen_capture() -> None:
    assert isinstance(StripeAdapter(STRIPE, api_key=Secret(STRIPE_KEY)), CapturingAdapter)
    assert isinstance(AdyenAdapter(ADYEN, api_key=Secret(ADYEN_KEY), merchant_account="Shop",
                                   report_api_key=Secret("AQEreport")), CapturingAdapter)


def test_stripe_charge__manual_capture_sends_capture_method_as_stripe_python_does(
        stripe: StripeAdapter, router: respx.MockRouter) -> None:
    held = intent(status="requires_capture", amount_capturable=1099, metadata={"merchant_reference": "order-7"})
    route = router.post(f"{STRIPE}/v1/payment_intents").mock(return_value=httpx.Response(200, json=held))
    answer = stripe.create_payment(ChargeRequest("order-7", 1099, "USD", payment_method="pm_card_visa",
                                                 customer_reference="cus_1", manual_capture=True),
                                   idempotency_key="recon-k")
    ours = Sent.of(route.calls.last.request)
    assert ours.form[("capture_method", "manual")] == 1
    theirs = sdk_request(lambda client: client.v1.payment_intents.create(params={
        "amount": 1099, "currency": "usd", "payment_method": "pm_card_visa", "customer": "cus_1", "confirm": True,
        "off_session": True, "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
        "metadata": {"merchant_reference": "order-7"}, "capture_method": "manual"},
        options={"idempotency_key": "recon-k"}), api_key=STRIPE_KEY, base_url=STRIPE, answer=held)
    assert (ours.path, ours.form) == (theirs.path, theirs.form)
    assert answer == Authorised(psp_reference=PI, amount=1099, currency="USD", raw_status="requires_capture",
                                merchant_reference="order-7")


def test_stripe_capture__sends_what_stripe_python_sends_and_reads_the_amount_received(
        stripe: StripeAdapter, router: respx.MockRouter) -> None:
    captured = intent(status="succeeded", amount_received=700, amount_capturable=0)
    route = router.post(f"{STRIPE}/v1/payment_intents/{PI}/capture").mock(
        return_value=httpx.Response(200, json=captured))
    answer = stripe.modify_payment(CAPTURE, idempotency_key="recon-capture-abc")
    ours = Sent.of(route.calls.last.request)
    theirs = sdk_request(lambda client: client.v1.payment_intents.capture(
        PI, params={"amount_to_capture": 700, "metadata": {"capture_reference": "order-7-capture1"}},
        options={"idempotency_key": "recon-capture-abc"}), api_key=STRIPE_KEY, base_url=STRIPE, answer=captured)
    assert (ours.method, ours.path, ours.form, ours.idempotency_key) == (
        theirs.method, theirs.path, theirs.form, theirs.idempotency_key)
    assert answer == Succeeded(psp_reference=PI, amount=700, currency="USD", raw_status="succeeded")


def test_stripe_cancel__sends_what_stripe_python_sends_and_canceled_is_done(
        stripe: StripeAdapter, router: respx.MockRouter) -> None:
    canceled = intent(status="canceled", cancellation_reason="requested_by_customer")
    route = router.post(f"{STRIPE}/v1/payment_intents/{PI}/cancel").mock(
        return_value=httpx.Response(200, json=canceled))
    answer = stripe.modify_payment(CANCEL, idempotency_key="recon-cancel-abc")
    ours = Sent.of(route.calls.last.request)
    theirs = sdk_request(lambda client: client.v1.payment_intents.cancel(
        PI, options={"idempotency_key": "recon-cancel-abc"}), api_key=STRIPE_KEY, base_url=STRIPE, answer=canceled)
    assert (ours.method, ours.path, ours.form, ours.idempotency_key) == (
        theirs.method, theirs.path, theirs.form, theirs.idempotency_key)
    assert isinstance(answer, Succeeded) and answer.raw_status == "canceled"


@pytest.mark.parametrize(("status", "changes", "capture", "cancel"), [
    ("requires_capture", {}, Pending, Pending),  # neither happened yet
    ("succeeded", {"amount_received": 1099}, Succeeded, Failed),  # captured: a cancel cannot have happened
    ("canceled", {"cancellation_reason": "automatic"}, Failed, Succeeded),  # expired uncaptured, or our cancel
    ("processing", {}, Pending, Pending),
])
def test_stripe_fetch_modification__reads_the_intent(stripe: StripeAdapter, router: respx.MockRouter, status: str,
                                                     changes: dict[str, Any], capture: type, cancel: type) -> None:
    router.get(f"{STRIPE}/v1/payment_intents/{PI}").mock(
        return_value=httpx.Response(200, json=intent(status=status, **changes)))
    assert type(stripe.fetch_modification(CAPTURE)) is capture
    assert type(stripe.fetch_modification(CANCEL)) is cancel


def test_stripe_capture__a_refusal_a_lost_answer_and_a_missing_intent(stripe: StripeAdapter,
                                                                      router: respx.MockRouter) -> None:
    router.post(f"{STRIPE}/v1/payment_intents/{PI}/capture").mock(return_value=httpx.Response(400, json={"error": {
        "type": "invalid_request_error", "code": "payment_intent_unexpected_state",
        "message": "This PaymentIntent could not be captured because it has a status of canceled."}}))
    with pytest.raises(PspRejectedError):
        stripe.modify_payment(CAPTURE, idempotency_key="k1")
    router.post(f"{STRIPE}/v1/payment_intents/{PI}/capture").mock(side_effect=httpx.ReadTimeout("no answer"))
    with pytest.raises(PspUnknownOutcome):
        stripe.modify_payment(CAPTURE, idempotency_key="k1")
    router.get(f"{STRIPE}/v1/payment_intents/{PI}").mock(return_value=httpx.Response(404, json={"error": {
        "type": "invalid_request_error", "code": "resource_missing", "message": "No such payment_intent"}}))
    assert isinstance(stripe.fetch_modification(CAPTURE), NotFound)


@pytest.mark.parametrize("version", ["v71", "v72"])
def test_adyen_charge__manual_capture_is_valid_and_authorised_is_authorised(router: respx.MockRouter,
                                                                           version: str) -> None:
    answer_doc = {"pspReference": "993617894903480A", "resultCode": "Authorised", "merchantReference": "order-7",
                  "amount": {"value": 2000, "currency": "EUR"}}
    adyen_schema.validate_payment_response(answer_doc, version=version)
    route = router.post(f"{ADYEN}/{version}/payments").mock(return_value=httpx.Response(200, json=answer_doc))
    adapter = adyen(version)
    answer = adapter.create_payment(ChargeRequest("order-7", 2000, "EUR", payment_method="8315000000000001",
                                                  customer_reference="shopper-7", manual_capture=True),
                                    idempotency_key="recon-k")
    body = json.loads(route.calls.last.request.content)
    adyen_schema.validate_payment_request(body, version=version)
    assert body["additionalData"] == {"manualCapture": "true"}
    assert answer == Authorised(psp_reference="993617894903480A", merchant_reference="order-7", amount=2000,
                                currency="EUR", raw_status="Authorised")
    automatic = adapter.create_payment(ChargeRequest("order-8", 2000, "EUR", payment_method="8315000000000001",
                                                     customer_reference="shopper-7"), idempotency_key="recon-k2")
    assert "additionalData" not in json.loads(route.calls.last.request.content)
    assert isinstance(automatic, Succeeded)  # automatic capture: Authorised is the money taken
    adapter.close()


