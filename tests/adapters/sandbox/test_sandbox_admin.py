"""The sandbox's admin API against cross-site requests (issue 22, item 10).

A browser lets any page send a "simple" cross-site POST (a form, or ``fetch`` in ``no-cors`` mode): ``text/plain``,
``application/x-www-form-urlencoded`` or ``multipart/form-data``, or no body at all, with an ``Origin`` header naming
the page (the Fetch standard, "CORS-safelisted request-header"; OWASP's CSRF cheat sheet, "Verifying origin with
standard headers"). A keyless sandbox on 127.0.0.1 must therefore take admin changes only with a JSON content type
(which a browser sends cross-site only after a preflight the sandbox never grants) and never from a foreign origin.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from psp_adapters.sandbox import SandboxServer

EVIL = "http://evil.example"


@pytest.fixture(params=["native", "stripe", "adyen"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SandboxServer]:
    with SandboxServer(tmp_path / "sandbox.db", flavor=request.param) as srv:  # keyless
        yield srv


def charge(server: SandboxServer) -> None:
    """One payment in the flavour's own wire, so that a reset would visibly forget it."""
    with httpx.Client(base_url=server.url, timeout=5.0) as http:
        if server.flavor == "native":
            body = {"merchant_reference": "order-1", "amount": 1250, "currency": "EUR"}
            response = http.post("/v1/payments", json=body, headers={"Idempotency-Key": "k1"})
        elif server.flavor == "stripe":
            form = {"amount": "1250", "currency": "eur", "payment_method": "pm_card_visa", "confirm": "true"}
            response = http.post("/v1/payment_intents", data=form)
        else:
            body = {"amount": {"value": 1250, "currency": "EUR"}, "merchantAccount": "Acme", "reference": "order-1",
                    "paymentMethod": {"type": "scheme", "storedPaymentMethodId": "pm"}, "returnUrl": "https://x.test"}
            response = http.post("/v71/payments", json=body)
        assert response.is_success, response.text


def payments(server: SandboxServer) -> int:
    counts = httpx.get(f"{server.url}/_admin/charges", timeout=5).json()
    return int(counts["charges"]) + int(counts.get("without_key", 0))


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"Content-Type": "text/plain", "Origin": EVIL}, b""),  # the case: a simple POST, empty body
        ({"Content-Type": "text/plain", "Origin": EVIL}, b"{}"),
        ({"Content-Type": "text/plain"}, b"{}"),  # no Origin (a form from a file:// page sends "null")
        ({"Content-Type": "application/x-www-form-urlencoded", "Origin": EVIL}, b"a=b"),
        ({"Content-Type": "multipart/form-data; boundary=x", "Origin": "null"}, b"--x--"),
        ({"Origin": EVIL}, b""),  # fetch(url, {method: "POST", mode: "no-cors"}): no body, no Content-Type
        ({}, b""),  # no content type at all: not JSON either
        ({"Content-Type": "application/json", "Origin": EVIL}, b"{}"),  # a foreign origin, whatever the type
        ({"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, b"{}"),
    ],
)
def test_admin__a_cross_site_or_non_json_change_is_refused_and_changes_nothing(
    server: SandboxServer, headers: dict[str, str], body: bytes
) -> None:
    charge(server)

    reset = httpx.post(f"{server.url}/_admin/reset", content=body, headers=headers, timeout=5)
    faults = httpx.post(f"{server.url}/_admin/faults", content=b'{"rate_500": 1.0}' if body == b"{}" else body,
                        headers=headers, timeout=5)

    assert reset.status_code in (403, 415), reset.text
    assert faults.status_code in (403, 415), faults.text
    assert reset.json()["error"]["code"] in ("cross_origin_forbidden", "unsupported_media_type")
    assert payments(server) == 1 and server.faults.rate_500 == 0.0


def test_admin__same_origin_or_no_origin_json_changes_are_taken(server: SandboxServer) -> None:
    charge(server)
    own = {"Content-Type": "application/json", "Origin": server.url, "Sec-Fetch-Site": "same-origin"}

    assert httpx.post(f"{server.url}/_admin/faults", json={"rate_503": 0.5}, headers=own, timeout=5).status_code == 200
    assert server.faults.rate_503 == 0.5
    assert httpx.post(f"{server.url}/_admin/reset", json={}, timeout=5).status_code == 200  # a script: no Origin
    assert payments(server) == 0


def test_admin__reads_stay_open_to_scripts_but_not_to_foreign_pages(server: SandboxServer) -> None:
    assert httpx.get(f"{server.url}/_admin/charges", timeout=5).status_code == 200
    # a GET is readable cross-site only through CORS, which the sandbox never grants (no Access-Control-* header)
    answer = httpx.get(f"{server.url}/_admin/charges", headers={"Origin": EVIL}, timeout=5)
    assert not any(name.lower().startswith("access-control-") for name in answer.headers)


def test_api__a_keyless_sandbox_refuses_a_cross_site_write_too(server: SandboxServer) -> None:
    """The same class of defect on the PSP API: a keyless sandbox took a simple cross-site POST (a form, or
    text/plain) as a charge. A write carrying another site's Origin is refused (403) before anything is recorded."""
    path, body = {
        "native": ("/v1/payments", b'{"merchant_reference": "evil", "amount": 100, "currency": "EUR"}'),
        "stripe": ("/v1/payment_intents", b"amount=100&currency=eur&payment_method=pm_card_visa&confirm=true"),
        "adyen": ("/v71/payments", b'{"amount": {"value": 100, "currency": "EUR"}}'),
    }[server.flavor]
    headers = {"Content-Type": "text/plain", "Origin": EVIL, "Idempotency-Key": "evil-1"}

    refused = httpx.post(f"{server.url}{path}", content=body, headers=headers, timeout=5)
    cross_site = httpx.post(f"{server.url}{path}", content=body, timeout=5,
                            headers={**headers, "Origin": server.url, "Sec-Fetch-Site": "cross-site"})

    assert (refused.status_code, cross_site.status_code) == (403, 403)
    assert payments(server) == 0
    charge(server)  # a script (no Origin) still charges
    assert payments(server) == 1
