"""Shared pieces of the adapter tests: recorded fixtures, fake credentials, and one Harness per adapter.

The conformance suite (``test_conformance.py``) runs once per name in ``psp_adapters.registry.names()`` and
drives each adapter only through its Harness: how to build it against a respx-mocked host, which routes its
create and fetch calls hit, what an error answer looks like, and which wire statuses exist.

To add an adapter (e.g. the sandbox once ``psp_adapters/sandbox/adapter.py`` lands): write a function
returning a ``Harness`` (import the adapter inside it) and add it to ``HARNESSES`` under its registry name.
``sandbox_harness`` below is already written from ``psp_adapters/sandbox/wire.py``'s documented shapes.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
import respx

from psp_adapters import registry
from psp_adapters.protocol import ChargeRequest, PspAdapter, PspRef, Secret

HERE = Path(__file__).parent
#: a frozen "now" for adapters (Retry-After dates, Adyen's report days)
NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)
#: fake credentials; every test that can checks they never escape
STRIPE_KEY = "sk_test_51NotARealKeyButLooksLikeOne0000"
ADYEN_KEY = "AQEyhmfxNotARealKeyButLooksLikeOne0000qwerty"
ADYEN_REPORT_KEY = "AQEyhmfxReportUserKeyNotReal0000asdfgh"
SANDBOX_KEY = "sandbox-secret-key-0000"

STRIPE_URL = "https://stripe.test"
ADYEN_URL = "https://checkout.adyen.test"
ADYEN_REPORT_URL = "https://reports.adyen.test"
SANDBOX_URL = "https://sandbox.test"


def fixture_text(psp: str, name: str) -> str:
    """A recorded fixture of ``tests/adapters/<psp>/fixtures/`` as text."""
    return (HERE / psp / "fixtures" / name).read_text(encoding="utf-8")


def fixture_json(psp: str, name: str) -> Any:
    """A recorded JSON fixture, decoded (a fresh copy each call: tests may edit it)."""
    return json.loads(fixture_text(psp, name))


CHARGE = ChargeRequest(
    merchant_reference="order-1042",
    amount=2000,
    currency="USD",
    payment_method="pm_card_visa",
    description="order 1042",
)


@dataclass(frozen=True)
class StatusProbe:
    """One status field: the call that reads it, and how to answer that call with a given wire status."""

    call: Literal["create", "fetch"]
    statuses: tuple[str, ...]  #: every value of the adapter's wire Enum for this field
    respond: Callable[[str], httpx.Response]  #: an answer carrying that status


@dataclass(frozen=True)
class Harness:
    """How the conformance suite drives one adapter."""

    name: str
    build: Callable[[], PspAdapter]  #: a fresh adapter aimed at the mocked hosts
    create_route: tuple[str, str]  #: (HTTP method, URL regex) of create_payment's request
    fetch_route: tuple[str, str]  #: (HTTP method, URL regex) of fetch_payment's request(s)
    fetch_ref: PspRef
    error: Callable[[int], httpx.Response]  #: the PSP's error answer for an HTTP status
    probes: tuple[StatusProbe, ...]
    secrets: tuple[str, ...]
    charge: ChargeRequest = CHARGE


def stripe_harness() -> Harness:
    """Answers built from Stripe's canonical PaymentIntent (``stripe_oracle.canonical``, read from
    ../shared/specs at test time; skipped when absent). Error bodies follow the error object of
    https://docs.stripe.com/api/errors (fixtures3.json has none)."""
    from psp_adapters.stripe import StripeAdapter
    from psp_adapters.stripe.wire import PaymentIntentStatus
    from tests.adapters.stripe_oracle import canonical

    canonical("payment_intent")  # skip now, not inside a probe, when the canonical objects are missing

    def intent(status: str) -> httpx.Response:
        return httpx.Response(200, json=canonical("payment_intent", status=status))

    def error(status: int) -> httpx.Response:
        name = {401: "error_authentication.json", 429: "error_rate_limit.json"}.get(status, "error_api.json")
        return httpx.Response(status, json=fixture_json("stripe", name))

    return Harness(
        name="stripe",
        build=lambda: StripeAdapter(STRIPE_URL, api_key=Secret(STRIPE_KEY), now_func=lambda: NOW),
        create_route=("POST", re.escape(STRIPE_URL) + r"/v1/payment_intents$"),
        fetch_route=("GET", re.escape(STRIPE_URL) + r"/v1/payment_intents/pi_"),
        fetch_ref=PspRef(psp_reference="pi_1PgafyB7WZ01zgkWSjxsAJo3"),
        error=error,
        probes=(
            StatusProbe("create", tuple(s.value for s in PaymentIntentStatus), intent),
            StatusProbe("fetch", tuple(s.value for s in PaymentIntentStatus), intent),
        ),
        secrets=(STRIPE_KEY,),
        # a merchant-initiated charge of a stored card names the PaymentMethod and its Customer
        charge=ChargeRequest(merchant_reference=CHARGE.merchant_reference, amount=CHARGE.amount,
                             currency=CHARGE.currency, payment_method="pm_card_visa",
                             customer_reference="cus_QXg1o8vcGmoR32", description=CHARGE.description),
    )


def adyen_report(record_type: str) -> httpx.Response:
    """A one-row Payment accounting report for payment QFQTPCQ8HXSKGK82 with the given record type (the
    documented standard columns, as the recorded fixtures have them)."""
    header = fixture_text("adyen", "payments_accounting_report_2024_05_01.csv").splitlines()[0]
    row = (
        f"AcmeCompany,AcmeShopEU,QFQTPCQ8HXSKGK82,order-2001,visa,2024-05-02 11:14:02,CEST,EUR,12.50,"
        f"{record_type}" + "," * 15
    )
    return httpx.Response(200, text=f"{header}\n{row}\n")


def adyen_harness() -> Harness:
    from psp_adapters.adyen import AdyenAdapter
    from psp_adapters.adyen.wire import RecordType, ResultCode

    def payment(result_code: str) -> httpx.Response:
        doc = fixture_json("adyen", "payment_authorised.json")
        doc["resultCode"] = result_code
        return httpx.Response(200, json=doc)

    def error(status: int) -> httpx.Response:
        doc = fixture_json("adyen", "error_security.json" if status in (401, 403) else "error_internal.json")
        doc["status"] = status
        return httpx.Response(status, json=doc)

    return Harness(
        name="adyen",
        build=lambda: AdyenAdapter(
            ADYEN_URL,
            api_key=Secret(ADYEN_KEY),
            merchant_account="AcmeShopEU",
            report_base_url=ADYEN_REPORT_URL,
            report_api_key=Secret(ADYEN_REPORT_KEY),
            lookback_days=0,
            now_func=lambda: NOW,
        ),
        create_route=("POST", re.escape(ADYEN_URL) + r"/v72/payments$"),  # the default Checkout version
        fetch_route=("GET", re.escape(ADYEN_REPORT_URL) + r"/reports/download/MerchantAccount/AcmeShopEU/"),
        fetch_ref=PspRef(psp_reference="QFQTPCQ8HXSKGK82"),
        error=error,
        probes=(
            StatusProbe("create", tuple(s.value for s in ResultCode), payment),
            StatusProbe("fetch", tuple(s.value for s in RecordType), adyen_report),
        ),
        secrets=(ADYEN_KEY, ADYEN_REPORT_KEY),
        # a charge Adyen can take: a stored card (its storedPaymentMethodId) of a known shopper
        charge=ChargeRequest(merchant_reference=CHARGE.merchant_reference, amount=CHARGE.amount,
                             currency=CHARGE.currency, payment_method="8415718415172200",
                             customer_reference="shopper-1042", description=CHARGE.description),
    )


def sandbox_harness() -> Harness:
    """Built from ``psp_adapters/sandbox/wire.py``: POST /v1/payments (201), GET /v1/payments/{ref}."""
    from psp_adapters.sandbox.adapter import SandboxAdapter  # ImportError until the adapter lands
    from psp_adapters.sandbox.wire import PaymentStatus

    def payment(status: str, code: int = 200) -> httpx.Response:
        return httpx.Response(
            code,
            json={
                "object": "payment",
                "psp_reference": "psp_1",
                "merchant_reference": CHARGE.merchant_reference,
                "amount": CHARGE.amount,
                "currency": CHARGE.currency,
                "merchant_account": None,
                "payment_method": None,
                "status": status,
                "failure_reason": None,
                "created_at": "2024-05-01T12:00:00.000000+00:00",
                "updated_at": "2024-05-01T12:00:00.000000+00:00",
                "settled_at": None,
            },
        )

    def error(status: int) -> httpx.Response:
        kind = "authentication_error" if status == 401 else "api_error"
        return httpx.Response(status, json={"error": {"type": kind, "code": kind, "message": "injected"}})

    return Harness(
        name="sandbox",
        build=lambda: SandboxAdapter(SANDBOX_URL, api_key=Secret(SANDBOX_KEY)),
        create_route=("POST", re.escape(SANDBOX_URL) + r"/v1/payments$"),
        fetch_route=("GET", re.escape(SANDBOX_URL) + r"/v1/payments/psp_1$"),
        fetch_ref=PspRef(psp_reference="psp_1"),
        error=error,
        probes=(
            StatusProbe("create", tuple(s.value for s in PaymentStatus), lambda s: payment(s, 201)),
            StatusProbe("fetch", tuple(s.value for s in PaymentStatus), payment),
        ),
        secrets=(SANDBOX_KEY,),
    )


#: registry name -> harness factory; the conformance suite fails for a registered adapter without one
HARNESSES: dict[str, Callable[[], Harness]] = {
    "adyen": adyen_harness,
    "sandbox": sandbox_harness,
    "stripe": stripe_harness,
}


@pytest.fixture(params=registry.names())
def harness(request: pytest.FixtureRequest) -> Harness:
    """One Harness per registered adapter; the sandbox is skipped only while its adapter is not importable."""
    name = request.param
    if name == "sandbox":
        try:
            importlib.import_module("psp_adapters.sandbox.adapter")
        except ImportError as exc:
            pytest.skip(f"psp_adapters.sandbox.adapter cannot be imported yet ({exc})")
    if name not in HARNESSES:
        pytest.fail(f"adapter {name!r} is registered but has no Harness in tests/adapters/conftest.py")
    return HARNESSES[name]()


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    """A respx router that mocks every httpx request made inside the test (unmatched requests fail)."""
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as mock:
        yield mock


@pytest.fixture
def stripe() -> Iterator[Any]:
    """The Stripe adapter on the movement tests' mocked host (tests/adapters/movement_oracle.py), closed after the
    test; a module that builds its own names a fixture of its own."""
    from tests.adapters.movement_oracle import stripe_adapter

    with stripe_adapter() as adapter:
        yield adapter
