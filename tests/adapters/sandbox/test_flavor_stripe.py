"""The sandbox's Stripe flavour over real HTTP on 127.0.0.1, driven by Stripe's official SDK (``stripe``).

The SDK is the oracle of the wire: if it builds typed objects and raises the right exception classes from our
answers, the wire is Stripe's as Stripe's own client understands it. Object shapes are compared with Stripe's
canonical example objects (``fixtures3.json``), read from ``<repo>/../shared/specs/`` at test time.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import stripe

from psp_adapters.sandbox import SandboxServer
from psp_adapters.sandbox.records import DISPUTE_FEE, sandbox_fee
from tests.adapters.sandbox.stripe_checks import checked_sdk

KEY = "sk_test_sandbox_123"
SPECS = Path(__file__).resolve().parents[3].parent / "shared" / "specs"
START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
INTENT = {
    "amount": 1250,
    "currency": "eur",
    "payment_method": "pm_card_visa",
    "customer": "cus_123",
    "confirm": True,
    "off_session": True,
    "metadata": {"merchant_reference": "order-1"},
    "description": "order 1",
}


class Clock:
    """The server's injected clock: tests move time instead of sleeping."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(tmp_path: Path, clock: Clock) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "stripe.db", flavor="stripe", api_key=KEY, now_func=clock) as srv:
        yield srv


@pytest.fixture
def sdk(server: SandboxServer) -> Iterator[stripe.StripeClient]:
    """Stripe's SDK on the sandbox, every answer checked against Stripe's canonical objects (stripe_checks)."""
    with checked_sdk(server.url, KEY) as client:
        yield client


@pytest.fixture
def http(server: SandboxServer) -> Iterator[httpx.Client]:
    """Raw HTTP, for what the SDK hides (headers, bytes) and for the admin API."""
    with httpx.Client(base_url=server.url, timeout=5.0, headers={"Authorization": f"Bearer {KEY}"}) as c:
        yield c


@pytest.fixture(scope="module")
def canonical() -> dict[str, Any]:
    path = SPECS / "stripe" / "fixtures3.json"
    if not path.exists():
        pytest.skip(f"Stripe's canonical objects are absent ({path}); see shared/specs/README.md")
    resources: dict[str, Any] = json.loads(path.read_text())["resources"]
    return resources


def create(sdk: stripe.StripeClient, key: str = "k1", **params: Any) -> stripe.PaymentIntent:
    params = {name: value for name, value in {**INTENT, **params}.items() if value is not None}
    return sdk.v1.payment_intents.create(params=params, options={"idempotency_key": key})  # type: ignore[arg-type]


def form(**params: object) -> dict[str, str]:
    """INTENT (updated by ``params``) as Stripe's form encoding, for raw requests."""
    merged: dict[str, Any] = {**INTENT, **params}
    data = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in merged.items() if k != "metadata"}
    data.update({f"metadata[{k}]": v for k, v in merged.get("metadata", {}).items()})
    return data


def post(http: httpx.Client, key: str, **params: object) -> httpx.Response:
    return http.post("/v1/payment_intents", data=form(**params), headers={"Idempotency-Key": key})


def set_faults(http: httpx.Client, **faults: object) -> None:
    assert http.post("/_admin/faults", json=faults).status_code == 200


def charges(http: httpx.Client, key: str | None = None) -> dict[str, Any]:
    return dict(http.get("/_admin/charges", params={"idempotency_key": key} if key else {}).json())


def assert_shaped_like(obj: dict[str, Any], canonical: dict[str, Any], *required: str) -> None:
    """Every field we send is one of Stripe's, of the same JSON type where both are set (an expanded object for
    an id); ``required`` are sent."""
    assert set(obj) <= set(canonical), sorted(set(obj) - set(canonical))
    assert set(required) <= set(obj), sorted(set(required) - set(obj))
    for name, value in obj.items():
        theirs = canonical[name]
        if value is not None and theirs is not None:
            expanded = isinstance(value, dict) and isinstance(theirs, str) and value.get("id")
            assert type(value) is type(theirs) or expanded, name


# -- PaymentIntents ----------------------------------------------------------------------------------------


def test_create__the_sdk_reads_a_succeeded_payment_intent_shaped_like_stripes(
    sdk: stripe.StripeClient, http: httpx.Client, canonical: dict[str, Any]
) -> None:
    intent = create(sdk)

    assert isinstance(intent, stripe.PaymentIntent)
    assert intent.id.startswith("pi_") and intent.latest_charge == "ch_" + intent.id[3:]
    assert (intent.status, intent.amount, intent.amount_received, intent.currency) == ("succeeded", 1250, 1250, "eur")
    assert (intent.customer, intent.payment_method, intent.livemode) == ("cus_123", "pm_card_visa", False)
    assert intent.metadata.to_dict() == {"merchant_reference": "order-1"}
    assert intent.created == int(START.timestamp()) and intent.last_payment_error is None
    raw = http.get(f"/v1/payment_intents/{intent.id}").json()
    assert_shaped_like(
        raw,
        canonical["payment_intent"],
        "id",
        "object",
        "amount",
        "amount_received",
        "currency",
        "status",
        "customer",
        "payment_method",
        "metadata",
        "latest_charge",
        "last_payment_error",
        "created",
        "livemode",
    )
    expanded = http.get(f"/v1/payment_intents/{intent.id}", params={"expand[]": "latest_charge"}).json()
    assert_shaped_like(expanded["latest_charge"], canonical["charge"], "id", "payment_intent", "balance_transaction")
    assert sdk.v1.payment_intents.retrieve(intent.id).to_dict() == intent.to_dict()


def test_retrieve__an_unknown_intent_is_404_resource_missing(sdk: stripe.StripeClient) -> None:
    with pytest.raises(stripe.InvalidRequestError) as caught:
        sdk.v1.payment_intents.retrieve("pi_missing")

    assert (caught.value.http_status, caught.value.code) == (404, "resource_missing")


def test_search__finds_intents_by_metadata_newest_first(sdk: stripe.StripeClient, clock: Clock) -> None:
    first = create(sdk, "k1")
    clock.advance(seconds=1)
    second = create(sdk, "k2")
    create(sdk, "k3", metadata={"merchant_reference": "o'brien"})

    found = sdk.v1.payment_intents.search(params={"query": "metadata['merchant_reference']:'order-1'", "limit": 10})
    quoted = sdk.v1.payment_intents.search(params={"query": r"metadata['merchant_reference']:'o\'brien'"})

    assert found.object == "search_result" and found.has_more is False
    assert [p.id for p in found.data] == [second.id, first.id]
    assert [p.metadata["merchant_reference"] for p in quoted.data] == ["o'brien"]
    paged = sdk.v1.payment_intents.search(params={"query": "metadata['merchant_reference']:'order-1'", "limit": 1})
    assert paged.has_more and paged.next_page
    rest = sdk.v1.payment_intents.search(
        params={"query": "metadata['merchant_reference']:'order-1'", "limit": 1, "page": paged.next_page}
    )
    assert [p.id for p in rest.data] == [first.id]
    for query in ("metadata['a']:'b' AND x", "nope:'x'", "status:succeeded", "amount>'x'"):
        with pytest.raises(stripe.InvalidRequestError):
            sdk.v1.payment_intents.search(params={"query": query})


def test_auth__a_wrong_or_missing_key_is_401(server: SandboxServer) -> None:
    wrong = stripe.StripeClient("sk_test_wrong", base_addresses={"api": server.url}, max_network_retries=0)
    with pytest.raises(stripe.AuthenticationError):
        create(wrong)
    with httpx.Client(base_url=server.url) as anonymous:
        response = anonymous.post("/v1/payment_intents", data=form())
        assert response.status_code == 401 and "sk_test" not in response.text
        assert anonymous.get("/_admin/charges").json()["charges"] == 0  # nothing was charged; admin needs no key


def test_validation__missing_payment_method_or_bad_params_are_400_and_save_nothing(
    sdk: stripe.StripeClient,
) -> None:
    with pytest.raises(stripe.InvalidRequestError) as caught:
        create(sdk, "k1", payment_method=None)
    assert (caught.value.http_status, caught.value.code) == (400, "payment_intent_unexpected_state")
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        create(sdk, "k1", card_number="4242")
    assert (unknown.value.code, unknown.value.param) == ("parameter_unknown", "card_number")

    assert create(sdk, "k1").status == "succeeded"  # the key was not burnt by the invalid requests


# -- outcomes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "code", "decline_code"),
    [
        ({"payment_method": "pm_card_declined"}, "card_declined", "generic_decline"),
        ({"payment_method": "pm_card_insufficient_funds"}, "card_declined", "insufficient_funds"),
        ({"payment_method": "pm_card_expired"}, "expired_card", "expired_card"),
    ],
)
def test_decline__is_a_402_card_error_with_the_intent_back_in_requires_payment_method(
    sdk: stripe.StripeClient, params: dict[str, Any], code: str, decline_code: str
) -> None:
    with pytest.raises(stripe.CardError) as caught:
        create(sdk, **params)

    error = caught.value
    assert (error.http_status, error.code, error.error.decline_code) == (402, code, decline_code)  # type: ignore[union-attr]
    intent = error.error.payment_intent  # type: ignore[union-attr]
    assert intent.status == "requires_payment_method" and intent.amount_received == 0
    assert intent.last_payment_error.decline_code == decline_code
    assert sdk.v1.payment_intents.retrieve(intent.id).status == "requires_payment_method"


def test_requires_action__off_session_is_a_402_authentication_required(
    sdk: stripe.StripeClient, http: httpx.Client
) -> None:
    set_faults(http, rate_requires_action=1.0)

    with pytest.raises(stripe.CardError) as caught:
        create(sdk)

    assert (caught.value.code, caught.value.error.decline_code) == ("authentication_required",) * 2  # type: ignore[union-attr]
    intent = caught.value.error.payment_intent  # type: ignore[union-attr]
    assert intent.status == "requires_payment_method"
    assert intent.last_payment_error.code == "authentication_required"
    assert charges(http)["charges"] == 1


def test_slow_settlement__processing_then_succeeded_with_its_balance_transaction(
    sdk: stripe.StripeClient, http: httpx.Client, clock: Clock
) -> None:
    set_faults(http, pending_fraction=1.0, settle_after_seconds=60.0)
    intent = create(sdk)
    assert (intent.status, intent.amount_received) == ("processing", 0)
    assert sdk.v1.balance_transactions.list().data == []

    clock.advance(seconds=61)

    assert sdk.v1.payment_intents.retrieve(intent.id).status == "succeeded"
    [txn] = sdk.v1.balance_transactions.list().data
    assert (txn.source, txn.created) == (intent.latest_charge, int((START + timedelta(seconds=60)).timestamp()))


def test_slow_settlement__can_fail_into_requires_payment_method(
    sdk: stripe.StripeClient, http: httpx.Client, clock: Clock
) -> None:
    set_faults(http, pending_fraction=1.0, pending_fail_fraction=1.0, settle_after_seconds=60.0)
    intent = create(sdk)

    clock.advance(minutes=2)

    settled = sdk.v1.payment_intents.retrieve(intent.id)
    assert settled.status == "requires_payment_method"
    assert settled.last_payment_error.type == "card_error"  # type: ignore[union-attr]


# -- idempotency ---------------------------------------------------------------------------------------------


def test_idempotency__same_key_same_params_replays_byte_for_byte_without_a_second_charge(
    http: httpx.Client,
) -> None:
    first = post(http, "k1")
    second = post(http, "k1")

    assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
    assert (second.status_code, second.content) == (200, first.content)
    assert second.headers["Idempotent-Replayed"] == "true" and second.headers["Idempotency-Key"] == "k1"
    assert first.headers["Request-Id"].startswith("req_")
    assert charges(http) == {"keys": 1, "charges": 1, "max_per_key": 1, "per_key": {"k1": 1}}


def test_idempotency__same_key_other_params_is_400_idempotency_error(sdk: stripe.StripeClient) -> None:
    create(sdk, "k1")

    with pytest.raises(stripe.IdempotencyError) as caught:
        create(sdk, "k1", amount=999)

    assert caught.value.http_status == 400
    assert "same parameters they were first used with" in str(caught.value.user_message)


def test_idempotency__a_request_while_the_first_executes_is_409_in_use(
    server: SandboxServer, http: httpx.Client
) -> None:
    set_faults(http, latency_ms=2500)  # the first request keeps the key in flight this long (loaded CI: be generous)
    results: dict[str, httpx.Response] = {}

    def first() -> None:
        with httpx.Client(base_url=server.url, timeout=5.0, headers=dict(http.headers)) as own:
            results["first"] = post(own, "k1")

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(0.6)
    second = post(http, "k1")
    thread.join()
    set_faults(http, latency_ms=0)

    assert second.status_code == 409
    assert second.json()["error"]["code"] == "idempotency_key_in_use"
    assert results["first"].status_code == 200
    assert post(http, "k1").content == results["first"].content  # the 409 was not saved
    assert charges(http, "k1")["charges"] == 1


def test_idempotency__a_500_once_executing_is_saved_and_replayed_for_its_key(
    sdk: stripe.StripeClient, http: httpx.Client
) -> None:
    set_faults(http, rate_500=1.0)
    with pytest.raises(stripe.APIError) as caught:
        create(sdk, "k1")
    assert caught.value.http_status == 500
    assert caught.value.headers["Stripe-Should-Retry"] == "false"  # type: ignore[index]
    set_faults(http, rate_500=0.0)

    replay = post(http, "k1")

    assert replay.status_code == 500 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.headers["Stripe-Should-Retry"] == "false"
    assert replay.json()["error"]["type"] == "api_error"
    assert charges(http, "k1")["charges"] == 0  # a saved 500 charged nothing
    assert create(sdk, "k2").status == "succeeded"  # a new key executes


def test_idempotency__429_and_503_are_not_saved(sdk: stripe.StripeClient, http: httpx.Client) -> None:
    set_faults(http, rate_429=1.0, retry_after_seconds=3)
    limited = post(http, "k1")
    assert (limited.status_code, limited.headers["Retry-After"]) == (429, "3")
    assert limited.json()["error"]["code"] == "rate_limit"
    with pytest.raises(stripe.RateLimitError):
        create(sdk, "k1")
    set_faults(http, rate_429=0.0, rate_503=1.0)
    assert post(http, "k1").status_code == 503
    set_faults(http, rate_503=0.0)

    assert create(sdk, "k1").status == "succeeded"


def test_idempotency__keys_are_forgotten_after_24_hours_of_the_servers_clock(
    sdk: stripe.StripeClient, http: httpx.Client, clock: Clock
) -> None:
    first = create(sdk, "k1")
    clock.advance(hours=23, minutes=59)
    with pytest.raises(stripe.IdempotencyError):
        create(sdk, "k1", amount=999)
    assert create(sdk, "k1").id == first.id  # still the saved answer

    clock.advance(minutes=2)
    again = create(sdk, "k1", amount=999)

    assert again.id != first.id and again.amount == 999  # a new request: a second charge under the old key
    assert charges(http, "k1")["charges"] == 2


def test_idempotency__a_create_without_a_key_simply_executes(http: httpx.Client) -> None:
    # raw HTTP: the SDK makes up a key for every POST
    first, second = (http.post("/v1/payment_intents", data=form()).json() for _ in range(2))

    assert first["id"] != second["id"] and first["status"] == second["status"] == "succeeded"
    assert charges(http) == {"keys": 0, "charges": 0, "max_per_key": 0, "per_key": {}, "without_key": 2}


# -- balance transactions ------------------------------------------------------------------------------------


def test_balance_transactions__one_per_succeeded_charge_with_the_fee_and_the_charge_expanded(
    sdk: stripe.StripeClient, http: httpx.Client, canonical: dict[str, Any]
) -> None:
    intent = create(sdk, "k1", amount=1000)
    with pytest.raises(stripe.CardError):
        create(sdk, "k2", payment_method="pm_card_declined")  # declined: no balance transaction

    listing = sdk.v1.balance_transactions.list(params={"expand": ["data.source"]})

    [txn] = listing.data
    assert isinstance(txn, stripe.BalanceTransaction)
    assert (txn.id, txn.type, txn.reporting_category) == ("txn_" + intent.id[3:], "charge", "charge")
    assert (txn.amount, txn.fee, txn.net, txn.currency) == (1000, sandbox_fee(1000), 1000 - 59, "eur")
    charge = txn.source
    assert isinstance(charge, stripe.Charge)
    assert (charge.id, charge.payment_intent, charge.status) == (intent.latest_charge, intent.id, "succeeded")
    assert charge.metadata.to_dict() == {"merchant_reference": "order-1"}
    assert (charge.refunded, charge.amount_refunded, charge.disputed) == (False, 0, False)
    raw = http.get("/v1/balance_transactions", params={"expand[]": "data.source"}).json()
    assert raw["object"] == "list" and raw["url"] == "/v1/balance_transactions"
    assert_shaped_like(
        raw["data"][0],
        canonical["balance_transaction"],
        "amount",
        "fee",
        "net",
        "currency",
        "type",
        "reporting_category",
        "source",
        "created",
    )
    assert_shaped_like(
        raw["data"][0]["source"],
        canonical["charge"],
        "payment_intent",
        "metadata",
        "refunded",
        "amount_refunded",
        "disputed",
    )
    assert http.get("/v1/balance_transactions").json()["data"][0]["source"] == intent.latest_charge


def test_balance_transactions__refunds_and_disputes_are_negative_and_name_their_charge(
    sdk: stripe.StripeClient, http: httpx.Client, clock: Clock, canonical: dict[str, Any]
) -> None:
    refunded = create(sdk, "k1", amount=1000)
    disputed = create(sdk, "k2", amount=2000, metadata={"merchant_reference": "order-2"})
    clock.advance(seconds=10)
    refund = http.post(f"/_admin/payments/{refunded.id}/refund", json={"amount": 400}).json()
    clock.advance(seconds=10)
    dispute = http.post(f"/_admin/payments/{disputed.id}/dispute", json={}).json()
    assert http.post(f"/_admin/payments/{refunded.id}/refund", json={"amount": 601}).status_code == 400
    assert http.post(f"/_admin/payments/{disputed.id}/dispute", json={}).status_code == 400

    data = sdk.v1.balance_transactions.list(params={"expand": ["data.source"]}).data

    assert [t.reporting_category for t in data] == ["dispute", "refund", "charge", "charge"]
    chargeback, refunding = data[0], data[1]
    assert (chargeback.type, chargeback.amount, chargeback.fee) == ("adjustment", -2000, DISPUTE_FEE)
    assert chargeback.net == -2000 - DISPUTE_FEE
    assert (chargeback.source.id, chargeback.source.charge) == (dispute["id"], disputed.latest_charge)
    assert chargeback.source.payment_intent == disputed.id
    assert (refunding.type, refunding.amount, refunding.fee, refunding.net) == ("refund", -400, 0, -400)
    assert (refunding.source.id, refunding.source.charge) == (refund["id"], refunded.latest_charge)
    assert refunding.source.payment_intent == refunded.id
    charges_by_intent = {t.source.payment_intent: t.source for t in data if t.type == "charge"}
    assert (charges_by_intent[refunded.id].amount_refunded, charges_by_intent[refunded.id].refunded) == (400, False)
    assert charges_by_intent[disputed.id].disputed is True
    assert_shaped_like(refund, canonical["refund"], "id", "amount", "charge", "payment_intent", "status")
    assert_shaped_like(dispute, canonical["dispute"], "id", "amount", "charge", "payment_intent", "status")
    assert http.post(f"/_admin/payments/{refunded.id}/refund", json={}).json()["amount"] == 600  # the rest
    [full] = [t for t in sdk.v1.balance_transactions.list().data if t.type == "refund" and t.amount == -600]
    assert full.source.startswith("re_")


def test_balance_transactions__created_window_and_starting_after_page_newest_first(
    sdk: stripe.StripeClient, clock: Clock
) -> None:
    intents = []
    for i in range(5):
        intents.append(create(sdk, f"k{i}"))
        clock.advance(seconds=100)
    expected = ["txn_" + p.id[3:] for p in reversed(intents)]

    seen, after = [], None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"starting_after": after} if after else {})}
        page = sdk.v1.balance_transactions.list(params=params)
        seen += [t.id for t in page.data]
        if not page.has_more:
            break
        after = page.data[-1].id
    window = sdk.v1.balance_transactions.list(
        params={"created": {"gte": int(START.timestamp()) + 100, "lt": int(START.timestamp()) + 300}}
    )
    every = [t.id for t in sdk.v1.balance_transactions.list(params={"limit": 2}).auto_paging_iter()]

    assert seen == expected == every
    assert [t.id for t in window.data] == expected[2:4]
    with pytest.raises(stripe.InvalidRequestError):
        sdk.v1.balance_transactions.list(params={"starting_after": "txn_missing"})


# -- admin ---------------------------------------------------------------------------------------------------


def test_admin__answers_in_stripe_shapes_and_moves_the_intent(sdk: stripe.StripeClient, http: httpx.Client) -> None:
    intent = create(sdk, "k1")

    failed = http.post(f"/_admin/payments/{intent.id}/fail", json={"reason": "fraud"}).json()
    canceled = http.post(f"/_admin/payments/{intent.id}/cancel", json={}).json()
    settled = http.post(f"/_admin/payments/{intent.id}/settle", json={}).json()

    assert (failed["object"], failed["status"]) == ("payment_intent", "requires_payment_method")
    assert canceled["status"] == "canceled" and canceled["canceled_at"] is not None
    assert settled["status"] == "succeeded"
    assert http.post("/_admin/payments/pi_missing/settle", json={}).status_code == 404


def test_restart__intents_and_saved_answers_survive(tmp_path: Path, clock: Clock) -> None:
    db = tmp_path / "stripe.db"
    with SandboxServer(db, flavor="stripe", now_func=clock) as server, httpx.Client(base_url=server.url) as c:
        first = post(c, "k1")
    with SandboxServer(db, flavor="stripe", now_func=clock) as server, httpx.Client(base_url=server.url) as c:
        assert post(c, "k1").content == first.content
        assert c.get(f"/v1/payment_intents/{first.json()['id']}").json()["status"] == "succeeded"
        assert charges(c)["charges"] == 1
