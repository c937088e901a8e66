"""The webhook sender's delivery rules and faults, through the Stripe flavour (its events are the simplest):
retries with backoff, giving up, drop/duplicate/delay/reorder (seeded like every fault), the bounded queue,
``GET /_admin/webhooks``, the thread's life, and the `recon psp-sandbox` options."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import stripe
from click.testing import CliRunner

from psp_adapters.protocol import Secret
from psp_adapters.sandbox import Faults, SandboxServer
from psp_adapters.sandbox.webhooks import WebhookConfig
from recon.commands.psp import psp_sandbox
from tests.adapters.sandbox.webhook_receiver import Delivery, Receiver, receiving

SECRET = "whsec_delivery_tests"
INTENT = (
    "amount=1250&currency=eur&payment_method={method}&confirm=true&off_session=true&metadata[merchant_reference]={ref}"
)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


def serve(tmp_path: Path, url: str, name: str = "s", faults: Faults | None = None, **config: Any) -> SandboxServer:
    hooks = WebhookConfig(url=url, secret=Secret(SECRET), **{"backoff_seconds": 0.05, **config})
    return SandboxServer(tmp_path / f"{name}.db", flavor="stripe", faults=faults, webhooks=hooks).start()


def pay(server: SandboxServer, ref: str = "order-1", method: str = "pm_card_visa") -> str:
    body = INTENT.format(method=method, ref=ref)
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Idempotency-Key": ref}
    return str(httpx.post(f"{server.url}/v1/payment_intents", content=body, headers=headers).json()["id"])


def log(server: SandboxServer, **params: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = httpx.get(f"{server.url}/_admin/webhooks", params=params).json()["webhooks"]
    return rows


def faults(server: SandboxServer, **fields: object) -> httpx.Response:
    return httpx.post(f"{server.url}/_admin/faults", json=fields)


def event(delivery: Delivery) -> tuple[str, str]:
    stripe.WebhookSignature.verify_header(delivery.body.decode(), delivery.headers["Stripe-Signature"], SECRET, 300)
    doc = delivery.json()
    return doc["type"], doc["id"]


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_retry__a_500_and_a_503_then_a_200_is_delivered_on_the_third_attempt(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.script.extend([(500, b""), (503, b"")])
    server = serve(tmp_path, receiver.url)
    try:
        ref = pay(server)
        first, second, third = receiver.wait_for(3)
        assert first.body == second.body == third.body
        assert all(event(d)[0] == "payment_intent.succeeded" for d in (first, second, third))
        assert third.at - first.at >= 0.05 + 0.1 * 0.9  # backoff 0.05 s, then doubled
        wait_until(lambda: log(server)[0]["state"] == "delivered")
        [row] = log(server, psp_reference=ref)
        assert (row["type"], row["attempts"], row["last_status"], row["copy"]) == (
            "payment_intent.succeeded",
            3,
            200,
            1,
        )
        assert receiver.quiet(0.2) == [first, second, third]
    finally:
        server.stop()


def test_retry__gives_up_after_max_attempts_and_connection_errors_count_as_failures(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.default = (500, b"")
    server = serve(tmp_path, receiver.url, max_attempts=3)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    closed = serve(tmp_path, f"http://127.0.0.1:{port}/hooks", "closed", max_attempts=2, timeout_seconds=1.0)
    try:
        pay(server)
        pay(closed)
        wait_until(lambda: log(server)[0]["state"] == "failed" and log(closed)[0]["state"] == "failed")
        assert len(receiver.quiet(0.3)) == 3
        [row] = log(server)
        assert (row["attempts"], row["last_status"], row["last_error"]) == (3, 500, "not acknowledged: HTTP 500 ''")
        [down] = log(closed)
        assert down["attempts"] == 2 and down["last_status"] is None and down["last_error"].startswith("ConnectError")
    finally:
        server.stop()
        closed.stop()


def test_drop__nothing_is_delivered_and_polling_still_sees_the_payment(tmp_path: Path, receiver: Receiver) -> None:
    server = serve(tmp_path, receiver.url, faults=Faults(webhook_drop_fraction=1.0))
    try:
        intent = pay(server)
        assert receiver.quiet(0.3) == []
        assert [(r["state"], r["attempts"]) for r in log(server)] == [("dropped", 0)]
        assert httpx.get(f"{server.url}/v1/payment_intents/{intent}").json()["status"] == "succeeded"
    finally:
        server.stop()


def test_duplicate__the_same_event_is_delivered_twice(tmp_path: Path, receiver: Receiver) -> None:
    server = serve(tmp_path, receiver.url)
    try:
        assert faults(server, webhook_duplicate_fraction=1.0).json()["webhook_duplicate_fraction"] == 1.0
        pay(server)
        first, second = receiver.wait_for(2)
        assert event(first) == event(second) and event(first)[0] == "payment_intent.succeeded"
        assert [r["copy"] for r in log(server)] == [1, 2]
    finally:
        server.stop()


def test_reorder__a_processing_is_delivered_after_the_succeeded(tmp_path: Path, receiver: Receiver) -> None:
    server = serve(tmp_path, receiver.url, faults=Faults(webhook_reorder=1.0, settle_after_seconds=0.3))
    try:
        pay(server, method="pm_pending")  # processing: held until the next message is queued
        assert receiver.quiet(0.15) == []
        assert faults(server, webhook_reorder=0.0).status_code == 200
        later, earlier = receiver.wait_for(2)  # settled by the webhook thread after 0.3 s
        assert (event(later)[0], event(earlier)[0]) == ("payment_intent.succeeded", "payment_intent.processing")
        assert [(r["type"], r["reordered"]) for r in log(server)] == [
            ("payment_intent.processing", True),
            ("payment_intent.succeeded", False),
        ]
    finally:
        server.stop()


def test_delay__every_message_waits_before_its_first_attempt(tmp_path: Path, receiver: Receiver) -> None:
    server = serve(tmp_path, receiver.url, faults=Faults(webhook_delay_seconds=0.4))
    try:
        started = time.monotonic()
        pay(server)
        [delivery] = receiver.wait_for(1)
        assert delivery.at - started >= 0.4
    finally:
        server.stop()


def test_faults__seeded_like_every_fault_and_validated_at_run_time(tmp_path: Path, receiver: Receiver) -> None:
    seeded = Faults(webhook_drop_fraction=0.5, webhook_duplicate_fraction=0.3, seed=7)
    servers = [serve(tmp_path, receiver.url, name, faults=seeded) for name in ("a", "b")]
    try:
        fates = []
        for server in servers:
            for n in range(12):
                pay(server, f"order-{n}")
            fates.append([(r["state"] == "dropped", r["copy"]) for r in log(server)])
        assert fates[0] == fates[1] and {dropped for dropped, _ in fates[0]} == {True, False}
        assert faults(servers[0], webhook_reorder=1.5).status_code == 400
        assert faults(servers[0], webhook_delay_seconds=-1).status_code == 400
    finally:
        for server in servers:
            server.stop()


def test_queue__bounded_overflow_is_logged_and_reset_forgets(tmp_path: Path, receiver: Receiver) -> None:
    server = serve(tmp_path, receiver.url, faults=Faults(webhook_delay_seconds=30), queue_limit=1)
    try:
        pay(server, "order-1")
        pay(server, "order-2")
        assert [r["state"] for r in log(server)] == ["queued", "overflow"]
        assert httpx.get(f"{server.url}/_admin/webhooks").json()["waiting"] == 1
        assert httpx.post(f"{server.url}/_admin/reset", json={}).status_code == 200
        assert httpx.get(f"{server.url}/_admin/webhooks").json() == {"url": receiver.url, "waiting": 0, "webhooks": []}
        assert receiver.deliveries == []
    finally:
        server.stop()


def test_thread__stops_with_the_server_and_none_runs_without_a_url(tmp_path: Path, receiver: Receiver) -> None:
    before = set(threading.enumerate())
    server = serve(tmp_path, receiver.url, faults=Faults(webhook_delay_seconds=30))
    pay(server)
    assert any(t.name == "psp-sandbox-webhooks" for t in threading.enumerate())
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 2.0
    assert {t for t in threading.enumerate() if t.name.startswith("psp-sandbox")} - before == set()
    with SandboxServer(tmp_path / "plain.db", flavor="stripe") as plain:
        assert plain.webhooks is None
        assert httpx.get(f"{plain.url}/_admin/webhooks").json() == {"url": None, "webhooks": []}
        assert not any(t.name == "psp-sandbox-webhooks" for t in threading.enumerate())


def test_connection__each_delivery_closes_its_connection_so_no_receiver_thread_outlives_it(
    tmp_path: Path, receiver: Receiver
) -> None:
    """A delivery on a kept-alive connection left the receiver's thread for it running as long as the sender's
    pool held the connection: a command under test that saw a webhook go out met a thread it had not started
    (test_dispute_sandbox's flake). Each delivery is one request on its own connection, closed by the answer."""
    server = serve(tmp_path, receiver.url)
    try:
        before = set(threading.enumerate())
        pay(server, "order-1")
        pay(server, "order-2")
        receiver.wait_for(2)
        receiver.quiet(0.3)
        wait_until(lambda: not [t for t in set(threading.enumerate()) - before if t.is_alive()])
        assert all(d.headers.get("Connection") == "close" for d in receiver.deliveries)
    finally:
        server.stop()


def test_config__refuses_what_no_psp_would_send() -> None:
    with pytest.raises(ValueError, match="http"):
        WebhookConfig(url="ftp://x/y", secret=Secret(SECRET))
    with pytest.raises(ValueError, match="secret"):
        WebhookConfig(url="http://127.0.0.1/h", secret=Secret(""))
    with pytest.raises(ValueError, match="together"):
        WebhookConfig(url="http://127.0.0.1/h", secret=Secret(SECRET), username="u")
    with pytest.raises(ValueError, match="native"):
        SandboxServer(flavor="native", webhooks=WebhookConfig(url="http://127.0.0.1/h", secret=Secret(SECRET)))
    with pytest.raises(ValueError, match="hex"):
        SandboxServer(flavor="adyen", webhooks=WebhookConfig(url="http://127.0.0.1/h", secret=Secret("whsec_x")))
    assert "whsec" not in repr(WebhookConfig(url="http://127.0.0.1/h", secret=Secret(SECRET)))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--flavor", "native", "--webhook-url", "http://127.0.0.1:1/h", "--webhook-secret", "s"], "native"),
        (["--flavor", "adyen", "--webhook-url", "http://127.0.0.1:1/h", "--webhook-secret", "zz"], "hex"),
        (["--flavor", "stripe", "--webhook-url", "http://127.0.0.1:1/h"], "--webhook-secret"),
        (
            [
                "--flavor",
                "adyen",
                "--webhook-url",
                "http://127.0.0.1:1/h",
                "--webhook-secret",
                "00",
                "--webhook-username",
                "u",
            ],
            "together",
        ),
        (["--flavor", "stripe", "--webhook-reorder", "2"], "webhook_reorder"),
    ],
)
def test_cli__bad_webhook_options_are_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(psp_sandbox, args, env={"RECON_SANDBOX_WEBHOOK_SECRET": None})

    assert result.exit_code != 0 and message in str(result.exception), (result.exception, result.output)


def test_cli__the_webhook_options_are_documented() -> None:
    result = CliRunner().invoke(psp_sandbox, ["--help"])

    for flag in (
        "--webhook-url",
        "--webhook-secret",
        "--webhook-username",
        "--webhook-password",
        "--webhook-drop-fraction",
        "--webhook-duplicate-fraction",
        "--webhook-delay-seconds",
        "--webhook-reorder",
    ):
        assert flag in result.output
