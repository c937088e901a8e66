"""What the shared dispatcher (``api``) and the flavours (``native_api``, ``stripe_api``, ``adyen_api``) agree on.

A flavour is one PSP's wire: its routes, its auth, its error shape, its idempotency rules (``IdempotencyPolicy``)
and how a payment looks. The dispatcher owns everything the flavours share: faults, the idempotent create
pipeline (claim the key, execute, save the answer with the charge, replay) and the admin API. A flavour never
writes the ledger; it reads it to answer GETs and hands creates to the dispatcher as a ``CreateCall``.

Generic error kinds a flavour renders in its own shape (``Flavor.error``): ``unauthorized``, ``not_found``,
``method_not_allowed``, ``rate_limited`` (``retry_after``), ``internal_error`` (``saved``: a 500 saved under an
idempotency key), ``service_unavailable``, ``bad_request``, ``idempotency_key_missing``,
``idempotency_key_invalid``, ``idempotency_in_flight``, ``idempotency_mismatch``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from email.message import Message
from typing import NamedTuple, Protocol

from psp_adapters.protocol import ChargeRequest
from psp_adapters.sandbox.records import Adjustment, PaymentRecord


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

    required: bool  #: a create without a key is refused (native) or simply not idempotent (Stripe, Adyen)
    max_length: int
    retention: timedelta | None  #: a finished key older than this is forgotten; None: kept for ever
    compares_body: bool  #: the same key with other parameters is an error (else: the first answer is replayed)
    saves_server_errors: bool  #: an injected 500 on a create is decided once the key is claimed, and saved
    scope: str  #: prefix of the key in the ledger, so that flavours sharing one state file never collide


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateCall:
    """A validated create, ready for the idempotent pipeline."""

    key: str | None  #: the idempotency key sent, if any
    fingerprint: str  #: the canonical digest of the request's parameters
    charge: ChargeRequest
    psp_reference: str  #: the id the payment gets if this call executes
    metadata: Mapping[str, str] = field(default_factory=dict)
    context: Mapping[str, str] = field(default_factory=dict)  #: flavour extras for the answer (e.g. a host)


class Flavor(Protocol):
    """One PSP's wire. Implementations: ``NativeFlavor``, ``StripeFlavor``, ``AdyenFlavor``."""

    name: str
    idempotency: IdempotencyPolicy
    create_paths: frozenset[str]  #: the POST paths that create a payment

    def serves(self, path: str) -> bool:
        """Whether ``path`` belongs to this flavour's PSP API (else 404 ``not_found``)."""
        ...

    def authorized(self, req: Request) -> bool: ...

    def error(
        self, kind: str, message: str | None = None, *, retry_after: int | None = None, saved: bool = False
    ) -> Response: ...

    def parse_create(self, req: Request, key: str | None) -> CreateCall | Response:
        """Validate a create; an invalid one is answered at once (and saves nothing under its key)."""
        ...

    def render_create(self, call: CreateCall, record: PaymentRecord) -> Response:
        """The answer to an executed create, saved under its key and replayed byte for byte."""
        ...

    def replay_headers(self, status: int) -> tuple[tuple[str, str], ...]:
        """Headers a replayed answer carries besides its saved status and body."""
        ...

    def route(self, req: Request) -> Response:
        """Any other PSP API request (after faults, latency and ``settle_due``)."""
        ...

    def decorate(self, req: Request, response: Response) -> Response:
        """Last touch on every PSP API answer (request ids, echoed headers)."""
        ...

    def render_payment(self, record: PaymentRecord) -> object:
        """A payment in this flavour's shape, for the admin API's answers."""
        ...

    def adjustment_id(self, kind: str) -> str:
        """A new id for a refund or a dispute."""
        ...

    def render_adjustment(self, adjustment: Adjustment, record: PaymentRecord) -> object:
        """A refund or dispute in this flavour's shape, for the admin API's answers."""
        ...
