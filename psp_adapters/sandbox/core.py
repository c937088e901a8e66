"""What the shared dispatcher (``api``) and the flavours (``native_api``, ``stripe_api``, ``adyen_api``) agree on.

A flavour is one PSP's wire: its routes, its auth, its error shape, its idempotency rules (``IdempotencyPolicy``)
and how its objects look. The dispatcher owns everything the flavours share: faults, the idempotent write
pipeline (claim the key, execute, save the answer with what the write changed, replay), the clock-driven work
(pending payments settling, refunds changing status, modifications processed, authorisations expiring) and the
admin API. A flavour parses a write into a ``WriteCall`` whose ``run`` does the write through a ``Scope``, inside
the ledger's transaction; it reads the ledger to answer GETs.

Generic error kinds a flavour renders in its own shape (``Flavor.error``): ``unauthorized``, ``forbidden`` (a
write from a web page of another site), ``not_found``,
``method_not_allowed``, ``rate_limited`` (``retry_after``), ``internal_error`` (``saved``: a 500 saved under an
idempotency key), ``service_unavailable``, ``bad_request``, ``idempotency_key_missing``,
``idempotency_key_invalid``, ``idempotency_in_flight``, ``idempotency_mismatch``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from email.message import Message
from typing import TYPE_CHECKING, NamedTuple, Protocol

from psp_adapters.sandbox.bank_credits import BankCredit
from psp_adapters.sandbox.cards import TestCard
from psp_adapters.sandbox.faults import Decision, Faults
from psp_adapters.sandbox.movements import Adjustment
from psp_adapters.sandbox.records import PaymentRecord
from psp_adapters.sandbox.webhook_events import Change

if TYPE_CHECKING:
    from psp_adapters.sandbox.ledger import Ledger


class Request(NamedTuple):
    method: str
    path: str
    query: dict[str, list[str]]
    headers: Message
    body: bytes

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


class Response(NamedTuple):
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    hold_seconds: float | None = None  #: an injected hang: wait this long before answering
    content_type: str = "application/json"


def json_response(status: int, doc: object, *headers: tuple[str, str]) -> Response:
    """A compact JSON answer (the bytes a replay sends again)."""
    return Response(status, json.dumps(doc, separators=(",", ":")).encode(), headers)


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotencyPolicy:
    """How a flavour's PSP documents idempotency; the dispatcher enforces it."""

    required: bool  #: a write without a key is refused (native) or simply not idempotent (Stripe, Adyen)
    max_length: int
    retention: timedelta | None  #: a finished key older than this is forgotten; None: kept for ever
    compares_body: bool  #: the same key with other parameters is an error (else: the first answer is replayed)
    saves_server_errors: bool  #: an injected 500 on a write is decided once the key is claimed, and saved
    scope: str  #: prefix of the key in the ledger, so that flavours sharing one state file never collide


class Scope(Protocol):
    """What a write may use while it runs, inside the ledger's transaction: the books, the server's clock, the
    fault dice, and the changes to tell (webhooks, Stripe's events), sent once the transaction commits."""

    @property
    def ledger(self) -> Ledger: ...

    @property
    def now(self) -> datetime: ...

    @property
    def faults(self) -> Faults: ...

    @property
    def key(self) -> str | None:
        """The write's idempotency key, if it had one."""
        ...

    def decide(self, *, amount: int, card: TestCard | None) -> Decision:
        """The outcome of a charge (``FaultInjector.decide``)."""
        ...

    def refund_fate(self, *, card: TestCard | None) -> str | None:
        """``FaultInjector.refund_fate``."""
        ...

    def tell(self, change: Change) -> None:
        """Tell ``change`` once the write commits (nothing is told for a write that fails)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteCall:
    """A validated write, ready for the idempotent pipeline."""

    fingerprint: str  #: the canonical digest of the request's parameters
    run: Callable[[Scope], Response]  #: does the write and renders its answer (saved under the key, replayed)


class Flavor(Protocol):
    """One PSP's wire. Implementations: ``NativeFlavor``, ``StripeFlavor``, ``AdyenFlavor``."""

    name: str
    idempotency: IdempotencyPolicy

    @property
    def authorization_validity(self) -> timedelta | None:
        """An authorisation left uncaptured this long is released (expires); None: the flavour only captures."""
        ...

    def serves(self, path: str) -> bool:
        """Whether ``path`` belongs to this flavour's PSP API (else 404 ``not_found``)."""
        ...

    def writes(self, req: Request) -> bool:
        """Whether ``req`` is a write (it goes through the idempotent pipeline; everything else is a read)."""
        ...

    def authorized(self, req: Request) -> bool: ...

    def error(
        self, kind: str, message: str | None = None, *, retry_after: int | None = None, saved: bool = False
    ) -> Response: ...

    def parse_write(self, req: Request) -> WriteCall | Response:
        """Validate a write; an invalid one is answered at once (and saves nothing under its key)."""
        ...

    def replay_headers(self, status: int) -> tuple[tuple[str, str], ...]:
        """Headers a replayed answer carries besides its saved status and body."""
        ...

    def route(self, req: Request) -> Response:
        """Any read of the PSP API (after faults, latency and the clock-driven work)."""
        ...

    def decorate(self, req: Request, response: Response) -> Response:
        """Last touch on every PSP API answer (request ids, echoed headers)."""
        ...

    def tick(self, scope: Scope) -> None:
        """The flavour's own clock-driven work (Adyen: received modifications falling due)."""
        ...

    def render_payment(self, record: PaymentRecord) -> object:
        """A payment in this flavour's shape, for the admin API's answers."""
        ...

    def fail_payout(self, scope: Scope, payout_id: str, code: str) -> object | str:
        """Fail a payout (the admin API): the payout in the flavour's shape, or why not
        (``resource_missing`` for a flavour without payouts)."""
        ...

    def run_payouts(self, scope: Scope) -> list[object]:
        """Pay out now what is unpaid (the admin API), paid at once; the payouts (or batches) made."""
        ...

    def bank_credits(self, since: date, until: date) -> list[BankCredit]:
        """The bank credits the flavour's payouts arriving in ``[since, until]`` make (``bank_credits``)."""
        ...

    def adjustment_id(self, kind: str) -> str:
        """A new id for a refund or a dispute."""
        ...

    def render_adjustment(self, adjustment: Adjustment, record: PaymentRecord) -> object:
        """A refund or dispute in this flavour's shape, for the admin API's answers."""
        ...
