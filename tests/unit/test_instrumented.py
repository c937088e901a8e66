"""recon.payments.instrumented: every PSP call timed and reported, 429s counted, errors passed through."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from psp_adapters.errors import PspAuthError, PspRateLimited
from psp_adapters.protocol import ChargeRequest, PaymentOutcome, PspAdapter, PspRef, SettlementLine, Succeeded
from recon.logs import job_scope
from recon.payments.instrumented import instrument

REQUEST = ChargeRequest(merchant_reference="order-1", amount=100, currency="EUR")


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bool]] = []

    def psp_call(self, psp: str, operation: str, *, seconds: float, throttled: bool) -> None:
        assert seconds >= 0
        self.calls.append((psp, operation, throttled))


class Scripted:
    name: ClassVar[str] = "scripted"
    idempotency_retention: ClassVar[timedelta | None] = None

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.closed = False

    def _next(self) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        return self._next()  # type: ignore[no-any-return]

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        return self._next()  # type: ignore[no-any-return]

    def iter_settlements(
        self, since: datetime, until: datetime, *, merchant_accounts: Any = ()
    ) -> Iterator[SettlementLine]:
        if since.tzinfo is None:
            raise ValueError("aware datetimes only")
        return iter(self._next())

    def close(self) -> None:
        self.closed = True


def test_instrumented__is_a_psp_adapter_with_the_inner_name() -> None:
    adapter = instrument(Scripted(), recorder=Recorder())
    assert isinstance(adapter, PspAdapter) and adapter.name == "scripted" and type(adapter).name == "scripted"
    adapter.close()
    assert adapter.inner.closed  # type: ignore[attr-defined]


def test_instrumented__is_a_context_manager_that_closes_the_inner_adapter() -> None:
    inner = Scripted(Succeeded())
    with instrument(inner, recorder=Recorder()) as adapter:
        assert isinstance(adapter.create_payment(REQUEST, idempotency_key="k"), Succeeded)
        assert not inner.closed
    assert inner.closed
    failing = Scripted(PspAuthError("no"))
    with pytest.raises(PspAuthError), instrument(failing, recorder=Recorder()) as adapter:
        adapter.create_payment(REQUEST, idempotency_key="k")
    assert failing.closed  # closed on the way out of an error too, which passes through


def test_instrumented__times_calls_counts_429s_and_passes_errors_through() -> None:
    recorder = Recorder()
    adapter = instrument(Scripted(Succeeded(), PspRateLimited("slow", retry_after=1.0), PspAuthError("no"),
                                  Succeeded()), recorder=recorder)
    assert isinstance(adapter.create_payment(REQUEST, idempotency_key="k"), Succeeded)
    with pytest.raises(PspRateLimited):
        adapter.create_payment(REQUEST, idempotency_key="k")
    with pytest.raises(PspAuthError):
        adapter.fetch_payment(PspRef(merchant_reference="order-1"))
    adapter.fetch_payment(PspRef(psp_reference="pi_1"))
    assert recorder.calls == [("scripted", "create_payment", False), ("scripted", "create_payment", True),
                              ("scripted", "fetch_payment", False), ("scripted", "fetch_payment", False)]


def test_instrumented__settlement_listing_is_timed_once_and_checks_arguments_at_once() -> None:
    recorder = Recorder()
    adapter = instrument(Scripted([1, 2, 3]), recorder=recorder)
    with pytest.raises(ValueError, match="aware"):
        adapter.iter_settlements(datetime(2026, 1, 1), datetime(2026, 1, 2))
    lines = adapter.iter_settlements(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC))
    assert recorder.calls == []
    assert list(lines) == [1, 2, 3]
    assert recorder.calls == [("scripted", "iter_settlements", False)]


def test_instrumented__names_the_payment_in_the_job_log_context() -> None:
    adapter = instrument(Scripted(Succeeded(), Succeeded()), recorder=Recorder())
    with job_scope({"job_id": 1}) as fields:
        adapter.create_payment(REQUEST, idempotency_key="k")
    assert fields["payment_reference"] == "order-1"
    with job_scope({"job_id": 2}) as fields:
        adapter.fetch_payment(PspRef(psp_reference="pi_9"))  # no merchant reference: nothing to name
    assert "payment_reference" not in fields
