"""One conformance suite for every adapter in the registry (STYLE §10), driven through tests/adapters/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest
import respx

from psp_adapters.errors import PspAuthError, PspError, PspTransientError, PspUnknownOutcome
from psp_adapters.protocol import PaymentOutcome, PspAdapter, Unknown

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
