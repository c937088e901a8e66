"""The sandbox PSP server over real HTTP on 127.0.0.1: idempotency, faults, persistence, admin, listing."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from psp_adapters.sandbox import Faults, SandboxServer
from psp_adapters.sandbox.faults import FaultInjector

BODY = {"merchant_reference": "order-1", "amount": 1250, "currency": "EUR"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "sandbox.db") as srv:
        yield srv


@pytest.fixture
def client(server: SandboxServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=5.0) as c:
        yield c


def create(client: httpx.Client, key: str, **body: object) -> httpx.Response:
    return client.post("/v1/payments", json={**BODY, **body}, headers={"Idempotency-Key": key})


def set_faults(client: httpx.Client, **faults: object) -> None:
    response = client.post("/_admin/faults", json=faults)
    assert response.status_code == 200, response.text


def charges(client: httpx.Client, key: str | None = None) -> dict[str, object]:
    params = {"idempotency_key": key} if key else {}
    return dict(client.get("/_admin/charges", params=params).json())


# -- payments and idempotency ----------------------------------------------------------------------


def test_create__returns_a_succeeded_payment(client: httpx.Client) -> None:
    response = create(client, "k1", merchant_account="acme", payment_method="pm_card_visa")

    assert response.status_code == 201
    doc = response.json()
    assert doc["status"] == "succeeded"
    assert (doc["merchant_reference"], doc["amount"], doc["currency"]) == ("order-1", 1250, "EUR")
    assert doc["psp_reference"].startswith("psp_")
    assert datetime.fromisoformat(doc["settled_at"]).tzinfo is not None
    assert client.get(f"/v1/payments/{doc['psp_reference']}").json() == doc


def test_idempotency__same_key_and_body_replays_the_stored_answer_without_a_second_charge(
    client: httpx.Client,
) -> None:
    first = create(client, "k1")
    second = create(client, "k1")

    assert (second.status_code, second.content) == (first.status_code, first.content)
    assert second.headers["Idempotent-Replayed"] == "true"
    assert charges(client) == {"keys": 1, "charges": 1, "max_per_key": 1, "per_key": {"k1": 1}}


def test_idempotency__same_key_with_another_body_is_422(client: httpx.Client) -> None:
    create(client, "k1")

    response = create(client, "k1", amount=999)

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert charges(client)["charges"] == 1


def test_idempotency__concurrent_requests_with_one_key_charge_once(
    client: httpx.Client, server: SandboxServer
) -> None:
    set_faults(client, latency_ms=300)  # the first request stays in flight this long
    barrier = threading.Barrier(6)
    results: list[httpx.Response] = []

    def send() -> None:
        with httpx.Client(base_url=server.url, timeout=5.0) as own:
            barrier.wait()
            results.append(create(own, "same-key"))

    threads = [threading.Thread(target=send) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    statuses = sorted(r.status_code for r in results)
    assert statuses[0] == 201 and 409 in statuses and set(statuses) <= {201, 409}
    assert {r.json()["error"]["code"] for r in results if r.status_code == 409} == {
        "idempotency_request_in_progress"
    }
    assert len({r.content for r in results if r.status_code == 201}) == 1
    assert charges(client, "same-key")["charges"] == 1


def test_idempotency__missing_key_is_400(client: httpx.Client) -> None:
    response = client.post("/v1/payments", json=BODY)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "idempotency_key_missing"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"amount": 12.5}, "amount_invalid"),
        ({"amount": 0}, "amount_invalid"),
        ({"currency": "eur"}, "currency_invalid"),
        ({"merchant_reference": ""}, "parameter_missing"),
        ({"card_number": "4242"}, "parameter_unknown"),
    ],
)
def test_create__invalid_body_is_400_and_stores_nothing(
    client: httpx.Client, body: dict[str, object], code: str
) -> None:
    response = create(client, "k1", **body)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert create(client, "k1").status_code == 201  # the key was not burnt by the invalid request


def test_create__oversized_body_is_refused_before_reading_it(
    server: SandboxServer, client: httpx.Client
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=5)
    try:
        conn.putrequest("POST", "/v1/payments")
        conn.putheader("Content-Length", str(2 << 20))  # announced, never sent
        conn.endheaders()
        response = conn.getresponse()
        assert (response.status, response.getheader("Connection")) == (400, "close")
        response.read()
    finally:
        conn.close()
    assert charges(client)["charges"] == 0  # the server still answers


def test_create__bad_json_is_400(client: httpx.Client) -> None:
    response = client.post("/v1/payments", content=b"{nope", headers={"Idempotency-Key": "k1"})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize(
    ("body", "faults", "decline_code"),
    [
        ({"payment_method": "pm_card_insufficient_funds"}, {}, "insufficient_funds"),
        ({"amount": 1402}, {"decline_amount_suffix": "402"}, "card_declined"),
    ],
)
def test_decline__magic_method_or_amount_is_402_with_a_failed_payment(
    client: httpx.Client, body: dict[str, object], faults: dict[str, object], decline_code: str
) -> None:
    set_faults(client, **faults)
    response = create(client, "k1", **body)

    assert response.status_code == 402
    error = response.json()["error"]
    assert (error["type"], error["code"], error["decline_code"]) == (
        "card_error",
        "card_declined",
        decline_code,
    )
    assert error["payment"]["status"] == "failed"
    assert create(client, "k1", **body).content == response.content  # a decline is replayed like any answer
    assert charges(client)["charges"] == 1


def test_decline__no_amount_declines_by_default(client: httpx.Client) -> None:
    assert client.get("/_admin/faults").json()["decline_amount_suffix"] is None
    assert create(client, "k1", amount=1402).status_code == 201  # only with the fault flag (--decline-suffix 402)


def test_lookup__by_merchant_reference_lists_every_charge(client: httpx.Client) -> None:
    refs = [create(client, key).json()["psp_reference"] for key in ("k1", "k2")]

    listed = client.get("/v1/payments", params={"merchant_reference": "order-1"}).json()["data"]

    assert [p["psp_reference"] for p in listed] == refs
    assert client.get("/v1/payments", params={"merchant_reference": "other"}).json()["data"] == []
    assert client.get("/v1/payments/psp_missing").status_code == 404


def test_auth__api_key_is_required_when_configured(tmp_path: Path) -> None:
    with (
        SandboxServer(tmp_path / "s.db", api_key="sk_test_123") as server,
        httpx.Client(base_url=server.url) as c,
    ):
        assert create(c, "k1").status_code == 401
        c.headers["Authorization"] = "Bearer wrong"
        assert create(c, "k1").status_code == 401
        assert "wrong" not in create(c, "k1").text
        c.headers["Authorization"] = "Bearer sk_test_123"
        assert create(c, "k1").status_code == 201
        del c.headers["Authorization"]
        assert c.get("/_admin/charges").json()["charges"] == 1  # admin needs no key


# -- faults ----------------------------------------------------------------------------------------


def test_fault_429__answers_retry_after_and_records_nothing(client: httpx.Client) -> None:
    set_faults(client, rate_429=1.0, retry_after_seconds=2)

    response = create(client, "k1")

    assert response.status_code == 429
    assert response.headers["Retry-After"] == "2"
    assert charges(client)["charges"] == 0
    set_faults(client, rate_429=0.0)
    assert create(client, "k1").status_code == 201


@pytest.mark.parametrize(("field", "status"), [("rate_500", 500), ("rate_503", 503)])
def test_fault_5xx__answers_before_recording_so_a_retry_is_safe(
    client: httpx.Client, field: str, status: int
) -> None:
    set_faults(client, **{field: 1.0})

    assert create(client, "k1").status_code == status
    assert client.get("/v1/payments/psp_x").status_code == status
    set_faults(client, **{field: 0.0})
    assert create(client, "k1").status_code == 201
    assert charges(client, "k1")["charges"] == 1


def test_fault_hang__records_the_charge_then_a_retry_with_the_same_key_returns_it(
    client: httpx.Client, server: SandboxServer
) -> None:
    set_faults(client, rate_hang=1.0, hang_seconds=5.0)
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(5.0, read=0.2)) as impatient:
        with pytest.raises(httpx.ReadTimeout):
            create(impatient, "k1")

    assert charges(client, "k1")["charges"] == 1  # the charge exists although nobody saw an answer
    set_faults(client, rate_hang=0.0)
    retry = create(client, "k1")
    assert retry.status_code == 201 and retry.headers["Idempotent-Replayed"] == "true"
    assert charges(client, "k1")["charges"] == 1


def test_fault_hang__stop_does_not_wait_for_a_hanging_answer(tmp_path: Path) -> None:
    server = SandboxServer(tmp_path / "s.db", faults=Faults(rate_hang=1.0, hang_seconds=30.0)).start()
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(5.0, read=0.1)) as c:
        with pytest.raises(httpx.ReadTimeout):
            create(c, "k1")
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < 2.0


def test_fault_latency__delays_every_api_answer(client: httpx.Client) -> None:
    set_faults(client, latency_ms=150)

    began = time.monotonic()
    assert client.get("/v1/payments/psp_x").status_code == 404
    assert time.monotonic() - began >= 0.15


def test_fault_pending__payment_settles_to_succeeded_after_the_delay(client: httpx.Client) -> None:
    set_faults(client, pending_fraction=1.0, settle_after_seconds=0.2)

    created = create(client, "k1").json()
    assert (created["status"], created["settled_at"]) == ("pending", None)
    time.sleep(0.3)

    settled = client.get(f"/v1/payments/{created['psp_reference']}").json()
    assert settled["status"] == "succeeded"
    assert settled["settled_at"] is not None


def test_fault_pending__fail_fraction_settles_to_failed(client: httpx.Client) -> None:
    set_faults(client, pending_fraction=1.0, pending_fail_fraction=1.0, settle_after_seconds=0.2)

    ref = create(client, "k1").json()["psp_reference"]
    assert client.get(f"/v1/payments/{ref}").json()["status"] == "pending"
    time.sleep(0.3)

    settled = client.get(f"/v1/payments/{ref}").json()
    assert (settled["status"], settled["failure_reason"]) == ("failed", "async_declined")


def test_fault_rate_limit__answers_429_beyond_the_bucket(client: httpx.Client) -> None:
    set_faults(client, rate_limit=5.0)

    statuses = [client.get("/v1/payments/psp_x") for _ in range(8)]

    assert [r.status_code for r in statuses[:5]] == [404] * 5
    limited = [r for r in statuses if r.status_code == 429]
    assert limited and all(int(r.headers["Retry-After"]) >= 1 for r in limited)


def test_faults__never_apply_to_admin_endpoints(client: httpx.Client) -> None:
    set_faults(client, rate_500=1.0, rate_429=1.0, latency_ms=2000)

    began = time.monotonic()
    assert client.get("/_admin/faults").status_code == 200
    assert client.get("/_admin/charges").status_code == 200
    assert time.monotonic() - began < 1.0


def test_faults__admin_update_is_partial_and_validated(client: httpx.Client) -> None:
    set_faults(client, rate_503=0.25)
    assert client.get("/_admin/faults").json()["rate_503"] == 0.25

    for bad in ({"rate_429": 2}, {"no_such_fault": 1}, {"latency_ms": -1}, {"rate_limit": 0}):
        response = client.post("/_admin/faults", json=bad)
        assert response.status_code == 400, bad
        assert response.json()["error"]["code"] == "faults_invalid"
    assert client.get("/_admin/faults").json()["rate_503"] == 0.25


def test_faults__seeded_dice_repeat_after_reset(tmp_path: Path) -> None:
    faults = Faults(rate_500=0.5, seed=7)
    with SandboxServer(tmp_path / "s.db", faults=faults) as server, httpx.Client(base_url=server.url) as c:
        first = [c.get("/v1/payments/psp_x").status_code for _ in range(12)]
        assert c.post("/_admin/reset", json={}).json()["faults"]["seed"] == 7
        second = [c.get("/v1/payments/psp_x").status_code for _ in range(12)]
    assert first == second
    assert set(first) == {404, 500}


def test_faults__from_options_maps_cli_flag_names() -> None:
    faults = Faults.from_options(
        rate_429=0.1, retry_after=3, settle_after=0.5, decline_suffix="13", rate_limit=None, seed=4
    )

    assert (faults.rate_429, faults.retry_after_seconds, faults.settle_after_seconds) == (0.1, 3, 0.5)
    assert (faults.decline_amount_suffix, faults.rate_limit, faults.seed) == ("13", None, 4)
    assert Faults.from_options(decline_suffix="off").decline_amount_suffix is None
    with pytest.raises(ValueError, match="rate_500"):
        Faults.from_options(rate_500=1.5)
    with pytest.raises(ValueError, match="unknown"):
        Faults.from_options(rate_999=0.1)


def test_fault_injector__same_seed_same_decisions() -> None:
    def run() -> list[object]:
        injector = FaultInjector(Faults(rate_500=0.3, pending_fraction=0.5, rate_decline=0.2, seed=11))
        return [(injector.reject(), injector.decide(amount=100, card=None)) for _ in range(50)]

    assert run() == run()


def test_faults__latency_jitter_spreads_each_request_around_the_median_within_its_bounds() -> None:
    injector = FaultInjector(Faults(latency_ms=200, latency_jitter=0.5, seed=3))
    draws = sorted(injector.latency_seconds() for _ in range(2001))
    assert 0.1 <= draws[0] < 0.11 and 0.29 < draws[-1] <= 0.3  # 200 ms x [0.5, 1.5]
    assert 0.19 < draws[1000] < 0.21  # the median stays 200 ms
    assert FaultInjector(Faults(latency_ms=200)).latency_seconds() == 0.2  # no jitter: exactly
    with pytest.raises(ValueError, match="latency_jitter"):
        Faults(latency_jitter=1.5)


# -- persistence -----------------------------------------------------------------------------------


def test_restart__payments_and_idempotency_records_survive(tmp_path: Path) -> None:
    db = tmp_path / "sandbox.db"
    with SandboxServer(db) as server, httpx.Client(base_url=server.url) as c:
        first = create(c, "k1")
    with SandboxServer(db) as server, httpx.Client(base_url=server.url) as c:
        ref = first.json()["psp_reference"]
        assert c.get(f"/v1/payments/{ref}").json() == first.json()
        replay = create(c, "k1")
        assert (replay.status_code, replay.content) == (201, first.content)
        assert create(c, "k1", amount=1).status_code == 422
        assert charges(c)["charges"] == 1


def test_server__without_a_file_the_state_is_in_memory_and_every_server_starts_fresh(tmp_path: Path) -> None:
    with SandboxServer() as first, httpx.Client(base_url=first.url, timeout=5.0) as c:
        assert first.db_path is None
        assert create(c, "k1").status_code == 201 and charges(c)["charges"] == 1
    with SandboxServer() as second, httpx.Client(base_url=second.url, timeout=5.0) as c:
        assert charges(c)["charges"] == 0  # nothing of the first server's run
        assert create(c, "k1").status_code == 201  # the key is new here too
    second.stop()  # idempotent
    assert not list(tmp_path.iterdir())


# -- admin -----------------------------------------------------------------------------------------


def test_admin_payment__settle_fail_cancel_and_amount(client: httpx.Client) -> None:
    set_faults(client, pending_fraction=1.0, settle_after_seconds=60.0)
    refs = [create(client, f"k{i}", merchant_reference=f"m{i}").json()["psp_reference"] for i in range(3)]

    settled = client.post(f"/_admin/payments/{refs[0]}/settle", json={}).json()
    failed = client.post(f"/_admin/payments/{refs[1]}/fail", json={"reason": "fraud"}).json()
    canceled = client.post(f"/_admin/payments/{refs[2]}/cancel", json={}).json()
    changed = client.post(
        f"/_admin/payments/{refs[0]}/amount", json={"amount": 999, "currency": "USD"}
    ).json()

    assert settled["status"] == "succeeded" and settled["settled_at"] is not None
    assert (failed["status"], failed["failure_reason"]) == ("failed", "fraud")
    assert (canceled["status"], canceled["failure_reason"]) == ("canceled", "admin_cancel")
    assert (changed["amount"], changed["currency"], changed["status"]) == (999, "USD", "succeeded")
    assert client.get(f"/v1/payments/{refs[0]}").json()["amount"] == 999
    assert client.post("/_admin/payments/psp_missing/settle", json={}).status_code == 404
    assert client.post(f"/_admin/payments/{refs[0]}/amount", json={"amount": 1.5}).status_code == 400
    assert client.post(f"/_admin/payments/{refs[0]}/amount", json={"amount": 2**63}).status_code == 400
    assert client.post(f"/_admin/payments/{refs[0]}/refund", json={"amount": 2**63 + 8}).status_code == 400


def test_admin_charges__filters_by_key(client: httpx.Client) -> None:
    create(client, "k1")
    create(client, "k2", merchant_reference="order-2")

    assert charges(client, "k2") == {"keys": 1, "charges": 1, "max_per_key": 1, "per_key": {"k2": 1}}
    assert charges(client, "nope") == {"keys": 1, "charges": 0, "max_per_key": 0, "per_key": {"nope": 0}}


def test_admin_reset__forgets_payments_keys_and_runtime_faults(client: httpx.Client) -> None:
    ref = create(client, "k1").json()["psp_reference"]
    set_faults(client, rate_500=1.0)

    assert client.post("/_admin/reset", json={}).status_code == 200

    assert client.get(f"/v1/payments/{ref}").status_code == 404
    assert charges(client)["charges"] == 0
    assert create(client, "k1", amount=5).status_code == 201  # the key is free again


# -- settlements -----------------------------------------------------------------------------------


def test_settlements__pages_through_the_window_with_a_cursor(client: httpx.Client) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    refs = [create(client, f"k{i}", merchant_reference=f"m{i}").json()["psp_reference"] for i in range(7)]
    until = datetime.now(UTC) + timedelta(seconds=1)
    params: dict[str, str | int] = {"since": since.isoformat(), "until": until.isoformat(), "limit": 3}

    seen: list[str] = []
    pages = 0
    while True:
        page = client.get("/v1/settlements", params=params).json()
        pages += 1
        seen += [p["psp_reference"] for p in page["data"]]
        if not page["has_more"]:
            assert page["next_cursor"] is None
            break
        params["cursor"] = page["next_cursor"]

    assert (seen, pages) == (refs, 3)
    empty = {"since": until.isoformat(), "until": (until + timedelta(hours=1)).isoformat()}
    assert client.get("/v1/settlements", params=empty).json()["data"] == []


def test_settlements__pending_payments_appear_once_settled(client: httpx.Client) -> None:
    set_faults(client, pending_fraction=1.0, settle_after_seconds=0.2)
    since = datetime.now(UTC) - timedelta(seconds=1)
    ref = create(client, "k1").json()["psp_reference"]
    params = {"since": since.isoformat(), "until": (since + timedelta(hours=1)).isoformat()}

    assert client.get("/v1/settlements", params=params).json()["data"] == []
    time.sleep(0.3)
    assert [p["psp_reference"] for p in client.get("/v1/settlements", params=params).json()["data"]] == [ref]


@pytest.mark.parametrize(
    "params",
    [
        {"until": "2024-01-01T00:00:00+00:00"},
        {"since": "2024-01-01T00:00:00", "until": "2024-01-02T00:00:00+00:00"},
        {"since": "2024-01-01T00:00:00Z", "until": "2024-01-02T00:00:00Z", "cursor": "garbage"},
        {"since": "2024-01-01T00:00:00Z", "until": "2024-01-02T00:00:00Z", "limit": 0},
    ],
)
def test_settlements__bad_parameters_are_400(client: httpx.Client, params: dict[str, object]) -> None:
    assert client.get("/v1/settlements", params=params).status_code == 400  # type: ignore[arg-type]


def test_admin__changes_need_the_api_key_when_set_and_json_bodies(tmp_path: Path) -> None:
    with SandboxServer(tmp_path / "s.db", api_key="sandbox-secret") as server:
        faults = {"rate_429": 0.5}
        assert httpx.post(f"{server.url}/_admin/faults", json=faults, timeout=5).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert httpx.post(f"{server.url}/_admin/faults", json=faults, headers=wrong, timeout=5).status_code == 401
        key = {"Authorization": "Bearer sandbox-secret"}
        as_text = httpx.post(f"{server.url}/_admin/faults", content=b'{"rate_429": 0.5}',
                             headers={**key, "Content-Type": "text/plain"}, timeout=5)
        assert as_text.status_code == 415
        assert server.faults.rate_429 == 0.0  # nothing changed by the refused requests
        assert httpx.post(f"{server.url}/_admin/faults", json=faults, headers=key, timeout=5).status_code == 200
        assert server.faults.rate_429 == 0.5
        assert httpx.get(f"{server.url}/_admin/charges", timeout=5).status_code == 200  # reads stay open
