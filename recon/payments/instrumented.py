"""InstrumentedAdapter: a PspAdapter around another one that times every call and counts 429s.

The composition root (``recon.app.App.adapter``, which the demo uses too) wraps each adapter it builds with
``instrument(adapter, recorder=…)``, so the charge and reconcile handlers are measured without knowing it.
Each call reports to a ``PspRecorder``
(``recon.counters.ProcessMetrics`` in a worker): the PSP's name, the operation, the seconds it took, and
whether the PSP rate limited us (``PspRateLimited``). Errors pass through unchanged.

It also names the payment in the current job's log context (``recon.logs.bind``): the charge request's
and the lookup's merchant reference becomes ``payment_reference`` on every later line about the job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from datetime import date, datetime, timedelta
from types import TracebackType
from typing import Any, ClassVar, Protocol, Self, TypeVar, cast

from psp_adapters.errors import PspRateLimited, PspRejectedError
from psp_adapters.protocol import (
    CapturingAdapter,
    ChargeRequest,
    DisputePage,
    DisputeSource,
    ModificationRequest,
    PaymentOutcome,
    PaymentPage,
    PayoutSource,
    PspAdapter,
    PspPayout,
    PspPayoutLine,
    PspRef,
    RefundingAdapter,
    RefundRef,
    RefundRequest,
    Reversed,
    SettlementLine,
)
from recon.errors import ConfigError
from recon.logs import bind

T = TypeVar("T")
P = TypeVar("P")
_CLASSES: dict[tuple[str, type], type[InstrumentedAdapter]] = {}


class PspRecorder(Protocol):
    def psp_call(self, psp: str, operation: str, *, seconds: float, throttled: bool) -> None: ...


def instrument(inner: PspAdapter, *, recorder: PspRecorder) -> InstrumentedAdapter:
    """``inner`` with every call timed and reported to ``recorder``. The result's ``name`` is the inner
    adapter's: a subclass of InstrumentedAdapter per PSP name and adapter class carries it, as the protocol's
    ClassVar (a stub and the real adapter of one name each get their own, with their own capabilities). A
    context manager, as the adapters are: leaving its ``with`` closes the inner adapter."""
    key = (inner.name, type(inner))  # the ClassVars copied are the inner class's: one wrapper class per class
    cls = _CLASSES.get(key)
    if cls is None:
        made = type(f"InstrumentedAdapter[{inner.name}]", (InstrumentedAdapter,),
                    {"name": inner.name, "idempotency_retention": inner.idempotency_retention,
                     "lists_payments": bool(getattr(inner, "lists_payments", False)),
                     "search_lag": getattr(inner, "search_lag", timedelta(0)),
                     "listing_window": getattr(inner, "listing_window", None),
                     "pays_out": isinstance(inner, PayoutSource),
                     "lists_disputes": isinstance(inner, DisputeSource),
                     "refund_reasons": getattr(inner, "refund_reasons", None),
                     "authorisation_validity": getattr(inner, "authorisation_validity", None)})
        cls = _CLASSES.setdefault(key, cast(type[InstrumentedAdapter], made))
    return cls(inner, recorder=recorder)


class InstrumentedAdapter:
    """``inner`` with every call timed and reported to ``recorder``; build one with ``instrument()``."""

    name: ClassVar[str] = "instrumented"
    idempotency_retention: ClassVar[timedelta | None] = None
    lists_payments: ClassVar[bool] = False
    search_lag: ClassVar[timedelta] = timedelta(0)
    listing_window: ClassVar[timedelta | None] = None
    #: whether the inner adapter is a ``PayoutSource`` (this wrapper always has its methods)
    pays_out: ClassVar[bool] = False
    #: whether the inner adapter is a ``DisputeSource`` (this wrapper always has its method)
    lists_disputes: ClassVar[bool] = False
    refund_reasons: ClassVar[tuple[str, ...] | None] = None
    authorisation_validity: ClassVar[timedelta | None] = None

    def __init__(self, inner: PspAdapter, *, recorder: PspRecorder) -> None:
        self.inner = inner
        self._recorder = recorder


    def __repr__(self) -> str:
        return f"InstrumentedAdapter({self.inner!r})"

    def create_payment(self, request: ChargeRequest, *, idempotency_key: str) -> PaymentOutcome:
        bind(payment_reference=request.merchant_reference)
        return self._timed("create_payment",
                           lambda: self.inner.create_payment(request, idempotency_key=idempotency_key))

    def fetch_payment(self, ref: PspRef) -> PaymentOutcome:
        bind(payment_reference=ref.merchant_reference)
        return self._timed("fetch_payment", lambda: self.inner.fetch_payment(ref))

    def iter_settlements(self, since: datetime, until: datetime, *,
                         merchant_accounts: Collection[str] = ()) -> Iterator[SettlementLine]:
        """Times the listing as a whole, from this call to the last line read (or the iterator's end)."""
        started = time.perf_counter()
        # bad arguments raise now, as the inner's do
        lines = self.inner.iter_settlements(since, until, merchant_accounts=merchant_accounts)
        return self._timed_iter("iter_settlements", lines, started)

    def iter_payments(self, since: datetime, until: datetime, *,
                      merchant_accounts: Collection[str] = ()) -> Iterator[PaymentPage]:
        """Times each page on its own: every ``next()`` is one request to the PSP, and one call counted."""
        pages = self.inner.iter_payments(since, until, merchant_accounts=merchant_accounts)  # bad arguments: now
        return self._timed_pages(pages, "iter_payments")

    def iter_disputes(self, since: datetime, until: datetime, *,
                      merchant_accounts: Collection[str] = ()) -> Iterator[DisputePage]:
        """Times each page on its own, as ``iter_payments``; PspRejectedError when the inner adapter lists none."""
        if not isinstance(self.inner, DisputeSource):
            raise PspRejectedError(f"{self.name}: the adapter lists no disputes", psp=self.name)
        return self._timed_pages(self.inner.iter_disputes(since, until, merchant_accounts=merchant_accounts),
                                 "iter_disputes")

    def iter_payouts(self, since: date, until: date, *, merchant_accounts: Collection[str] = (),
                     known: Collection[str] = (), files: Collection[str] = ()) -> Iterator[PspPayout]:
        """Times the listing as a whole; PspRejectedError when the inner adapter lists no payouts."""
        started = time.perf_counter()
        payouts = self._payout_source().iter_payouts(since, until, merchant_accounts=merchant_accounts,
                                                     known=known, files=files)
        return self._timed_iter("iter_payouts", payouts, started)

    def payout_lines(self, payout: PspPayout) -> Iterator[PspPayoutLine]:
        started = time.perf_counter()
        return self._timed_iter("payout_lines", self._payout_source().payout_lines(payout), started)

    def _payout_source(self) -> PayoutSource:
        if not isinstance(self.inner, PayoutSource):
            raise PspRejectedError(f"{self.name}: the adapter lists no payouts", psp=self.name)
        return self.inner

    def create_refund(self, request: RefundRequest, *, idempotency_key: str) -> PaymentOutcome:
        bind(payment_reference=request.refund_reference)
        inner = self._refunding()
        return self._timed("create_refund", lambda: inner.create_refund(request, idempotency_key=idempotency_key))

    def fetch_refund(self, ref: RefundRef) -> PaymentOutcome | Reversed:
        bind(payment_reference=ref.refund_reference)
        inner = self._refunding()
        return self._timed("fetch_refund", lambda: inner.fetch_refund(ref))

    def _refunding(self) -> RefundingAdapter:
        """The inner adapter as one that refunds; ConfigError when its PSP does not (the job dies, replayable)."""
        if not isinstance(self.inner, RefundingAdapter):
            raise ConfigError(f"PSP {self.name!r}: its adapter does not refund")
        return self.inner

    def modify_payment(self, request: ModificationRequest, *, idempotency_key: str) -> PaymentOutcome:
        bind(payment_reference=request.modification_reference)
        inner = self._capturing()
        return self._timed(request.kind, lambda: inner.modify_payment(request, idempotency_key=idempotency_key))

    def fetch_modification(self, request: ModificationRequest) -> PaymentOutcome:
        bind(payment_reference=request.modification_reference)
        inner = self._capturing()
        return self._timed(f"fetch_{request.kind}", lambda: inner.fetch_modification(request))

    def _capturing(self) -> CapturingAdapter:
        """The inner adapter as one that captures; ConfigError when its PSP does not (the job dies, replayable)."""
        if not isinstance(self.inner, CapturingAdapter):
            raise ConfigError(f"PSP {self.name!r}: its adapter does not capture or cancel")
        return self.inner

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Closes the inner adapter, as the adapters it wraps do on leaving their ``with``."""
        self.close()

    def _timed(self, operation: str, call: Callable[[], T]) -> T:
        started = time.perf_counter()
        throttled = False
        try:
            return call()
        except PspRateLimited:
            throttled = True
            raise
        finally:
            self._recorder.psp_call(self.name, operation, seconds=time.perf_counter() - started,
                                    throttled=throttled)

    def _timed_pages(self, pages: Iterator[P], operation: str) -> Iterator[P]:
        # the adapter's generator makes its request inside next(); the next() that only finds the end
        # makes none, and is not counted
        while True:
            started = time.perf_counter()
            try:
                page = next(pages)
            except StopIteration:
                return
            except PspRateLimited:
                self._recorder.psp_call(self.name, operation, seconds=time.perf_counter() - started,
                                        throttled=True)
                raise
            except BaseException:
                self._recorder.psp_call(self.name, operation, seconds=time.perf_counter() - started,
                                        throttled=False)
                raise
            self._recorder.psp_call(self.name, operation, seconds=time.perf_counter() - started,
                                    throttled=False)
            yield page

    def _timed_iter(self, operation: str, lines: Iterator[Any], started: float) -> Iterator[Any]:
        throttled = False
        try:
            yield from lines
        except PspRateLimited:
            throttled = True
            raise
        finally:
            self._recorder.psp_call(self.name, operation, seconds=time.perf_counter() - started,
                                    throttled=throttled)
