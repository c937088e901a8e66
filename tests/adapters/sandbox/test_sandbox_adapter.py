"""SandboxAdapter: outcome mapping and error translation, over real HTTP to the sandbox and over respx."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest
import respx

from psp_adapters.errors import (
    PspAuthError,
    PspIdempotencyError,
    PspProtocolError,
    PspRateLimited,
    PspRejectedError,
    PspTransientError,
    PspUnknownOutcome,
)
from psp_adapters.protocol import (
    ChargeRequest,
    Failed,
    NotFound,
    Pending,
    PspAdapter,
    PspRef,
    Secret,
    Succeeded,
    Unknown,
)
from psp_adapters.sandbox import SandboxAdapter, SandboxServer, wire
from psp_adapters.sandbox import adapter as adapter_module

CHARGE = ChargeRequest(merchant_reference="order-1", amount=1250, currency="EUR")
FAKE_URL = "http://sandbox.test"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "sandbox.db") as srv:
        yield srv


@pytest.fixture
def admin(server: SandboxServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=5.0) as c:
        yield c


@pytest.fixture
def adapter(server: SandboxServer) -> Iterator[SandboxAdapter]:
    with SandboxAdapter(server.url, timeout=5.0) as a:
        yield a


def set_faults(admin: httpx.Client, **faults: object) -> None:
    assert admin.post("/_admin/faults", json=faults).status_code == 200


def charge(**fields: object) -> ChargeRequest:
    return ChargeRequest(**{"merchant_reference": "order-1", "amount": 1250, "currency": "EUR", **fields})  # type: ignore[arg-type]


# -- outcomes over real HTTP -----------------------------------------------------------------------


def test_adapter__implements_the_protocol(adapter: SandboxAdapter) -> None:
    assert isinstance(adapter, PspAdapter)
    assert SandboxAdapter.name == "sandbox"


def test_create_payment__succeeded(adapter: SandboxAdapter) -> None:
    outcome = adapter.create_payment(CHARGE, idempotency_key="k1")

    assert isinstance(outcome, Succeeded)
    assert (outcome.amount, outcome.currency, outcome.merchant_reference) == (1250, "EUR", "order-1")
    assert outcome.raw_status == "succeeded" and outcome.psp_reference


def test_create_payment__decline_is_a_failed_outcome_not_an_error(adapter: SandboxAdapter) -> None:
    outcome = adapter.create_payment(
        charge(payment_method="pm_card_insufficient_funds"), idempotency_key="k1"
    )

    assert isinstance(outcome, Failed)
    assert (outcome.reason, outcome.raw_status) == ("insufficient_funds", "failed")


def test_create_payment__same_key_returns_the_first_charge(
    adapter: SandboxAdapter, admin: httpx.Client
) -> None:
    first = adapter.create_payment(CHARGE, idempotency_key="k1")

    assert adapter.create_payment(CHARGE, idempotency_key="k1") == first
    assert admin.get("/_admin/charges").json()["charges"] == 1


def test_create_payment__key_reused_with_other_parameters_raises_idempotency_error(
    adapter: SandboxAdapter,
) -> None:
    adapter.create_payment(CHARGE, idempotency_key="k1")

    with pytest.raises(PspIdempotencyError) as info:
        adapter.create_payment(charge(amount=1), idempotency_key="k1")

    assert (info.value.psp, info.value.status_code, info.value.code) == (
        "sandbox",
        422,
        "idempotency_key_reused",
    )


def test_create_payment__validation_error_raises_rejected(adapter: SandboxAdapter) -> None:
    with pytest.raises(PspRejectedError) as info:
        adapter.create_payment(charge(currency="eur"), idempotency_key="k1")

    assert not isinstance(info.value, PspIdempotencyError)
    assert (info.value.status_code, info.value.code) == (400, "currency_invalid")


def test_pending__settles_and_fetch_follows(adapter: SandboxAdapter, admin: httpx.Client) -> None:
    set_faults(admin, settle_after_seconds=0.2)
    ok = adapter.create_payment(charge(payment_method="pm_pending"), idempotency_key="k1")
    ko = adapter.create_payment(
        charge(payment_method="pm_pending_fail", merchant_reference="o2"), idempotency_key="k2"
    )
    assert isinstance(ok, Pending) and isinstance(ko, Pending)
    time.sleep(0.3)

    assert isinstance(adapter.fetch_payment(PspRef(psp_reference=ok.psp_reference)), Succeeded)
    failed = adapter.fetch_payment(PspRef(psp_reference=ko.psp_reference))
    assert isinstance(failed, Failed) and failed.reason == "async_declined"


def test_fetch_payment__canceled_is_failed(adapter: SandboxAdapter, admin: httpx.Client) -> None:
    ref = adapter.create_payment(CHARGE, idempotency_key="k1").psp_reference
    admin.post(f"/_admin/payments/{ref}/cancel", json={})

    outcome = adapter.fetch_payment(PspRef(psp_reference=ref))

    assert isinstance(outcome, Failed)
    assert (outcome.raw_status, outcome.reason) == ("canceled", "admin_cancel")


def test_fetch_payment__unknown_references_are_not_found(adapter: SandboxAdapter) -> None:
    assert adapter.fetch_payment(PspRef(psp_reference="psp_nope")) == NotFound(psp_reference="psp_nope")
    assert adapter.fetch_payment(PspRef(merchant_reference="nope")) == NotFound(merchant_reference="nope")


def test_fetch_payment__by_merchant_reference_prefers_the_succeeded_duplicate(
    adapter: SandboxAdapter,
) -> None:
    good = adapter.create_payment(CHARGE, idempotency_key="k1")
    adapter.create_payment(charge(payment_method="pm_card_declined"), idempotency_key="k2")

    assert adapter.fetch_payment(PspRef(merchant_reference="order-1")) == good


def test_fetch_payment__shows_a_psp_side_amount_change(adapter: SandboxAdapter, admin: httpx.Client) -> None:
    ref = adapter.create_payment(CHARGE, idempotency_key="k1").psp_reference
    admin.post(f"/_admin/payments/{ref}/amount", json={"amount": 1300})

    assert adapter.fetch_payment(PspRef(psp_reference=ref)).amount == 1300


def test_iter_settlements__pages_lazily(server: SandboxServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter_module, "SETTLEMENT_PAGE_SIZE", 2)
    since = datetime.now(UTC) - timedelta(seconds=1)
    calls: list[str] = []

    class Counting(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            calls.append(request.url.path)
            return super().handle_request(request)

    with SandboxAdapter(server.url, transport=Counting()) as adapter:
        refs = [
            adapter.create_payment(charge(merchant_reference=f"m{i}"), idempotency_key=f"k{i}").psp_reference
            for i in range(5)
        ]
        lines = adapter.iter_settlements(since, datetime.now(UTC) + timedelta(seconds=1))
        assert calls.count("/v1/settlements") == 0
        first = next(lines)
        assert calls.count("/v1/settlements") == 1
        rest = list(lines)

    assert [line.psp_reference for line in [first, *rest]] == refs
    assert calls.count("/v1/settlements") == 3
    assert all(line.settled_at.tzinfo is not None and line.status == "succeeded" for line in rest)


def test_iter_settlements__naive_datetimes_are_refused(adapter: SandboxAdapter) -> None:
    with pytest.raises(ValueError):
        adapter.iter_settlements(datetime(2024, 1, 1), datetime(2024, 1, 2))


# -- errors over real HTTP -------------------------------------------------------------------------


def test_rate_limited__raises_with_retry_after(adapter: SandboxAdapter, admin: httpx.Client) -> None:
    set_faults(admin, rate_429=1.0, retry_after_seconds=2)

    with pytest.raises(PspRateLimited) as info:
        adapter.create_payment(CHARGE, idempotency_key="k1")

    assert (info.value.retry_after, info.value.status_code, info.value.psp) == (2.0, 429, "sandbox")


@pytest.mark.parametrize(("field", "status"), [("rate_500", 500), ("rate_503", 503)])
def test_server_error__raises_transient_with_status(
    adapter: SandboxAdapter, admin: httpx.Client, field: str, status: int
) -> None:
    set_faults(admin, **{field: 1.0})

    with pytest.raises(PspTransientError) as info:
        adapter.create_payment(CHARGE, idempotency_key="k1")

    assert type(info.value) is PspTransientError
    assert info.value.status_code == status


def test_hang__create_raises_unknown_outcome_and_a_retry_returns_the_charge(
    server: SandboxServer, admin: httpx.Client
) -> None:
    set_faults(admin, rate_hang=1.0, hang_seconds=5.0)
    with SandboxAdapter(server.url, timeout=httpx.Timeout(5.0, read=0.2)) as impatient:
        with pytest.raises(PspUnknownOutcome):
            impatient.create_payment(CHARGE, idempotency_key="k1")
        set_faults(admin, rate_hang=0.0)
        outcome = impatient.create_payment(CHARGE, idempotency_key="k1")

    assert isinstance(outcome, Succeeded)
    assert admin.get("/_admin/charges").json()["per_key"] == {"k1": 1}


def test_read_timeout_on_fetch__is_transient_not_unknown(server: SandboxServer, admin: httpx.Client) -> None:
    set_faults(admin, latency_ms=500)
    with SandboxAdapter(server.url, timeout=httpx.Timeout(5.0, read=0.1)) as impatient:
        with pytest.raises(PspTransientError) as info:
            impatient.fetch_payment(PspRef(merchant_reference="order-1"))

    assert not isinstance(info.value, PspUnknownOutcome)


def test_in_flight_key__raises_transient_409(server: SandboxServer, admin: httpx.Client) -> None:
    set_faults(admin, latency_ms=2500)  # the first create keeps the key in flight this long (loaded CI: generous)
    first = SandboxAdapter(server.url)
    thread = threading.Thread(target=first.create_payment, args=(CHARGE,), kwargs={"idempotency_key": "k1"})
    thread.start()
    try:
        time.sleep(0.6)
        with SandboxAdapter(server.url) as second, pytest.raises(PspTransientError) as info:
            second.create_payment(CHARGE, idempotency_key="k1")
    finally:
        thread.join()
        first.close()

    assert (info.value.status_code, info.value.code) == (409, "idempotency_request_in_progress")


def test_connect_error__raises_transient_not_unknown() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed below: nothing listens there
    with SandboxAdapter(f"http://127.0.0.1:{port}", timeout=1.0) as adapter:
        with pytest.raises(PspTransientError) as info:
            adapter.create_payment(CHARGE, idempotency_key="k1")

    assert not isinstance(info.value, PspUnknownOutcome)
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_auth__secret_never_shows_in_repr_errors_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "sk_live_do_not_leak"
    with SandboxServer(tmp_path / "s.db", api_key=secret) as server:
        with SandboxAdapter(server.url, api_key=Secret("wrong")) as bad, pytest.raises(PspAuthError) as info:
            bad.create_payment(CHARGE, idempotency_key="k1")
        with SandboxAdapter(server.url, api_key=Secret(secret)) as good:
            assert isinstance(good.create_payment(CHARGE, idempotency_key="k1"), Succeeded)
            shown = repr(good)

    assert info.value.status_code == 401
    assert "wrong" not in str(info.value) and "wrong" not in repr(info.value)
    assert secret not in shown
    assert "HTTP Request: POST" in caplog.text  # httpx did log the requests ...
    assert secret not in caplog.text and "Bearer" not in caplog.text  # ... without the credential


# -- malformed answers (respx) ---------------------------------------------------------------------


@pytest.fixture
def mocked() -> Iterator[tuple[respx.MockRouter, SandboxAdapter]]:
    with (
        respx.mock(base_url=FAKE_URL, assert_all_called=False) as router,
        SandboxAdapter(FAKE_URL) as adapter,
    ):
        yield router, adapter


PAYMENT = {
    "psp_reference": "psp_1",
    "merchant_reference": "order-1",
    "amount": 1250,
    "currency": "EUR",
    "status": "succeeded",
}


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(201, text="<html>oops</html>"),
        httpx.Response(201, json=[PAYMENT]),
        httpx.Response(201, json={**PAYMENT, "amount": 12.5}),
        httpx.Response(201, json={**PAYMENT, "amount": True}),
        httpx.Response(201, json={key: v for key, v in PAYMENT.items() if key != "psp_reference"}),
        httpx.Response(201, json={**PAYMENT, "status": None}),
        httpx.Response(402, json={"error": {"code": "card_declined"}}),
        httpx.Response(302, headers={"Location": "/elsewhere"}),
    ],
)
def test_malformed_answer__raises_protocol_error(
    mocked: tuple[respx.MockRouter, SandboxAdapter], response: httpx.Response
) -> None:
    router, adapter = mocked
    router.post("/v1/payments").mock(return_value=response)

    with pytest.raises(PspProtocolError) as info:
        adapter.create_payment(CHARGE, idempotency_key="k1")

    assert info.value.psp == "sandbox"


def test_unknown_status__is_unknown_with_the_raw_status(
    mocked: tuple[respx.MockRouter, SandboxAdapter],
) -> None:
    router, adapter = mocked
    router.get("/v1/payments/psp_1").respond(200, json={**PAYMENT, "status": "requires_action"})

    outcome = adapter.fetch_payment(PspRef(psp_reference="psp_1"))

    assert outcome == Unknown(
        psp_reference="psp_1",
        amount=1250,
        currency="EUR",
        raw_status="requires_action",
        merchant_reference="order-1",
    )


@pytest.mark.parametrize(
    ("status", "error"),
    [(403, PspAuthError), (408, PspTransientError), (502, PspTransientError), (418, PspRejectedError)],
)
def test_status_triage__by_type(
    mocked: tuple[respx.MockRouter, SandboxAdapter], status: int, error: type[Exception]
) -> None:
    router, adapter = mocked
    router.get("/v1/payments/psp_1").respond(status, text="not json either")

    with pytest.raises(error) as info:
        adapter.fetch_payment(PspRef(psp_reference="psp_1"))

    assert type(info.value) is error


def test_fetch_payment__404_without_resource_missing_raises(
    mocked: tuple[respx.MockRouter, SandboxAdapter],
) -> None:
    router, adapter = mocked
    router.get("/v1/payments/psp_1").respond(404, text="<html>no such path</html>")

    with pytest.raises(PspRejectedError):  # a wrong base URL must never read as "the PSP has no such payment"
        adapter.fetch_payment(PspRef(psp_reference="psp_1"))


def test_rate_limited__http_date_retry_after(mocked: tuple[respx.MockRouter, SandboxAdapter]) -> None:
    router, _ = mocked
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    router.get("/v1/payments/psp_1").respond(429, headers={"Retry-After": later})

    with SandboxAdapter(FAKE_URL, now_func=lambda: now) as adapter, pytest.raises(PspRateLimited) as info:
        adapter.fetch_payment(PspRef(psp_reference="psp_1"))

    assert info.value.retry_after == 30.0


def test_settlements__malformed_listing_raises_protocol_error(
    mocked: tuple[respx.MockRouter, SandboxAdapter],
) -> None:
    router, adapter = mocked
    route = router.get("/v1/settlements")
    since, until = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC)

    route.respond(200, json={"data": [], "has_more": True, "next_cursor": None})
    with pytest.raises(PspProtocolError):
        list(adapter.iter_settlements(since, until))
    route.respond(200, json={"items": []})
    with pytest.raises(PspProtocolError):
        list(adapter.iter_settlements(since, until))
    route.respond(200, json={"data": [{**PAYMENT, "settled_at": "2024-01-01T10:00:00"}], "has_more": False})
    with pytest.raises(PspProtocolError):
        list(adapter.iter_settlements(since, until))


# -- pure helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", list(wire.PaymentStatus))
def test_wire_to_outcome__maps_every_status(status: wire.PaymentStatus) -> None:
    outcome = wire.to_outcome({**PAYMENT, "status": status.value})

    assert not isinstance(outcome, Unknown | NotFound)
    assert outcome.raw_status == status.value


@pytest.mark.parametrize("path", ["/v1/payments", "/v1/settlements"])
def test_listings__the_same_cursor_again_is_a_protocol_error_not_a_loop(
    mocked: tuple[respx.MockRouter, SandboxAdapter], path: str
) -> None:
    """A listing answering has_more with the same next_cursor forever ends at the second page (issue 22, item 3)."""
    router, adapter = mocked
    item = {**PAYMENT, "created_at": "2024-01-01T10:00:00Z", "settled_at": "2024-01-01T10:00:00Z"}
    route = router.get(path).mock(side_effect=lambda request: httpx.Response(  # the last page after 50: never hangs
        200, json={"data": [item], "has_more": route.call_count < 50, "next_cursor": "c1"}))
    since, until = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC)
    listing = adapter.iter_payments(since, until) if path == "/v1/payments" else adapter.iter_settlements(since, until)
    with pytest.raises(PspProtocolError, match=f"listing {path} never ends: cursor 'c1' repeated"):
        list(listing)
    assert route.call_count == 2
