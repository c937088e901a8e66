"""One conformance suite for every adapter in the registry, driven through conftest.Harness."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest
import respx

from psp_adapters import registry
from psp_adapters.errors import PspAuthError, PspError, PspTransientError, PspUnknownOutcome
from psp_adapters.protocol import PaymentOutcome, PspAdapter, Secret, Unknown

if TYPE_CHECKING:
    from tests.adapters.conftest import Harness  # the ``harness`` fixture is parametrised over the registry

UNRECOGNISED = "zz_not_a_status"


@pytest.fixture
def adapter(harness: Harness) -> Iterator[PspAdapter]:
    built = harness.build()
    yield built
    built.close()


def _call(harness: Harness, adapter: PspAdapter, call: str) -> object:
    if call == "create":
        return adapter.create_payment(harness.charge, idempotency_key="idem-conformance-1")
    return adapter.fetch_payment(harness.fetch_ref)


def _route(router: respx.MockRouter, harness: Harness, call: str) -> respx.Route:
    method, url = harness.create_route if call == "create" else harness.fetch_route
    return router.route(method=method, url__regex=url)


def test_conformance__adapter_satisfies_protocol(harness: Harness, adapter: PspAdapter) -> None:
    assert isinstance(adapter, PspAdapter)
    assert type(adapter).name == harness.name
    assert not any(secret in repr(adapter) for secret in harness.secrets)


@pytest.mark.parametrize("call", ["create", "fetch"])
@pytest.mark.parametrize("exc", [httpx.ConnectTimeout, httpx.ConnectError, httpx.PoolTimeout])
def test_conformance__request_never_sent_raises_transient(
    harness: Harness, adapter: PspAdapter, router: respx.MockRouter, call: str, exc: type[Exception]
) -> None:
    _route(router, harness, call).mock(side_effect=exc("boom"))
    with pytest.raises(PspTransientError) as info:
        _call(harness, adapter, call)
    assert not isinstance(info.value, PspUnknownOutcome)
    assert "connect" in str(info.value)
    assert isinstance(info.value.__cause__, exc)


@pytest.mark.parametrize("exc", [httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ReadError])
def test_conformance__no_answer_after_send__create_is_unknown_outcome(
    harness: Harness, adapter: PspAdapter, router: respx.MockRouter, exc: type[Exception]
) -> None:
    _route(router, harness, "create").mock(side_effect=exc("no answer"))
    with pytest.raises(PspUnknownOutcome):
        _call(harness, adapter, "create")


@pytest.mark.parametrize("exc", [httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ReadError])
def test_conformance__no_answer_after_send__fetch_is_transient(
    harness: Harness, adapter: PspAdapter, router: respx.MockRouter, exc: type[Exception]
) -> None:
    _route(router, harness, "fetch").mock(side_effect=exc("no answer"))
    with pytest.raises(PspTransientError) as info:
        _call(harness, adapter, "fetch")
    assert not isinstance(info.value, PspUnknownOutcome)


@pytest.mark.parametrize("call", ["create", "fetch"])
@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_conformance__5xx_raises_transient(
    harness: Harness, adapter: PspAdapter, router: respx.MockRouter, call: str, status: int
) -> None:
    _route(router, harness, call).mock(return_value=harness.error(status))
    with pytest.raises(PspTransientError) as info:
        _call(harness, adapter, call)
    assert info.value.status_code == status


@pytest.mark.parametrize("call", ["create", "fetch"])
def test_conformance__401_raises_auth_error(
    harness: Harness, adapter: PspAdapter, router: respx.MockRouter, call: str
) -> None:
    _route(router, harness, call).mock(return_value=harness.error(401))
    with pytest.raises(PspAuthError) as info:
        _call(harness, adapter, call)
    _assert_clean(harness, info.value)


def test_conformance__every_wire_status_maps_to_an_outcome(
    harness: Harness, adapter: PspAdapter, router: respx.MockRouter
) -> None:
    for probe in harness.probes:
        for status in probe.statuses:
            router.reset()
            _route(router, harness, probe.call).mock(return_value=probe.respond(status))
            outcome = _call(harness, adapter, probe.call)
            assert isinstance(outcome, PaymentOutcome), (probe.call, status)
            assert not isinstance(outcome, Unknown), (probe.call, status)
            assert outcome.raw_status == status, (probe.call, status)


def test_conformance__unrecognised_status_is_unknown(
    harness: Harness, adapter: PspAdapter, router: respx.MockRouter
) -> None:
    for probe in harness.probes:
        router.reset()
        _route(router, harness, probe.call).mock(return_value=probe.respond(UNRECOGNISED))
        outcome = _call(harness, adapter, probe.call)
        assert isinstance(outcome, Unknown), probe.call
        assert outcome.raw_status == UNRECOGNISED


def _assert_clean(harness: Harness, exc: PspError) -> None:
    for secret in harness.secrets:
        assert secret not in str(exc)
        assert secret not in repr(exc)


def test_registry__names_and_unknown_name() -> None:
    assert registry.names() == ("adyen", "sandbox", "stripe")
    with pytest.raises(LookupError, match="known: adyen, sandbox, stripe"):
        registry.get_factory("paypal")


def test_registry__settings_from_env_reads_prefixed_variables_and_wraps_keys() -> None:
    environ = {
        "RECON_ADYEN_API_KEY": "AQEkey0000000000000000",
        "RECON_ADYEN_MERCHANT_ACCOUNT": "AcmeShopEU",
        "RECON_ADYEN_REPORT_API_KEY": "AQEreportkey00000000000",  # the report user: its own credentials
        "RECON_ADYEN_REPORT_TIMEZONE": "Europe/Amsterdam",
        "RECON_ADYEN_READ_TIMEOUT": "12.5",
        "RECON_STRIPE_API_KEY": "sk_test_other",
    }
    settings = registry.settings_from_env("adyen", environ)
    assert settings["base_url"] == "https://checkout-test.adyen.com"
    assert settings["api_key"] == Secret("AQEkey0000000000000000")
    assert settings["merchant_account"] == "AcmeShopEU"
    assert settings["timeout"] == httpx.Timeout(connect=5.0, read=12.5, write=10.0, pool=5.0)
    assert "AQEkey" not in repr(settings)
    adapter = registry.get_factory("adyen")(settings)
    assert adapter.name == "adyen"
    adapter.close()


def test_registry__keys_never_default_and_must_be_secrets() -> None:
    settings = registry.settings_from_env("stripe", {})
    assert settings == {"base_url": "https://api.stripe.com"}
    factory = registry.get_factory("stripe")
    with pytest.raises(ValueError, match="api_key"):
        factory(settings)
    with pytest.raises(ValueError, match="Secret"):
        factory({**settings, "api_key": "sk_test_plain_string"})
    with pytest.raises(ValueError, match="READ_TIMEOUT"):
        registry.settings_from_env("stripe", {"RECON_STRIPE_READ_TIMEOUT": "soon"})


def test_registry__timeout_must_set_every_phase() -> None:
    settings = {
        "base_url": "https://stripe.test",
        "api_key": Secret("sk_test_x"),
        "timeout": httpx.Timeout(5.0),
    }
    registry.get_factory("stripe")(settings).close()
    with pytest.raises(ValueError, match="pool"):
        registry.get_factory("stripe")({**settings, "timeout": httpx.Timeout(5.0, pool=None)})
