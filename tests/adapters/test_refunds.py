"""The refund calls of the Stripe and Adyen adapters against oracles they did not write (respx; no network).

Stripe: the request equals what Stripe's official SDK (stripe-python) sends for ``refunds.create`` with the same
parameters; answers are Stripe's canonical Refund object (fixtures3.json, ../shared/specs) in each documented
status. Adyen: the request body is valid against ``PaymentRefundRequest`` of Adyen's Checkout OpenAPI documents
(v71, v72) and equals Adyen's own example; the answer is Adyen's documented example ``PaymentRefundResponse``
("status: received").
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
    Failed,
    NotFound,
    Pending,
    RefundingAdapter,
    RefundRef,
    RefundRequest,
    Secret,
    Succeeded,
    Unknown,
)
from psp_adapters.stripe.adapter import StripeAdapter
from tests.adapters import adyen_schema
from tests.adapters.movement_oracle import ADYEN, PI, STRIPE, STRIPE_KEY, adyen, adyen_example
from tests.adapters.stripe_oracle import Sent, canonical, listing, sdk_request

REFUND = RefundRequest(payment_reference=PI, refund_reference="rf-1042", amount=1500, currency="USD",
                       reason="requested_by_customer")


def refund_doc(**changes: Any) -> dict[str, Any]:
    return canonical("refund", **{"payment_intent": PI, "amount": 1500, "currency": "usd",
                                  "metadata": {"refund_reference": "rf-1042"}, **changes})


def test_adapters__stripe_and_adyen_refund() -> None:
    assert isinstance(StripeAdapter(STRIPE, api_key=Secret(STRIPE_KEY)), RefundingAdapter)
    assert StripeAdapter.refund_reasons == ("duplicate", "fraudulent", "requested_by_customer")
    assert AdyenAdapter.refund_reasons == tuple(adyen_schema.schema("PaymentRefundRequest")["properties"][
        "merchantRefundReason"]["enum"])


def test_stripe_create_refund__sends_what_stripe_python_sends(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    route = router.post(f"{STRIPE}/v1/refunds").mock(return_value=httpx.Response(200, json=refund_doc()))
    answer = stripe.create_refund(REFUND, idempotency_key="recon-refund-abc")
    ours = Sent.of(route.calls.last.request)
    theirs = sdk_request(lambda client: client.v1.refunds.create(
        params={"payment_intent": PI, "amount": 1500, "reason": "requested_by_customer",
                "metadata": {"refund_reference": "rf-1042"}}, options={"idempotency_key": "recon-refund-abc"}),
        api_key=STRIPE_KEY, base_url=STRIPE, answer=refund_doc())
    assert (ours.method, ours.path, ours.form, ours.idempotency_key) == (
        theirs.method, theirs.path, theirs.form, theirs.idempotency_key)
    assert answer == Succeeded(psp_reference="re_1Pgc72B7WZ01zgkWqPvrRrPE", amount=1500, currency="USD",
                               raw_status="succeeded", merchant_reference="rf-1042")


@pytest.mark.parametrize(("status", "expected"), [
    ("pending", Pending), ("requires_action", Pending), ("succeeded", Succeeded), ("failed", Failed),
    ("canceled", Failed), ("on_hold_somewhere", Unknown)])
def test_stripe_refund__every_documented_status_is_mapped(stripe: StripeAdapter, router: respx.MockRouter,
                                                          status: str, expected: type) -> None:
    router.get(f"{STRIPE}/v1/refunds/re_1").mock(return_value=httpx.Response(
        200, json=refund_doc(id="re_1", status=status, failure_reason="expired_or_canceled_card")))
    answer = stripe.fetch_refund(RefundRef(payment_reference=PI, refund_reference="rf-1042", psp_refund_id="re_1"))
    assert type(answer) is expected and answer.psp_reference == "re_1" and answer.raw_status == status
    if expected is Failed:
        assert answer.reason == "expired_or_canceled_card"  # type: ignore[attr-defined]


def test_stripe_fetch_refund__by_our_reference_among_the_intents_refunds(stripe: StripeAdapter,
                                                                         router: respx.MockRouter) -> None:
    route = router.get(f"{STRIPE}/v1/refunds").mock(return_value=httpx.Response(200, json=listing("/v1/refunds", [
        refund_doc(id="re_other", metadata={"refund_reference": "rf-other"}), refund_doc(id="re_ours")])))
    answer = stripe.fetch_refund(RefundRef(payment_reference=PI, refund_reference="rf-1042"))
    assert isinstance(answer, Succeeded) and answer.psp_reference == "re_ours"
    assert route.calls.last.request.url.params["payment_intent"] == PI
    missing = stripe.fetch_refund(RefundRef(payment_reference=PI, refund_reference="rf-none"))
    assert missing == NotFound(merchant_reference="rf-none")


def test_stripe_fetch_refund__an_unknown_id_is_not_found(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.get(f"{STRIPE}/v1/refunds/re_gone").mock(return_value=httpx.Response(404, json={"error": {
        "type": "invalid_request_error", "code": "resource_missing", "message": "No such refund: 're_gone'"}}))
    answer = stripe.fetch_refund(RefundRef(payment_reference=PI, refund_reference="rf-1042", psp_refund_id="re_gone"))
    assert answer == NotFound(psp_reference="re_gone", merchant_reference="rf-1042")


def test_stripe_create_refund__a_refusal_and_a_lost_answer(stripe: StripeAdapter, router: respx.MockRouter) -> None:
    router.post(f"{STRIPE}/v1/refunds").mock(return_value=httpx.Response(400, json={"error": {
        "type": "invalid_request_error", "code": "charge_already_refunded",
        "message": "Charge ch_1 has already been refunded."}}))
    with pytest.raises(PspRejectedError):
        stripe.create_refund(REFUND, idempotency_key="k1")
    router.post(f"{STRIPE}/v1/refunds").mock(side_effect=httpx.ReadTimeout("no answer"))
    with pytest.raises(PspUnknownOutcome):
        stripe.create_refund(REFUND, idempotency_key="k1")


@pytest.mark.parametrize("version", ["v71", "v72"])
def test_adyen_create_refund__a_reason_is_adyens_merchant_refund_reason(router: respx.MockRouter,
                                                                         version: str) -> None:
    route = router.post(f"{ADYEN}/{version}/payments/993617894903480A/refunds").mock(
        return_value=httpx.Response(201, json=adyen_example("post-payments-paymentPspReference-refunds-refund-201")))
    adapter = adyen(version)
    adapter.create_refund(RefundRequest(payment_reference="993617894903480A", refund_reference="r2", amount=100,
                                        currency="EUR", reason="CUSTOMER REQUEST"), idempotency_key="k2")
    adyen_schema.validate("PaymentRefundRequest", json.loads(route.calls.last.request.content), version=version)
    assert json.loads(route.calls.last.request.content)["merchantRefundReason"] == "CUSTOMER REQUEST"
    adapter.close()
