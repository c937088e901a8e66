"""`recon psp-sandbox` as a user starts it: defaults that do not surprise (issue 26).

A fresh in-memory state unless ``--state-file``; ``--port 0`` picks a free port and the ready line prints the URL;
a key is always required (each flavour's documented test key unless ``--api-key``); no amount declines by itself.
Each test runs the real command in its own process, in an empty working directory.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
#: the documented test keys (docs/psps.md, "Testing against a mocked PSP"): the expected values are the docs'
DOCUMENTED_KEYS = {"native": "recon_sandbox_test_key", "stripe": "sk_test_recon_sandbox", "adyen": "AQE_recon_sandbox"}
READY = re.compile(r"listening on (http://127\.0\.0\.1:(\d+)) \(state (.+?); api key: (.+?)\)")


@contextmanager
def sandbox(cwd: Path, *args: str) -> Iterator[tuple[str, str]]:
    """`recon psp-sandbox --port 0 ARGS` in ``cwd``: yields (its URL, its ready line); stopped by SIGTERM."""
    proc = subprocess.Popen([sys.executable, "-m", "recon", "psp-sandbox", "--port", "0", *args], cwd=cwd,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = READY.search(line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        assert int(match[2]) > 0  # --port 0: the port actually bound is printed, not 0
        yield match[1], line
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0


def native_charge(url: str, key: str | None, amount: int = 1250) -> httpx.Response:
    headers = {"Idempotency-Key": f"k-{amount}", **({"Authorization": f"Bearer {key}"} if key else {})}
    body = {"merchant_reference": "order-1", "amount": amount, "currency": "EUR"}
    return httpx.post(f"{url}/v1/payments", json=body, headers=headers, timeout=5)


def test_psp_sandbox__port_0_prints_the_url_and_the_state_is_fresh_and_in_memory(tmp_path: Path) -> None:
    with sandbox(tmp_path) as (url, line):
        assert "state in memory" in line and DOCUMENTED_KEYS["native"] not in line  # a key is never printed
        assert native_charge(url, DOCUMENTED_KEYS["native"]).status_code == 201
    with sandbox(tmp_path) as (url, _):
        assert httpx.get(f"{url}/_admin/charges", timeout=5).json()["charges"] == 0  # nothing of the last run
    assert list(tmp_path.iterdir()) == []  # and nothing written to the working directory


def test_psp_sandbox__a_state_file_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "sandbox.db"
    with sandbox(tmp_path, "--state-file", str(state)) as (url, line):
        assert f"state in {state}" in line
        assert native_charge(url, DOCUMENTED_KEYS["native"]).status_code == 201
    with sandbox(tmp_path, "--state-file", str(state)) as (url, _):
        assert httpx.get(f"{url}/_admin/charges", timeout=5).json()["charges"] == 1


@pytest.mark.parametrize("flavor", ["native", "stripe", "adyen"])
def test_psp_sandbox__a_key_is_required_by_default_the_documented_test_key(tmp_path: Path, flavor: str) -> None:
    key = DOCUMENTED_KEYS[flavor]
    with sandbox(tmp_path, "--flavor", flavor) as (url, line), httpx.Client(base_url=url, timeout=5) as http:
        assert "api key: the documented test key" in line
        method, path, good, wrong, authenticated = {
            "native": ("GET", "/v1/payments/psp_x", {"Authorization": f"Bearer {key}"},
                       {"Authorization": "Bearer x"}, 404),
            "stripe": ("GET", "/v1/payment_intents/pi_x", {"Authorization": f"Bearer {key}"},
                       {"Authorization": "Bearer x"}, 404),
            "adyen": ("POST", "/v71/payments", {"X-API-Key": key}, {"X-API-Key": "x"}, 422),  # an empty request
        }[flavor]
        body = {} if method == "POST" else None
        assert http.request(method, path, json=body).status_code == 401  # no key at all
        assert http.request(method, path, json=body, headers=wrong).status_code == 401
        assert http.request(method, path, json=body, headers=good).status_code == authenticated


def test_psp_sandbox__adyen_reports_need_the_documented_report_user_by_default(tmp_path: Path) -> None:
    report = "/reports/download/MerchantAccount/Acme/payments_accounting_report_2026_01_01.csv"
    with sandbox(tmp_path, "--flavor", "adyen") as (url, _):
        assert httpx.get(url + report, timeout=5).status_code == 401
        user = ("report@Company.SandboxCompany", "recon_sandbox_report")  # docs/psps.md
        assert httpx.get(url + report, auth=user, timeout=5).status_code == 404  # authenticated; no such account


def test_psp_sandbox__an_api_key_given_replaces_the_default(tmp_path: Path) -> None:
    with sandbox(tmp_path, "--api-key", "my-own-key") as (url, line):
        assert "api key: the --api-key given" in line and "my-own-key" not in line
        assert native_charge(url, DOCUMENTED_KEYS["native"]).status_code == 401
        assert native_charge(url, "my-own-key").status_code == 201


def test_psp_sandbox__no_amount_declines_unless_the_fault_flag_says_so(tmp_path: Path) -> None:
    with sandbox(tmp_path) as (url, _):
        assert native_charge(url, DOCUMENTED_KEYS["native"], amount=1402).status_code == 201
    with sandbox(tmp_path, "--decline-suffix", "402") as (url, _):
        declined = native_charge(url, DOCUMENTED_KEYS["native"], amount=1402)
        assert declined.status_code == 402 and declined.json()["error"]["code"] == "card_declined"


def test_psp_sandbox__an_empty_api_key_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "recon", "psp-sandbox", "--port", "0", "--api-key", ""], cwd=tmp_path,
                          env={"PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--api-key must not be empty" in done.stderr


def test_psp_sandbox__webhook_events_chooses_what_the_endpoint_gets(tmp_path: Path) -> None:
    from tests.adapters.sandbox.webhook_receiver import receiving

    events = "payment_intent.created, charge.succeeded"
    with receiving() as receiver, sandbox(tmp_path, "--flavor", "stripe", "--webhook-url", receiver.url,
                                          "--webhook-secret", "whsec_cli_0123456789",
                                          "--webhook-events", events) as (url, line):
        assert f"webhooks to {receiver.url}" in line
        form = {"amount": "1250", "currency": "eur", "payment_method": "pm_card_visa", "confirm": "true"}
        headers = {"Authorization": f"Bearer {DOCUMENTED_KEYS['stripe']}"}
        assert httpx.post(f"{url}/v1/payment_intents", data=form, headers=headers, timeout=5).status_code == 200
        assert [d.json()["type"] for d in receiver.wait_for(2)] == ["payment_intent.created", "charge.succeeded"]
        assert len(receiver.quiet(0.3)) == 2  # payment_intent.succeeded: not taken
